"""Reads a pack's `search` companion family back for tests/search_stats.rs, two ways: NumPy
over the files (`np.load`, the structured dtype by field name), and the dataset_packer
reader from this checkout (`batches(companions=["search"])`, unshuffled). Prints one JSON
object: the dtype's field names and types, and per row `[run_id, step_index, used, the 14
fields]` from each reader."""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from dataset_packer import Pack  # noqa: E402

pack = Path(sys.argv[1])


def rows_of(steps, search):
    return [[int(r), int(s), bool(st["used"])] + [st[f].item() for f in search.dtype.names[1:]]
            for r, s, st in zip(steps["run_id"], steps["step_index"], search)]


shards = sorted(pack.glob("steps*.npy"))
files = [pack / s.name.replace("steps", "search") for s in shards]
numpy_rows = []
for shard, file in zip(shards, files):
    numpy_rows += rows_of(np.load(shard), np.load(file))
dtype = np.load(files[0], mmap_mode="r").dtype

reader_rows = []
p = Pack(pack)
for batch in p.batches(batch_size=97, shuffle=False, drop_last=False, companions=["search"]):
    reader_rows += rows_of({"run_id": batch["run_id"], "step_index": batch["step_index"]},
                           batch["search"])

print(json.dumps({
    "fields": [[name, dtype.fields[name][0].str] for name in dtype.names],
    "itemsize": dtype.itemsize,
    "numpy": numpy_rows,
    "reader": reader_rows,
}))
