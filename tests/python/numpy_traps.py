#!/usr/bin/env python3
"""Demonstrate, on a real pack, the two NumPy traps readers of this project must avoid.

Usage:
    python numpy_traps.py PACK_DIR        (the pack must have at least 2 shards)

(a) np.concatenate([np.load(s) for s in shards]) does NOT keep STEP_ROW_DTYPE:
    np.load gives each shard a dtype equal to STEP_ROW_DTYPE (offsets, itemsize 48)
    but not flagged as an aligned struct, and concatenating structured arrays
    promotes their dtypes, which canonicalises to a *packed* 46-byte record
    (the padding disappears). Saving that array writes the "legacy packed"
    format this project's writers must never produce.
(b) Going back with .astype(STEP_ROW_DTYPE) restores the 48-byte layout, but
    astype allocates with np.empty and copies field by field: padding bytes
    26..27 hold whatever was in that memory. Bytes written from it (np.save,
    tobytes, checksums) are then not deterministic. The same holds for
    np.empty(...) followed by slice assignment.

Claims that NumPy guarantees are asserted (exit 1 if one fails with the installed
NumPy). Whether the padding of (b) actually holds garbage depends on the
allocator, so it is NOT asserted: the script pre-dirties the allocator to make
it likely, reports what it observed, and asserts only that the safe recipe
gives zero padding.
"""

from __future__ import annotations

import glob
import io
import os
import sys

import numpy as np

STEP_ROW_DTYPE = np.dtype([
    ("run_id", np.uint32),            # offset 0
    ("step_index", np.uint32),        # 4
    ("board", np.uint64),             # 8   16 packed 4-bit exponents, MSB nibble = cell 0
    ("board_eval", np.int32),         # 16  Macroxue heuristic of the board
    ("tile_65536_mask", np.uint16),   # 20  bit i set when cell i's exponent is 16
    ("move_dir", np.uint8),           # 22  0=up 1=down 2=left 3=right
    ("valuation_type", np.uint8),     # 23  id into valuation_types.json
    ("ev_legal", np.uint8),           # 24  bit0=up bit1=down bit2=left bit3=right
    ("max_rank", np.uint8),           # 25  largest exponent on the board
                                      # 26..27 padding, written as zero bytes
    ("seed", np.uint32),              # 28
    ("branch_evs", np.float32, (4,)), # 32  [up, down, left, right]
], align=True)
assert STEP_ROW_DTYPE.itemsize == 48

SAFE_RECIPE = '''\
import glob, numpy as np
shards = sorted(glob.glob(f"{pack}/steps-*.npy")) or [f"{pack}/steps.npy"]
parts = [np.load(s, mmap_mode="r") for s in shards]
rows = np.zeros(sum(len(p) for p in parts), STEP_ROW_DTYPE)   # zeros, not empty
pos = 0
for p in parts:
    assert p.dtype == STEP_ROW_DTYPE
    rows[pos:pos + len(p)] = p                                   # fills fields, padding stays 0
    pos += len(p)
# never: np.concatenate(parts)          -> packed 46-byte dtype
# never: packed.astype(STEP_ROW_DTYPE)  -> 48 bytes, padding uninitialised
# to convert a packed (legacy 46-byte) array: out = np.zeros(len(a), STEP_ROW_DTYPE)
#                                              for f in a.dtype.names: out[f] = a[f]'''

failures = []


def claim(cond, msg):
    print(("  ok    " if cond else "  FAIL  ") + msg)
    if not cond:
        failures.append(msg)
    return cond


def padding(arr):
    return arr.view(np.uint8).reshape(len(arr), STEP_ROW_DTYPE.itemsize)[:, 26:28]


def fields_equal(a, b):
    return all(np.array_equal(a[f], b[f]) for f in STEP_ROW_DTYPE.names)


def main(argv):
    if len(argv) != 2:
        print(__doc__.splitlines()[3].strip(), file=sys.stderr)
        return 2
    pack = argv[1]
    shards = sorted(glob.glob(os.path.join(pack, "steps-*.npy")))
    if len(shards) < 2:
        print(f"error: {pack} has {len(shards)} steps-*.npy shard(s); the traps need at least 2 "
              "(pack with --shard-rows)", file=sys.stderr)
        return 2
    print(f"NumPy {np.__version__}, pack {pack}, {len(shards)} shards")

    loaded = [np.load(s) for s in shards]
    total = sum(len(a) for a in loaded)

    print("(a) np.concatenate of loaded shards")
    for s, a in zip(shards, loaded):
        claim(a.dtype == STEP_ROW_DTYPE and a.dtype.itemsize == 48,
              f"{os.path.basename(s)}: np.load dtype == STEP_ROW_DTYPE (itemsize {a.dtype.itemsize})")
    naive = np.concatenate(loaded)
    claim(naive.dtype.itemsize == 46, f"np.concatenate gives itemsize {naive.dtype.itemsize} (packed, expected 46)")
    claim(naive.dtype != STEP_ROW_DTYPE, "np.concatenate result dtype != STEP_ROW_DTYPE")
    buf = io.BytesIO()
    np.save(buf, naive)
    claim(b"'|V2'" not in buf.getvalue()[:400],
          "np.save of it writes a header without the ('', '|V2') padding: the legacy packed format")

    safe = np.zeros(total, STEP_ROW_DTYPE)
    pos = 0
    for a in loaded:
        safe[pos:pos + len(a)] = a
        pos += len(a)
    claim(safe.dtype == STEP_ROW_DTYPE and safe.dtype.itemsize == 48,
          "preallocated np.zeros(total, STEP_ROW_DTYPE) + slice fill keeps the dtype")
    claim(fields_equal(safe, naive), "both hold the same field values")

    print("(b) .astype(STEP_ROW_DTYPE) from the packed array")
    back = naive.astype(STEP_ROW_DTYPE)
    claim(back.dtype == STEP_ROW_DTYPE, "astype restores dtype == STEP_ROW_DTYPE")
    claim(fields_equal(back, safe), "astype keeps every field value")
    # Not guaranteed, so not asserted: make garbage likely by freeing a dirty block of the
    # same size right before astype allocates (NumPy's small-block cache / malloc reuse it).
    n = min(16, len(naive))
    small = np.ascontiguousarray(naive[:n])
    junk = np.full(n * STEP_ROW_DTYPE.itemsize, 0xAB, np.uint8)
    del junk
    dirty = small.astype(STEP_ROW_DTYPE)
    garbage = bool(padding(dirty).any()) or bool(padding(back).any())
    if garbage:
        print(f"  seen  astype left non-zero padding bytes, e.g. {padding(dirty)[:4].tolist()}: "
              "uninitialised memory (np.save/tobytes/CRC of it are not deterministic)")
    else:
        print("  note  astype padding happened to be zero this time; that is luck (np.empty memory), "
              "not a guarantee, so it is not asserted")
    junk = np.full(n * STEP_ROW_DTYPE.itemsize, 0xAB, np.uint8)
    del junk
    empty_fill = np.empty(n, STEP_ROW_DTYPE)
    empty_fill[:] = small
    if padding(empty_fill).any():
        print("  seen  np.empty + slice assignment leaves padding garbage too: preallocate with np.zeros")

    fixed = np.zeros(len(naive), STEP_ROW_DTYPE)
    for f in naive.dtype.names:
        fixed[f] = naive[f]
    claim(not padding(fixed).any(), "np.zeros + field-by-field assignment leaves padding bytes zero")
    claim(not padding(safe).any(), "np.zeros + slice assignment leaves padding bytes zero")
    claim(fields_equal(fixed, safe), "field-by-field conversion keeps every value")
    claim(fixed.tobytes() == safe.tobytes(), "the two safe recipes give identical bytes")
    raw = b"".join(open(s, "rb").read()[384:] for s in shards)
    claim(safe.tobytes() == raw, "safe concatenation is byte-identical to the shards' data sections")

    print("Safe recipe:")
    print(SAFE_RECIPE)
    if failures:
        print(f"FAILED: {len(failures)} claim(s) do not hold with NumPy {np.__version__}", file=sys.stderr)
        return 1
    print(f"OK: both traps shown on {len(shards)} shards, {total} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
