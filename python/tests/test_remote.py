"""Packs in object storage, read with `Pack("s3://…")`, against a real S3 server (conftest's
`s3`: moto's). A pack made by the binary is uploaded with obstore in the layout before commit
records (its files under their own names, metadata.db last) and read through a cache folder
of the test's own; test_remote_commits.py reads the table layout.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, cli, put

def publish(folder: Path, url: str) -> None:
    """Uploads a pack folder: every file, metadata.db last (the commit point)."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != "metadata.db")
    for path in files + [folder / "metadata.db"]:
        put(f"{url}/{path.name}", path.read_bytes())


EMBED = 5


@pytest.fixture(scope="session")
def local(tmp_path_factory) -> Path:
    """A pack of fixtures/raw in 500-row shards, with two companion families attached one
    after the other (so it has 3 versions: the pack, then each attach)."""
    root = tmp_path_factory.mktemp("remote")
    path = root / "pack"
    cli("pack", "--input", FIXTURES / "raw", "--output", path, "--shard-rows", 500, "--quiet")
    files = []
    for k, shard in enumerate(sorted(path.glob("steps-*.npy"))):
        rows = np.load(shard)
        emb = np.stack([rows["run_id"], rows["step_index"]] + [rows["step_index"] * j
                       for j in range(EMBED - 2)], axis=1).astype(np.float32)
        files.append(root / f"emb-{k}.npy")
        np.save(files[-1], emb)
    cli("attach", path, "--name", "emb", "--from", *files, "--quiet")
    # Version 3: another family (version 2 then reads `emb` cut to its rows).
    tags = root / "tags.npy"
    np.save(tags, (np.arange(sum(len(np.load(f)) for f in files)) % 251).astype(np.uint8))
    cli("attach", path, "--name", "tags", "--from", tags, "--quiet")
    return path


@pytest.fixture(scope="session")
def url(s3, local) -> str:
    url = "s3://packs/team/clean"
    publish(local, url)
    return url


def open_remote(url, cache, **kw):
    from dataset_packer import Pack

    return Pack(url, cache=cache, **kw)


def shard_files(pack) -> list[str]:
    return [p.name for p in pack.shards]


def entries(cache: Path) -> dict[str, tuple]:
    """The cache's files (name → (inode, mtime_ns, size)), lock files aside."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size)
            for p in (cache / "entries").iterdir() if not p.name.endswith(".lock")}


def downloads(pack) -> int:
    return pack._remote.client.downloads


def same_batches(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


# ---------------------------------------------------------------------------- reading


def test_a_remote_pack_reads_exactly_as_the_local_one(url, local, tmp_path):
    from dataset_packer import Pack

    here = Pack(local)
    there = open_remote(url, tmp_path / "cache")
    assert str(there.path) == url and there.path.name == "clean"
    assert (len(there), there.num_runs, there.valuation_names, there.version) == \
           (len(here), here.num_runs, here.valuation_names, here.version)
    assert there.version == 3 and len(there.shards) == len(here.shards) >= 4
    assert shard_files(there) == [p.name for p in here.shards]
    assert [str(p) for p in there.shards][0] == f"{url}/steps-00000.npy"
    assert there.session == here.session and there.pack_id == here.pack_id
    assert there.versions() == here.versions()
    np.testing.assert_array_equal(there.rows(slice(None)), here.rows(slice(None)))
    picks = np.random.default_rng(3).integers(0, len(here), 400)
    np.testing.assert_array_equal(there.rows(picks), here.rows(picks))
    run = int(here.select("steps > 50").run_ids[0])
    np.testing.assert_array_equal(there.run(run), here.run(run))
    assert there.select("steps > 50").run_ids.tolist() == here.select("steps > 50").run_ids.tolist()
    assert there.companions == here.companions == ["emb", "tags"]
    np.testing.assert_array_equal(there.companion("emb")[picks], here.companion("emb")[picks])
    for options in ({"shuffle": True, "seed": 5, "epoch": 1, "augment": True},
                    {"shuffle": False, "select": "steps > 50"},
                    {"shuffle": True, "rank": 1, "world_size": 2, "companions": ["emb"]}):
        same_batches(list(there.batches(256, **options)), list(here.batches(256, **options)))
    same_batches(list(there.windows(8, 32, seed=2)), list(here.windows(8, 32, seed=2)))
    train_r, val_r = there.split(0.2, seed=1)
    train_l, val_l = here.split(0.2, seed=1)
    assert val_r.run_ids.tolist() == val_l.run_ids.tolist()
    # Version 1 (before the attach): its rows, read through the same cache.
    v1_r, v1_l = there.at_version(1), Pack(local, version=1)
    assert (v1_r.version, len(v1_r), v1_r.companions) == (1, len(v1_l), [])
    same_batches(list(v1_r.batches(500, seed=9)), list(v1_l.batches(500, seed=9)))
    there.close()


def test_shards_are_fetched_lazily_and_a_second_open_downloads_nothing(url, local, tmp_path):
    cache = tmp_path / "cache"
    pack = open_remote(url, cache)
    # metadata.db and valuation_types.json only: no shard is fetched before it is read.
    assert downloads(pack) == 2 and entries(cache) == {}
    pack.rows(slice(0, 10))
    assert downloads(pack) == 3 and len(entries(cache)) == 1
    pack.rows(slice(None))
    shards = len(pack.shards)
    assert downloads(pack) == 2 + shards
    before = entries(cache)
    assert len(before) == shards
    from dataset_packer._cache import entry_name

    # The cache's entries are named as the binary names them (src/store/cache.rs): shard 0,
    # first read in part, by its one block (1 MiB blocks, 24 KB shards); the others, read
    # whole, whole.
    listed = {f["file_name"]: f for f in pack.versions()[-1]["files"]}
    assert set(before) == {entry_name(pack.path / name, listed[name]["bytes"],
                                      int(listed[name]["crc32c"], 16),
                                      0 if name == "steps-00000.npy" else None)
                           for name in shard_files(pack)}
    assert (cache / "CACHEDIR.TAG").read_text().startswith(
        "Signature: 8a477f597d28d172789f06886806bc55\n")
    again = open_remote(url, cache)
    np.testing.assert_array_equal(again.rows(slice(None)), pack.rows(slice(None)))
    assert downloads(again) == 2, "the shards came from the cache"
    assert entries(cache) == before, "not one entry was written again"
    pack.close()
    again.close()
    assert list((cache / "views").iterdir()) == [], "closing removes the private views"


def test_the_cache_protocol_entry_names_are_the_binarys():
    from dataset_packer._cache import entry_name, is_entry_name
    from dataset_packer._remote import parse_location

    # The same names src/store/cache.rs's `entry_names_are_the_ones_python_computes` asserts.
    assert entry_name(parse_location("s3://packs/team/clean/steps-00003.npy"), 48_128,
                      0x1234ABCD) == "c5b5a1d288c357c6-1234abcd-48128-steps-00003.npy"
    assert entry_name(parse_location("S3A://Bucket/p/émb dé-00000.npy/"), 7, 0) == \
        "c852b7674cf794f8-00000000-7-_mb_d_-00000.npy"
    name = "c5b5a1d288c357c6-1234abcd-48128-steps-00003.npy"
    assert is_entry_name(name)
    for other in (f"{name}.lock", f"{name}.part", "notes.txt", "CACHEDIR.TAG",
                  "0123-deadbeef-1-x", "steps-00000.npy"):
        assert not is_entry_name(other), other


READER = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from dataset_packer import Pack
    from dataset_packer._cache import Cache
    from dataset_packer._remote import parse_location
    url, cache, go, big, size, crc = sys.argv[1:7]
    pack = Pack(url, cache=cache)
    shared = Cache(cache, 1 << 30, pack._remote.client)
    opened = pack._remote.client.downloads
    with open(go + "." + str(os.getpid()), "w"):
        pass
    while not os.path.exists(go):
        time.sleep(0.001)
    # All at once: the large file first (its download takes long enough that they overlap).
    with shared.fetch(parse_location(big), int(size), int(crc)) as entry:
        assert os.path.getsize(entry.path) == int(size)
    rows = pack.rows(slice(None))
    print(json.dumps({"downloads": pack._remote.client.downloads - opened,
                      "sum": int(rows.view(np.uint8).astype(np.uint64).sum())}))
""")


def test_processes_sharing_a_cache_download_each_file_once(url, local, tmp_path):
    import google_crc32c

    from dataset_packer import Pack

    big = np.random.default_rng(0).integers(0, 256, 24 << 20, dtype=np.uint8).tobytes()
    put("s3://packs/big/file.bin", big)
    cache, go = tmp_path / "cache", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", READER, url, str(cache), str(go),
                               "s3://packs/big/file.bin", str(len(big)),
                               str(google_crc32c.value(big))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    deadline = time.time() + 120
    while len(list(tmp_path.glob("go.*"))) < len(procs) and time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            break  # one failed before it was ready: its error is shown below
        time.sleep(0.01)
    go.touch()
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), [e for _, e in outputs]
    results = [json.loads(out) for out, _ in outputs]
    here = Pack(local)
    want = int(here.rows(slice(None)).view(np.uint8).astype(np.uint64).sum())
    assert [r["sum"] for r in results] == [want] * len(procs)
    # The large file and each shard, downloaded once for the whole node.
    assert sum(r["downloads"] for r in results) == 1 + len(here.shards), results
    assert len(entries(cache)) == 1 + len(here.shards)


def test_a_pickled_remote_pack_reopens_on_the_same_cache(url, tmp_path):
    pack = open_remote(url, tmp_path / "cache", cache_limit="64MiB")
    rows = pack.rows(slice(None))
    copy = pickle.loads(pickle.dumps(pack))
    assert str(copy.path) == url and copy._data.cache_limit == 64 << 20
    np.testing.assert_array_equal(copy.rows(slice(None)), rows)
    assert downloads(copy) == 2


# ---------------------------------------------------------------------------- the loader contract


def test_the_packdata_contract_for_a_loader(url, local, tmp_path):
    from dataset_packer import Pack
    from dataset_packer._data import of

    here = of(Pack(local))
    assert (here.is_remote, here.cache_limit) == (False, None)
    here.prefetch([0, 1])
    here.release([0, 1])
    sizes = [p.stat().st_size for p in Pack(local).shards]
    assert [here.shard_bytes(i) for i in range(len(sizes))] == sizes

    cache = tmp_path / "cache"
    # Room for two shards and a half: reading every shard needs `release` of the others.
    limit = sizes[0] * 5 // 2
    pack = open_remote(url, cache, cache_limit=limit)
    data = of(pack)
    assert (data.is_remote, data.cache_limit) == (True, limit)
    assert [data.shard_bytes(i) for i in range(len(sizes))] == sizes
    data.prefetch([0, 1])
    deadline = time.time() + 60
    while len(entries(cache)) < 2 and time.time() < deadline:
        time.sleep(0.02)
    assert len(entries(cache)) == 2, "prefetch fetched both, in the background"
    np.testing.assert_array_equal(pack.rows(slice(0, 1000)),
                                  Pack(local).rows(slice(0, 1000)))
    assert downloads(pack) == 4, "the reads used the prefetched entries"
    from dataset_packer import CacheLimitError

    with pytest.raises(CacheLimitError, match="cache_limit"):
        pack.rows(slice(None))  # shards 0 and 1 are pinned, 2 more do not fit
    for k in range(len(sizes)):
        data.prefetch([k])
        start, stop = data._offsets[k], data._offsets[k + 1]
        np.testing.assert_array_equal(pack.rows(slice(start, stop)),
                                      Pack(local).rows(slice(start, stop)))
        data.release([k])
    assert sum(s for *_, s in entries(cache).values()) <= limit
    pack.close()


# ---------------------------------------------------------------------------- faults


def test_a_corrupt_object_is_refused_and_nothing_of_it_is_cached(s3, local, tmp_path):
    from dataset_packer import CorruptError

    url = "s3://packs/corrupt"
    publish(local, url)
    good = (local / "steps-00001.npy").read_bytes()
    bad = bytearray(good)
    bad[1000] ^= 0xFF
    put(f"{url}/steps-00001.npy", bytes(bad))
    cache = tmp_path / "cache"
    pack = open_remote(url, cache)
    pack.rows(slice(0, 10))  # shard 0 is fine
    with pytest.raises(CorruptError, match=f"{url}/steps-00001.npy: downloaded"):
        pack.rows(slice(None))
    names = sorted(entries(cache))
    # Shard 0 first read in part: its one block (1 MiB blocks, 24 KB shards) is its entry.
    assert len(names) == 1 and names[0].endswith("steps-00000.npy_0"), names
    # A download interrupted by kill -9 leaves a .part: never read as data, replaced.
    put(f"{url}/steps-00001.npy", good)
    from dataset_packer import Pack
    from dataset_packer._cache import entry_name
    from dataset_packer._remote import parse_location

    listed = {f["file_name"]: f for f in pack.versions()[-1]["files"]}["steps-00001.npy"]
    name = entry_name(parse_location(f"{url}/steps-00001.npy"), listed["bytes"],
                      int(listed["crc32c"], 16))
    part = cache / "entries" / f"{name}.part"
    part.write_bytes(good[:5000])
    np.testing.assert_array_equal(pack.rows(slice(None)), Pack(local).rows(slice(None)))
    assert not part.exists() and (cache / "entries" / name).stat().st_size == len(good)


def test_a_cache_limit_smaller_than_a_shard_says_so(url, tmp_path):
    from dataset_packer import CacheLimitError

    pack = open_remote(url, tmp_path / "cache", cache_limit=1000)
    with pytest.raises(CacheLimitError, match=r"steps-00000\.npy \(\d+ bytes\) is larger than "
                                              r"the cache's limit \(1000 bytes\): raise "
                                              "cache_limit"):
        pack.rows(0)
    assert entries(tmp_path / "cache") == {}
    left = sorted(p.name for p in (tmp_path / "cache" / "entries").iterdir())
    assert left == [], f"the refused fetch left {left}"


def test_a_pack_updated_under_its_reader_says_it_changed(s3, local, tmp_path):
    from dataset_packer import PackChangedError

    url = "s3://packs/updated-under-reader"
    publish(local, url)
    pack = open_remote(url, tmp_path / "cache")
    # A writer publishes another pack there (today's remote layout rewrites keys in place).
    other = tmp_path / "other"
    cli("pack", "--input", FIXTURES / "raw/d7_10g_v1", "--output", other, "--shard-rows",
        300, "--quiet")
    publish(other, url)
    with pytest.raises(PackChangedError, match="changed while this reader had it open.*open "
                                               "the pack again"):
        pack.rows(slice(None))
    pack.close()


def test_missing_things_and_wrong_credentials_each_say_so(s3, url, tmp_path, monkeypatch):
    from dataset_packer import NotAPackError, PackError
    from dataset_packer import RemoteError, UrlError

    cache = tmp_path / "cache"
    with pytest.raises(NotAPackError, match="s3://packs/nothing/here is not a pack: it has no "
                                            "metadata.db"):
        open_remote("s3://packs/nothing/here", cache)
    with pytest.raises(NotAPackError, match='the bucket "nobucket" does not exist|'
                                            "the bucket 'nobucket' does not exist"):
        open_remote("s3://nobucket/x", cache)
    with pytest.raises(UrlError, match="unknown URL scheme 'ftp'") as caught:
        open_remote("ftp://host/pack", cache)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, PackError)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    # The first request lists the pack's commit records.
    with pytest.raises(RemoteError, match="s3://packs/team/clean/_versions: the server does "
                                          "not accept these credentials"):
        open_remote(url, cache)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    with pytest.raises(RemoteError, match="no credentials: set AWS_ACCESS_KEY_ID"):
        open_remote(url, cache)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    with pytest.raises(RemoteError, match="is plain http://.*AWS_ALLOW_HTTP=true"):
        open_remote(url, cache)
    assert list((cache / "views").iterdir()) == [], "a failed open leaves no view behind"


def test_the_cache_settings_come_from_the_arguments_else_the_environment(monkeypatch, tmp_path):
    from dataset_packer._remote import DEFAULT_LIMIT, cache_config, parse_size

    monkeypatch.delenv("DATASET_PACKER_CACHE", raising=False)
    monkeypatch.delenv("DATASET_PACKER_CACHE_LIMIT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_config() == (tmp_path / "xdg" / "dataset-packer", DEFAULT_LIMIT)
    monkeypatch.setenv("DATASET_PACKER_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("DATASET_PACKER_CACHE_LIMIT", "1.5GiB")
    assert cache_config() == (tmp_path / "c", 3 << 29)
    assert cache_config(tmp_path / "d", "2GB") == (tmp_path / "d", 2_000_000_000)
    assert cache_config(None, 4096)[1] == 4096
    monkeypatch.setenv("DATASET_PACKER_CACHE_LIMIT", "lots")
    with pytest.raises(ValueError, match="DATASET_PACKER_CACHE_LIMIT=lots"):
        cache_config()
    assert (parse_size("50GiB"), parse_size(" 2 KiB "), parse_size("3MB")) == \
        (50 << 30, 2048, 3_000_000)
    for bad in ("", "GiB", "1.2.3G", "5 parsecs", "-1G", "1e400"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_views_of_processes_that_are_gone_are_swept(url, tmp_path):
    import fcntl

    cache = tmp_path / "cache"
    views = cache / "views"
    views.mkdir(parents=True)
    # The binary's kind (no .lock) of a process that is gone, and ours of a process that is
    # gone (a .lock nobody holds), and one that lives (its .lock held: perhaps in another
    # container, where its process id means nothing here), and a folder not named like one.
    gone_pid, gone_lock, alive, other = (views / "999999999-0", views / "4-0", views / "5-0",
                                         views / "notes")
    for folder in (gone_pid, gone_lock, alive, other):
        folder.mkdir()
        (folder / "metadata.db").write_bytes(b"x")
    (gone_lock / ".lock").touch()
    (alive / ".lock").touch()
    held = open(alive / ".lock", "w")
    fcntl.flock(held, fcntl.LOCK_SH)
    pack = open_remote(url, cache)
    left = sorted(p.name for p in views.iterdir())
    assert left == sorted(["5-0", "notes", pack._remote.view.name]), left
    held.close()
    pack.close()


def test_the_summary_of_a_remote_pack_needs_no_shard(url, local, tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "DATASET_PACKER_CACHE": str(cache)}
    out = [subprocess.run([sys.executable, "-m", "dataset_packer", str(where), "--json"],
                          capture_output=True, text=True, env=env) for where in (url, local)]
    assert [o.returncode for o in out] == [0, 0], out[0].stderr
    there, here = (json.loads(o.stdout) for o in out)
    assert there.pop("pack") == url and here.pop("pack") == str(local)
    assert there == here and there["companions"] == ["emb", "tags"]
    assert entries(cache) == {}, "headers and metadata.db were enough"
    typo = subprocess.run([sys.executable, "-m", "dataset_packer", "s3:packs/team/clean"],
                          capture_output=True, text=True, env=env)
    assert typo.returncode == 1 and "'s3:packs/team/clean': a URL is written s3://…" in \
        typo.stderr


def test_a_past_version_of_a_remote_pack_reads_its_companions(url, local, tmp_path):
    from dataset_packer import Pack

    v2, here = open_remote(url, tmp_path / "cache", version=2), Pack(local, version=2)
    assert v2.companions == here.companions == ["emb"]
    with pytest.raises(KeyError, match="no companion 'tags'.*attached in version 3"):
        v2.companion("tags")
    np.testing.assert_array_equal(v2.companion("emb")[:], here.companion("emb")[:])
    same_batches(list(v2.batches(300, seed=4, companions=["emb"])),
                 list(here.batches(300, seed=4, companions=["emb"])))
    assert [str(f) for f in v2.companion("emb").files][0] == f"{url}/emb-00000.npy"


def _fetch_in_child(cache: str, url: str, size: int, crc: int, out) -> None:
    from dataset_packer._cache import Cache
    from dataset_packer._remote import Client, parse_location

    with Cache(cache, 1 << 30, Client()).fetch(parse_location(url), size, crc) as entry:
        out.put(os.path.getsize(entry.path))


def test_a_process_forked_while_a_thread_holds_a_cache_lock_does_not_keep_it(s3, tmp_path):
    """A DataLoader worker forked while a prefetch thread holds a lock of the cache (here the
    eviction lock, which every download takes): the child's copy of that lock is closed, so
    the child's own downloads wait for the thread's work, not forever."""
    import multiprocessing
    import threading

    import google_crc32c

    from dataset_packer._cache import Cache
    from dataset_packer._remote import Client

    data = b"forked" * 1000
    url = "s3://packs/small/forked.bin"
    put(url, data)
    cache = Cache(tmp_path / "cache", 1 << 30, Client())
    locked, done = threading.Event(), threading.Event()

    def hold():
        with cache._evict_lock():
            locked.set()
            done.wait(60)

    thread = threading.Thread(target=hold)
    thread.start()
    assert locked.wait(60)
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_fetch_in_child, args=(
        str(tmp_path / "cache"), url, len(data), google_crc32c.value(data), out))
    child.start()
    done.set()
    thread.join()
    child.join(60)
    if child.exitcode is None:
        child.kill()
        pytest.fail("the child waits forever on its copy of the thread's eviction lock")
    assert child.exitcode == 0 and out.get(timeout=10) == len(data)


def _read_in_child(pack, out) -> None:
    rows = pack.rows(slice(None))
    out.put((int(rows.view(np.uint8).astype(np.uint64).sum()), pack._remote.client.downloads))


def test_a_forked_worker_reads_a_pack_its_parent_opened(url, local, tmp_path):
    """A DataLoader worker forked from the process that opened the pack (obstore's runtime,
    whose threads stay in the parent, is then unusable there): it downloads through a helper
    process of its own, into the same cache."""
    import multiprocessing

    from dataset_packer import Pack

    pack = open_remote(url, tmp_path / "cache")
    pack.rows(slice(0, 10))  # shard 0 in the cache and mapped: the rest is downloaded there
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_read_in_child, args=(pack, out))
    child.start()
    child.join(120)
    if child.exitcode is None:
        child.kill()
        pytest.fail("the forked worker's download never ended")
    assert child.exitcode == 0
    total, child_downloads = out.get(timeout=10)
    rows = Pack(local).rows(slice(None))
    assert total == int(rows.view(np.uint8).astype(np.uint64).sum())
    # The child's counter starts at its parent's 3 (metadata.db, valuation_types.json, shard 0).
    assert child_downloads == 3 + len(pack.shards) - 1, "every shard but the first, once"
    assert downloads(pack) == 3
    assert len(entries(tmp_path / "cache")) == len(pack.shards)


OPENER = textwrap.dedent("""
    import sys
    from dataset_packer import Pack
    url, cache, times = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for _ in range(times):
        Pack(url, cache=cache).close()
""")


def test_processes_opening_packs_at_once_never_sweep_each_others_views(url, tmp_path):
    """Each open sweeps the views of processes that are gone while others make theirs: a
    view is never seen before its lock is held, so no open loses its folder."""
    cache = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, url, str(cache), "15"],
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    assert list((cache / "views").iterdir()) == []


def test_the_binary_and_python_share_one_cache(url, local, tmp_path):
    """What the binary fetched is a cache hit for Python, and the other way round: one
    cache folder, one download per file for the whole node, whichever reads first."""
    cache = tmp_path / "by-the-binary"
    cli("--cache", cache, "validate", url, "--quiet")
    fetched = entries(cache)
    pack = open_remote(url, cache)
    listed = pack.versions()[-1]["files"]
    assert len(fetched) == len(listed), "the binary fetched every file the pack lists"
    rows = pack.rows(slice(None))
    for name in pack.companions:
        pack.companion(name)[:]
    assert downloads(pack) == 2, "Python downloaded metadata.db and valuation_types.json only"
    assert entries(cache) == fetched
    pack.close()

    cache = tmp_path / "by-python"
    pack = open_remote(url, cache)
    np.testing.assert_array_equal(pack.rows(slice(None)), rows)
    for name in pack.companions:
        pack.companion(name)[:]
    fetched = entries(cache)
    assert len(fetched) == len(listed)
    pack.close()
    cli("--cache", cache, "validate", url, "--quiet")
    assert entries(cache) == fetched, "the binary downloaded none of them again"


def test_a_global_epoch_larger_than_the_cache_is_refused_before_its_first_batch(url, local,
                                                                                 tmp_path):
    from dataset_packer import CacheLimitError, EpochStream, Pack

    sizes = [p.stat().st_size for p in Pack(local).shards]
    cache = tmp_path / "cache"
    pack = open_remote(url, cache, cache_limit=sizes[0] * 5 // 2)
    # Refused at the call, before anything is fetched, naming the order that reads it.
    with pytest.raises(CacheLimitError, match=r'the shards \([\d,]+ bytes\) do not fit in '
                                              r'the cache \([\d,]+ bytes\): read it in shard '
                                              r'windows \(order="shards" or "auto"'):
        pack.batches(64, seed=1)
    assert entries(cache) == {}
    # The public NumPy path to shard windows: every row once, fetched within the limit.
    rows = np.concatenate([b["row"] for b in pack.batches(64, seed=1, order="auto")])
    assert sorted(rows.tolist()) == list(range(len(Pack(local))))
    stream = EpochStream(pack, 64, seed=1)
    assert stream.chosen_order() == ("shards", sizes[0] * 5 // 4)
    np.testing.assert_array_equal(np.concatenate([b["row"] for b in stream.batches()]), rows)


# ---------------------------------------------------------------------------- blocks


def publish_with_small_blocks(folder: Path, shard_rows: int, url: str) -> tuple[str, Path]:
    """A pack of fixtures/raw in `shard_rows`-row shards whose metadata.db records 4 KiB
    blocks (DATASET_PACKER_BLOCK_BYTES), made in `folder` and published at `url`; (url, its
    local copy)."""
    path = folder / "pack"
    env = {**os.environ, "DATASET_PACKER_BLOCK_BYTES": "4096"}
    from conftest import binary
    subprocess.run([str(binary()), "pack", "--input", str(FIXTURES / "raw"), "--output",
                    str(path), "--shard-rows", str(shard_rows), "--quiet"], check=True, env=env)
    publish(path, url)
    return url, path


@pytest.fixture(scope="session")
def blocked(s3, tmp_path_factory) -> tuple[str, Path]:
    """A pack in 1,000-row shards of 4 KiB blocks (`publish_with_small_blocks`)."""
    return publish_with_small_blocks(tmp_path_factory.mktemp("blocked"), 1000,
                                     "s3://packs/team/blocked")


def block_entries(cache: Path) -> dict[str, int]:
    """The cache's block entries: name → size."""
    return {name: size for name, (_, _, size) in entries(cache).items()
            if name.rsplit("_", 1)[-1].isdigit()}


def test_runs_and_scattered_rows_fetch_only_their_blocks(blocked, tmp_path):
    from dataset_packer import Pack
    from dataset_packer._cache import entry_name

    url, local = blocked
    here = Pack(local)
    cache = tmp_path / "cache"
    there = open_remote(url, cache)
    import sqlite3
    db = sqlite3.connect(local / "metadata.db")
    (run, steps), = db.execute("SELECT id, steps FROM runs WHERE id = 5").fetchall()
    shard, offset = db.execute("SELECT shard, row_offset FROM run_index WHERE run_id = 5").fetchone()
    np.testing.assert_array_equal(there.run(5), here.run(5))
    # Exactly the blocks holding the run's rows, each an entry of the cache of its own,
    # named as the binary names them.
    name = f"steps-{shard:05d}.npy"
    size = (local / name).stat().st_size
    start = size - 1000 * 48 + offset * 48
    wanted = range(start // 4096, -(-(start + steps * 48) // 4096))
    blocks = db.execute("SELECT block_crc32c FROM file_blocks WHERE file_name = ?",
                        (name,)).fetchone()[0]
    crcs = np.frombuffer(blocks, dtype="<u4")
    expected = {entry_name(there.path / name, min(4096, size - b * 4096), int(crcs[b]),
                           b * 4096) for b in wanted}
    assert set(block_entries(cache)) == expected
    assert set(entries(cache)) == expected, "no whole shard was fetched"
    # Scattered rows: their blocks only, never the whole pack.
    picks = np.random.default_rng(4).choice(len(here), 12, replace=False)
    np.testing.assert_array_equal(there.rows(picks), here.rows(picks))
    got = block_entries(cache)
    assert len(got) <= len(expected) + 2 * len(picks)
    assert sum(got.values()) < sum(p.stat().st_size for p in here.shards) / 2
    np.testing.assert_array_equal(there.gather(picks)["exps"], here.gather(picks)["exps"])
    # Another reader on the same cache downloads none of them again.
    again = open_remote(url, cache)
    np.testing.assert_array_equal(again.run(5), here.run(5))
    assert downloads(again) == 2
    # Whole shards read whole are fetched whole (as the binary's commands fetch them).
    np.testing.assert_array_equal(again.rows(slice(None)), here.rows(slice(None)))
    there.close()
    again.close()
    assert list((cache / "views").iterdir()) == []


def test_a_damaged_block_is_named_and_not_cached(blocked, tmp_path):
    from dataset_packer import CorruptError

    url, local = blocked
    good = (local / "steps-00001.npy").read_bytes()
    bad = bytearray(good)
    bad[20_000] ^= 0xFF  # in block 4 (bytes 16384..20480)
    put(f"{url}/steps-00001.npy", bytes(bad))
    try:
        cache = tmp_path / "cache"
        pack = open_remote(url, cache)
        rows_per_block = 4096 // 48
        pack.rows(slice(1000, 1000 + rows_per_block))  # block 0-1 of shard 1: fine
        with pytest.raises(CorruptError, match=r"steps-00001\.npy \(bytes 16384\.\.20480\)"):
            pack.rows(np.array([1000 + (20_000 - 128) // 48]))
        assert not any("steps-00001.npy_16384" in n for n in entries(cache))
        pack.close()
        # Fetched whole (by a ranged request per block), the same block is named, and
        # nothing of the file is kept, neither whole nor in part.
        pack = open_remote(url, tmp_path / "whole")
        with pytest.raises(CorruptError, match=r"steps-00001\.npy \(bytes 16384\.\.20480\)"):
            pack.rows(slice(1000, 2000))
        assert not any("steps-00001" in n for n in entries(tmp_path / "whole"))
        pack.close()
    finally:
        put(f"{url}/steps-00001.npy", good)


@pytest.fixture(scope="session")
def blocked_emb(s3, tmp_path_factory) -> tuple[str, Path, list[Path]]:
    """A pack in 1,000-row shards of 4 KiB blocks with a companion `emb` of 64 float32 a
    row (256 KB files of 63 blocks, attached with 4 KiB blocks), published; (url, local
    copy, the companion's files as made)."""
    from conftest import binary

    folder = tmp_path_factory.mktemp("blocked-emb")
    url, local = publish_with_small_blocks(folder, 1000, "s3://packs/team/blocked-emb")
    files = []
    for k, shard in enumerate(sorted(local.glob("steps-*.npy"))):
        rows = np.load(shard)
        files.append(folder / f"emb-{k}.npy")
        np.save(files[-1], (rows["run_id"][:, None] * 1000 + rows["step_index"][:, None]
                            + np.arange(64)).astype(np.float32))
    subprocess.run([str(binary()), "attach", str(local), "--name", "emb", "--from",
                    *map(str, files), "--quiet"], check=True,
                   env={**os.environ, "DATASET_PACKER_BLOCK_BYTES": "4096"})
    publish(local, url)
    return url, local, files


def test_companion_rows_fetch_only_their_blocks(blocked_emb, tmp_path):
    from dataset_packer import Pack

    url, local, files = blocked_emb
    here = Pack(local)
    cache = tmp_path / "cache"
    there = open_remote(url, cache)
    emb = there.companion("emb")
    # Opening fetched each file's first 64 KiB (its header) and nothing more of it.
    def emb_blocks() -> set[tuple[str, int]]:
        return {(n.split("-emb-")[1].rsplit("_", 1)[0], int(n.rsplit("_", 1)[1]))
                for n in block_entries(cache) if "-emb-" in n}

    # Opening read each file's npy header by a small ranged request, through no cache
    # entry: no block yet.
    assert emb_blocks() == set()
    np.testing.assert_array_equal(emb.run(5), here.companion("emb").run(5))
    # Then run 5: the blocks its rows lie in (those past the head).
    import sqlite3
    shard, offset, steps = sqlite3.connect(local / "metadata.db").execute(
        "SELECT shard, row_offset, steps FROM run_index JOIN runs ON id = run_id "
        "WHERE run_id = 5").fetchone()
    size = files[shard].stat().st_size
    start = size - 1000 * 256 + offset * 256 if shard < len(files) - 1 else None
    if start is None:  # the last shard is shorter
        start = size - len(np.load(files[shard], mmap_mode="r")) * 256 + offset * 256
    wanted = set(range(start // 4096 * 4096, start + steps * 256, 4096))
    assert emb_blocks() == {(f"{shard:05d}.npy", b) for b in wanted}
    picks = np.random.default_rng(5).choice(len(here), 8, replace=False)
    got = there.gather(picks, companions=["emb"])
    np.testing.assert_array_equal(got["emb"], here.gather(picks, companions=["emb"])["emb"])
    np.testing.assert_array_equal(emb.rows(picks), here.companion("emb").rows(picks))
    emb_bytes = sum(f.stat().st_size for f in files)
    fetched = sum(size for n, size in block_entries(cache).items() if "-emb-" in n)
    assert fetched < emb_bytes, (fetched, emb_bytes)
    # An epoch of shard windows reads it with the rows, and gives each finished window's
    # blocks back (the view's sparse files hold no data once it is over).
    epoch = list(there.batches(300, seed=2, order="shards", window_bytes=50_000,
                               companions=["emb"]))
    rows = np.concatenate([b["row"] for b in epoch])
    assert sorted(rows.tolist()) == list(range(len(here)))
    np.testing.assert_array_equal(np.concatenate([b["emb"] for b in epoch]),
                                  here.companion("emb").rows(rows))
    views = list((cache / "views").glob("*/emb-*.npy.*.blocks"))
    assert len(views) == len(files)
    assert sum(v.stat().st_blocks * 512 for v in views) < 64 << 10
    # `arrays` (any row, zero-copy) fetches every file first: never a hole read as zeros.
    for mine, theirs in zip(emb.arrays, here.companion("emb").arrays):
        np.testing.assert_array_equal(mine, theirs)
    there.close()
    assert list((cache / "views").iterdir()) == []


def test_a_companion_header_longer_than_the_first_read_is_read_whole(s3, tmp_path):
    from dataset_packer import CorruptError, Pack

    from conftest import binary

    url, local = publish_with_small_blocks(tmp_path, 1000, "s3://packs/team/wide")
    dtype = np.dtype([(f"f{i:03d}", "u1") for i in range(400)])  # a header of about 8 KB
    files = []
    for k, shard in enumerate(sorted(local.glob("steps-*.npy"))):
        rows = np.load(shard)
        wide = np.zeros(len(rows), dtype=dtype)
        for i in range(400):
            wide[f"f{i:03d}"] = (rows["step_index"] + i) % 251
        files.append(tmp_path / f"wide-{k}.npy")
        np.save(files[-1], wide)
    assert files[0].read_bytes()[:16384].index(b"}") > 4096
    subprocess.run([str(binary()), "attach", str(local), "--name", "wide", "--from",
                    *map(str, files), "--quiet"], check=True,
                   env={**os.environ, "DATASET_PACKER_BLOCK_BYTES": "4096"})
    publish(local, url)
    here = Pack(local).companion("wide")
    picks = np.array([3, 999, 1000, 2239])
    pack = open_remote(url, tmp_path / "cache")
    np.testing.assert_array_equal(pack.companion("wide").rows(picks), here.rows(picks))
    pack.close()
    # A header that differs (in its padding: it reads the same) between the read at open and
    # the checked block is refused when the block is read, naming the object.
    data = bytearray(files[0].read_bytes())
    end = data.index(b"\n")
    assert data[end - 1:end] == b" "
    data[end - 1:end] = b"\t"
    put(f"{url}/wide-00000.npy", bytes(data))
    try:
        pack = open_remote(url, tmp_path / "cache2")
        wide = pack.companion("wide")
    finally:
        put(f"{url}/wide-00000.npy", files[0].read_bytes())
    with pytest.raises(CorruptError, match=r"wide-00000\.npy: its first bytes changed"):
        wide.rows(np.array([3]))
    pack.close()


def _epoch_with_companions(pack, out) -> None:
    batches = list(pack.batches(300, seed=2, order="shards", window_bytes=50_000,
                                companions=["emb"]))
    out.put((np.concatenate([b["row"] for b in batches]),
             np.concatenate([b["emb"] for b in batches])))


def test_a_forked_worker_and_its_parent_never_spoil_each_others_blocks(blocked_emb, tmp_path):
    """A DataLoader worker forked from a process that read blocks shares its view folder
    and inherits its block files: the worker's epoch (which gives finished windows' blocks
    back) must leave what the parent read intact, and the parent's later reads must leave
    the worker's files alone."""
    import multiprocessing

    from dataset_packer import Pack

    url, local, _ = blocked_emb
    here = Pack(local)
    pack = open_remote(url, tmp_path / "cache")
    emb = pack.companion("emb")
    picks = np.array([5, 1200, 2100])
    np.testing.assert_array_equal(emb.rows(picks), here.companion("emb").rows(picks))
    np.testing.assert_array_equal(pack.rows(picks), here.rows(picks))
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_epoch_with_companions, args=(pack, out))
    child.start()
    # Meanwhile the parent reads other blocks of the same files.
    more = np.arange(0, len(here), 97)
    np.testing.assert_array_equal(emb.rows(more), here.companion("emb").rows(more))
    np.testing.assert_array_equal(pack.rows(more), here.rows(more))
    rows, got = out.get(timeout=120)
    child.join(60)
    assert child.exitcode == 0
    assert sorted(rows.tolist()) == list(range(len(here)))
    np.testing.assert_array_equal(got, here.companion("emb").rows(rows))
    # What the parent had read before the fork still reads right.
    np.testing.assert_array_equal(emb.rows(picks), here.companion("emb").rows(picks))
    np.testing.assert_array_equal(pack.rows(picks), here.rows(picks))
    pack.close()


def test_a_server_that_refuses_ranges_is_read_by_whole_files(s3, tmp_path):
    """Python's own http.server answers a ranged GET with the whole file: blocks and
    whole files fetched by blocks fall back to one request per file, and read right."""
    import functools
    import http.server
    import threading

    from dataset_packer import Pack

    _, local = publish_with_small_blocks(tmp_path, 1000, "s3://packs/team/http")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        here = Pack(local)
        cache = tmp_path / "cache"
        there = open_remote(f"http://127.0.0.1:{server.server_address[1]}/pack", cache)
        np.testing.assert_array_equal(there.run(5), here.run(5))  # read by blocks: refused
        np.testing.assert_array_equal(there.rows(slice(None)), here.rows(slice(None)))
        assert block_entries(cache) == {}, "no block entry: every file came whole"
        there.close()
    finally:
        server.shutdown()


def test_threads_waiting_on_a_download_helper_that_ends_are_told_so(s3):
    """A forked process downloads through a helper process, several threads at once: when
    the helper ends, every thread waiting for an answer gets a RemoteError, none waits
    forever."""
    import threading

    from dataset_packer._remote import RemoteError, _Helper, parse_location

    helper = _Helper()
    url = parse_location("s3://packs/team/none")
    errors = []

    def ask():
        try:
            helper.list_names(url)
            helper._ask({"op": "list", "url": str(url)}, url)
        except RemoteError as e:
            errors.append(str(e))

    helper._process.stdin.write("not json\n")  # kills it: its loop cannot read the request
    helper._process.stdin.flush()
    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert len(errors) == 4 and all("helper process ended" in e for e in errors), errors


def test_the_blocks_metadata_db_records_combine_into_each_files_crc(blocked):
    import sqlite3

    import google_crc32c

    from dataset_packer._crc import combine, combine_blocks

    url, local = blocked
    db = sqlite3.connect(local / "metadata.db")
    files = db.execute("SELECT file_name, crc32c, block_bytes, block_crc32c "
                       "FROM file_blocks").fetchall()
    assert sorted(f[0] for f in files) == sorted(p.name for p in local.glob("steps-*.npy"))
    for name, crc, block_bytes, blob in files:
        data = (local / name).read_bytes()
        crcs = np.frombuffer(blob, dtype="<u4")
        assert crcs.size == -(-len(data) // block_bytes)
        assert combine_blocks(crcs, block_bytes, len(data)) == int(crc, 16) == \
            google_crc32c.value(data), name
        flipped = crcs.copy()
        flipped[-1] ^= 1
        assert combine_blocks(flipped, block_bytes, len(data)) != int(crc, 16)
    rng = np.random.default_rng(7)
    for size in (1, 4095, 4096, 4097, 3 * 4096 + 5):
        a, b = rng.bytes(size), rng.bytes(size * 3 + 1)
        assert combine(google_crc32c.value(a), google_crc32c.value(b), len(b)) == \
            google_crc32c.value(a + b)


def test_an_epoch_twice_its_cache_through_a_slow_far_link_reads_each_shard_once_by_ranges(
        s3, tmp_path, monkeypatch):
    """Through the shaper (tests/python/shaper.py: 25 ms before each request reaches the
    server, 2 MB/s per connection, 8 MB/s in all): a shard-window epoch of a pack twice its
    cache's size reads every row once, downloads each shard once, each by a ranged request
    per block, and the cache never holds more than its limit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests/python"))
    import shaper

    from dataset_packer import Pack

    # 9 shards of 3 blocks: windows of a quarter of the pack hold two shards.
    url, local = publish_with_small_blocks(tmp_path, 250, "s3://packs/team/far")
    here = Pack(local)
    port = int(s3["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    link = shaper.start(port, latency=0.025, per_connection=2e6, total=8e6)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{link.port}")
        shard_bytes = sum(p.stat().st_size for p in here.shards)
        blocks = sum(-(-p.stat().st_size // 4096) for p in here.shards)
        cache = tmp_path / "cache"
        limit = shard_bytes // 2
        pack = open_remote(url, cache, cache_limit=limit)
        peak, done = [0], [False]

        def poll():
            while not done[0]:
                try:
                    size = sum(f.stat().st_size for f in (cache / "entries").iterdir()
                               if not f.name.endswith(".lock"))
                except FileNotFoundError:
                    size = 0
                peak[0] = max(peak[0], size)
                time.sleep(0.005)

        import threading
        watcher = threading.Thread(target=poll)
        watcher.start()
        try:
            batches = list(pack.batches(256, seed=3, order="shards"))
        finally:
            done[0] = True
            watcher.join()
        rows = np.concatenate([b["row"] for b in batches])
        assert sorted(rows.tolist()) == list(range(len(here)))
        np.testing.assert_array_equal(np.concatenate([b["exps"] for b in batches]),
                                      here.gather(rows)["exps"])
        assert peak[0] <= limit
        # Each shard once, block by block; besides: metadata.db and valuation_types.json.
        client = pack._remote.client
        extra = sum((local / n).stat().st_size for n in ("metadata.db", "valuation_types.json"))
        assert client.bytes_downloaded == shard_bytes + extra
        assert client.downloads == blocks + 2
        seen = link.stats()
        assert seen["ranged"] == blocks
        assert seen["requests"] >= blocks + 2
        pack.close()
    finally:
        link.close()
