#!/usr/bin/env python3
"""A cold epoch of a remote pack twice its cache's size, through a shaped link (issue 43,
item 4): how long it takes against the time the link needs for the pack's bytes.

    target/test-venv/bin/python bench/shaped_epoch.py [--runs 200] [--rows-per-run 20000]
        [--shard-rows 250000] [--blocks 1,4,16,1024] [--rounds 3]
        [--latency 0.025] [--per-connection 16e6] [--total 64e6]

Needs what bench/remote_epoch.py needs (the `[s3]` extra, moto[server], the release binary
and its `bench_corpus` example). Not part of CI.

1. Generates a drop with `bench_corpus` (4M rows by default) and packs it once per block
   size (`DATASET_PACKER_BLOCK_BYTES`: the blocks `metadata.db` records, and so the ranged
   requests a whole file is fetched by; 1024 MiB is one request per shard, as before
   issue 43).
2. Starts moto (bench/remote_epoch.py's counting server), publishes each pack, and puts the
   shaper (tests/python/shaper.py) in front of it: `--latency` before each request and new
   connection reaches the server, `--per-connection` and `--total` bytes per second back.
3. Reads, through the shaper, in this process, with `EpochStream(pack, 4096, seed=0,
   order="auto")` (decoded, shuffled batches: one DataLoader worker's work):
   - `cold`: an empty cache of half the pack's bytes (shard windows of a quarter of the
     pack, read ahead), epoch 0, then `epoch 1` on the same cache;
   - `warm`: a cache of twice the pack that a first epoch filled, epoch 1.
   Each epoch is timed from opening the pack to its last batch. `link` is the time the link
   needs for the bytes the server sent (total ÷ `--total`); `ratio` is the epoch's time over
   it (the goal: at most 1.3 for the cold epoch). Also: the rows read (each row once: the
   epoch's row count must be the pack's), the requests the shaper saw, and the cache's peak
   against its limit. The median of `--rounds` rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests/python"))

import remote_epoch  # noqa: E402 (the counting moto server, the corpus, the cache's peak)
import shaper  # noqa: E402


def pack_with_blocks(args, corpus_pack: Path, mib: int) -> Path:
    """The pack again with blocks of `mib` MiB recorded (a copy packed from the same drop)."""
    out = Path(args.workdir) / f"{corpus_pack.name}-blocks{mib}"
    if not (out / "metadata.db").exists():
        shutil.rmtree(out, ignore_errors=True)
        corpus = Path(args.workdir) / f"corpus-{args.runs}x{args.rows_per_run}"
        subprocess.run([remote_epoch.binary(), "pack", "--input", corpus, "--output", out,
                        "--shard-rows", str(args.shard_rows), "--quiet"], check=True,
                       env={**os.environ, "DATASET_PACKER_BLOCK_BYTES": str(mib << 20)})
    return out


def timed_epoch(url: str, cache: Path, limit: int, number: int, batch: int) -> tuple:
    """(rows, seconds) of epoch `number` of the pack at `url`, opening included."""
    from dataset_packer import Pack

    start = time.perf_counter()
    with Pack(url, cache=cache, cache_limit=limit) as pack:
        rows, _ = remote_epoch.epoch(pack, batch, number)
        total = len(pack)
    if rows != total:
        raise SystemExit(f"{url}: the epoch read {rows} rows of {total}")
    return rows, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rows-per-run", type=int, default=20000)
    parser.add_argument("--shard-rows", type=int, default=250000)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--blocks", default="1,4,16,1024", help="block sizes in MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.025)
    parser.add_argument("--per-connection", type=float, default=16e6)
    parser.add_argument("--total", type=float, default=64e6)
    parser.add_argument("--workdir", default=str(REPO / "target/bench/shaped-epoch"))
    args = parser.parse_args()

    from dataset_packer import Pack
    from dataset_packer._data import of

    base = remote_epoch.make_pack(args)
    sizes = [int(b) for b in args.blocks.split(",")]
    packs = {mib: pack_with_blocks(args, base, mib) for mib in sizes}
    with Pack(base) as pack:
        data = of(pack)
        pack_bytes = sum(data.shard_bytes(s) for s in range(len(data.shards)))
        print(f"pack: {len(pack):,} rows, {len(data.shards)} shards, {pack_bytes:,} bytes of "
              f"shards; link {args.per_connection / 1e6:g} MB/s per connection, "
              f"{args.total / 1e6:g} MB/s in all, {args.latency * 1e3:g} ms; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        _, local_seconds = remote_epoch.epoch(pack, args.batch, 0, "shards", pack_bytes // 4)
    print(f"local, shard windows of a quarter: {local_seconds:.2f} s", flush=True)

    server, port = remote_epoch.start_server()
    link = shaper.start(port, args.latency, args.per_connection, args.total)
    try:
        for mib, folder in packs.items():
            remote_epoch.publish(folder, "bench", f"b{mib}")
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{link.port}"
        caches = Path(args.workdir) / "caches"
        results: dict = {}

        def measure(name, mib, cache, limit, number):
            before, seen = remote_epoch.served(port), link.stats()
            with remote_epoch.CachePeak(cache) as peak:
                rows, seconds = timed_epoch(f"s3://bench/b{mib}", cache, limit, number,
                                            args.batch)
            down = remote_epoch.served(port) - before
            requests = link.stats()["requests"] - seen["requests"]
            floor = down / args.total
            figures = (seconds, floor, seconds / floor if floor else float("nan"), down,
                       requests, peak.peak)
            results.setdefault((name, mib), (limit, []))[1].append(figures)
            print(f"{mib} MiB blocks, {name}: {rows:,} rows in {seconds:.2f} s, link "
                  f"{floor:.2f} s (× {figures[2]:.2f}), {down:,} bytes served, {requests} "
                  f"requests, peak cache {peak.peak:,} of {limit:,}", flush=True)

        for _ in range(args.rounds):
            for mib in sizes:
                shutil.rmtree(caches, ignore_errors=True)
                half = caches / "half"
                measure("cold, cache ½ pack, epoch 0", mib, half, pack_bytes // 2, 0)
                measure("cold, cache ½ pack, epoch 1", mib, half, pack_bytes // 2, 1)
                full = caches / "full"
                timed_epoch(f"s3://bench/b{mib}", full, 2 * pack_bytes, 0, args.batch)
                measure("warm, cache 2× pack", mib, full, 2 * pack_bytes, 1)
        print(f"\nmedian of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}\n")
        print("| blocks | epoch | seconds | link s | ratio | MB served (× pack) | requests "
              "| peak cache MB (limit) |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for (name, mib), (limit, rounds) in results.items():
            seconds, floor, ratio, down, requests, peak = (statistics.median(x)
                                                           for x in zip(*rounds))
            ratio_text = f"{ratio:.2f}" if down > pack_bytes // 100 else "-"
            print(f"| {mib} MiB | {name} | {seconds:.2f} | {floor:.2f} | {ratio_text} | "
                  f"{down / 1e6:,.1f} ({down / pack_bytes:.2f}×) | {requests:.0f} | "
                  f"{peak / 1e6:,.1f} ({limit / 1e6:,.1f}) |")
    finally:
        link.close()
        server.stdin.close()
        server.wait(30)


if __name__ == "__main__":
    main()
