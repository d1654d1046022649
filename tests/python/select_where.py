#!/usr/bin/env python3
"""The rows an `export --where SQL` must select, computed with sqlite3 and NumPy only.

Usage:
    python select_where.py PACK_DIR "SQL EXPRESSION" [--params JSON_LIST]
    python select_where.py PACK_DIR "SELECT … QUERY" --query [--params JSON_LIST]

Selects the run ids for which EXPR holds over `runs` left-joined with `run_details` (or, with
--query, the ids the query returns when sqlite3 runs it as written, each once), binding the
JSON list of parameters, then the pack's rows of those runs (np.load of the shards, np.isin
on run_id). Prints one JSON object:
{"run_ids": [...], "rows_per_run": [...], "rows": N, "crc32": C}, where crc32 is zlib.crc32
of the selected rows' bytes 4..48 (everything but run_id, which the export renumbers), in order.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import zlib
from pathlib import Path

import numpy as np


def main() -> int:
    pack, expr = Path(sys.argv[1]), sys.argv[2]
    rest = sys.argv[3:]
    params = json.loads(rest[rest.index("--params") + 1]) if "--params" in rest else []
    db = sqlite3.connect(f"file:{pack / 'metadata.db'}?mode=ro", uri=True)
    if "--query" in rest:
        ids = sorted({rid for (rid,) in db.execute(expr, params)})
    else:
        ids = [rid for (rid,) in db.execute(
            "SELECT runs.id FROM runs LEFT JOIN run_details ON run_details.run_id = runs.id "
            f"WHERE ({expr}) ORDER BY runs.id", params)]
    shards = sorted(pack.glob("steps-*.npy")) or [pack / "steps.npy"]
    crc = 0
    per_run = {rid: 0 for rid in ids}
    wanted = np.array(ids, dtype=np.uint32)
    for shard in shards:
        arr = np.load(shard, mmap_mode="r")
        raw = np.asarray(arr).view(np.uint8).reshape(-1, 48)
        keep = np.isin(arr["run_id"], wanted)
        crc = zlib.crc32(np.ascontiguousarray(raw[keep][:, 4:]).tobytes(), crc)
        found, counts = np.unique(arr["run_id"][keep], return_counts=True)
        for rid, n in zip(found.tolist(), counts.tolist()):
            per_run[rid] += n
    print(json.dumps({
        "run_ids": ids,
        "rows_per_run": [per_run[r] for r in ids],
        "rows": sum(per_run.values()),
        "crc32": crc,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
