#!/usr/bin/env python3
"""Writes a float32 .npy array of shape (ROWS, DIM) as np.save would, with the standard library
only (the benchmark machine need not have NumPy): the companion arrays of the benchmarks.

    python3 bench/make_array.py OUT.npy ROWS DIM
"""
import os
import sys


def header(rows, dim):
    d = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, dim)
    d += " " * (21 - len(str(rows)))  # np.save's room for the first axis to grow
    hlen = len(d) + 1
    pad = 64 - (10 + hlen) % 64
    return b"\x93NUMPY\x01\x00" + (hlen + pad).to_bytes(2, "little") + d.encode() + b" " * pad + b"\n"


def main():
    out, rows, dim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    block = os.urandom(1 << 20)
    total = rows * dim * 4
    with open(out, "wb") as f:
        f.write(header(rows, dim))
        while total > 0:
            n = min(total, len(block))
            f.write(block[:n])
            total -= n


if __name__ == "__main__":
    main()
