#!/usr/bin/env python3
"""What reading a few runs of a pack in object storage downloads, against the pack's size
(issue 43, items 2 and 5): the bytes the server sends and the reader's peak RSS, at two pack
sizes, for the commands that read by blocks and, for contrast, one that reads every row.

    target/test-venv/bin/python bench/remote_ranges.py [--sizes 20,200] [--rows-per-run 20000]
        [--shard-rows 1000000] [--workdir target/bench/remote-ranges]

Needs what bench/remote_epoch.py needs (moto[server], boto3 through moto, the `[s3]` extra,
the release binary and its `bench_corpus` example). Not part of CI.

For each size (runs of `--rows-per-run` rows): the drop is generated and packed (kept in
`--workdir`), published to moto behind a server that counts the bytes of every GET, and
each reader runs on an empty cache:
- `versions URL` (metadata.db only);
- `show URL --run K --json` and `export URL --runs K --output run.jsonl` (K: the middle run);
- Python `Pack(url).run(K)` and `Pack(url).rows(64 random rows)`;
- `stats URL` (every row: whole files), and `stats` and `validate` with a cache a tenth of
  the pack (streamed block by block).
Every reader runs in a child process under GNU time (`/usr/bin/time -f %M`): its peak RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from remote_epoch import binary, make_pack, publish, served, start_server  # noqa: E402


def peak_rss(argv: list, env=None) -> float:
    """Runs `argv` under GNU time: its peak RSS in MiB. (A child's own `ru_maxrss` would
    start at this process's size: Linux keeps the high-water mark of the forked copy across
    exec.)"""
    with tempfile.NamedTemporaryFile("r") as report:
        out = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", report.name, *map(str, argv)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if out.returncode != 0:
            raise SystemExit(f"{argv} failed: {out.stderr.decode()}")
        return int(report.read().split()[-1]) / 1024


def command(args: list, cache: Path) -> tuple[int, float]:
    """Runs the binary on an empty cache `cache`: (0, peak RSS in MiB)."""
    env = {**os.environ, "DATASET_PACKER_CACHE": str(cache)}
    return 0, peak_rss([binary(), *args], env)


def measure(port: int, what, *args) -> tuple[int, float]:
    """(bytes served, peak RSS MiB) of `what(*args)`."""
    before = served(port)
    _, rss = what(*args)
    return served(port) - before, rss


def python_read(url: str, cache: Path, read: str) -> tuple[int, float]:
    """Runs `read` (Python over `pack`, numpy as `np`) in a child process on `Pack(url)`:
    (0, its peak RSS in MiB)."""
    code = (f"import numpy as np\nfrom dataset_packer import Pack\n"
            f"pack = Pack({url!r}, cache={str(cache)!r})\n{read}\npack.close()\n")
    return 0, peak_rss([sys.executable, "-c", code])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="20,200", help="runs per pack, comma-separated")
    parser.add_argument("--rows-per-run", type=int, default=20_000)
    parser.add_argument("--shard-rows", type=int, default=1_000_000)
    parser.add_argument("--workdir", default="target/bench/remote-ranges")
    args = parser.parse_args()
    server, port = start_server()

    try:
        print("| pack | reader | bytes served | ÷ pack | peak RSS |")
        print("|---|---|---|---|---|")
        for runs in [int(n) for n in args.sizes.split(",")]:
            args.runs = runs
            pack = make_pack(args)
            size = sum(p.stat().st_size for p in pack.iterdir() if p.is_file())
            url = f"s3://bench/ranges-{runs}"
            publish(pack, "bench", f"ranges-{runs}")
            middle = runs // 2
            label = f"{runs * args.rows_per_run / 1e6:g}M rows, {size / 2**20:,.0f} MiB"
            picks = (f"pack.rows(np.random.default_rng(7).choice(len(pack), 64, "
                     f"replace=False))")
            readers = [
                ("versions", command, ["versions", url]),
                (f"show --run {middle}", command, ["show", url, "--run", middle, "--json"]),
                (f"export --runs {middle}", command,
                 ["export", url, "--runs", middle, "--output", "OUT"]),
                (f"Python run({middle})", python_read, url, f"pack.run({middle})"),
                ("Python rows(64 random)", python_read, url, picks),
                ("stats (every row)", command, ["stats", url]),
                ("stats, cache = pack ÷ 10 (streamed)", command,
                 ["--cache-limit", size // 10, "stats", url]),
                ("validate, cache = pack ÷ 10 (streamed)", command,
                 ["--cache-limit", size // 10, "validate", url, "--quiet"]),
            ]
            for name, what, *rest in readers:
                cache = Path(tempfile.mkdtemp(prefix="ranges-cache-"))
                out = cache.parent / (cache.name + ".jsonl")
                if what is command:
                    rest = [[str(out) if a == "OUT" else a for a in rest[0]], cache]
                else:
                    rest = [rest[0], cache, rest[1]]
                got, rss = measure(port, what, *rest)
                shutil.rmtree(cache, ignore_errors=True)
                out.unlink(missing_ok=True)
                print(f"| {label} | {name} | {got:,} | {got / size:.4f} | {rss:,.0f} MiB |",
                      flush=True)
    finally:
        server.stdin.close()
        server.wait()


if __name__ == "__main__":
    main()
