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
