"""Epoch order: which rows go into which batch, for which rank and worker.

Everything here is a pure function of its arguments, computed per batch, so an epoch over a
billion rows needs no billion-entry permutation in memory:

- `Permutation(n, seed, epoch)` is a keyed bijection of `range(n)`: a 4-round Feistel network
  on the smallest power of two ≥ n, with cycle-walking back into range. `perm(positions)`
  gives the items at those positions of the epoch's order.
- `EpochPlan` cuts the epoch into batches. The epoch is one sequence of positions, the same
  whatever the world size, workers or batch size; global step j takes the `world_size ×
  batch_size` positions starting at `start_sample + j × world_size × batch_size`, and rank r
  gets the r-th `batch_size` of them. Every rank gets the same number of batches and rows,
  as torch's `DistributedSampler` does it: with `drop_last`, an incomplete last step is left
  out; without it, the remaining positions are split evenly between the ranks as one shorter
  batch each, padded with positions from the start of the epoch's order (fewer than
  `world_size` of them), so that no row is left out.
- `start_sample=N` resumes after the first N positions of the epoch, with any world size,
  batch size or worker count: rows before N do not come again (but as padding), rows after N
  are not missed. `start_batch=k` is the shorthand for `start_sample=k × world_size ×
  batch_size` (the same batch size and world size as before).
- A rank's batches go round-robin to its data-loader workers, worker w taking batches w,
  w+num_workers, …, which is the order in which PyTorch's DataLoader collects them; so a
  resumed epoch yields exactly the uninterrupted epoch's positions.
- `ShardWindows` is the other order of an epoch, for a pack read through a cache smaller
  than it (object storage): shards permuted, grouped into windows that fit about half the
  cache, items permuted inside each window. The batch plan is the same (position-based,
  so resume, ranks and workers work alike), except that its padding repeats the epoch's
  last positions (`pad_from_end`: still in the last window) instead of its first ones.
- A reader evaluates the permutation for several of its batches at once (`EpochPlan.chunks`:
  about `CHUNK_POSITIONS` positions a call): each call pays a fixed cost of its own (a dozen
  NumPy passes, cycle-walking included) that one batch's positions would pay alone. The
  grouping changes how the positions are computed, never which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

#: Positions whose permutation a reader evaluates in one call (one batch at least): large
#: enough that the call's fixed cost is small against its per-position cost, small enough
#: that the call's arrays stay in the CPU's cache.
CHUNK_POSITIONS = 1 << 15

_MASK64 = (1 << 64) - 1
_ROUNDS = 4
_MAX_TABLE_BITS = 22  # tabulate round functions up to 2^22 entries (n < 2^44)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S32 = np.uint64(32)


def mix64(x: int) -> int:
    """SplitMix64's finaliser on a Python int (a well-spread 64-bit hash)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def derive_key(seed: int, epoch: int, purpose: int) -> int:
    """A 64-bit key for one use (shuffle round, augmentation) of one (seed, epoch)."""
    return mix64(mix64(mix64(int(seed) ^ 0x5EED) ^ int(epoch)) + purpose)


def mix64_array(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x *= _MUL1
    x ^= x >> np.uint64(27)
    x *= _MUL2
    x ^= x >> np.uint64(31)
    return x


class Permutation:
    """A keyed pseudo-random bijection of range(n), evaluated at any positions (`stream`:
    another, independent one for the same seed and epoch).

    The round functions are tabulated once (one entry per value of a half, so memory grows
    with the square root of n: 2^15 entries per round for a billion rows); a round is then
    one table lookup and one xor."""

    def __init__(self, n: int, seed: int, epoch: int, stream: int = 0):
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        self._left_bits = bits // 2
        self._right_bits = bits - self._left_bits
        # `stream` picks one of several independent orders of one (seed, epoch); stream 0
        # is the epoch's global order (its keys are those of before streams existed).
        self._keys = [np.uint64(derive_key(seed, epoch, (int(stream) << 8) + 1 + r))
                      for r in range(_ROUNDS)]
        self._tables = None
        if self._right_bits <= _MAX_TABLE_BITS:
            self._tables = [self._round_table(r) for r in range(_ROUNDS)]

    def _round_widths(self, r: int) -> tuple[int, int]:
        """(left, right) widths before round r: they swap every round."""
        wl, wr = self._left_bits, self._right_bits
        return (wl, wr) if r % 2 == 0 else (wr, wl)

    def _round_table(self, r: int) -> np.ndarray:
        wl, wr = self._round_widths(r)
        halves = np.arange(1 << wr, dtype=np.uint64)
        return self._round_function(halves, self._keys[r], np.uint64(64 - wl)).astype(np.int64)

    @staticmethod
    def _round_function(half: np.ndarray, key: np.uint64, shift: np.uint64) -> np.ndarray:
        """The keyed half through SplitMix64-style mixing; its top bits (in place)."""
        t = half ^ key
        t *= _MUL1
        t ^= t >> _S32
        t *= _MUL2
        t >>= shift
        return t

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        """One pass of the Feistel network over [0, 2^bits) (int64 in and out): unbalanced
        halves whose widths swap every round, so after an even number of rounds the layout
        is back."""
        left = x >> self._right_bits
        right = x & ((1 << self._right_bits) - 1)
        for r in range(_ROUNDS):
            wl, _ = self._round_widths(r)
            if self._tables is not None:
                # The array's own take: this runs a dozen times per batch, on small arrays
                # when cycle-walking, where np.take's dispatch is a good part of the cost.
                mixed = self._tables[r].take(right)
            else:
                mixed = self._round_function(right.astype(np.uint64), self._keys[r],
                                             np.uint64(64 - wl)).astype(np.int64)
            mixed ^= left
            left, right = right, mixed
        left <<= self._right_bits
        left |= right
        return left

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The items at these positions (int64 in, int64 out)."""
        if self.n <= 1:
            return np.asarray(positions, dtype=np.int64).copy()
        out = self._encrypt(np.asarray(positions, dtype=np.int64))
        todo = (out >= self.n).nonzero()[0]
        while todo.size:  # cycle-walk: re-encrypt until back in range (a bijection of [0, n))
            again = self._encrypt(out[todo])
            out[todo] = again
            todo = todo[again >= self.n]
        return out


def validation_side(fingerprints: list[str], seed: int, fraction: float) -> np.ndarray:
    """Whether each run (by its 32-hex-digit content fingerprint) is on the validation side of
    a split: its fingerprint's first 64 bits, mixed with the seed, as a number in [0, 1) below
    `fraction`. A function of (fingerprint, seed, fraction) alone, and monotone in the
    fraction: a larger fraction only adds runs to the validation side."""
    key = np.uint64(derive_key(seed, 0, 0x5B117))
    bits = np.array([int(f[:16], 16) for f in fingerprints], dtype=np.uint64)
    unit = (mix64_array(bits ^ key) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return unit < fraction


def symmetries_for(rows: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """One of the 8 symmetries per global row index, fixed by (seed, epoch, row)."""
    key = np.uint64(derive_key(seed, epoch, 0xA46))
    h = mix64_array(np.asarray(rows, dtype=np.uint64) ^ key)
    return (h >> np.uint64(61)).astype(np.uint8)


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer ≥ {minimum}, not {value!r}")
    return int(value)


@dataclass(frozen=True)
class Part:
    """Which share of an epoch a caller reads: its rank among `world_size` training processes
    and its worker among `num_workers` data-loader workers of that rank."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self):
        _positive_int("world_size", self.world_size)
        _positive_int("num_workers", self.num_workers)
        if not 0 <= int(self.rank) < self.world_size:
            raise ValueError(f"rank must be in 0..{self.world_size - 1}, not {self.rank!r}")
        if not 0 <= int(self.worker) < self.num_workers:
            raise ValueError(f"worker must be in 0..{self.num_workers - 1}, not {self.worker!r}")


class EpochPlan:
    """The batches of one epoch over `items` positions, per rank (see the module docstring)."""

    def __init__(self, items: int, batch_size: int, world_size: int = 1, drop_last: bool = False,
                 start_sample: int = 0, pad_from_end: bool = False):
        self.items = int(items)
        self.pad_from_end = bool(pad_from_end)
        self.batch_size = _positive_int("batch_size", batch_size)
        self.world_size = _positive_int("world_size", world_size)
        self.start = _positive_int("start_sample", start_sample, minimum=0)
        if self.start > self.items:
            raise ValueError(f"start_sample={self.start} is past the end of an epoch of "
                             f"{self.items} positions")
        remaining = self.items - self.start
        step = self.batch_size * self.world_size
        self.full_steps = remaining // step
        tail = remaining - self.full_steps * step
        self.tail_per_rank = 0 if drop_last else -(-tail // self.world_size)
        self.batches_per_rank = self.full_steps + (1 if self.tail_per_rank else 0)
        self.rows_per_rank = self.full_steps * self.batch_size + self.tail_per_rank
        #: Padding positions of the last step (fewer than world_size).
        self.padding = self.tail_per_rank * self.world_size - tail if self.tail_per_rank else 0

    def _wrapped(self, first: int) -> int:
        """Where the padding position `first` (≥ items) repeats the epoch's order: from its
        start, or with `pad_from_end` from its last `padding` positions (what a shard-window
        order still holds in its last window)."""
        if self.pad_from_end:
            first -= self.padding
        return first % self.items

    def span(self, rank: int, batch: int) -> tuple[int, int]:
        """(first position, count) of a rank's batch; positions from `items` on are padding
        (see `spans`)."""
        if batch < self.full_steps:
            return self.start + (batch * self.world_size + rank) * self.batch_size, self.batch_size
        first = self.start + self.full_steps * self.world_size * self.batch_size
        return first + rank * self.tail_per_rank, self.tail_per_rank

    def spans(self, rank: int, batch: int) -> list[tuple[int, int]]:
        """The positions of a rank's batch as `[a, b)` ranges of the epoch's order, padding
        wrapped around to its start."""
        first, count = self.span(rank, batch)
        out = []
        while count > 0:
            at = first if first < self.items else self._wrapped(first)
            take = min(count, self.items - at)
            out.append((at, at + take))
            first, count = first + take, count - take
        return out

    def positions(self, rank: int, batch: int) -> np.ndarray:
        """The positions of a rank's batch (int64), padding wrapped around."""
        first, count = self.span(rank, batch)
        positions = np.arange(first, first + count, dtype=np.int64)
        if first + count > self.items:  # padding: an int64 division only then
            pad = positions >= self.items
            if self.pad_from_end:
                positions[pad] -= self.padding
            positions[pad] %= max(self.items, 1)
        return positions

    def batches_of(self, part: Part) -> range:
        """The rank's batch numbers this worker reads."""
        return range(part.worker, self.batches_per_rank, part.num_workers)

    def chunks(self, rank: int, numbers: range) -> Iterator[list[tuple[int, int]]]:
        """These batches of a rank (in order), grouped so that a group holds about
        `CHUNK_POSITIONS` positions (a whole batch at least): per group, each batch's
        (number, count of positions)."""
        group, held = [], 0
        for b in numbers:
            count = self.span(rank, b)[1]
            if group and held + count > CHUNK_POSITIONS:
                yield group
                group, held = [], 0
            group.append((b, count))
            held += count
        if group:
            yield group

    def chunk_spans(self, rank: int, group: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The positions of a group of `chunks`, batch after batch, as `[a, b)` ranges:
        `spans` of its batches, merged where one ends at the next one's start (a reader with
        one worker and one rank reads consecutive batches: one range)."""
        out: list = []
        for b, _ in group:
            for a, z in self.spans(rank, b):
                if out and out[-1][1] == a:
                    out[-1] = (out[-1][0], z)
                else:
                    out.append((a, z))
        return out

    def chunk_positions(self, rank: int, group: list[tuple[int, int]]) -> np.ndarray:
        """The positions of a group of `chunks`, batch after batch (int64)."""
        spans = self.chunk_spans(rank, group)
        if len(spans) == 1:
            return np.arange(*spans[0], dtype=np.int64)
        return np.concatenate([np.arange(a, z, dtype=np.int64) for a, z in spans])


def items_before(item_rows, total: int, bounds) -> np.ndarray:
    """For each global row in `bounds`, how many of `total` items lie before it. Items are
    numbered in pack order: `item_rows(items)` (int64 in and out) gives each one's (first)
    row, never decreasing from one item to the next, so a bisection finds the count with
    about log2(total) calls over all the bounds at once."""
    bounds = np.asarray(bounds, dtype=np.int64)
    lo = np.zeros(bounds.size, dtype=np.int64)
    hi = np.full(bounds.size, int(total), dtype=np.int64)
    active = np.flatnonzero(lo < hi)
    while active.size:
        mid = (lo[active] + hi[active]) // 2
        below = np.asarray(item_rows(mid)) < bounds[active]
        lo[active] = np.where(below, mid + 1, lo[active])
        hi[active] = np.where(below, hi[active], mid)
        active = active[lo[active] < hi[active]]
    return lo


def shard_items(item_rows, total: int, shard_rows, length: int = 1):
    """Which items each shard holds, for `ShardWindows`: (cuts, reach). Shard s holds items
    cuts[s]..cuts[s+1]-1 (those whose first row is in it); reading them reads shards s to
    reach[s] (beyond s only for windows of `length` rows that run into the next shards)."""
    offsets = np.zeros(len(shard_rows) + 1, dtype=np.int64)
    np.cumsum(np.asarray(shard_rows, dtype=np.int64), out=offsets[1:])
    cuts = items_before(item_rows, total, offsets)
    reach = np.arange(len(shard_rows), dtype=np.int64)
    if length > 1:
        held = np.flatnonzero(cuts[1:] > cuts[:-1])
        last_rows = np.asarray(item_rows(cuts[held + 1] - 1)) + (length - 1)
        reach[held] = np.searchsorted(offsets[1:], last_rows, side="right")
    return cuts, reach


class ShardWindows:
    """The shard-window order of one epoch: a bijection of range(n) like `Permutation`,
    which reads a pack a few shards at a time.

    The shards are permuted (seeded by seed and epoch) and cut, in that order, into windows
    of consecutive shards whose bytes add up to at most `window_bytes` (a window holds one
    shard at least, however large); the epoch reads window after window, each window's
    items in an order of their own (a permutation per window). So position p of the epoch
    is an item of the window p falls in, and a reader that goes through the positions in
    order needs one window's shards at a time (two around a boundary), the next one being
    the one to fetch ahead. Without `shuffle`, the shards keep their order and the items
    theirs: the positions are the items, in windows.

    `cuts` and `reach` are `shard_items`'; `shard_bytes` what each shard costs to hold.
    A shard that holds no item is left out (a selection that skips it never reads it)."""

    def __init__(self, cuts, reach, shard_bytes, window_bytes: int, seed: int, epoch: int,
                 shuffle: bool = True):
        cuts = np.asarray(cuts, dtype=np.int64)
        self.n = int(cuts[-1])
        self.seed, self.epoch, self.shuffle = seed, epoch, bool(shuffle)
        self.window_bytes = _positive_int("window_bytes", window_bytes)
        held = np.flatnonzero(cuts[1:] > cuts[:-1])
        if self.shuffle and held.size > 1:
            held = held[Permutation(held.size, seed, epoch, stream=1)(
                np.arange(held.size, dtype=np.int64))]
        #: The shards in the epoch's order, where each one's items start in it, and where
        #: in the pack's item numbering.
        self.sequence = held
        self._seq_start = np.zeros(held.size + 1, dtype=np.int64)
        np.cumsum(cuts[held + 1] - cuts[held], out=self._seq_start[1:])
        self._first_item = cuts[held]
        bounds, self._reads = self._group(held, np.asarray(reach), np.asarray(shard_bytes))
        #: The position where each window starts, and n after the last.
        self.starts = self._seq_start[bounds]
        self._perms: dict = {}

    def _group(self, held, reach, shard_bytes) -> tuple[list[int], list[list[int]]]:
        """Windows of the shard sequence (greedy, in order): their bounds in it, and the
        shards each one reads (its own and those its items run into)."""
        bounds, reads = [0], []
        window: set = set()
        size = 0
        for j, s in enumerate(held.tolist()):
            needs = set(range(s, int(reach[s]) + 1))
            more = sum(int(shard_bytes[x]) for x in needs - window)
            if window and size + more > self.window_bytes:
                bounds.append(j)
                reads.append(sorted(window))
                window, size = set(), 0
                more = sum(int(shard_bytes[x]) for x in needs)
            window |= needs
            size += more
        if window:
            bounds.append(held.size)
            reads.append(sorted(window))
        return bounds, reads

    @property
    def windows(self) -> int:
        return len(self._reads)

    def reads(self, window: int) -> list[int]:
        """The shards window `window` reads (ascending)."""
        return self._reads[window]

    def span(self, window: int) -> tuple[int, int]:
        """[first position, end) of a window."""
        return int(self.starts[window]), int(self.starts[window + 1])

    def window_of(self, positions: np.ndarray) -> np.ndarray:
        """The window of each position (int64)."""
        return np.searchsorted(self.starts, positions, side="right") - 1

    def _permutation(self, window: int) -> Permutation:
        found = self._perms.get(window)
        if found is None:
            if len(self._perms) >= 4:  # a reader is in one or two windows at a time
                self._perms.clear()
            a, z = self.span(window)
            found = self._perms[window] = Permutation(z - a, self.seed, self.epoch,
                                                      stream=2 + window)
        return found

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The items at these positions (int64 in, int64 out)."""
        positions = np.asarray(positions, dtype=np.int64)
        if not self.shuffle or positions.size == 0:
            return positions.copy()
        window = self.window_of(positions)
        lo, hi = int(window.min()), int(window.max())
        if lo == hi:
            at = int(self.starts[lo])
            sequence = self._permutation(lo)(positions - at) + at
        else:
            sequence = np.empty_like(positions)
            for k in range(lo, hi + 1):
                mine = window == k
                at = int(self.starts[k])
                sequence[mine] = self._permutation(k)(positions[mine] - at) + at
        j = np.searchsorted(self._seq_start, sequence, side="right") - 1
        return self._first_item[j] + (sequence - self._seq_start[j])


def start_position(start_sample: int, start_batch: int, batch_size: int, world_size: int,
                   items: int) -> int:
    """The epoch position to resume at, from `start_sample` or its shorthand `start_batch`."""
    start_sample = _positive_int("start_sample", start_sample, minimum=0)
    start_batch = _positive_int("start_batch", start_batch, minimum=0)
    if start_batch and start_sample:
        raise ValueError("give start_sample or start_batch, not both")
    if start_batch:
        # Past the last batch: nothing left of the epoch.
        return min(start_batch * int(batch_size) * int(world_size), items)
    return start_sample


def plan_epoch(total: int, batch_size: int, shuffle: bool, seed: int, epoch: int, rank: int,
               world_size: int, worker: int, num_workers: int, drop_last: bool,
               start_sample: int, start_batch: int, pad_from_end: bool = False):
    """One epoch over `total` items (rows or windows) for one (rank, worker): its batch plan
    from the resume point on, the rank as checked, the numbers of the batches this part
    yields, and the epoch's permutation (None without shuffle)."""
    part = Part(rank, world_size, worker, num_workers)
    start = start_position(start_sample, start_batch, batch_size, world_size, total)
    plan = EpochPlan(total, batch_size, world_size, drop_last, start, pad_from_end)
    numbers = plan.batches_of(part)
    perm = Permutation(total, seed, epoch) if shuffle else None
    return plan, part.rank, numbers, perm
