"""Index spaces laid over global rows, in memory proportional to runs (never to rows).

- `RowRanges`: the rows of a selection as sorted, disjoint row ranges (adjacent ranges are
  merged, so "every run" is a single range). Item i of the selection is its i-th row in pack
  order.
- `WindowStarts`: the windows of `length` consecutive rows inside each run, one every
  `stride` rows; item i is the i-th window in pack order, given by its first row.
"""

from __future__ import annotations

import numpy as np


def _prefix_sums(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


class RowRanges:
    """Rows `[starts[i], starts[i] + lengths[i])`, numbered 0..total-1 in order."""

    def __init__(self, starts: np.ndarray, lengths: np.ndarray):
        starts = np.asarray(starts, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        keep = lengths > 0
        starts, lengths = starts[keep], lengths[keep]
        order = np.argsort(starts, kind="stable")
        starts, lengths = starts[order], lengths[order]
        if starts.size > 1:
            # Merge a range into the previous one when it starts where that one ends.
            ends = starts + lengths
            new_group = np.ones(starts.size, dtype=bool)
            new_group[1:] = starts[1:] != ends[:-1]
            group = np.cumsum(new_group) - 1
            first = np.flatnonzero(new_group)
            lengths = np.bincount(group, weights=lengths).astype(np.int64)
            starts = starts[first]
        self.starts = starts
        self.lengths = lengths
        self.offsets = _prefix_sums(lengths)
        self.total = int(self.offsets[-1])

    @classmethod
    def everything(cls, rows: int) -> "RowRanges":
        return cls(np.array([0]), np.array([rows]))

    def rows_at(self, items: np.ndarray) -> np.ndarray:
        """Global rows of selection items (int64)."""
        items = np.asarray(items, dtype=np.int64)
        if self.starts.size == 1:
            return items + self.starts[0]
        r = np.searchsorted(self.offsets, items, side="right") - 1
        return self.starts[r] + (items - self.offsets[r])

    def spans(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The global row spans `[a, b)` holding items lo..hi-1, in order."""
        out = []
        r = int(np.searchsorted(self.offsets, lo, side="right")) - 1
        while lo < hi:
            start = int(self.starts[r]) + lo - int(self.offsets[r])
            take = min(hi, int(self.offsets[r + 1])) - lo
            out.append((start, start + take))
            lo += take
            r += 1
        return out


#: Set bits of each byte value, and the position of its k-th set bit (k = 0..7; 0 past them).
_POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1).astype(
    np.int64)
_NTH_BIT = np.zeros((256, 8), dtype=np.int64)
for _value in range(256):
    _set = [bit for bit in range(8) if _value >> bit & 1]
    _NTH_BIT[_value, :len(_set)] = _set
del _value, _set


def _membership(wanted: np.ndarray):
    """A function telling, for an array of run ids, which are in `wanted`: a lookup table when
    the ids are small (the usual case: a table of at most 64 MiB), else a sorted search."""
    if wanted.size and 0 <= wanted.min() and wanted.max() < (1 << 26):
        table = np.zeros(int(wanted.max()) + 2, dtype=bool)
        table[wanted] = True
        return lambda ids: table[np.minimum(ids, table.size - 1)]
    return lambda ids: np.isin(ids, wanted)


class RowSet:
    """The rows whose `run_id` is one of `run_ids`, numbered 0..total-1 in pack order.

    `read_run_ids(start, stop)` gives the run_id column of global rows start..stop-1; it is
    called over the whole pack in blocks of `BLOCK` rows."""

    BLOCK = 1 << 20

    def __init__(self, rows: int, run_ids: np.ndarray, read_run_ids):
        wanted = np.asarray(run_ids, dtype=np.int64)
        is_wanted = _membership(wanted)
        words = (rows + 63) // 64
        self.bits = np.zeros(words * 8, dtype=np.uint8)
        counts = np.zeros(words, dtype=np.int64)
        for start in range(0, rows, self.BLOCK):
            stop = min(rows, start + self.BLOCK)
            keep = is_wanted(read_run_ids(start, stop))
            padded = np.zeros(-(-keep.size // 64) * 64, dtype=bool)
            padded[:keep.size] = keep
            self.bits[start // 8:start // 8 + padded.size // 8] = np.packbits(
                padded, bitorder="little")
            counts[start // 64:start // 64 + padded.size // 64] = (
                padded.reshape(-1, 64).sum(axis=1))
        self.offsets = _prefix_sums(counts)
        self.total = int(self.offsets[-1])

    def rows_at(self, items: np.ndarray) -> np.ndarray:
        """Global rows of selection items (int64)."""
        items = np.asarray(items, dtype=np.int64)
        word = np.searchsorted(self.offsets, items, side="right") - 1
        rank = items - self.offsets[word]
        # The (rank+1)-th set bit of each item's 64-bit word: first its byte, by the running
        # popcount of the word's 8 bytes, then the bit inside that byte, from a table.
        octets = self.bits.reshape(-1, 8)[word]
        counts = _POPCOUNT[octets]
        running = np.cumsum(counts, axis=-1, dtype=np.int64)
        byte = (running <= rank[..., None]).sum(axis=-1)
        picked = np.take_along_axis(octets, byte[..., None], axis=-1)[..., 0]
        before = np.take_along_axis(running - counts, byte[..., None], axis=-1)[..., 0]
        return word * 64 + byte * 8 + _NTH_BIT[picked, rank - before]

    def spans(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The global row spans `[a, b)` holding items lo..hi-1, in order."""
        rows = self.rows_at(np.arange(lo, hi, dtype=np.int64))
        if rows.size == 0:
            return []
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = np.concatenate([[0], breaks])
        ends = np.concatenate([breaks, [rows.size]])
        return [(int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(starts, ends)]


class WindowStarts:
    """Windows of `length` rows inside runs (never across two), one every `stride` rows."""

    def __init__(self, run_starts: np.ndarray, run_steps: np.ndarray, length: int, stride: int):
        run_starts = np.asarray(run_starts, dtype=np.int64)
        run_steps = np.asarray(run_steps, dtype=np.int64)
        counts = np.where(run_steps >= length, (run_steps - length) // stride + 1, 0)
        keep = counts > 0
        self.run_starts = run_starts[keep]
        self.counts = counts[keep]
        self.offsets = _prefix_sums(self.counts)
        self.total = int(self.offsets[-1])
        self.length = int(length)
        self.stride = int(stride)

    def first_rows(self, items: np.ndarray) -> np.ndarray:
        """The first global row of each window (int64)."""
        items = np.asarray(items, dtype=np.int64)
        r = np.searchsorted(self.offsets, items, side="right") - 1
        return self.run_starts[r] + (items - self.offsets[r]) * self.stride
