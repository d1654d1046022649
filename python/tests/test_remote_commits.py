"""Packs in object storage in the table layout (docs/object-storage.md, "The layout in a
bucket"), against conftest's moto server: commit N's record at `P/_versions/{2**64-1-N:020}.json`
names each file's object, written once under `P/_objects/<writer>/`.

The commits are published here by hand (`commit`) from copies of a local pack taken as the
binary changes it: 1 = d6's 5 runs in 300-row shards, 2 = after `pack --update` with d7's
runs (steps-00004.npy rewritten, three shards added, valuation_types.json grown), 3 = after a
`tag` (metadata.db only). A commit uploads the files the previous one does not hold with the
same size and CRC-32C, under a new writer's folder, and names the earlier keys of the rest.
"""

from __future__ import annotations

import json
import pickle
import secrets
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, cli, put
from dataset_packer._remote import record_key
from test_remote import publish

RAW = FIXTURES / "raw"


def writer_id() -> str:
    """A writer's folder name: milliseconds since 1970 (13 digits), 16 random hex digits."""
    return f"{int(time.time() * 1000):013d}-{secrets.token_hex(8)}"


def record_of(folder: Path, keys: dict[str, str]) -> dict[str, dict]:
    """The `files` of a record of the local pack `folder`, each at the key `keys` names."""
    import google_crc32c

    files = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        data = path.read_bytes()
        files[path.name] = {"key": keys[path.name], "bytes": len(data),
                            "crc32c": google_crc32c.value(data)}
    return files


def commit(folder: Path, url: str, number: int, command: str, parent: dict | None = None,
           **changes) -> dict:
    """Publishes the local pack `folder` as commit `number` of the pack at `url` (on top of
    `parent`, the previous commit's record): the files `parent` does not hold with the same
    size and CRC are uploaded under a new writer's folder, the others keep their keys; the
    record is written last (the commit point). `changes` replace fields of the record."""
    writer = writer_id()
    kept = (parent or {}).get("files", {})
    fresh = record_of(folder, {p.name: f"_objects/{writer}/{p.name}" for p in folder.iterdir()})
    files = {}
    for name, ref in fresh.items():
        old = kept.get(name)
        if old is not None and (old["bytes"], old["crc32c"]) == (ref["bytes"], ref["crc32c"]):
            files[name] = old
        else:
            put(f"{url}/{ref['key']}", (folder / name).read_bytes())
            files[name] = ref
    from dataset_packer import Pack

    with Pack(folder) as pack:
        pack_id = pack.pack_id
    record = {"format": "dataset-packer commit", "format_version": 1, "commit": number,
              "parent": number - 1 if number > 1 else None, "pack_id": pack_id,
              "writer": writer, "command": command, "files": files, **changes}
    put(f"{url}/{record_key(number)}", json.dumps(record, indent=2).encode())
    return record


@pytest.fixture(scope="module")
def states(tmp_path_factory) -> list[Path]:
    """Copies of the local pack after each change: commit 1, 2 and 3 publish them."""
    root = tmp_path_factory.mktemp("commits")
    raw, pack = root / "raw", root / "pack"
    raw.mkdir()
    for f in (RAW / "d6_10g_v1").iterdir():
        shutil.copy(f, raw)
    cli("pack", "--input", raw, "--output", pack, "--shard-rows", 300, "--quiet")
    states = [root / "1"]
    shutil.copytree(pack, states[-1])
    for f in (RAW / "d7_10g_v1").iterdir():
        shutil.copy(f, raw)
    cli("pack", "--input", raw, "--output", pack, "--update", "--shard-rows", 300, "--quiet")
    states.append(root / "2")
    shutil.copytree(pack, states[-1])
    cli("tag", pack, "first", "--version", 1)
    states.append(root / "3")
    shutil.copytree(pack, states[-1])
    return states


def publish_commits(states: list[Path], url: str, upto: int, records=None) -> list[dict]:
    """Commits 1..upto of the pack at `url` (after those in `records`)."""
    records = list(records or [])
    commands = ["pack", "pack --update", "tag"]
    for n in range(len(records) + 1, upto + 1):
        records.append(commit(states[n - 1], url, n, commands[n - 1],
                              records[-1] if records else None))
    return records


def open_remote(url, cache, **kw):
    from dataset_packer import Pack

    return Pack(url, cache=cache, **kw)


def rows(pack) -> np.ndarray:
    return pack.rows(slice(None))


def local_rows(path: Path, version=None) -> np.ndarray:
    from dataset_packer import Pack

    with Pack(path, version=version) as pack:
        return rows(pack)


def downloads(pack) -> int:
    return pack._remote.client.downloads


# ---------------------------------------------------------------------------- reading


def test_the_fixture_commits_keep_some_objects_and_replace_others(s3, states):
    url = "s3://packs/commits/fixture"
    one, two, three = publish_commits(states, url, 3)
    assert one["files"]["steps-00000.npy"]["key"] == f"_objects/{one['writer']}/steps-00000.npy"
    # What the update did not change stays where commit 1 wrote it.
    assert two["files"]["steps-00000.npy"] == one["files"]["steps-00000.npy"]
    for name in ("steps-00004.npy", "steps-00005.npy", "metadata.db", "valuation_types.json"):
        assert two["files"][name]["key"].startswith(f"_objects/{two['writer']}/"), name
    changed = {n for n in three["files"] if three["files"][n] != two["files"][n]}
    assert changed == {"metadata.db"}


def test_the_latest_commit_reads_as_the_local_pack(s3, states, tmp_path):
    from dataset_packer import Pack
    from dataset_packer._cache import entry_name
    from dataset_packer._remote import parse_location

    url = "s3://packs/commits/latest"
    records = publish_commits(states, url, 3)
    # Other names under _versions/ are not records.
    put(f"{url}/_versions/00000000000000000009.json.tmp", b"{}")
    put(f"{url}/_versions/9.json", b"{}")
    put(f"{url}/_versions/notes.txt", b"x")
    cache = tmp_path / "cache"
    there, here = open_remote(url, cache), Pack(states[2])
    assert there._remote.commit_number == 3
    assert downloads(there) == 3, "the record, metadata.db and valuation_types.json"
    assert (len(there), there.version, there.num_runs) == (len(here), here.version,
                                                           here.num_runs) == (2240, 2, 10)
    assert there.valuation_names == here.valuation_names and there.pack_id == here.pack_id
    assert [str(p) for p in there.shards] == [f"{url}/{p.name}" for p in here.shards]
    assert there.versions() == here.versions() and there.session == here.session
    np.testing.assert_array_equal(rows(there), rows(here))
    picks = np.random.default_rng(1).integers(0, len(here), 300)
    np.testing.assert_array_equal(there.rows(picks), here.rows(picks))
    # Each shard's cache entry is its object's: keyed by the object URL the record names.
    files = records[2]["files"]
    assert set(p.name for p in (cache / "entries").iterdir() if not p.name.endswith(".lock")) \
        == {entry_name(parse_location(f"{url}/{files[p.name]['key']}"), files[p.name]["bytes"],
                       files[p.name]["crc32c"]) for p in here.shards}
    # A version of it (a tag of commit 3's metadata.db), from the latest commit's files.
    v1 = open_remote(url, cache, version="first")
    assert (v1.version, len(v1), v1._remote.commit_number) == (1, 1220, 3)
    np.testing.assert_array_equal(rows(v1), local_rows(states[0]))
    there.close()
    v1.close()
    assert list((cache / "views").iterdir()) == []


def test_a_reader_reads_its_commit_whatever_is_committed_after(s3, states, tmp_path):
    import multiprocessing

    from dataset_packer import Pack

    url = "s3://packs/commits/reader"
    records = publish_commits(states, url, 1)
    cache = tmp_path / "cache"
    pack = open_remote(url, cache)
    np.testing.assert_array_equal(pack.rows(slice(0, 10)), local_rows(states[0])[:10])
    untouched = open_remote(url, tmp_path / "other-cache")  # reads nothing before the fork
    publish_commits(states, url, 3, records)
    # Shards 1..4 are fetched now, after commits 2 and 3 (which rewrote steps-00004.npy):
    # those of commit 1, never "the pack changed".
    assert (pack._remote.commit_number, pack.version, len(pack)) == (1, 1, 1220)
    np.testing.assert_array_equal(rows(pack), local_rows(states[0]))
    assert pack.versions() == Pack(states[0]).versions()
    # Its copies in other processes read commit 1 too: pickled (a spawned worker)…
    copy = pickle.loads(pickle.dumps(pack))
    assert (copy._remote.commit_number, len(copy)) == (1, 1220)
    np.testing.assert_array_equal(rows(copy), local_rows(states[0]))
    # …and forked (a DataLoader worker), which downloads through its helper process.
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_read_in_child, args=(untouched, out))
    child.start()
    try:
        found = out.get(timeout=120)
    finally:
        child.join(10)
        if child.exitcode is None:
            child.kill()
    assert child.exitcode == 0
    assert found == (1, local_rows(states[0]).tobytes())
    # A new reader reads the latest commit; its version 1 is commit 1's rows exactly.
    latest = open_remote(url, cache)
    assert (latest._remote.commit_number, len(latest)) == (3, 2240)
    np.testing.assert_array_equal(rows(latest), local_rows(states[2]))
    v1 = open_remote(url, cache, version=1)
    assert (v1._remote.commit_number, len(v1)) == (3, 1220)
    np.testing.assert_array_equal(rows(v1), local_rows(states[0]))
    # A version of a reader is read at the reader's commit.
    assert latest.at_version(1)._remote.commit_number == 3
    for p in (pack, copy, untouched, latest, v1):
        p.close()


def _read_in_child(pack, out) -> None:
    out.put((pack._remote.commit_number, rows(pack).tobytes()))


def test_a_pickled_reader_reads_its_commit_after_new_ones(s3, states, tmp_path):
    """Pickled before the new commits and opened after them (a worker that starts late)."""
    url = "s3://packs/commits/pickled"
    records = publish_commits(states, url, 2)
    pack = open_remote(url, tmp_path / "cache")
    sent = pickle.dumps(pack)
    publish_commits(states, url, 3, records)
    copy = pickle.loads(sent)
    assert copy._remote.commit_number == 2
    assert [v["tags"] for v in copy.versions()] == [[], []], "commit 3's tag is not read"
    np.testing.assert_array_equal(rows(copy), local_rows(states[1]))


def test_a_record_that_disagrees_with_its_objects_is_refused(s3, states, tmp_path):
    from dataset_packer import CorruptError, PackError

    cache = tmp_path / "cache"
    size = (states[0] / "metadata.db").stat().st_size
    # metadata.db's CRC-32C in the record is not the object's.
    url = "s3://packs/commits/bad-metadata"
    record = commit(states[0], url, 1, "pack")
    record["files"]["metadata.db"]["crc32c"] ^= 1
    put(f"{url}/{record_key(1)}", json.dumps(record).encode())
    key = record["files"]["metadata.db"]["key"]
    with pytest.raises(CorruptError, match=rf"^{url}/{key}: downloaded {size} "
                                           rf"bytes with CRC-32C [0-9a-f]{{8}}, expected .*"
                                           rf"{url}/{record_key(1)}"):
        open_remote(url, cache)
    # A shard's size and CRC in the record are not those its metadata.db records.
    url = "s3://packs/commits/bad-shard"
    record = commit(states[0], url, 1, "pack")
    record["files"]["steps-00002.npy"]["crc32c"] ^= 1
    put(f"{url}/{record_key(1)}", json.dumps(record).encode())
    key = record["files"]["steps-00002.npy"]["key"]
    with pytest.raises(CorruptError, match=rf"^{url}/{key}: .* the pack is corrupt"):
        open_remote(url, cache)
    # A record of a layout this package does not know.
    url = "s3://packs/commits/future"
    commit(states[0], url, 1, "pack", format_version=2)
    with pytest.raises(PackError, match=rf"^{url}/{record_key(1)}: a commit "
                                        r"record of layout 2, .* upgrade dataset_packer"):
        open_remote(url, cache)
    # Not a record at all.
    url = "s3://packs/commits/garbage"
    put(f"{url}/{record_key(1)}", b"not json")
    with pytest.raises(CorruptError, match=rf"^{url}/{record_key(1)}: not a "
                                           "commit record"):
        open_remote(url, cache)
    assert list((cache / "views").iterdir()) == [], "a refused open leaves no view behind"


def test_a_pack_in_the_old_layout_reads_as_before_and_then_with_its_first_commit(
        s3, states, tmp_path):
    """A pack published before commit records reads as it is; its first commit names the old
    keys it keeps (plain top-level names), whose cache entries are the same objects'."""
    from dataset_packer import Pack

    url = "s3://packs/commits/old-layout"
    publish(states[0], url)
    cache = tmp_path / "cache"
    old = open_remote(url, cache)
    assert old._remote.commit_number is None and downloads(old) == 2
    np.testing.assert_array_equal(rows(old), local_rows(states[0]))
    entries = sorted(p.name for p in (cache / "entries").iterdir())
    files = record_of(states[0], {p.name: p.name for p in states[0].iterdir()})
    record = {"format": "dataset-packer commit", "format_version": 1, "commit": 1,
              "parent": None, "pack_id": Pack(states[0]).pack_id, "writer": writer_id(),
              "command": "tag", "files": files}
    put(f"{url}/{record_key(1)}", json.dumps(record).encode())
    new = open_remote(url, cache)
    assert new._remote.commit_number == 1
    np.testing.assert_array_equal(rows(new), local_rows(states[0]))
    assert downloads(new) == 3, "the shards came from the old layout's cache entries"
    assert sorted(p.name for p in (cache / "entries").iterdir()) == entries
    old.close()
    new.close()


# ---------------------------------------------------------------------------- the binary's commits


def test_what_the_binary_commits_reads_and_a_reader_keeps_its_commit(s3, tmp_path, monkeypatch):
    """The commits `dataset-packer` makes (an update that rewrites a tail shard, a tag) read
    here as the local pack, and a Pack opened before them keeps reading its commit."""
    monkeypatch.setenv("DATASET_PACKER_CACHE", str(tmp_path / "cli-cache"))
    url, local, d6 = "s3://packs/commits/binary", tmp_path / "local", RAW / "d6_10g_v1"
    for out in (url, str(local)):
        cli("pack", "--input", str(d6), "--output", out, "--shard-rows", "300", "--quiet")
    first = open_remote(url, tmp_path / "cache")
    want = local_rows(local)
    for out in (url, str(local)):
        cli("pack", "--input", str(RAW), "--output", out, "--update", "--quiet")
    cli("tag", url, "nightly")
    assert np.array_equal(rows(first), want), "commit 1's rows, fetched after commits 2 and 3"
    first.close()
    with open_remote(url, tmp_path / "cache") as latest:
        assert np.array_equal(rows(latest), local_rows(local))
    with open_remote(url, tmp_path / "cache", version=1) as v1:
        assert np.array_equal(rows(v1), want)


def test_a_pack_on_a_web_server_reads_its_latest_commit(s3, tmp_path, monkeypatch):
    """A web server cannot list: the latest commit is found by probing its records."""
    import functools
    import http.server
    import threading

    import obstore
    from obstore.store import S3Store

    monkeypatch.setenv("DATASET_PACKER_CACHE", str(tmp_path / "cli-cache"))
    url, local = "s3://packs/commits/web", tmp_path / "local"
    for out in (url, str(local)):
        cli("pack", "--input", str(RAW), "--output", out, "--shard-rows", "300", "--quiet")
    for name in ("a", "b", "c", "d", "e"):
        cli("tag", url, name)
    site = tmp_path / "site"
    store = S3Store("packs")
    for batch in obstore.list(store, "commits/web"):
        for meta in batch:
            key = str(meta["path"])
            path = site / "pack" / key[len("commits/web/"):]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bytes(obstore.get(store, key).bytes()))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        web = f"http://127.0.0.1:{server.server_address[1]}/pack"
        with open_remote(web, tmp_path / "web-cache") as pack:
            assert pack._remote.commit_number == 6
            assert np.array_equal(rows(pack), local_rows(local))
    finally:
        server.shutdown()


def test_a_shard_window_epoch_reads_its_commit_through_an_update(s3, tmp_path, monkeypatch):
    """The failure the table layout ends: a shard-window epoch that reaches the tail shard an
    update rewrote after it started. It reads commit 1's rows, each once, with their EVs."""
    from dataset_packer import Pack
    from dataset_packer._loader import EpochStream, WorkerInfo, partition

    monkeypatch.setenv("DATASET_PACKER_CACHE", str(tmp_path / "cli-cache"))
    url, local, d6 = "s3://packs/commits/epoch", tmp_path / "local", RAW / "d6_10g_v1"
    for out in (url, str(local)):
        cli("pack", "--input", str(d6), "--output", out, "--shard-rows", "300", "--quiet")
    pack = open_remote(url, tmp_path / "cache")
    # Windows of one shard: each is fetched only when the epoch reaches it.
    stream = EpochStream(pack, 64, seed=3, order="shards", window_bytes=20_000)
    stream.set_epoch(0)
    batches = iter(stream.batches(partition(WorkerInfo(0, 1), 0, 1)))
    got = [next(batches)]
    cli("pack", "--input", str(RAW), "--output", url, "--update", "--quiet")
    cli("tag", url, "after")
    got.extend(batches)
    rows = np.concatenate([b["row"] for b in got])
    evs = np.concatenate([b["evs"] for b in got])
    with Pack(local) as here:
        want = here.rows(slice(None))
    assert sorted(rows.tolist()) == list(range(len(want))), "every row of commit 1, once"
    legal = np.concatenate([b["legal"] for b in got])
    assert legal.any() and np.array_equal(evs[legal], want["branch_evs"][rows][legal])
    pack.close()
