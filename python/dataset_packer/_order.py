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
    """A keyed pseudo-random bijection of range(n), evaluated at any positions.

    The round functions are tabulated once (one entry per value of a half, so memory grows
    with the square root of n: 2^15 entries per round for a billion rows); a round is then
    one table lookup and one xor."""

    def __init__(self, n: int, seed: int, epoch: int):
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        self._left_bits = bits // 2
        self._right_bits = bits - self._left_bits
        self._keys = [np.uint64(derive_key(seed, epoch, 1 + r)) for r in range(_ROUNDS)]
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
                 start_sample: int = 0):
        self.items = int(items)
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
            at = first % self.items
            take = min(count, self.items - at)
            out.append((at, at + take))
            first, count = first + take, count - take
        return out

    def positions(self, rank: int, batch: int) -> np.ndarray:
        """The positions of a rank's batch (int64), padding wrapped around."""
        first, count = self.span(rank, batch)
        positions = np.arange(first, first + count, dtype=np.int64)
        if first + count > self.items:  # padding: an int64 division only then
            positions %= max(self.items, 1)
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
               start_sample: int, start_batch: int):
    """One epoch over `total` items (rows or windows) for one (rank, worker): its batch plan
    from the resume point on, the rank as checked, the numbers of the batches this part
    yields, and the epoch's permutation (None without shuffle)."""
    part = Part(rank, world_size, worker, num_workers)
    start = start_position(start_sample, start_batch, batch_size, world_size, total)
    plan = EpochPlan(total, batch_size, world_size, drop_last, start)
    numbers = plan.batches_of(part)
    perm = Permutation(total, seed, epoch) if shuffle else None
    return plan, part.rank, numbers, perm
