#!/usr/bin/env python3
"""Benchmark of the Python package (`python/`, issue 13) against a vectorised baseline loader.

    bench/run.sh corpus                       # the 4M-row corpus, once
    target/test-venv/bin/python bench/python_loader.py [PACK] [--batch 4096] [--batches 200]
                                                      [--rounds 3] [--skip-baseline]

PACK (default target/bench/pack-4m-1m-shards) is the 4M-row bench pack with 1M-row shards; when
missing it is packed from target/bench/corpus-4m with `--shard-rows 1M`. The shards are read
once first so they are in page cache; then, in one process and on the same random indices:

- baseline: what a careful hand-written loader does. Each shard is memory-mapped once
  (`np.load(mmap_mode="r")`); per batch: argsort the indices, fancy-index each shard with its
  sorted slice, unsort, decode the board with a 16-step shift loop and the 65536 mask with a
  16-step mask loop, legal bits, EVs, run_id, step_index.
- package: `Pack.gather(indices)` (the same decoded columns and more: move, valuation,
  board_eval, max_rank, seed, illegal EVs as NaN), then `Pack.batches(shuffle=True)` and
  `Pack.sample` as a training loop calls them.
- sequential: one epoch of `Pack.batches(shuffle=False)`, decoded, in GB/s of shard data.

Each measurement is repeated `--rounds` times (baseline and package alternating) and the best
is reported. Peak RSS is the process's high-water mark (VmHWM), which counts the shard pages
the memory maps touched (the baseline maps the shards a second time: `--skip-baseline` gives
the package's own figure); RssAnon at the end is the private memory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

try:
    from dataset_packer import Pack
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    from dataset_packer import Pack


class BaselineLoader:
    """The vectorised loader the issue measures against (shards mapped once)."""

    def __init__(self, shard_paths):
        self.shards = [np.load(p, mmap_mode="r") for p in shard_paths]
        sizes = [len(s) for s in self.shards]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])

    def batch(self, indices: np.ndarray) -> dict:
        order = np.argsort(indices)
        ordered = indices[order]
        bounds = np.searchsorted(ordered, self.offsets)
        parts = []
        for s, shard in enumerate(self.shards):
            a, b = bounds[s], bounds[s + 1]
            if b > a:
                parts.append(shard[ordered[a:b] - self.offsets[s]])
        gathered = np.concatenate(parts)
        rows = np.empty_like(gathered)
        rows[order] = gathered
        board = rows["board"]
        mask = rows["tile_65536_mask"]
        exps = np.empty((len(rows), 16), dtype=np.uint8)
        for i in range(16):
            exps[:, i] = (board >> np.uint64(60 - 4 * i)) & np.uint64(0xF)
        for i in range(16):
            exps[((mask >> i) & 1).astype(bool), i] = 16
        legal = ((rows["ev_legal"][:, None] >> np.arange(4, dtype=np.uint8)) & 1).astype(bool)
        return {"exps": exps, "legal": legal, "evs": np.array(rows["branch_evs"]),
                "run_id": np.array(rows["run_id"]), "step_index": np.array(rows["step_index"])}


REPO = Path(__file__).resolve().parents[1]
DEFAULT_PACK = REPO / "target/bench/pack-4m-1m-shards"
CORPUS = REPO / "target/bench/corpus-4m"


def ensure_pack(path: Path) -> None:
    """Packs the bench corpus with 1M-row shards when `path` holds no pack yet."""
    if (path / "metadata.db").exists():
        return
    binary = Path(os.environ.get("PACKER", REPO / "target/release/dataset-packer"))
    if not CORPUS.is_dir():
        sys.exit(f"no pack at {path} and no corpus at {CORPUS}: run bench/run.sh corpus")
    print(f"packing {CORPUS} into {path} (--shard-rows 1M)…", file=sys.stderr)
    subprocess.run([str(binary), "pack", "--input", str(CORPUS), "--output", str(path),
                    "--shard-rows", "1M", "--quiet"], check=True, stdout=subprocess.DEVNULL)


def warm_page_cache(paths) -> int:
    total = 0
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 24):
                total += len(chunk)
    return total


def proc_status(key: str) -> int:
    """A /proc/self/status figure in KiB (0 where unavailable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def check_same(base: dict, ours: dict) -> None:
    np.testing.assert_array_equal(base["exps"], ours["exps"])
    np.testing.assert_array_equal(base["legal"], ours["legal"])
    np.testing.assert_array_equal(base["run_id"], ours["run_id"])
    np.testing.assert_array_equal(base["step_index"], ours["step_index"])
    legal = ours["legal"]
    np.testing.assert_array_equal(base["evs"][legal], ours["evs"][legal])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path, nargs="?", default=DEFAULT_PACK)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--batches", type=int, default=200, help="random batches per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-baseline", action="store_true",
                    help="measure only the package (its own peak RSS)")
    args = ap.parse_args()
    ensure_pack(args.pack)

    load = os.getloadavg()[0]
    open_s = time.perf_counter()
    pack = Pack(args.pack)
    open_s = time.perf_counter() - open_s
    rss_open = proc_status("VmRSS")
    nbytes = warm_page_cache(pack.shards)
    n = len(pack)
    print(f"pack {args.pack}: {n} rows, {len(pack.shards)} shards, {nbytes / 1e6:.0f} MB; "
          f"opened in {open_s * 1e3:.1f} ms, RSS after open {rss_open / 1024:.0f} MiB; "
          f"{os.cpu_count()} CPUs, load average {load:.2f}")

    rng = np.random.default_rng(0)
    batches = [rng.integers(0, n, args.batch) for _ in range(args.batches)]
    rows = args.batch * args.batches
    baseline = None if args.skip_baseline else BaselineLoader(pack.shards)
    if baseline is not None:
        check_same(baseline.batch(batches[0]), pack.gather(batches[0]))

    def run_baseline():
        for idx in batches:
            baseline.batch(idx)

    def run_gather():
        for idx in batches:
            pack.gather(idx)

    def run_batches():
        it = pack.batches(args.batch, shuffle=True, seed=1, epoch=0)
        for _ in range(args.batches):
            next(it)

    def run_sample():
        g = np.random.default_rng(1)
        for _ in range(args.batches):
            pack.sample(args.batch, g)

    runs = [("baseline", run_baseline)] if baseline is not None else []
    runs += [("gather", run_gather), ("batches", run_batches), ("sample", run_sample)]
    best = {name: float("inf") for name, _ in runs}
    for _ in range(args.rounds):
        for name, fn in runs:
            best[name] = min(best[name], timed(fn))
    rate = {name: rows / t for name, t in best.items()}
    print(f"random batches of {args.batch} decoded rows ({args.batches} batches, best of "
          f"{args.rounds}):")
    if baseline is not None:
        print(f"  {'baseline (argsort, per-shard fancy index, unsort, 16+16-step loops)':<68} "
              f"{rate['baseline'] / 1e6:6.2f} M rows/s")
    for name, label in (("gather", "Pack.gather(indices), the same indices"),
                        ("batches", "Pack.batches(shuffle=True)"),
                        ("sample", "Pack.sample(n, rng)")):
        versus = (f"  ({rate[name] / rate['baseline']:.1f}x baseline)" if baseline is not None
                  else "")
        print(f"  {label:<68} {rate[name] / 1e6:6.2f} M rows/s{versus}")

    for seq_batch in (args.batch, 65536):
        seconds = float("inf")
        for _ in range(args.rounds):
            seconds = min(seconds, timed(lambda: sum(len(b["row"]) for b in
                                                     pack.batches(seq_batch, shuffle=False))))
        print(f"sequential epoch, batches of {seq_batch}, decoded: {n / seconds / 1e6:.1f} M "
              f"rows/s, {n * 48 / seconds / 1e9:.2f} GB/s of shard data ({seconds:.2f} s)")

    print(f"peak RSS (VmHWM) {proc_status('VmHWM') / 1024:.0f} MiB; at the end RssAnon "
          f"{proc_status('RssAnon') / 1024:.0f} MiB, RssFile (mapped shard pages) "
          f"{proc_status('RssFile') / 1024:.0f} MiB; load average now {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
