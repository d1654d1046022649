#!/usr/bin/env python3
"""Checks a Parquet export of a pack with pyarrow against the pack's shards (np.load).

Usage:
    python check_parquet.py PARQUET PACK_DIR [--runs 0,3,7]

PARQUET is one .parquet file or a folder of part-NNNNN.parquet files (read in name order).
The expected rows are the pack's rows (all of them, or those whose run_id is in --runs), in
pack order; every column of the export is compared exactly with them: run_id, step_index,
board (16 exponents decoded from the packed nibbles, a cell in tile_65536_mask = 16),
board_eval, move_dir, valuation_type (the name from valuation_types.json, stored
dictionary-encoded), ev_legal, max_rank, seed, branch_evs (float32 bits). The Arrow types are
checked too. Prints "OK: N rows" and exits 0, or prints the problems and exits 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

STEP_ROW_DTYPE = np.dtype([
    ("run_id", np.uint32), ("step_index", np.uint32), ("board", np.uint64),
    ("board_eval", np.int32), ("tile_65536_mask", np.uint16), ("move_dir", np.uint8),
    ("valuation_type", np.uint8), ("ev_legal", np.uint8), ("max_rank", np.uint8),
    ("seed", np.uint32), ("branch_evs", np.float32, (4,)),
], align=True)

EXPECTED_TYPES = {
    "run_id": pa.uint32(),
    "step_index": pa.uint32(),
    "board": pa.list_(pa.field("item", pa.uint8(), nullable=False), 16),
    "board_eval": pa.int32(),
    "move_dir": pa.uint8(),
    "valuation_type": pa.dictionary(pa.uint8(), pa.string()),
    "ev_legal": pa.uint8(),
    "max_rank": pa.uint8(),
    "seed": pa.uint32(),
    "branch_evs": pa.list_(pa.field("item", pa.float32(), nullable=False), 4),
}


def pack_rows(pack: Path) -> np.ndarray:
    shards = sorted(pack.glob("steps-*.npy")) or [pack / "steps.npy"]
    arrays = [np.load(s, mmap_mode="r") for s in shards]
    assert all(a.dtype == STEP_ROW_DTYPE for a in arrays)
    total = sum(len(a) for a in arrays)
    rows = np.zeros(total, dtype=STEP_ROW_DTYPE)
    at = 0
    for a in arrays:
        rows[at:at + len(a)] = a
        at += len(a)
    return rows


def decode_boards(board: np.ndarray, mask: np.ndarray) -> np.ndarray:
    shifts = np.array([60 - 4 * i for i in range(16)], dtype=np.uint64)
    cells = ((board[:, None] >> shifts[None, :]) & np.uint64(0xF)).astype(np.uint8)
    masked = ((mask[:, None].astype(np.uint32) >> np.arange(16, dtype=np.uint32)[None, :]) & 1) == 1
    cells[masked] = 16
    return cells


def read_export(path: Path) -> pa.Table:
    files = sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]
    if not files:
        raise SystemExit(f"no parquet files in {path}")
    return pa.concat_tables([pq.read_table(f) for f in files])


def main() -> int:
    args = sys.argv[1:]
    runs = None
    if "--runs" in args:
        i = args.index("--runs")
        runs = [int(x) for x in args[i + 1].split(",")]
        del args[i:i + 2]
    export, pack = Path(args[0]), Path(args[1])
    rows = pack_rows(pack)
    if runs is not None:
        rows = rows[np.isin(rows["run_id"], np.array(runs, dtype=np.uint32))]
    names = json.loads((pack / "valuation_types.json").read_text())
    table = read_export(export)
    problems = []
    for name, want in EXPECTED_TYPES.items():
        got = table.schema.field(name).type
        if got != want:
            problems.append(f"column {name}: type {got}, expected {want}")
    if table.num_rows != len(rows):
        problems.append(f"{table.num_rows} rows, expected {len(rows)}")
        print("\n".join(problems))
        return 1

    def col(name):
        return table.column(name).combine_chunks()

    def fixed(name, width, dtype):
        flat = col(name).flatten().to_numpy(zero_copy_only=False).astype(dtype)
        return flat.reshape(-1, width)

    expect = {
        "run_id": rows["run_id"], "step_index": rows["step_index"],
        "board_eval": rows["board_eval"], "move_dir": rows["move_dir"],
        "ev_legal": rows["ev_legal"], "max_rank": rows["max_rank"], "seed": rows["seed"],
    }
    for name, want in expect.items():
        got = col(name).to_numpy(zero_copy_only=False)
        if got.dtype != want.dtype or not np.array_equal(got, want):
            bad = int(np.argmax(got != want)) if got.shape == want.shape else 0
            problems.append(f"column {name} differs (first at row {bad}: {got[bad]} vs {want[bad]})")
    boards = fixed("board", 16, np.uint8)
    if not np.array_equal(boards, decode_boards(rows["board"], rows["tile_65536_mask"])):
        problems.append("column board differs")
    evs = fixed("branch_evs", 4, np.float32)
    if not np.array_equal(evs.view(np.uint32), np.ascontiguousarray(rows["branch_evs"]).view(np.uint32)):
        problems.append("column branch_evs differs")
    vt = col("valuation_type")
    got_names = np.array(vt.dictionary.to_pylist(), dtype=object)[vt.indices.to_numpy()]
    want_names = np.array(names, dtype=object)[rows["valuation_type"]]
    if not np.array_equal(got_names, want_names):
        problems.append("column valuation_type differs")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"OK: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
