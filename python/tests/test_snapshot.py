"""A `Pack` is a snapshot of one version: it keeps reading the version it opened while the
command line publishes into the folder (docs/format.md, "Reading while a pack is written").
tests/concurrent_reads.rs runs the same readers against a writer in a loop."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import threading
import time

import numpy as np
import pytest

from conftest import FIXTURES, cli, copy_pack
from dataset_packer import Pack, PackError


def _rows(pack) -> bytes:
    return pack.rows(slice(0, len(pack))).tobytes()


def test_a_pack_keeps_reading_its_version_after_an_overwrite(packs, tmp_path):
    path = copy_pack(packs, "sharded", tmp_path)
    pack = Pack(path)
    before, rows, pack_id = _rows(pack), len(pack), pack.pack_id
    cli("pack", "--input", FIXTURES / "raw/d7_10g_v1", "--output", path, "--overwrite",
        "--shard-rows", "100", "--quiet")
    assert Pack(path).pack_id != pack_id
    # Every shard was replaced (other rows, other sizes): the open Pack reads its own.
    assert (len(pack), pack.pack_id, _rows(pack)) == (rows, pack_id, before)
    pack.close()


def _fork_read(pack, out):
    out.put(pack.rows(slice(0, len(pack))).tobytes())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_worker_reads_the_version_its_parent_opened(packs, tmp_path):
    path = copy_pack(packs, "sharded", tmp_path)
    pack = Pack(path)
    before = _rows(pack)
    cli("pack", "--input", FIXTURES / "raw/d7_10g_v1", "--output", path, "--overwrite",
        "--quiet")
    # The worker opens its own metadata.db connection, after the publish replaced it.
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    worker = ctx.Process(target=_fork_read, args=(pack, out))
    worker.start()
    got = out.get(timeout=60)
    worker.join(timeout=60)
    assert got == before
    pack._conn = None  # a fresh connection here too: the held file, not the new one
    assert pack.num_runs == len(pack.db().execute("SELECT id FROM runs").fetchall())


def test_a_pickled_pack_of_a_replaced_pack_is_refused(packs, tmp_path):
    path = copy_pack(packs, "sharded", tmp_path)
    state = pickle.dumps(Pack(path))
    cli("pack", "--input", FIXTURES / "raw/d7_10g_v1", "--output", path, "--overwrite",
        "--quiet")
    with pytest.raises(PackError, match="replaced by another pack"):
        pickle.loads(state)


def test_opening_waits_for_a_publish_under_way(packs, tmp_path):
    path = copy_pack(packs, "sharded", tmp_path)
    rows = len(Pack(path))
    # Inside a publish: the old metadata.db moved out, the new one staged.
    staging = path / ".dataset-packer-staging"
    (staging / ".old").mkdir(parents=True)
    os.rename(path / "metadata.db", staging / ".old/metadata.db")
    shutil.copy(staging / ".old/metadata.db", staging / "metadata.db")
    (staging / ".complete").write_text("metadata.db\n")

    def publish():
        time.sleep(0.5)
        os.rename(staging / "metadata.db", path / "metadata.db")
        shutil.rmtree(staging)

    publisher = threading.Thread(target=publish)
    started = time.monotonic()
    publisher.start()
    pack = Pack(path)
    publisher.join()
    assert time.monotonic() - started >= 0.4
    assert len(pack) == rows


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_failed_open_keeps_no_file_open(packs):
    from dataset_packer import VersionError

    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(VersionError):
            Pack(packs["sharded"], version=99)
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_companion_opened_late_is_the_opened_versions(packs, tmp_path):
    path = copy_pack(packs, "sharded", tmp_path)
    rows = len(Pack(path))
    emb = tmp_path / "emb.npy"
    np.save(emb, np.arange(rows, dtype=np.float32))
    cli("attach", path, "--name", "emb", "--from", emb, "--quiet")
    pack = Pack(path)
    cli("detach", path, "--name", "emb")
    # The family's files are gone from the folder; the open Pack still has them.
    assert not list(path.glob("emb-*.npy"))
    assert "emb" in pack.companions
    assert np.array_equal(pack.companion("emb")[0:rows], np.arange(rows, dtype=np.float32))
