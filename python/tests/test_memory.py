"""Packs larger than memory (issue 45): what `order="auto"` reads from the memory the process
may use, the shard-window order through the public NumPy path (`Pack.batches(order=…)`,
`EpochStream`), resume states that record the order, and the hints the maps carry (checked in
the kernel's own records: /proc/self/smaps and mincore)."""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import vm_flags
from dataset_packer import STEP_ROW_DTYPE, EpochStream, Pack
from dataset_packer import _loader, _memory
from dataset_packer._data import of
from dataset_packer._memory import auto_order, available_memory, cgroup_limit

MiB = 1 << 20


# ------------------------------------------------------------------ reading the memory

def fake_proc(tmp_path: Path, cgroup: str, mountinfo: str, meminfo: str | None) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    if meminfo is not None:
        (proc / "meminfo").write_text(meminfo)
    return proc


def test_a_v1_limit_is_the_tightest_of_the_cgroup_and_its_ancestors(tmp_path):
    mount = tmp_path / "memory"
    (mount / "jobs" / "train").mkdir(parents=True)
    (mount / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # unlimited
    (mount / "jobs" / "memory.limit_in_bytes").write_text(f"{300 * MiB}\n")
    (mount / "jobs" / "train" / "memory.limit_in_bytes").write_text(f"{500 * MiB}\n")
    proc = fake_proc(
        tmp_path, "4:memory:/host/jobs/train\n2:cpu,cpuacct:/\n",
        f"35 31 0:32 /host {mount} rw,relatime - cgroup cgroup rw,memory\n"
        f"36 31 0:33 / {tmp_path}/cpu rw,relatime - cgroup cgroup rw,cpu\n",
        "MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n")
    assert cgroup_limit(proc) == 300 * MiB
    # 300 MiB, rounded down to a power of two
    assert available_memory(proc) == (256 * MiB, "cgroup")


def test_a_v2_limit_reads_memory_max_and_max_means_none(tmp_path):
    root = tmp_path / "cg2"
    (root / "user.slice" / "job").mkdir(parents=True)
    (root / "user.slice" / "memory.max").write_text("max\n")
    (root / "user.slice" / "job" / "memory.max").write_text(f"{3 << 30}\n")
    proc = fake_proc(tmp_path, "0::/user.slice/job\n",
                     f"30 1 0:26 / {root} rw - cgroup2 cgroup2 rw\n",
                     "MemAvailable: 16777216 kB\n")
    assert available_memory(proc) == (2 << 30, "cgroup")
    (root / "user.slice" / "job" / "memory.max").write_text("max\n")
    assert cgroup_limit(proc) is None
    assert available_memory(proc) == (16 << 30, "MemAvailable")


def test_without_a_limit_or_meminfo_there_is_no_figure(tmp_path):
    proc = fake_proc(tmp_path, "0::/\n", "", None)
    assert available_memory(proc) == (None, "no /proc/meminfo or memory cgroup")


def test_this_process_has_a_figure():
    memory, source = available_memory()
    assert memory and memory & (memory - 1) == 0 and source in ("cgroup", "MemAvailable")


def test_auto_reads_shard_windows_beyond_half_the_memory():
    assert auto_order(512 * MiB, 1 << 30) == ("global", None)
    assert auto_order(513 * MiB, 1 << 30) == ("shards", 128 * MiB)
    assert auto_order(100 << 30, None) == ("global", None)
    # companions read count against the memory; the window is counted in shard bytes
    assert auto_order(3 << 30, 1 << 30, shard_share=0.25) == ("shards", 32 * MiB)
    assert auto_order(3 << 30, 16 * MiB) == ("shards", _memory.MIN_WINDOW_BYTES)


# ------------------------------------------------------------------ the orders

def keys(batches) -> np.ndarray:
    """(run_id, step_index) of every row the batches hold, in order."""
    return np.concatenate([b["run_id"].astype(np.int64) << 32 | b["step_index"]
                           for b in batches])


def test_shard_windows_read_every_row_once_in_another_order(sharded):
    pack = sharded
    every = keys(pack.batches(64, shuffle=False))
    glob = keys(pack.batches(64, seed=3))
    windows = keys(pack.batches(64, seed=3, order="shards", window_bytes=1))
    assert sorted(windows.tolist()) == sorted(every.tolist()) == sorted(glob.tolist())
    assert windows.tolist() != glob.tolist()
    # each batch of a one-shard window holds rows of one shard only
    data = of(pack)
    for batch in pack.batches(64, seed=3, order="shards", window_bytes=1, drop_last=True):
        shards = {data.pieces(int(r), int(r) + 1).__next__()[0] for r in batch["row"]}
        assert len(shards) <= 2  # a batch may straddle two windows
    # a pure function of (pack, seed, epoch, order): the same again
    again = keys(pack.batches(64, seed=3, order="shards", window_bytes=1))
    assert again.tolist() == windows.tolist()


def test_windows_of_steps_take_the_order_too(sharded):
    pack = sharded
    glob = [b["run_id"][:, 0].tolist() for b in pack.windows(4, 16, seed=1)]
    shards = [b["run_id"][:, 0].tolist() for b in pack.windows(4, 16, seed=1, order="shards",
                                                               window_bytes=1)]
    assert sorted(sum(glob, [])) == sorted(sum(shards, [])) and glob != shards


def test_auto_follows_the_memory_in_pack_batches_and_epoch_streams(sharded, monkeypatch):
    pack = sharded
    size = sum(p.stat().st_size for p in Path(sharded.path).glob("steps-*.npy"))
    glob = keys(pack.batches(64, seed=5))
    monkeypatch.setattr(_memory, "available_memory", lambda *a: (1 << 40, "MemAvailable"))
    import dataset_packer._pack as pack_module
    monkeypatch.setattr(pack_module, "available_memory", _memory.available_memory)
    monkeypatch.setattr(_loader, "available_memory", _memory.available_memory)
    assert keys(pack.batches(64, seed=5, order="auto")).tolist() == glob.tolist()
    assert EpochStream(pack, 64, seed=5).epoch_order() == ("global", None)
    small = 1 << (size.bit_length() - 1)  # less than the pack, more than half of it
    monkeypatch.setattr(pack_module, "available_memory", lambda *a: (small, "cgroup"))
    monkeypatch.setattr(_loader, "available_memory", lambda *a: (small, "cgroup"))
    auto = keys(pack.batches(64, seed=5, order="auto"))
    window = max(_memory.MIN_WINDOW_BYTES, small // 8)
    assert auto.tolist() == keys(pack.batches(64, seed=5, order="shards",
                                              window_bytes=window)).tolist()
    stream = EpochStream(pack, 64, seed=5)
    assert stream.epoch_order() == ("shards", window)
    assert keys(stream.batches()).tolist() == auto.tolist()
    # explicit orders are never changed by the memory
    assert keys(pack.batches(64, seed=5, order="global")).tolist() == glob.tolist()
    assert EpochStream(pack, 64, seed=5, order="global").epoch_order() == ("global", None)


def test_a_state_records_the_chosen_order_and_resumes_it_with_more_memory(sharded,
                                                                         monkeypatch):
    pack = sharded
    monkeypatch.setattr(_loader, "available_memory", lambda *a: (1 << 16, "cgroup"))
    stream = EpochStream(pack, 32, seed=9)
    stream.set_epoch(2)
    iteration = stream.iteration()
    seen = []
    for n, batch in enumerate(iteration):
        seen.append(batch)
        if n == 6:
            break
    state = json.loads(json.dumps(iteration.state_dict()))
    assert state["order"] == "shards" and state["window_bytes"] == _memory.MIN_WINDOW_BYTES
    rest = list(iteration)
    # Another machine, with all the memory it wants: auto would pick the global order.
    monkeypatch.setattr(_loader, "available_memory", lambda *a: (1 << 40, "MemAvailable"))
    other = EpochStream(Pack(sharded.path), 32, seed=9)
    assert other.chosen_order() == ("global", None)
    other.load_state_dict(state)
    resumed = list(other.batches())
    assert keys(resumed).tolist() == keys(rest).tolist()
    assert sorted(keys(seen + resumed).tolist()) == sorted(
        keys(pack.batches(10**6, shuffle=False)).tolist())


def test_bad_orders_are_refused(sharded):
    pack = sharded
    with pytest.raises(ValueError, match="order must be one of 'auto', 'global', 'shards'"):
        pack.batches(8, order="random")
    with pytest.raises(ValueError, match="window_bytes must be a number of bytes ≥ 1"):
        pack.batches(8, order="shards", window_bytes=0)


# ------------------------------------------------------------------ the kernel's view

def big_pack(folder: Path, shards: int = 2, rows: int = 80_000) -> Path:
    """A pack of `shards` shards of `rows` rows (3.8 MB each), 1,000 steps a run."""
    folder.mkdir()
    for k in range(shards):
        out = np.lib.format.open_memmap(folder / f"steps-{k:05d}.npy", mode="w+",
                                        dtype=STEP_ROW_DTYPE, shape=(rows,))
        g = np.arange(k * rows, (k + 1) * rows)
        out["run_id"], out["step_index"] = g // 1000, g % 1000
        out["board"] = g * 7919
        out.flush()
        del out
    db = sqlite3.connect(folder / "metadata.db")
    db.executescript("""
        CREATE TABLE runs (id INTEGER PRIMARY KEY, seed BIGINT NOT NULL, steps INT NOT NULL,
                           max_score INT NOT NULL, highest_tile INT NOT NULL);
        CREATE TABLE run_index (run_id INTEGER PRIMARY KEY, global_row INTEGER NOT NULL);
    """)
    runs = shards * rows // 1000
    db.executemany("INSERT INTO runs VALUES (?, ?, 1000, 0, 0)", ((i, i) for i in range(runs)))
    db.executemany("INSERT INTO run_index VALUES (?, ?)", ((i, i * 1000) for i in range(runs)))
    db.commit()
    db.close()
    (folder / "valuation_types.json").write_text('["search"]')
    return folder


def resident(array: np.ndarray) -> float:
    """The share of `array`'s pages in memory (mincore(2) over its map)."""
    libc = ctypes.CDLL(None, use_errno=True)
    address = array.__array_interface__["data"][0]
    start = address - address % mmap.PAGESIZE
    length = address + array.nbytes - start
    pages = -(-length // mmap.PAGESIZE)
    vector = (ctypes.c_ubyte * pages)()
    assert libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(length), vector) == 0, \
        os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vector) / pages


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def wait_for(check, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


@pytest.mark.skipif(not hasattr(os, "posix_fadvise") or sys.platform != "linux",
                    reason="Linux page-cache calls")
def test_maps_are_random_and_windows_are_brought_in_ahead(tmp_path, monkeypatch):
    from dataset_packer import _maps

    folder = big_pack(tmp_path / "big")
    shard = folder / "steps-00001.npy"
    # A pack that fits in half the memory keeps the kernel's read-around.
    fits = Pack(folder)
    assert vm_flags(shard) and not any("rr" in flags for flags in vm_flags(shard))
    fits.close()
    del fits
    # One that does not is read at random, companions included.
    monkeypatch.setattr(_maps, "available_memory", lambda *a: (4 * MiB, "cgroup"))
    pack = Pack(folder)
    data = of(pack)
    flags = vm_flags(shard)
    assert flags and all("rr" in f for f in flags), flags
    evict(shard)
    if resident(data._maps[1]) > 0.1:
        pytest.skip("this filesystem keeps evicted pages (no page cache to drop)")
    # What ReadAhead asks when a window is next: the shard comes in, in the background.
    data.prefetch([1])
    assert wait_for(lambda: resident(data._maps[1]) > 0.95), resident(data._maps[1])
    # A span read in bulk is asked for at once.
    evict(shard)
    span = data.read_span(80_000, 160_000)
    assert wait_for(lambda: resident(span) > 0.95), resident(span)
    assert (span.view(STEP_ROW_DTYPE)["board"].reshape(-1)
            == np.arange(80_000, 160_000) * 7919).all()


def can_limit_memory() -> Path | None:
    """A memory cgroup this process may make (root, cgroup v1 or v2), else None."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    base = Path("/sys/fs/cgroup") if v2.exists() else Path("/sys/fs/cgroup/memory")
    if os.geteuid() != 0 or not base.is_dir():
        return None
    if v2.exists() and "memory" not in v2.read_text():
        return None
    folder = base / f"dataset-packer-test-{os.getpid()}"
    try:
        folder.mkdir(exist_ok=True)
        (folder / ("memory.max" if v2.exists() else "memory.limit_in_bytes")).write_text(
            str(64 * MiB))
    except OSError:
        return None
    return folder


def test_in_a_memory_cgroup_auto_reads_windows_and_every_row_once(tmp_path):
    folder = can_limit_memory()
    if folder is None:
        pytest.skip("no memory cgroup can be made here (needs root)")
    pack = big_pack(tmp_path / "big", shards=12, rows=100_000)  # 57.6 MB: over half of 64 MiB
    script = (
        "import json, numpy as np\n"
        "from dataset_packer import EpochStream, Pack\n"
        f"pack = Pack({str(pack)!r})\n"
        "stream = EpochStream(pack, 4096, seed=2)\n"
        "seen = np.zeros(len(pack), np.uint8)\n"
        "for b in stream.batches():\n"
        "    seen[b['run_id'].astype(np.int64) * 1000 + b['step_index']] += 1\n"
        "print(json.dumps({'order': stream.epoch_order(), 'once': bool((seen == 1).all()),\n"
        "                  'state': stream.state_dict()}))\n")
    procs = folder / "cgroup.procs"
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             preexec_fn=lambda: procs.write_text(str(os.getpid())),
                             timeout=300)
    finally:
        try:
            folder.rmdir()
        except OSError:
            pass
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["order"] == ["shards", 8 * MiB] and result["once"]
    assert (result["state"]["order"], result["state"]["window_bytes"]) == ("shards", 8 * MiB)
