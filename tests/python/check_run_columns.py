#!/usr/bin/env python3
"""Checks the run facts of a Parquet export against metadata.db, read with Python's sqlite3.

Usage:
    python check_run_columns.py PARQUET PACK_DIR [--row-columns]

With --row-columns, every exported row must carry its run's `runs` and `run_details` columns
(`runs.seed` as `run_seed`, `run_details.max_rank` as `run_max_rank`, the others under their
own names) with exactly the values metadata.db holds for the row's run_id. When PARQUET is a
folder, its runs.parquet must hold one row per exported run, in run order: `id` and every
column of `runs` and `run_details`, equal to metadata.db. Prints "OK: ..." and exits 0, or the
problems and exits 1.
"""

from __future__ import annotations

import math
import sqlite3
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from check_parquet import read_export

# Row columns that would clash with a step column get another name on rows.
ROW_NAMES = {"seed": "run_seed", "max_rank": "run_max_rank"}


def run_facts(pack: Path) -> tuple[list[str], dict[int, dict]]:
    """The run columns in table order (runs, then run_details less run_id) and each run's values."""
    db = sqlite3.connect(f"file:{pack / 'metadata.db'}?mode=ro", uri=True)
    runs_cols = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
    detail_cols = [r[1] for r in db.execute("PRAGMA table_info(run_details)") if r[1] != "run_id"]
    facts = {}
    sql = (f"SELECT {', '.join('r.' + c for c in runs_cols)}, {', '.join('d.' + c for c in detail_cols)} "
           "FROM runs r LEFT JOIN run_details d ON d.run_id = r.id ORDER BY r.id")
    for row in db.execute(sql):
        facts[row[0]] = dict(zip(runs_cols + detail_cols, row))
    return [c for c in runs_cols if c != "id"] + detail_cols, facts


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and (a == b or (math.isnan(a) and math.isnan(b)))
    return a == b


def check_rows(table: pa.Table, cols: list[str], facts: dict[int, dict]) -> list[str]:
    problems = []
    run_ids = table.column("run_id").to_pylist()
    for col in cols:
        name = ROW_NAMES.get(col, col)
        if name not in table.column_names:
            problems.append(f"row column {name} missing")
            continue
        values = table.column(name).to_pylist()
        for i, (rid, got) in enumerate(zip(run_ids, values)):
            if not same(got, facts[rid][col]):
                problems.append(f"row {i} (run {rid}) {name}: {got!r}, metadata.db has {facts[rid][col]!r}")
                break
    return problems


def check_runs_file(path: Path, run_ids: list[int], cols: list[str], facts: dict[int, dict]) -> list[str]:
    table = pq.read_table(path)
    want_names = ["id"] + cols
    if table.column_names != want_names:
        return [f"runs.parquet columns {table.column_names}, expected {want_names}"]
    ids = table.column("id").to_pylist()
    if ids != run_ids:
        return [f"runs.parquet ids {ids}, expected the exported runs {run_ids}"]
    problems = []
    for col in cols:
        for rid, got in zip(ids, table.column(col).to_pylist()):
            if not same(got, facts[rid][col]):
                problems.append(f"runs.parquet run {rid} {col}: {got!r}, metadata.db has {facts[rid][col]!r}")
                break
    return problems


def main() -> int:
    args = sys.argv[1:]
    row_columns = "--row-columns" in args
    args = [a for a in args if a != "--row-columns"]
    export, pack = Path(args[0]), Path(args[1])
    cols, facts = run_facts(pack)
    table = read_export(export)
    run_ids = sorted(set(table.column("run_id").to_pylist()))
    problems = []
    if row_columns:
        problems += check_rows(table, cols, facts)
    else:
        extra = [ROW_NAMES.get(c, c) for c in cols if ROW_NAMES.get(c, c) in table.column_names]
        if extra:
            problems.append(f"run columns {extra} without --run-columns")
    if export.is_dir():
        problems += check_runs_file(export / "runs.parquet", run_ids, cols, facts)
    if problems:
        print("\n".join(problems))
        return 1
    print(f"OK: {table.num_rows} rows of {len(run_ids)} runs, {len(cols)} run columns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
