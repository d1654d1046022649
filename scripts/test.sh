#!/usr/bin/env bash
# Runs the whole test suite: creates the Python venv with NumPy for the interop tests when it
# is missing (target/test-venv) and installs the Python package (python/) into it, runs every
# Rust unit and integration test and the library's doc tests in release mode, then the Python
# package's pytest tests against the release binary.
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

# The Python package: re-installed (offline, no build isolation: flit_core is in the venv)
# only when its files change. Before the Rust tests, whose Python checkers import it; its own
# tests run last, with the binary cargo builds.
py_stamp="$venv/.python-package"
py_digest=$(cat python/pyproject.toml python/dataset_packer/*.py | sha256sum)
if [ "$py_digest" != "$(cat "$py_stamp" 2>/dev/null)" ]; then
    echo "installing ./python into $venv…" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
        --no-build-isolation --force-reinstall ./python
    echo "$py_digest" > "$py_stamp"
fi

cargo test --release --all-targets "$@"
# The rustdoc examples of the library's public surface (--all-targets leaves doc tests out),
# and the docs themselves: a broken or private intra-doc link fails the suite.
cargo test --release --doc
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --quiet

DATASET_PACKER_BIN="$PWD/target/release/dataset-packer" \
    "$venv/bin/python" -m pytest python/tests -q -p no:cacheprovider
