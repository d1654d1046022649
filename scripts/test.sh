#!/usr/bin/env bash
# Runs the whole test suite: creates the Python venv with NumPy for the interop tests when it
# is missing (target/test-venv), then runs every Rust unit and integration test in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/test-venv
stamp="$venv/.requirements"
if ! cmp -s tests/python/requirements.txt "$stamp" 2>/dev/null; then
    echo "setting up $venv (NumPy for the interop tests)…" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
    cp tests/python/requirements.txt "$stamp"
fi
export DATASET_PACKER_PYTHON="$PWD/$venv/bin/python"

cargo test --release --all-targets "$@"
