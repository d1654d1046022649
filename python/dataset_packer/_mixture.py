"""`Mixture`: several packs (or selections) read as one, at chosen proportions.

An epoch of a mixture is `len(mixture)` positions (by default the sources' rows added up).
Source i fills `count_i` of them: its weight's share of the epoch, rounded so that the counts
add up to the epoch exactly (largest remainders). Each source has an endless stream of rows:
its own epoch orders one after the other (`Pack.batches(seed=seed, epoch=k)`'s order for
k = 0, 1, 2, …; with `shuffle=False`, its rows in pack order again and again). Mixture epoch
e takes positions `[e × count_i, (e + 1) × count_i)` of source i's stream, so no row of a
source comes again before the source is used up, and a source weighted above its size
continues into its next permutation (in the next mixture epoch too).

The sources are interleaved evenly, not at random (their rows already are): the epoch's
positions are split between two halves of the sources by Bresenham's rule (position t of N
goes left when ⌊(t+1)·A/N⌋ > ⌊t·A/N⌋, A the left half's count), and each half again, down to
single sources. Any run of positions, a batch in particular, holds each source in its
proportion to within one row per level, and a position is placed in O(log sources) integer
steps.

Everything else is `Pack.batches`: the same plan over the epoch's positions (ranks, workers,
padding, `start_sample`/`start_batch`), augmentation, companions, plus `source` in every
batch (the index of the row's source; `row` and `run_id` are the source's own). A row is
read from its pack as 48 bytes and the batch is decoded once; sources that are selections of
one `Pack` object are read together (one grouping by shard, one gather). The order is worked
out for several batches at once (`EpochPlan.chunks`, as `Pack.batches` does): each source's
permutation is evaluated once per chunk, not once per batch, and the rows are placed by
source in one pass; so mixing selections of a pack costs little more than reading the pack.
`valuation` indexes `mixture.valuation_names`, the sources' valuation names in order of first
appearance.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from . import _data
from ._codec import apply_symmetries, decode_rows
from ._companions import add_rows, requested
from ._data import Selection, rebase
from ._format import ROW_BYTES, STEP_ROW_DTYPE
from ._order import Permutation, plan_epoch, symmetries_for
from ._errors import VersionError
from ._versions import IDENTITY_KEYS, saved_versions
from ._pack import NAN, Pack

_VALUATION = STEP_ROW_DTYPE.fields["valuation_type"][1]


class Mixture:
    """Packs or selections mixed at `weights` (default: in proportion to their rows).

    >>> mix = Mixture([Pack("packs/d6"), Pack("packs/d7").select("max_score > 100000")],
    ...               weights=[0.75, 0.25])
    >>> for batch in mix.batches(4096, seed=0, epoch=3):
    ...     batch["source"]   # 0 or 1 per row
    """

    def __init__(self, sources, weights=None, *, length: int | None = None):
        self.sources = [_as_source(s) for s in sources]
        self._weights_given, self._length_given = weights, length
        if not self.sources:
            raise ValueError("a Mixture needs at least one source")
        self._ranges = [_data.of(pack).row_ranges(sel, "Mixture") for pack, sel in self.sources]
        sizes = np.array([r.total for r in self._ranges], dtype=np.int64)
        if weights is None:
            weights = sizes
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (len(self.sources),):
            raise ValueError(f"{len(self.sources)} sources need {len(self.sources)} weights, "
                             f"not {weights.size}")
        if not np.isfinite(weights).all() or (weights < 0).any() or weights.sum() <= 0:
            raise ValueError(f"weights must be finite, ≥ 0 and not all 0: {weights.tolist()}")
        self.weights = weights / weights.sum()
        self.length = int(sizes.sum()) if length is None else int(length)
        if self.length < 1:
            raise ValueError(f"length must be ≥ 1, not {length}")
        self.counts = _apportion(self.weights, self.length)
        self._starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self._start_list = self._starts.tolist()
        self._levels = (len(self.sources) - 1).bit_length()
        # The distinct Pack objects, and each source's among them: rows are read per pack.
        self._packs: list[Pack] = []
        for pack, _ in self.sources:
            if not any(pack is seen for seen in self._packs):
                self._packs.append(pack)
        self._data = [_data.of(pack) for pack in self._packs]
        self._pack_of = np.array([next(k for k, seen in enumerate(self._packs) if seen is pack)
                                  for pack, _ in self.sources], dtype=np.int64)
        names: list[str] = []
        self._valuation_maps = []
        for pack in self._packs:
            for name in pack.valuation_names:
                if name not in names:
                    names.append(name)
            table = np.arange(256, dtype=np.uint8)
            for i, name in enumerate(pack.valuation_names):
                table[i] = names.index(name)
            # None when the source's ids are already the mixture's: nothing to rewrite.
            same = (table == np.arange(256)).all()
            self._valuation_maps.append(None if same else table)
        if len(names) > 256:
            raise ValueError("the sources have more than 256 valuation names together")
        self.valuation_names = names

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        parts = ", ".join(f"{pack.path.name}: {c} rows/epoch"
                          for (pack, _), c in zip(self.sources, self.counts))
        return f"Mixture({self.length} rows per epoch; {parts})"

    def _selection(self, select) -> None:
        _refuse(select, None)

    @property
    def identity(self) -> dict:
        """What a resume state records of the packs it was saved on: `sources`, each
        source's `Pack.identity`."""
        return {"sources": [pack.identity for pack, _ in self.sources]}

    def _saved_versions(self, saved) -> tuple:
        """Per source, the version to go on reading an epoch saved at `saved` (a state or
        an identity), each source checked as a pack's `saved_at` is (`saved_versions`)."""
        if "sources" not in saved:
            if any(key in saved for key in IDENTITY_KEYS):
                raise VersionError("this resume state was saved on one pack, and this reader "
                                   f"is a mixture of {len(self.sources)} sources")
            saved_versions(self.sources[0][0], saved)  # warns: nothing to check
            return self._versions()
        found = saved["sources"]
        if len(found) != len(self.sources):
            raise VersionError(f"this resume state was saved on a mixture of {len(found)} "
                               f"sources; this one has {len(self.sources)}")
        return tuple(saved_versions(pack, identity)[0]
                     for (pack, _), identity in zip(self.sources, found))

    def _versions(self) -> tuple:
        """The version each source reads."""
        return tuple(pack.version for pack, _ in self.sources)

    def _at_versions(self, versions: tuple) -> "Mixture":
        """This mixture over those versions of its sources (selections keep the runs each
        version holds), with the weights and length it was given: the mixture as it was
        at those versions."""
        if tuple(versions) == self._versions():
            return self
        views: list = []
        sources = []
        for (pack, selection), version in zip(self.sources, versions):
            view = next((v for p, n, v in views if p is pack and n == version), None)
            if view is None:
                view = pack.at_version(version)
                views.append((pack, version, view))
            sources.append(view if selection is None else rebase(selection, view))
        return Mixture(sources, self._weights_given, length=self._length_given)

    def _for_saved(self, saved) -> "Mixture":
        """The reader of an epoch whose resume point was saved at `saved`: this mixture, or
        the mixture over the source versions it was saved on."""
        return self._at_versions(self._saved_versions(saved))

    def epoch_length(self, select=None, window=None, stride=None) -> int:
        """Positions in an epoch (what `start_sample` counts)."""
        _refuse(select, window)
        return self.length

    def num_batches(self, batch_size: int, *, select=None, world_size: int = 1,
                    drop_last: bool = False, window: int | None = None,
                    stride: int | None = None, start_sample: int = 0,
                    start_batch: int = 0) -> int:
        """How many batches each rank gets per epoch, from the resume point on."""
        _refuse(select, window)
        plan = plan_epoch(self.length, batch_size, False, 0, 0, 0, world_size, 0, 1,
                          drop_last, start_sample, start_batch)[0]
        return plan.batches_per_rank

    def batches(self, batch_size: int, *, shuffle: bool = True, seed: int = 0, epoch: int = 0,
                select=None, rank: int = 0, world_size: int = 1, worker: int = 0,
                num_workers: int = 1, drop_last: bool = False, start_sample: int = 0,
                start_batch: int = 0, augment: bool = False, illegal_ev: float | None = NAN,
                companions=None, saved_at=None) -> Iterator[dict]:
        """Decoded batches of one mixture epoch, with `Pack.batches`' arguments and keys, plus
        `source`: a pure function of (sources, weights, length, seed, epoch). `saved_at`:
        the `identity` recorded with the resume point, checked source by source."""
        _refuse(select, None)
        if saved_at is not None:
            return self._for_saved(saved_at).batches(
                batch_size, shuffle=shuffle, seed=seed, epoch=epoch, rank=rank,
                world_size=world_size, worker=worker, num_workers=num_workers,
                drop_last=drop_last, start_sample=start_sample, start_batch=start_batch,
                augment=augment, illegal_ev=illegal_ev, companions=companions)
        families = [requested(pack, companions) for pack in self._packs]
        plan, rank, numbers, _ = plan_epoch(
            self.length, batch_size, False, seed, epoch, rank, world_size, worker, num_workers,
            drop_last, start_sample, start_batch)
        return self._batches(plan, rank, numbers, shuffle, seed, epoch, augment, illegal_ev,
                             families)

    def _sources(self, a: int, b: int) -> np.ndarray:
        """The source of each epoch position a..b-1: one halving of each position's range of
        sources per level, all positions at once (a range already down to one source has no
        left part, so it stays as it is). At the first level the range is every source for
        every position, and the positions are consecutive, so Bresenham's count of left
        positions below each is computed once for all of them."""
        count = len(self.sources)
        if count == 1:
            return np.zeros(b - a, dtype=np.int64)
        starts = self._starts
        mid = count >> 1
        below = np.arange(a, b + 1, dtype=np.int64)
        below *= int(starts[mid])
        below //= int(starts[count])
        left = below[1:] > below[:-1]
        lo = (~left).astype(np.int64)
        if mid != 1:
            lo *= mid
        if self._levels == 1:
            return lo
        t = np.arange(a, b, dtype=np.int64) - below[1:]
        np.copyto(t, below[:-1], where=left)
        hi = np.where(left, mid, count)
        for _ in range(self._levels - 1):
            mid = (lo + hi) >> 1
            total = starts[hi] - starts[lo]
            left_count = starts[mid] - starts[lo]
            before = (t + 1) * left_count // total
            left = before > t * left_count // total
            t = np.where(left, before - 1, t - before)
            hi = np.where(left, mid, hi)
            lo = np.where(left, lo, mid)
        return lo

    def _below(self, t: int) -> list[int]:
        """How many of the epoch's positions below t are each source's: the same halving,
        counting (Bresenham's count of a range's left positions below t is ⌊t·A/N⌋). A
        source's positions among consecutive epoch positions are therefore the next ones of
        its own sequence."""
        starts = self._start_list
        out = []
        todo = [(0, len(self.sources), t)]
        while todo:
            lo, hi, t = todo.pop()
            if hi - lo == 1:
                out.append(t)
                continue
            mid = (lo + hi) >> 1
            left = t * (starts[mid] - starts[lo]) // (starts[hi] - starts[lo])
            todo.append((mid, hi, t - left))  # popped after the left half: sources in order
            todo.append((lo, mid, left))
        return out

    def _batches(self, plan, rank, numbers, shuffle, seed, epoch, augment, illegal_ev,
                 families):
        orders: dict = {}
        present = np.flatnonzero(self.counts).tolist()
        for group in plan.chunks(rank, numbers):
            # Several batches at once, as ranges of consecutive positions: the sources of a
            # range's positions are found in one pass, and in a range each source takes the
            # next positions of its own sequence (`shares`), whose rows are looked up at once.
            spans = plan.chunk_spans(rank, group)
            found = [self._sources(a, z) for a, z in spans]
            source = found[0] if len(found) == 1 else np.concatenate(found)
            shares = [list(zip(self._below(a), self._below(z))) for a, z in spans]
            if len(present) == 1:
                rows = self._stream_rows(present[0], [s[present[0]] for s in shares], epoch,
                                         shuffle, seed, orders)
            else:
                rows = np.empty(source.size, dtype=np.int64)
                for i in present:
                    # Each source's rows in its order, into its places among the positions.
                    mine = source == i
                    theirs = self._stream_rows(i, [s[i] for s in shares], epoch, shuffle, seed,
                                               orders)
                    if np.count_nonzero(mine) != theirs.size:
                        # np.place would repeat or drop rows without a word.
                        raise AssertionError(f"source {i}: {theirs.size} rows for "
                                             f"{np.count_nonzero(mine)} places")
                    np.place(rows, mine, theirs)
            at = 0
            for _, count in group:
                yield self._batch(rows[at:at + count], source[at:at + count], augment,
                                  illegal_ev, families, seed, epoch)
                at += count

    def _batch(self, rows, source, augment, illegal_ev, families, seed, epoch) -> dict:
        """The decoded batch of these rows of these sources."""
        raw, parts = self._gather(source, rows)
        for p, at, _ in parts:
            table = self._valuation_maps[p]
            if table is not None:
                raw[at, _VALUATION] = table[raw[at, _VALUATION]]
        batch = decode_rows(raw, illegal_ev)
        batch["row"] = rows
        batch["source"] = source
        self._add_companions(batch, families, parts)
        if augment:
            # Keyed by source too, so equal row numbers of two packs are not tied.
            symmetry = symmetries_for(rows ^ (batch["source"] << 40), seed, epoch)
            apply_symmetries(batch, symmetry)
            batch["symmetry"] = symmetry
        return batch

    def _stream_rows(self, i: int, shares: list, epoch: int, shuffle: bool, seed: int,
                     orders: dict) -> np.ndarray:
        """The rows of source i at its epoch positions [first, end) of each share, in turn:
        positions epoch × count_i + first … of its endless stream, cut where its own epochs
        (cycles) end, each cycle's positions through that cycle's order
        (`Pack.batches(seed=seed, epoch=cycle)`'s; pack order without shuffle)."""
        n = self._ranges[i].total
        base = epoch * int(self.counts[i])
        runs: list = []  # (cycle, [(start, stop) of positions in that cycle's order])
        for first, end in shares:
            at, stop = base + first, base + end
            while at < stop:
                cycle, local = divmod(at, n)
                take = min(stop - at, n - local)
                if runs and runs[-1][0] == cycle:
                    runs[-1][1].append((local, local + take))
                else:
                    runs.append((cycle, [(local, local + take)]))
                at += take
        items = []
        for cycle, ranges in runs:
            local = np.concatenate([np.arange(a, z, dtype=np.int64) for a, z in ranges])
            if shuffle:
                order = orders.get((i, cycle))
                if order is None:
                    order = orders[(i, cycle)] = Permutation(n, seed, cycle)
                local = order(local)
            items.append(local)
        if not items:
            return np.empty(0, dtype=np.int64)
        return self._ranges[i].rows_at(items[0] if len(items) == 1 else np.concatenate(items))

    def _gather(self, source: np.ndarray, rows: np.ndarray):
        """The batch's raw rows, read pack by pack, and per pack present (pack index,
        positions in the batch, shard groups) for the companions."""
        if len(self._packs) == 1:
            groups = self._data[0].groups(rows)
            return self._data[0].gather(rows, groups), [(0, slice(None), groups)]
        pack_of = self._pack_of[source]
        found = [(p, np.flatnonzero(pack_of == p)) for p in range(len(self._packs))]
        found = [(p, at) for p, at in found if at.size]
        if len(found) == 1:
            p = found[0][0]
            groups = self._data[p].groups(rows)
            return self._data[p].gather(rows, groups), [(p, slice(None), groups)]
        raw = np.empty((rows.size, ROW_BYTES), dtype=np.uint8)
        parts = []
        for p, at in found:
            local = rows[at]
            groups = self._data[p].groups(local)
            raw[at] = self._data[p].gather(local, groups)
            parts.append((p, at, groups))
        return raw, parts

    def _add_companions(self, batch: dict, families: list, parts: list) -> None:
        """Each requested companion's rows of the batch's rows, pack by pack (`parts`: the
        batch's (pack index, positions, shard groups) per pack present)."""
        read = []
        for p, at, groups in parts:
            rows: dict = {}
            add_rows(rows, families[p], groups)
            read.append((at, rows))
        for key, _ in families[0]:
            found = [(at, rows[key]) for at, rows in read]
            first = found[0][1]
            if len(found) == 1:
                batch[key] = first
                continue
            out = np.empty((batch["row"].size,) + first.shape[1:], dtype=first.dtype)
            for at, values in found:
                if values.dtype != out.dtype or values.shape[1:] != out.shape[1:]:
                    raise ValueError(f"companion {key!r} differs between the mixture's "
                                     f"sources: {values.dtype}{values.shape[1:]} against "
                                     f"{out.dtype}{out.shape[1:]}")
                out[at] = values
            batch[key] = out


def _as_source(source) -> tuple[Pack, Selection | None]:
    if isinstance(source, Selection):
        return source.pack, source
    if isinstance(source, Pack):
        return source, None
    return Pack(source), None


def _refuse(select, window) -> None:
    if select is not None:
        raise ValueError("a Mixture is selected through its sources: mix selections "
                         "(pack.select(...)) instead of passing select=")
    if window is not None:
        raise ValueError("a Mixture yields rows, not windows")


def _apportion(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts in proportion to `weights` that add up to `total` (largest
    remainders; ties to the earlier source)."""
    exact = weights * total
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:short]] += 1
    return counts
