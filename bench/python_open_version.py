"""The Python reader's cost of opening a version of a big pack (issue 29: "opening a version
costs no more than opening the pack").

With `--keep DIR`, the fabricated packs stay in DIR (`versioned`, `plain`) for the Rust
library's timing: `cargo run --release --example open_version -- DIR/versioned latest 180 1`.

Fabricates a 40M-row pack in a temporary folder without writing its rows: 400 shards of
100,000 rows as sparse files (`np.lib.format.open_memmap` seeks past the data), 40,000 runs
of 1,000 steps, and a history of 365 versions (a year of nightly `pack --update`s: version k
holds the first ~k/365 of the rows, its steps files listed in `version_files`, 73,000 rows
in all). Then times `Pack(path)` (the latest version), `Pack(path, version=1)` and
`Pack(path, version=180)`, and `Pack(path)` of the same pack without its history tables.

    python bench/python_open_version.py          # needs NumPy and the package (./python)
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from dataset_packer import STEP_ROW_DTYPE, Pack  # noqa: E402

SHARD_ROWS, SHARDS, RUN_STEPS, VERSIONS = 100_000, 400, 1_000, 365
ROWS = SHARD_ROWS * SHARDS


def fabricate(folder: Path, history: bool) -> None:
    folder.mkdir()
    for k in range(SHARDS):
        np.lib.format.open_memmap(folder / f"steps-{k:05d}.npy", mode="w+",
                                  dtype=STEP_ROW_DTYPE, shape=(SHARD_ROWS,)).flush()
    (folder / "valuation_types.json").write_text(json.dumps(["search"]))
    db = sqlite3.connect(folder / "metadata.db")
    db.executescript("""
        CREATE TABLE session (meta_key TEXT PRIMARY KEY, meta_value TEXT NOT NULL);
        CREATE TABLE runs (id INTEGER PRIMARY KEY, seed BIGINT NOT NULL, steps INT NOT NULL,
                           max_score INT NOT NULL, highest_tile INT NOT NULL);
        CREATE TABLE run_index (run_id INTEGER PRIMARY KEY, global_row INTEGER NOT NULL);
        CREATE TABLE shards (shard INTEGER PRIMARY KEY, file_name TEXT NOT NULL,
                             rows INT NOT NULL, bytes INT NOT NULL, crc32c TEXT NOT NULL);
    """)
    runs = ROWS // RUN_STEPS
    db.executemany("INSERT INTO runs VALUES (?, ?, ?, 0, 0)",
                   ((i, i, RUN_STEPS) for i in range(runs)))
    db.executemany("INSERT INTO run_index VALUES (?, ?)",
                   ((i, i * RUN_STEPS) for i in range(runs)))
    db.executemany("INSERT INTO shards VALUES (?, ?, ?, ?, '00000000')",
                   ((k, f"steps-{k:05d}.npy", SHARD_ROWS, (folder / f"steps-{k:05d}.npy").stat().st_size)
                    for k in range(SHARDS)))
    if history:
        db.execute("INSERT INTO session VALUES ('pack_id', ?)", ("ab" * 16,))
        db.executescript("""
            CREATE TABLE versions (version INTEGER PRIMARY KEY, created_utc TEXT NOT NULL,
              operation TEXT NOT NULL, rows INTEGER NOT NULL, runs INTEGER NOT NULL,
              command TEXT NOT NULL);
            CREATE TABLE version_files (version INTEGER NOT NULL, family TEXT NOT NULL,
              shard INTEGER NOT NULL, file_name TEXT NOT NULL, rows INTEGER NOT NULL,
              bytes INTEGER NOT NULL, crc32c TEXT NOT NULL,
              PRIMARY KEY (version, family, shard));
            CREATE TABLE version_tags (name TEXT PRIMARY KEY, version INTEGER NOT NULL,
              created_utc TEXT NOT NULL);
            CREATE TABLE version_sources (version INT NOT NULL, pack_id TEXT,
              source_version INT NOT NULL, path TEXT NOT NULL);
        """)
        for v in range(1, VERSIONS + 1):
            # Whole runs: version v holds the first runs_v runs.
            runs_v = runs if v == VERSIONS else max(1, runs * v // VERSIONS)
            rows_v = runs_v * RUN_STEPS
            db.execute("INSERT INTO versions VALUES (?, '2026-11-27T06:30:00Z', ?, ?, ?, "
                       "'[]')", (v, "pack" if v == 1 else "update", rows_v, runs_v))
            full, rest = divmod(rows_v, SHARD_ROWS)
            files = [(k, SHARD_ROWS) for k in range(full)] + ([(full, rest)] if rest else [])
            db.executemany("INSERT INTO version_files VALUES (?, 'steps', ?, ?, ?, 0, "
                           "'00000000')", ((v, k, f"steps-{k:05d}.npy", r) for k, r in files))
    db.commit()
    db.close()


def timed(open_it, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        pack = open_it()
        times.append(time.perf_counter() - start)
        pack.close()
    return statistics.median(times)


def main() -> None:
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    with tempfile.TemporaryDirectory() as scratch:
        tmp = keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        versioned, plain = Path(tmp) / "versioned", Path(tmp) / "plain"
        fabricate(versioned, True)
        fabricate(plain, False)
        print(f"{ROWS:,} rows, {SHARDS} shards, {ROWS // RUN_STEPS:,} runs, "
              f"{VERSIONS} versions; median of 7 opens")
        for label, open_it in [
                ("Pack(path), no history tables", lambda: Pack(plain)),
                ("Pack(path), latest of 365", lambda: Pack(versioned)),
                ("Pack(path, version=180)", lambda: Pack(versioned, version=180)),
                ("Pack(path, version=1)", lambda: Pack(versioned, version=1))]:
            pack = open_it()
            print(f"  {label:32s} {timed(open_it) * 1000:7.1f} ms   ({len(pack):,} rows)")


if __name__ == "__main__":
    main()
