"""Fixture packs made by the real binary from `fixtures/`, once per test session.

The binary is `$DATASET_PACKER_BIN`, or `target/release/dataset-packer` of this repository
(`cargo build --release`). Packs: `plain` (one steps.npy), `sharded` (700-row shards, runs
straddling them), `merged` (d6 and d7 packed apart, merged into 500-row shards), `findings`
(runs of 0 rows, illegal played moves), `legacy` (the sharded pack rewritten in the 46-byte
layout, as tests/common/mod.rs `make_legacy_pack` does), `shuffled` and `no_index` (the
plain pack without its run_index table).

`s3` starts a real S3 server for the session: moto's, on a free port (IAM auth on, a user and
key made through boto3, bucket `packs`), as tests/object_store.rs starts it; `put` uploads an
object there. Without moto, boto3 or the `[s3]` extra the tests that use it are skipped; with
`CI` set they fail instead, so CI never skips them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
INDEXED_PACKS = ("plain", "sharded", "merged", "findings", "legacy")


def binary() -> Path:
    given = os.environ.get("DATASET_PACKER_BIN")
    path = Path(given).resolve() if given else REPO / "target/release/dataset-packer"
    if not path.is_file():
        raise RuntimeError(f"no dataset-packer binary at {path}: run `cargo build --release` "
                           "or set DATASET_PACKER_BIN")
    return path


def cli(*args) -> str:
    """Runs the binary; fails the test with its stderr when it fails."""
    out = subprocess.run([str(binary()), *map(str, args)], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"dataset-packer {' '.join(map(str, args))} failed "
                             f"({out.returncode}):\n{out.stderr}")
    return out.stdout


def copy_pack(packs, name, tmp_path) -> Path:
    """A copy of a fixture pack to change."""
    dest = tmp_path / name
    shutil.copytree(packs[name], dest)
    return dest


def make_legacy_pack(pack: Path) -> None:
    """Rewrites every shard in the packed 46-byte layout and drops the `shards` table (an
    older tool recorded no checksums)."""
    from dataset_packer import LEGACY_ROW_DTYPE

    for shard in sorted(pack.glob("steps*.npy")):
        raw = np.fromfile(shard, dtype=np.uint8, offset=384).reshape(-1, 48)
        packed = np.concatenate([raw[:, :26], raw[:, 28:]], axis=1)
        with open(shard, "wb") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": np.lib.format.dtype_to_descr(LEGACY_ROW_DTYPE),
                    "fortran_order": False, "shape": (len(raw),)})
            f.write(np.ascontiguousarray(packed).tobytes())
    with sqlite3.connect(pack / "metadata.db") as db:
        db.execute("DROP TABLE shards")
    db.close()


@pytest.fixture(scope="session")
def packs(tmp_path_factory) -> dict:
    """Paths of the fixture packs by name (see the module docstring)."""
    root = tmp_path_factory.mktemp("packs")
    raw = FIXTURES / "raw"
    quiet = "--quiet"
    cli("pack", "--input", raw, "--output", root / "plain", quiet)
    cli("pack", "--input", raw, "--output", root / "sharded", "--shard-rows", 700, quiet)
    cli("pack", "--input", raw / "d6_10g_v1", "--output", root / "d6", "--shard-rows", 300, quiet)
    cli("pack", "--input", raw / "d7_10g_v1", "--output", root / "d7", "--shard-rows", 300, quiet)
    cli("merge", "--input", root / "d6", "--input", root / "d7", "--output", root / "merged",
        "--shard-rows", 500, quiet)
    cli("pack", "--input", FIXTURES / "findings", "--output", root / "findings",
        "--shard-rows", 10, quiet)
    cli("shuffle", "--input", root / "sharded", "--output", root / "shuffled", "--seed", 7,
        quiet)
    shutil.copytree(root / "sharded", root / "legacy")
    make_legacy_pack(root / "legacy")
    shutil.copytree(root / "plain", root / "no_index")
    with sqlite3.connect(root / "no_index" / "metadata.db") as db:
        db.execute("DROP TABLE run_index")
    db.close()
    return {name: root / name for name in
            ("plain", "sharded", "merged", "findings", "legacy", "shuffled", "no_index")}


@pytest.fixture(scope="session")
def exports(packs, tmp_path_factory) -> dict:
    """`export --format parquet` of each indexed pack (single files)."""
    root = tmp_path_factory.mktemp("exports")
    out = {}
    for name in INDEXED_PACKS:
        if name == "legacy":
            continue  # the same rows as `sharded`; compared against its export
        out[name] = root / f"{name}.parquet"
        cli("export", packs[name], "--output", out[name], "--format", "parquet", "--quiet")
    out["legacy"] = out["sharded"]
    return out


@pytest.fixture(params=INDEXED_PACKS)
def pack_name(request) -> str:
    return request.param


@pytest.fixture
def pack(packs, pack_name):
    from dataset_packer import Pack

    with Pack(packs[pack_name]) as p:
        yield p


@pytest.fixture(scope="session")
def sharded(packs):
    from dataset_packer import Pack

    return Pack(packs["sharded"])


def all_rows(path: Path) -> np.ndarray:
    """Every row of a 48-byte pack as (n, 48) bytes, read plainly with np.load."""
    shards = sorted(path.glob("steps-*.npy")) or [path / "steps.npy"]
    return np.concatenate([np.load(s).view(np.uint8).reshape(-1, 48) for s in shards])


# ---------------------------------------------------------------------------- an S3 server

# The one script the Rust and the Python tests start the server with.
MOTO_SERVER = REPO / "tests/python/moto_server.py"


def _missing() -> str | None:
    for module in ("moto.server", "boto3", "obstore", "google_crc32c", "xxhash"):
        try:
            __import__(module)
        except ImportError:
            return (f"no {module} in {sys.executable} (pip install -r "
                    "tests/python/requirements.txt)")
    return None


@pytest.fixture(scope="session")
def s3():
    """The server's environment (AWS_* variables), set in this process for the session."""
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(MOTO_SERVER), str(port)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    try:
        keys = json.loads(line)
    except ValueError:
        server.kill()
        pytest.fail(f"moto did not start: {line!r}")
    env = {"AWS_ACCESS_KEY_ID": keys["key"], "AWS_SECRET_ACCESS_KEY": keys["secret"],
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
           "AWS_ALLOW_HTTP": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stdin.close()
    server.wait(30)


def put(url: str, data: bytes) -> None:
    """Uploads `data` to `url` (`s3://bucket/key`) on the `s3` server."""
    import obstore
    from obstore.store import S3Store

    bucket, _, key = url[len("s3://"):].partition("/")
    obstore.put(S3Store(bucket), key, data)


def vm_flags(path) -> list[set[str]]:
    """The kernel's VmFlags of each mapping of `path` in this process (/proc/self/smaps):
    "rr" marks one advised MADV_RANDOM, "sr" MADV_SEQUENTIAL."""
    target = str(Path(path).resolve())
    found, current = [], None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
            current = fields[5] if len(fields) > 5 else None
        elif fields and fields[0] == "VmFlags:" and current == target:
            found.append(set(fields[1:]))
    return found
