"""Epochs over a local pack larger than memory (issue 45), under a memory cgroup.

Needs root (it makes a memory cgroup and drops the page cache before each cold run), NumPy
and the package (./python). Fabricates its packs in `--dir` (kept between runs):

* `epoch-<rows>`: `--rows` rows (default 8M, 369 MB) of random boards and EVs in 1M-row
  shards, 1,000 steps a run;
* `sparse-1b`: 1B rows in 1,000 sparse shards (no data written: the rows read as zeros),
  for the cold first batch.

Each measurement runs in a child process, in the cgroup when it is limited, after
`echo 3 > /proc/sys/vm/drop_caches`:

    python bench/local_memory.py epochs [--limit-mb 96] [--budget 60]
        the default epoch (`EpochStream`, the engine of `PackDataset`), the global order and shard windows of
        32 MiB, with and without the limit, against `cat` of the shards under the limit;
        every row read once is checked
    python bench/local_memory.py first-batch
        the cold first batch of the 1B-row pack: `Pack(path)` then one batch of
        the default `EpochStream(pack, 4096)`, and of the global order
    python bench/local_memory.py ab --base OLD/python [--repeat 7]
        paired rounds on the pack in memory: the default epoch of this package against
        another checkout's, cold and warm ("nothing slower when the pack fits")
    python bench/local_memory.py auto
        what `order="auto"` chooses on this machine for packs of 1, 10 and 100 GB

cgroup v2 (`memory.max`) is used where /sys/fs/cgroup is a v2 hierarchy, else v1
(`memory.limit_in_bytes` under /sys/fs/cgroup/memory).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
# `DATASET_PACKER_PYTHON=DIR` measures the package in DIR (another checkout's python/).
sys.path.insert(0, os.environ.get("DATASET_PACKER_PYTHON", str(REPO / "python")))
from dataset_packer import STEP_ROW_DTYPE, Pack  # noqa: E402
from dataset_packer._loader import EpochStream  # noqa: E402
from dataset_packer._order import Part  # noqa: E402

RUN_STEPS = 1_000
CGROUP_NAME = "dataset-packer-bench"


# ------------------------------------------------------------------ fabricated packs

def write_db(folder: Path, shard_rows: list[int]) -> None:
    """metadata.db of a pack whose runs are RUN_STEPS consecutive rows."""
    rows = sum(shard_rows)
    db = sqlite3.connect(folder / "metadata.db")
    db.executescript("""
        CREATE TABLE session (meta_key TEXT PRIMARY KEY, meta_value TEXT NOT NULL);
        CREATE TABLE runs (id INTEGER PRIMARY KEY, seed BIGINT NOT NULL, steps INT NOT NULL,
                           max_score INT NOT NULL, highest_tile INT NOT NULL);
        CREATE TABLE run_index (run_id INTEGER PRIMARY KEY, global_row INTEGER NOT NULL);
        CREATE TABLE shards (shard INTEGER PRIMARY KEY, file_name TEXT NOT NULL,
                             rows INT NOT NULL, bytes INT NOT NULL, crc32c TEXT NOT NULL);
    """)
    runs = -(-rows // RUN_STEPS)
    db.executemany("INSERT INTO runs VALUES (?, ?, ?, 0, 0)",
                   ((i, i, min(RUN_STEPS, rows - i * RUN_STEPS)) for i in range(runs)))
    db.executemany("INSERT INTO run_index VALUES (?, ?)",
                   ((i, i * RUN_STEPS) for i in range(runs)))
    db.executemany("INSERT INTO shards VALUES (?, ?, ?, ?, '00000000')",
                   ((k, f"steps-{k:05d}.npy", r, (folder / f"steps-{k:05d}.npy").stat().st_size)
                    for k, r in enumerate(shard_rows)))
    db.commit()
    db.close()
    (folder / "valuation_types.json").write_text(json.dumps(["search"]))


def fabricate(folder: Path, rows: int, shard_rows: int, sparse: bool) -> Path:
    """A pack of `rows` rows (random content, or sparse files of zeros)."""
    if (folder / "metadata.db").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    sizes = [min(shard_rows, rows - a) for a in range(0, rows, shard_rows)]
    rng = np.random.default_rng(45)
    start = 0
    for k, n in enumerate(sizes):
        out = np.lib.format.open_memmap(folder / f"steps-{k:05d}.npy", mode="w+",
                                        dtype=STEP_ROW_DTYPE, shape=(n,))
        if not sparse:
            g = np.arange(start, start + n, dtype=np.int64)
            out["run_id"] = g // RUN_STEPS
            out["step_index"] = g % RUN_STEPS
            out["board"] = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)
            out["move_dir"] = rng.integers(0, 4, n)
            out["ev_legal"] = 0xF
            out["branch_evs"] = rng.random((n, 4), dtype=np.float32)
        out.flush()
        del out
        start += n
    write_db(folder, sizes)
    return folder


# ------------------------------------------------------------------ cgroups

def cgroup_dir(limit: int) -> tuple[Path, str]:
    """A memory cgroup limited to `limit` bytes: (its folder, the limit file's name)."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    base = Path("/sys/fs/cgroup") if v2 else Path("/sys/fs/cgroup/memory")
    name = "memory.max" if v2 else "memory.limit_in_bytes"
    folder = base / CGROUP_NAME
    folder.mkdir(exist_ok=True)
    if v2:
        (folder / name).write_text(str(limit))
        return folder, name
    # v1 keeps memory ≤ memory+swap: raise the one that must stay above first.
    swap = folder / "memory.memsw.limit_in_bytes"
    for path in ((swap, folder / name) if limit > _read_int(folder / name) else
                 (folder / name, swap)):
        try:
            path.write_text(str(limit))
        except OSError:
            if path != swap:  # no swap accounting: only the memory limit matters
                raise
    return folder, name


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def in_cgroup(limit: int | None):
    """A preexec_fn that moves the child into the limited cgroup."""
    if limit is None:
        return None
    folder, _ = cgroup_dir(limit)
    procs = folder / "cgroup.procs"
    return lambda: procs.write_text(str(os.getpid()))


def child(args: list[str], limit: int | None, budget: float) -> dict:
    drop_caches()
    cmd = [sys.executable, __file__, "child", *args, "--budget", str(budget)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         preexec_fn=in_cgroup(limit))
    return json.loads(out.stdout.strip().splitlines()[-1])


def cat_rate(pack: Path, limit: int | None) -> float:
    drop_caches()
    files = sorted(str(p) for p in pack.glob("steps-*.npy"))
    start = time.perf_counter()
    subprocess.run(["cat", *files], check=True, stdout=subprocess.DEVNULL,
                   preexec_fn=in_cgroup(limit))
    return time.perf_counter() - start


# ------------------------------------------------------------------ the child's work

def run_child(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pack")
    p.add_argument("--order", default=None)
    p.add_argument("--window-bytes", type=int, default=None)
    p.add_argument("--budget", type=float, default=60)
    p.add_argument("--batches", type=int, default=0, help="stop after this many (0: epoch)")
    a = p.parse_args(argv)
    start = time.perf_counter()
    pack = Pack(a.pack)
    opened = time.perf_counter() - start
    options = {}
    if a.order is not None:
        options["order"] = a.order
    if a.window_bytes is not None:
        options["window_bytes"] = a.window_bytes
    # The engine of PackDataset (and of Pack.batches' order="auto").
    stream = EpochStream(pack, 4096, seed=1, **options)
    chosen = stream.epoch_order()
    seen = np.zeros(len(pack), dtype=np.uint8)
    rows, first = 0, None
    t0 = time.perf_counter()
    for n, batch in enumerate(stream.batches(Part(0, 1, 0, 1))):
        if first is None:
            first = time.perf_counter() - t0
        g = batch["run_id"].astype(np.int64) * RUN_STEPS + batch["step_index"]
        seen[g] += 1  # a row twice in one batch leaves another unseen: still caught
        rows += len(g)
        if a.batches and n + 1 >= a.batches:
            break
        if time.perf_counter() - t0 > a.budget:
            break
    took = time.perf_counter() - t0
    complete = rows == len(pack)
    once = bool(complete and (seen == 1).all())
    peak = 0
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    print(json.dumps({"rows": rows, "seconds": took, "first_batch": first, "open": opened,
                      "complete": complete, "every_row_once": once, "peak_rss": peak,
                      "order": chosen}))


# ------------------------------------------------------------------ commands

def epochs(a) -> None:
    import statistics
    pack = fabricate(Path(a.dir) / f"epoch-{a.rows}-{a.shard_rows}", a.rows, a.shard_rows,
                     sparse=False)
    size = sum(p.stat().st_size for p in pack.glob("steps-*.npy"))
    limit = a.limit_mb << 20
    print(f"pack: {a.rows:,} rows, {size / 1e6:.0f} MB of shards of {a.shard_rows:,} rows; "
          f"limit {a.limit_mb} MiB (pack = {size / limit:.1f}× the limit); budget "
          f"{a.budget:.0f} s per run; medians of {a.repeat}")

    def show(name, limited, extra, repeat):
        runs = [child([str(pack), *extra], limit if limited else None, a.budget)
                for _ in range(repeat)]
        rates = [r["rows"] / r["seconds"] / 1e6 for r in runs]
        r = runs[rates.index(statistics.median_low(rates))]
        print(f"{name:34} {'limited' if limited else 'no limit':9} "
              f"{statistics.median(rates):6.2f} M rows/s ({', '.join(f'{x:.2f}' for x in rates)})"
              f"  rows {r['rows']:>10,}  first batch {r['first_batch']:.3f} s  every row "
              f"once: {r['every_row_once']}  peak RSS {r['peak_rss'] / 2**20:.0f} MiB  "
              f"order {r['order']}", flush=True)
        return r

    chosen = show("default (auto)", True, [], a.repeat)["order"]
    show("global", True, ["--order", "global"], 1)
    if chosen[0] == "shards":
        show(f"auto's order, windows of {chosen[1] >> 20} MiB", False,
             ["--order", "shards", "--window-bytes", str(chosen[1])], a.repeat)
    show("default (auto)", False, [], a.repeat)
    show("global", False, ["--order", "global"], a.repeat)
    for limited in (True, False):
        t = statistics.median(cat_rate(pack, limit if limited else None)
                              for _ in range(a.repeat))
        print(f"cat of the shards, {'limited' if limited else 'no limit'}: {t:.2f} s "
              f"({size / t / 1e6:.0f} MB/s, {a.rows / t / 1e6:.2f} M rows/s)")


def first_batch(a) -> None:
    pack = fabricate(Path(a.dir) / "sparse-1b", 1_000_000_000, 1_000_000, sparse=True)
    for name, extra in (("default", []), ("global", ["--order", "global"])):
        for _ in range(a.repeat):
            r = child([str(pack), *extra, "--batches", "1"], None, 600)
            print(f"{name:8} open {r['open']:.3f} s, first batch {r['first_batch']:.3f} s",
                  flush=True)


def ab(a) -> None:
    """Paired rounds, the pack in memory: this package against the one in `--base` (a
    checkout's python/), each epoch cold (page cache dropped) then warm, interleaved."""
    import statistics
    pack = fabricate(Path(a.dir) / f"epoch-{a.rows}-{a.shard_rows}", a.rows, a.shard_rows,
                     sparse=False)
    packages = {"base": a.base, "this": str(REPO / "python")}
    figures = {(name, when, what): [] for name in packages for when in ("cold", "warm")
               for what in ("rate", "first")}
    for _ in range(a.repeat):
        for name, folder in packages.items():
            for when in ("cold", "warm"):
                if when == "cold":
                    drop_caches()
                out = subprocess.run([sys.executable, __file__, "child", str(pack), *a.extra],
                                     check=True, capture_output=True, text=True,
                                     env=dict(os.environ, DATASET_PACKER_PYTHON=folder))
                r = json.loads(out.stdout.strip().splitlines()[-1])
                figures[name, when, "rate"].append(r["rows"] / r["seconds"] / 1e6)
                figures[name, when, "first"].append(r["first_batch"])
    for when in ("cold", "warm"):
        for name in packages:
            rate = statistics.median(figures[name, when, "rate"])
            first = statistics.median(figures[name, when, "first"])
            print(f"{when} {name:5} median of {a.repeat}: {rate:.2f} M rows/s, first batch "
                  f"{first * 1000:.1f} ms")


def auto(a) -> None:
    from dataset_packer._memory import auto_order, available_memory
    memory, source = available_memory()
    print(f"memory available to this process: {memory / 2**30:.1f} GiB ({source})")
    for gb in (1, 10, 100):
        print(f"{gb:>3} GB pack: {auto_order(gb * 10**9, memory)}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        return run_child(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["epochs", "first-batch", "auto", "ab"])
    p.add_argument("--base", help="ab: the python/ folder of the package to compare with")
    p.add_argument("extra", nargs="*", help="ab: options for the child (e.g. -- --order global)")
    p.add_argument("--dir", default="/tmp/dataset-packer-bench-memory")
    p.add_argument("--rows", type=int, default=8_000_000)
    p.add_argument("--shard-rows", type=int, default=1_000_000)
    p.add_argument("--limit-mb", type=int, default=96)
    p.add_argument("--budget", type=float, default=60)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    {"epochs": epochs, "first-batch": first_batch, "auto": auto, "ab": ab}[a.what](a)


if __name__ == "__main__":
    main()
