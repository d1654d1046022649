#!/usr/bin/env python3
"""The readers' side of tests/npy_headers.rs: for each case (a pack whose shard header was
mutated), how NumPy (`np.load(mmap_mode="r")`, the loader the README shows) and
`dataset_packer.Pack()` read the shard, against the rows of the unmutated shard.

Usage: npy_headers.py CASES.json   (a list of {"dir", "layout", "original"})
Prints one JSON line per case: {"numpy": VERDICT, "pack": VERDICT}, VERDICT being "same",
"differs: …" or "refused: …".
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

import dataset_packer
from dataset_packer._format import LEGACY_ROW_DTYPE, STEP_ROW_DTYPE

FIELDS = ("run_id", "step_index", "board", "board_eval", "seed", "branch_evs")


def fields(records) -> list[bytes]:
    return [np.ascontiguousarray(records[f]).tobytes() for f in FIELDS]


def numpy_reading(shard: Path, want_dtype, original) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = np.load(shard, mmap_mode="r")
        if a.dtype != want_dtype or a.dtype.itemsize != want_dtype.itemsize:
            return f"differs: dtype {a.dtype}"
        if a.shape != original.shape:
            return f"differs: shape {a.shape}"
        if np.asarray(a).tobytes() != original.tobytes():
            return "differs: bytes"
        return "same"
    except Exception as e:  # noqa: BLE001 - any refusal counts, whatever its type
        return f"refused: {type(e).__name__}: {e}"[:300]


def pack_reading(folder: Path, original) -> str:
    try:
        pack = dataset_packer.Pack(folder)
        try:
            if len(pack) != len(original):
                return f"differs: {len(pack)} rows"
            if fields(pack.rows(slice(None))) != fields(original):
                return "differs: rows"
            return "same"
        finally:
            pack.close()
    except dataset_packer.PackError as e:
        return f"refused: {e}"[:300]


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    originals = {}
    for case in cases:
        key = case["original"]
        if key not in originals:
            originals[key] = np.load(key)
        original = originals[key]
        want = STEP_ROW_DTYPE if case["layout"] == "aligned" else LEGACY_ROW_DTYPE
        folder = Path(case["dir"])
        shard = folder / "steps.npy"
        print(json.dumps({"numpy": numpy_reading(shard, want, original),
                          "pack": pack_reading(folder, original)}))


if __name__ == "__main__":
    main()
