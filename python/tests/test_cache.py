"""The node's cache of remote files (`_cache.Cache`) as processes share it, against
conftest's moto server: an entry is checked (its whole CRC-32C) each time it is pinned, and a
damaged one is fetched again; `entries/` deleted under a running reader is made again; and no
two processes wait for each other, whatever order they fetch in.

The pack is fixtures/raw in 500-row shards, published as commit 1 of the table layout
(test_remote_commits.commit).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, cli, put
from test_remote_commits import commit


@pytest.fixture(scope="module")
def remote(s3, tmp_path_factory) -> tuple[Path, str, dict]:
    """(the local pack, its URL, its commit record)."""
    local = tmp_path_factory.mktemp("cache") / "pack"
    cli("pack", "--input", FIXTURES / "raw", "--output", local, "--shard-rows", 500, "--quiet")
    url = "s3://packs/cache/pack"
    return local, url, commit(local, url, 1, "pack")


def open_remote(url, cache):
    from dataset_packer import Pack

    return Pack(url, cache=cache)


def local_rows(path: Path) -> np.ndarray:
    from dataset_packer import Pack

    with Pack(path) as pack:
        return pack.rows(slice(None))


def entry_of(cache: Path, url: str, record: dict, name: str) -> Path:
    """The cache file of the pack's file `name` (its object's entry)."""
    from dataset_packer._cache import entry_name
    from dataset_packer._remote import parse_location

    ref = record["files"][name]
    return cache / "entries" / entry_name(parse_location(f"{url}/{ref['key']}"), ref["bytes"],
                                          ref["crc32c"])


def flip(path: Path, offset: int) -> None:
    """One byte of the file changed in place (the inode readers map is the same)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0xFF]))


def damaged_warning(path: Path, record: dict, name: str) -> str:
    return (rf"^cache file {re.escape(str(path))} is damaged \(CRC-32C [0-9a-f]{{8}}, expected "
            rf"{record['files'][name]['crc32c']:08x}\); fetching it again$")


def downloads(pack) -> int:
    return pack._remote.client.downloads


# ---------------------------------------------------------------------------- damage


def test_a_damaged_cache_file_is_found_at_its_next_use_and_fetched_again(remote, tmp_path):
    from dataset_packer import CacheWarning

    local, url, record = remote
    cache = tmp_path / "cache"
    first = open_remote(url, cache)
    want = local_rows(local)
    np.testing.assert_array_equal(first.rows(slice(None)), want)
    first.close()
    damaged = entry_of(cache, url, record, "steps-00001.npy")
    flip(damaged, damaged.stat().st_size - 30)  # a byte of a row, not of the header
    again = open_remote(url, cache)
    with pytest.warns(CacheWarning, match=damaged_warning(damaged, record, "steps-00001.npy")):
        np.testing.assert_array_equal(again.rows(slice(None)), want)
    assert downloads(again) == 3 + 1, "the record, metadata.db, valuation_types.json, shard 1"
    assert damaged.read_bytes() == (local / "steps-00001.npy").read_bytes()
    again.close()


def test_a_file_damaged_while_another_reader_uses_it_is_fetched_again(remote, tmp_path):
    """The reader that pins the damaged entry keeps it (its exclusive lock never comes): the
    next one replaces the entry's lock file after about 2 s and downloads it again."""
    from dataset_packer import CacheWarning

    local, url, record = remote
    cache = tmp_path / "cache"
    holder = open_remote(url, cache)
    want = local_rows(local)
    np.testing.assert_array_equal(holder.rows(slice(None)), want)  # every shard pinned
    damaged = entry_of(cache, url, record, "steps-00002.npy")
    flip(damaged, damaged.stat().st_size - 30)
    reader = open_remote(url, cache)
    began = time.monotonic()
    with pytest.warns(CacheWarning, match=damaged_warning(damaged, record, "steps-00002.npy")):
        np.testing.assert_array_equal(reader.rows(slice(None)), want)
    assert time.monotonic() - began < 30
    assert damaged.read_bytes() == (local / "steps-00002.npy").read_bytes()
    holder.close()
    reader.close()


def _fetch_in_child(cache: str, url: str, size: int, crc: int, out) -> None:
    from dataset_packer._cache import Cache
    from dataset_packer._remote import Client, parse_location

    with Cache(cache, 1 << 30, Client()).fetch(parse_location(url), size, crc) as entry:
        out.put(Path(entry.path).read_bytes())


def test_a_file_deleted_while_a_reader_uses_it_is_fetched_again_not_waited_for(remote,
                                                                                tmp_path):
    """Its reader holds the entry's lock for as long as it lives; another process that wants
    the file must not wait for it (it did, forever, before the lock was only ever tried)."""
    local, url, record = remote
    cache = tmp_path / "cache"
    holder = open_remote(url, cache)
    # Shard 0 read whole (so fetched whole, not by blocks) and pinned.
    holder.rows(slice(0, len(np.load(local / "steps-00000.npy", mmap_mode="r"))))
    entry = entry_of(cache, url, record, "steps-00000.npy")
    entry.unlink()
    ref = record["files"]["steps-00000.npy"]
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_fetch_in_child, args=(
        str(cache), f"{url}/{ref['key']}", ref["bytes"], ref["crc32c"], out))
    child.start()
    try:
        found = out.get(timeout=60)
    except Exception:
        found = None
    child.join(10)
    if child.exitcode is None:
        child.kill()
    holder.close()
    assert found is not None, "the fetch waited for the reader that holds the entry"
    assert found == (local / "steps-00000.npy").read_bytes()
    assert entry.read_bytes() == found


# ---------------------------------------------------------------------------- entries/ deleted


def test_entries_deleted_under_an_open_pack_are_fetched_again(remote, tmp_path):
    import dataset_packer._remote as remote_module

    local, url, record = remote
    cache = tmp_path / "cache"
    pack = open_remote(url, cache)
    want = local_rows(local)
    np.testing.assert_array_equal(pack.rows(slice(0, 10)), want[:10])  # shard 0 pinned
    shutil.rmtree(cache / "entries")
    np.testing.assert_array_equal(pack.rows(slice(None)), want)
    assert downloads(pack) == 3 + len(pack.shards)
    assert entry_of(cache, url, record, "steps-00001.npy").is_file()
    # Deleted again while a download runs: that fetch starts over in the new folder.
    shutil.rmtree(cache / "entries")
    other = open_remote(url, cache)
    download = remote_module.Client.download_file
    deleted = []

    def deleting(client, source, path):
        if not deleted and str(path).endswith(".part"):
            deleted.append(path)
            shutil.rmtree(cache / "entries")
        return download(client, source, path)

    other._remote.client.download_file = deleting.__get__(other._remote.client)
    np.testing.assert_array_equal(other.rows(slice(None)), want)
    assert deleted and downloads(other) == 3 + len(other.shards)  # (the failed try is not one)
    pack.close()
    other.close()


# ---------------------------------------------------------------------------- no waiting


ROUNDS = 20


def _fetch_rounds(root: str, objects: list, seed: int, barrier, out) -> None:
    """`ROUNDS` times, on an empty cache the other processes share (`root/round-N`): every
    object in an order of its own, each pinned until the round ends."""
    from dataset_packer._cache import Cache
    from dataset_packer._remote import Client, parse_location

    client = Client()
    order = random.Random(seed)
    try:
        for round in range(ROUNDS):
            barrier.wait(60)
            cache = Cache(Path(root) / f"round-{round}", 1 << 30, client)
            held = []
            for url, size, crc in order.sample(objects, len(objects)):
                held.append(cache.fetch(parse_location(url), size, crc))
                assert os.path.getsize(held[-1].path) == size
            for entry in held:
                entry.release()
        out.put(("done", client.downloads))
    except BaseException as e:  # a broken barrier: another process is stuck
        out.put(("failed", f"{type(e).__name__}: {e}"))


def test_processes_fetching_in_different_orders_never_wait_for_each_other(s3, tmp_path):
    import google_crc32c

    rng = np.random.default_rng(2)
    objects = []
    for k in range(4):
        data = rng.integers(0, 256, (1 + k) << 19, dtype=np.uint8).tobytes()
        url = f"s3://packs/cache/order/{k}.bin"
        put(url, data)
        objects.append((url, len(data), google_crc32c.value(data)))
    # Fresh interpreters (no copy of this process's obstore runtime or locks).
    context = multiprocessing.get_context("spawn")
    processes = 4
    barrier, out = context.Barrier(processes), context.Queue()
    children = [context.Process(target=_fetch_rounds,
                                args=(str(tmp_path / "cache"), objects, seed, barrier, out))
                for seed in range(processes)]
    for child in children:
        child.start()
    results = []
    deadline = time.monotonic() + 300
    try:
        for _ in children:
            results.append(out.get(timeout=max(1, deadline - time.monotonic())))
    except Exception:
        pass
    for child in children:
        child.join(max(1, deadline - time.monotonic()))
        if child.exitcode is None:
            child.kill()
    assert [r[0] for r in results] == ["done"] * processes, results
    # Each round's cache downloaded each object once for the node.
    assert sum(r[1] for r in results) == ROUNDS * len(objects), results


def _hold_then_fetch(root: str, mine: tuple, theirs: tuple, barrier, out) -> None:
    """Pins `mine`, waits while the test deletes both files, then fetches `theirs`."""
    from dataset_packer._cache import Cache
    from dataset_packer._remote import Client, parse_location

    cache = Cache(root, 1 << 30, Client())
    try:
        url, size, crc = mine
        held = cache.fetch(parse_location(url), size, crc)
        barrier.wait(60)  # both pinned
        barrier.wait(60)  # both files deleted
        url, size, crc = theirs
        with cache.fetch(parse_location(url), size, crc) as entry:
            assert os.path.getsize(entry.path) == size
        held.release()
        out.put("done")
    except BaseException as e:
        out.put(f"{type(e).__name__}: {e}")


def test_two_processes_each_holding_what_the_other_wants_do_not_deadlock(s3, tmp_path):
    """Each pins an entry whose file is then deleted, and wants the other's: each holds a
    shared lock the other's exclusive lock needs. Before exclusive locks were only tried,
    both waited forever."""
    import google_crc32c

    from dataset_packer._cache import entry_name
    from dataset_packer._remote import parse_location

    objects = []
    for k in range(2):
        data = bytes([k]) * 70_000
        url = f"s3://packs/cache/held/{k}.bin"
        put(url, data)
        objects.append((url, len(data), google_crc32c.value(data)))
    cache = tmp_path / "cache"
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(3), context.Queue()
    children = [context.Process(target=_hold_then_fetch,
                                args=(str(cache), objects[k], objects[1 - k], barrier, out))
                for k in range(2)]
    for child in children:
        child.start()
    results = []
    try:
        barrier.wait(120)
        for url, size, crc in objects:
            (cache / "entries" / entry_name(parse_location(url), size, crc)).unlink()
        barrier.wait(60)
        began = time.monotonic()
        for _ in children:
            results.append(out.get(timeout=60))
        took = time.monotonic() - began
    except Exception as e:  # (queue.Empty: a process still waits)
        results.append(f"no answer in time ({type(e).__name__}: {e})")
    finally:
        for child in children:
            child.join(10)
            if child.exitcode is None:
                child.kill()
    assert results == ["done", "done"], results
    assert took < 30, "each replaced the other's lock file after about 2 s"
