#!/usr/bin/env python3
"""Companion arrays for the tests, made and checked with NumPy.

    companion_tool.py make PACK NAME KIND [--whole OUT.npy]
        KIND ids: a structured companion ('seed' u4, 'step_index' u4, 'board' u8) copied from
                  each steps row, so that after any command row i of the companion must equal
                  the identity of steps row i;
        KIND emb: float32 (rows, 8), a function of each row's identity.
        Writes NAME-NNNNN.npy (or NAME.npy beside steps.npy) with np.save; with --whole,
        writes one array for the whole pack to OUT.npy instead (for `attach`).
    companion_tool.py check PACK NAME KIND
        Every companion file pairs with its shard, has np.save's header, and every row holds
        the identity of its steps row. Prints "OK: N rows" or the first mismatches, exit 1.
"""

import glob
import os
import sys

import numpy as np

IDS = np.dtype([("seed", "<u4"), ("step_index", "<u4"), ("board", "<u8")])


def shards(pack):
    names = sorted(glob.glob(os.path.join(pack, "steps-*.npy")))
    return names or [os.path.join(pack, "steps.npy")]


def companion_path(pack, name, shard_path):
    base = os.path.basename(shard_path)
    if base == "steps.npy":
        return os.path.join(pack, f"{name}.npy")
    return os.path.join(pack, f"{name}-{base[len('steps-'):]}")


def identity(rows, kind):
    if kind == "ids":
        out = np.zeros(len(rows), IDS)
        out["seed"] = rows["seed"]
        out["step_index"] = rows["step_index"]
        out["board"] = rows["board"]
        return out
    emb = np.zeros((len(rows), 8), np.float32)
    emb[:, 0] = rows["seed"] % 100000
    emb[:, 1] = rows["step_index"]
    emb[:, 2] = (rows["board"] >> np.uint64(32)).astype(np.float32)
    emb[:, 3] = (rows["board"] & np.uint64(0xFFFFFFFF)).astype(np.float32)
    emb[:, 4:] = np.arange(4, dtype=np.float32)
    return emb


def make(pack, name, kind, whole=None):
    parts = []
    for s in shards(pack):
        rows = np.load(s, mmap_mode="r")
        arr = identity(rows, kind)
        if whole:
            parts.append(arr)
        else:
            np.save(companion_path(pack, name, s), arr)
    if whole:
        np.save(whole, np.concatenate(parts) if parts else identity(np.zeros(0), kind))


def check(pack, name, kind):
    import io

    problems = []
    total = 0
    for s in shards(pack):
        rows = np.load(s, mmap_mode="r")
        path = companion_path(pack, name, s)
        if not os.path.exists(path):
            problems.append(f"{path} is missing")
            continue
        got = np.load(path, mmap_mode="r")
        want = identity(rows, kind)
        if got.dtype != want.dtype or got.shape != want.shape:
            problems.append(f"{path}: {got.dtype} {got.shape}, expected {want.dtype} {want.shape}")
            continue
        if not np.array_equal(np.asarray(got), want):
            bad = np.nonzero(np.asarray(got) != want)[0] if kind == "ids" else \
                np.nonzero((np.asarray(got) != want).any(axis=1))[0]
            problems.append(f"{path}: {len(bad)} rows differ from their steps rows, first at {bad[:5]}")
        buf = io.BytesIO()
        np.save(buf, np.asarray(got))
        with open(path, "rb") as f:
            head = f.read(len(buf.getvalue()) - got.nbytes)
        if head != buf.getvalue()[: len(head)]:
            problems.append(f"{path}: header differs from np.save's")
        total += len(rows)
    extra = [p for p in glob.glob(os.path.join(pack, f"{name}*.npy"))
             if p not in {companion_path(pack, name, s) for s in shards(pack)}]
    if extra:
        problems.append(f"files that pair with no shard: {extra}")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(f"OK: {total} rows")
    return 0


def main(argv):
    if len(argv) >= 4 and argv[0] == "make":
        whole = argv[5] if len(argv) >= 6 and argv[4] == "--whole" else None
        make(argv[1], argv[2], argv[3], whole)
        return 0
    if len(argv) == 4 and argv[0] == "check":
        return check(argv[1], argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
