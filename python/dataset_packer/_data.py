"""A pack's data as the package's modules read it: the one way in, besides `Pack` itself.

`PackData` is what a `Pack` opened, as data: its steps shards (memory-mapped) and their row
offsets, its run table (ids and steps, and through `run_index` each run's first row), its
history and the version read. It answers what every reader asks: which shard holds a global
row, how to read rows shard by shard, a span of consecutive rows, a run's span, and the rows
or windows of a selection. `Selection` (some runs of a pack) lives here too, with `resolve`
(what a `select=` argument means) and `rebase` (the same selection on another version).

`Pack` delegates to a `PackData`; `_companions`, `_mixture`, `_versions`, `_loader` and the
command line reach it through `of(pack)` and the functions here, never through `Pack`'s
private members (python/tests/test_internal_interface.py checks that no module does).

Rows are read by global index: the shard is found with `np.searchsorted` over the shard
offsets (or a division, when the shards are of one size), indices are grouped by shard (one
stable radix sort of small shard numbers), and each shard's rows are gathered with one
`np.take` on its `(rows, 48)` byte view. A span of consecutive rows inside one shard is a
view of the memory map, without a copy. Companion arrays are read with the same grouping
(`groups`, computed once per batch and handed to `gather_with`), so companion row i is always
steps row i.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from ._codec import recompute_ev_legal
from ._errors import EmptySelectionError, NotAPackError, PackError, RunIndexError
from ._format import METADATA_NAME, ROW_BYTES, Shard, map_shard, widen_legacy
from ._maps import READ_AHEAD, read_at_random, will_need
from ._ranges import RowRanges, RowSet, WindowStarts
from ._select import has_table


def of(pack) -> "PackData":
    """The data of a `Pack`: how the package's other modules read it."""
    return pack._data


class PackData:
    """The shards, offsets and runs of one pack at one version (see the module docstring).

    `db` is the pack's `Pack.db` (re-opened in a forked worker); `run_limit` the number of
    runs the version holds (-1: all of them); `legacy_legal` how a legacy row's `ev_legal`
    is read ("recompute" or "stored")."""

    def __init__(self, path: Path, db, shards: list[Shard], *, legacy_legal: str,
                 shuffled: bool, history, version: int, run_limit: int = -1,
                 remote: "RemoteShards | None" = None, source=None, file_names=None):
        self.path = path
        #: name → where a local pack's file is read from (the file as the pack was opened).
        self._source = source or (lambda name: path / name)
        #: The names of a local pack's files as it was opened.
        self.file_names = file_names or (lambda: {p.name for p in path.iterdir()})
        self.db = db
        self.legacy_legal = legacy_legal
        self.shuffled = shuffled
        self.history = history
        self.version = version
        #: Whether this is a past version of the pack (its files cut to the version's rows).
        self.past = version != history.latest
        self.run_limit = run_limit
        self.shards = shards
        # Local: every shard mapped now, a plain list on the hot path. Remote: mapped on
        # first access, through the cache (`RemoteShards`), which behaves as that list.
        self._remote = remote
        #: Whether the maps are read at random (`_maps.read_at_random`).
        self.random = read_at_random(sum(s.data_offset + s.rows * s.row_bytes for s in shards))
        self._maps = ([map_shard(s, self.random) for s in shards] if remote is None else
                      remote)
        counts = np.array([s.rows for s in shards], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._boundaries = self._offsets[1:-1]
        # Shards of one size (all but the last, which may be shorter): shard = row // size.
        sizes = set(counts[:-1].tolist())
        self._uniform_rows = sizes.pop() if len(sizes) == 1 and counts[0] > 0 else None
        self.rows = int(self._offsets[-1])
        self._run_table = None
        self._run_rows = None

    def __len__(self) -> int:
        return self.rows

    def close(self) -> None:
        if self._remote is not None:
            self._remote.close()
        self._maps = []

    # ------------------------------------------------------------------ remote packs
    # What a loader needs to read a pack in object storage within the cache's limit: these
    # are no-ops (or plain answers) for a local pack.

    @property
    def is_remote(self) -> bool:
        """Whether the shards come from object storage through the cache."""
        return self._remote is not None

    @property
    def cache_limit(self) -> int | None:
        """The cache's limit in bytes (None for a local pack)."""
        return None if self._remote is None else self._remote.limit

    def shard_bytes(self, shard: int) -> int:
        """The bytes shard `shard` takes in the cache (its whole file)."""
        if self._remote is not None:
            return self._remote.file_bytes(shard)
        s = self.shards[shard]
        return s.data_offset + s.rows * s.row_bytes

    def prefetch(self, shards) -> None:
        """Starts bringing these shards in, in the background, and returns at once: into
        the cache for a remote pack (a failed prefetch is raised when the shard is read),
        into the page cache for a local one (`_maps.ReadAheadThread`)."""
        if self._remote is not None:
            self._remote.prefetch(shards)
        else:
            READ_AHEAD.request([self._maps[int(i)] for i in shards])

    def remote_family(self, family: str) -> list[str]:
        """The file names of a family ("steps" or a companion) in a remote pack's latest
        version."""
        return list(self._remote.remote.families.get(family, []))

    def local_files(self, names: list[str]) -> list[Path]:
        """Files of the pack (a companion's) on this machine: the pack's own; for a remote
        pack, each the cache's copy pinned until `close`, or where metadata.db records its
        blocks, a sparse file whose blocks are fetched as reads need them (`lazy_file`; its
        npy header is there already). A remote pack's are opened several at once."""
        if self._remote is None:
            return [self._source(name) for name in names]
        return self._remote.open_files(names)

    def lazy_file(self, local: Path):
        """The block reader of a `local_files` file read block by block (its `ensure(first,
        last)` fetches the blocks of those byte ranges before they are read), or None."""
        return None if self._remote is None else self._remote.lazy_file(local)

    def prefetch_files(self, lazies) -> None:
        """Starts fetching these `lazy_file`s whole in the background."""
        if self._remote is not None:
            self._remote.prefetch_files(lazies)

    def release(self, shards) -> None:
        """Drops these shards' maps and pins, so that the cache may evict them; a shard read
        again is fetched (or found in the cache) and mapped again. A no-op locally: the
        kernel's page cache decides what stays."""
        if self._remote is not None:
            self._remote.release(shards)

    @property
    def legacy(self) -> bool:
        """Whether the shards use the legacy packed 46-byte layout (rows come back as 48)."""
        return any(s.legacy for s in self.shards)

    def shard_rows(self, shard: int) -> int:
        """The rows of shard `shard` (in this version)."""
        return int(self._offsets[shard + 1] - self._offsets[shard])

    # ------------------------------------------------------------------ checks on opening

    def count_runs(self) -> int:
        """The runs of this version, checked against the shards' rows (runs.steps)."""
        if not has_table(self.db(), "runs"):
            raise NotAPackError(f"{self.path / METADATA_NAME} has no runs table: not a pack")
        runs, steps = self.db().execute(
            "SELECT COUNT(*), COALESCE(SUM(steps), 0) FROM (SELECT steps FROM runs ORDER BY id "
            "LIMIT ?)", (self.run_limit,)).fetchone()
        if steps != self.rows:
            at = f" (version {self.version}'s {runs} runs)" if self.past else ""
            raise PackError(f"{self.path}: metadata.db counts {steps} rows in runs.steps{at}, "
                            f"the shards hold {self.rows}")
        return int(runs)

    def check_recorded_shards(self) -> None:
        """The shards on disk against those metadata.db records (table `shards`)."""
        if not has_table(self.db(), "shards"):
            return
        recorded = self.db().execute("SELECT file_name, rows FROM shards ORDER BY shard").fetchall()
        found = [(s.path.name, s.rows) for s in self.shards]
        if recorded != found:
            raise PackError(f"{self.path}: the shards on disk {found[:4]}… do not match those "
                            f"metadata.db records {recorded[:4]}…")

    # ------------------------------------------------------------------ runs

    def runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, steps) of every run, ascending id (loaded once)."""
        if self._run_table is None:
            table = np.array(self.db().execute("SELECT id, steps FROM runs ORDER BY id LIMIT ?",
                                               (self.run_limit,)).fetchall(),
                             dtype=np.int64).reshape(-1, 2)
            self._run_table = (table[:, 0].copy(), table[:, 1].copy())
        return self._run_table

    def last_run_id(self) -> int:
        """The highest run id this version holds (-1 for none): its runs are the smallest."""
        ids = self.runs()[0]
        return int(ids[-1]) if ids.size else -1

    def require_run_index(self, feature: str) -> None:
        if self.shuffled:
            raise RunIndexError(
                f"{self.path} is a shuffled pack: a run's rows are spread over it, so "
                f"{feature} cannot find them; use the unshuffled pack it was made from")
        if not has_table(self.db(), "run_index"):
            raise RunIndexError(
                f"{self.path} has no run_index table (a legacy pack from before run indexes), "
                f"which {feature} needs; rewrite it with the current tool, e.g. "
                f"`dataset-packer export {self.path} --format pack --output NEW`")

    def first_rows(self, feature: str) -> np.ndarray:
        """Each run's first global row, aligned with `runs()` (needs run_index)."""
        self.require_run_index(feature)
        if self._run_rows is None:
            found = np.array(self.db().execute(
                "SELECT runs.id, COALESCE(run_index.global_row, -1) FROM runs LEFT JOIN "
                "run_index ON run_index.run_id = runs.id ORDER BY runs.id LIMIT ?",
                (self.run_limit,)).fetchall(),
                dtype=np.int64).reshape(-1, 2)
            missing = found[found[:, 1] < 0, 0]
            if missing.size:
                raise RunIndexError(f"{self.path}: run_index has no entry for run {missing[0]}")
            self._run_rows = found[:, 1].copy()
        return self._run_rows

    def run_span(self, run_id: int) -> tuple[int, int]:
        """(first global row, steps) of a run, through run_index; KeyError for a run this
        version does not hold."""
        self.require_run_index("run()")
        row = self.db().execute(
            "SELECT runs.steps, run_index.global_row FROM runs LEFT JOIN run_index "
            "ON run_index.run_id = runs.id WHERE runs.id = ?", (int(run_id),)).fetchone()
        if row is None or (self.past and int(run_id) > self.last_run_id()):
            at = f" version {self.version}" if self.past else ""
            raise KeyError(f"no run {run_id} in {self.path}{at} ({self.runs()[0].size} runs)")
        steps, first = row
        if first is None:
            raise RunIndexError(f"{self.path}: run_index has no entry for run {run_id}")
        return int(first), int(steps)

    def runs_are_ranges(self) -> bool:
        """Whether each run's rows are one contiguous range that run_index locates."""
        return not self.shuffled and has_table(self.db(), "run_index")

    # ------------------------------------------------------------------ selections

    def row_ranges(self, selection: "Selection | None", feature: str) -> "RowRanges | RowSet":
        """The rows of a selection (None: every row), as ranges or, where runs are not
        ranges, as the set found by run_id."""
        if selection is None:
            ranges = RowRanges.everything(self.rows)
        elif not self.runs_are_ranges():
            ranges = selection._row_set()
        else:
            ids, steps = self.runs()
            first = self.first_rows(feature)
            slot = np.searchsorted(ids, selection.run_ids)
            ranges = RowRanges(first[slot], steps[slot])
        if ranges.total == 0:
            raise EmptySelectionError(f"{feature}: the selection holds no rows")
        return ranges

    def windows(self, selection: "Selection | None", length: int, stride: int,
                feature: str) -> WindowStarts:
        """The windows of `length` rows, one every `stride` rows of each run of a
        selection (None: every run)."""
        ids, steps = self.runs()
        first = self.first_rows(feature)
        if selection is not None:
            slot = np.searchsorted(ids, selection.run_ids)
            first, steps = first[slot], steps[slot]
        windows = WindowStarts(first, steps, length, stride)
        if windows.total == 0:
            raise EmptySelectionError(f"{feature}: no run of the selection has {length} rows")
        return windows

    # ------------------------------------------------------------------ reading rows

    def indices(self, key) -> np.ndarray:
        """Global row indices (int64, in range) for an int array-like; negatives count from
        the end."""
        idx = np.asarray(key)
        if idx.dtype == np.bool_:
            raise TypeError("rows() takes row indices, not a boolean mask (use np.flatnonzero)")
        if idx.size == 0:
            return idx.astype(np.int64)
        if not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"row indices must be integers, not {idx.dtype}")
        idx = idx.astype(np.int64)
        idx = np.where(idx < 0, idx + self.rows, idx)
        if idx.min() < 0 or idx.max() >= self.rows:
            bad = idx[(idx < 0) | (idx >= self.rows)][0]
            raise IndexError(f"row {bad} is out of range for a pack of {self.rows} rows")
        return idx

    def pieces(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(shard, first local row, end local row) of the shards rows start..stop-1 lie
        in, in order."""
        s = int(np.searchsorted(self._boundaries, start, side="right"))
        while start < stop:
            end = min(stop, int(self._offsets[s + 1]))
            base = int(self._offsets[s])
            yield s, start - base, end - base
            start = end
            s += 1

    def _shard_of(self, rows: np.ndarray) -> np.ndarray:
        """The shard of each global row."""
        if self._uniform_rows is not None:
            shard = rows // self._uniform_rows
            np.minimum(shard, len(self._maps) - 1, out=shard)
            return shard
        return np.searchsorted(self._boundaries, rows, side="right")

    def groups(self, rows: np.ndarray):
        """How to read these global rows (int64, in range) shard by shard: a list of
        (shard, local rows, start, end) in grouped order and the permutation back to the
        asked order (None when no reordering is needed). Computed once per batch and used
        for the steps rows and every companion alike."""
        if rows.size == 0:
            return [], None
        if len(self._maps) == 1:
            return [(0, rows, 0, rows.size)], None
        shard = self._shard_of(rows)
        if shard.min() == shard.max():
            s = int(shard[0])
            return [(s, rows - self._offsets[s], 0, rows.size)], None
        small = shard.astype(np.uint16 if len(self._maps) <= 0xFFFF else np.uint32)
        order = np.argsort(small, kind="stable")
        ordered_rows = rows[order]
        ends = np.cumsum(np.bincount(shard, minlength=len(self._maps)))
        parts, start = [], 0
        for s in range(len(self._maps)):
            end = int(ends[s])
            if end > start:
                parts.append((s, ordered_rows[start:end] - self._offsets[s], start, end))
            start = end
        # Back to the asked order: a gather by the inverse permutation (cheaper than a
        # scatter of whole rows).
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size, dtype=order.dtype)
        return parts, inverse

    @staticmethod
    def gather_with(groups, take, row_shape: tuple, dtype) -> np.ndarray:
        """Rows read by `take(shard, local, out=None)` as `groups` grouped them."""
        parts, inverse = groups
        if not parts:
            return np.empty((0,) + tuple(row_shape), dtype=dtype)
        if inverse is None:
            s, local, _, _ = parts[0]
            return take(s, local)
        grouped = np.empty((inverse.size,) + tuple(row_shape), dtype=dtype)
        for s, local, start, end in parts:
            take(s, local, out=grouped[start:end])
        return np.take(grouped, inverse, axis=0)

    def gather(self, rows: np.ndarray, groups=None) -> np.ndarray:
        """(n, 48) uint8 copies of the rows at these global indices (int64, in range)."""
        if groups is None:
            groups = self.groups(rows)
        return self.gather_with(groups, self._take, (ROW_BYTES,), np.uint8)

    def _take(self, shard: int, local: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        source = self._maps[shard] if self._remote is None else \
            self._remote.rows_at(shard, local)
        if self.shards[shard].legacy:
            rows = self._widen(np.take(source, local, axis=0, mode="clip"))
            if out is None:
                return rows
            out[...] = rows
            return out
        return np.take(source, local, axis=0, out=out, mode="clip")

    def _widen(self, raw: np.ndarray, legal: bool = True) -> np.ndarray:
        """Legacy 46-byte rows as 48-byte rows, their `ev_legal` recomputed from the board
        (unless `legacy_legal="stored"`, or `legal=False` for a reader of other columns)."""
        rows = widen_legacy(raw)
        if legal and self.legacy_legal == "recompute":
            recompute_ev_legal(rows)
        return rows

    def read_span(self, start: int, stop: int, legal: bool = True) -> np.ndarray:
        """(n, 48) uint8 rows start..stop-1: a view of the memory map when they lie in one
        48-byte shard, else a copy. (`legal=False`: a legacy row's `ev_legal` may be left as
        stored, for a caller that reads other columns.)"""
        pieces = []
        for s, a, z in self.pieces(start, stop):
            mapped = self._maps[s] if self._remote is None else \
                self._remote.rows_span(s, a, z)
            raw = mapped[a:z]
            # Rows read in bulk: one sequential read, not a fault per page (`_maps`).
            will_need(raw)
            pieces.append(self._widen(raw, legal) if self.shards[s].legacy else raw)
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return np.zeros((0, ROW_BYTES), dtype=np.uint8)
        return np.concatenate(pieces)

    def read_spans(self, spans: list[tuple[int, int]]) -> np.ndarray:
        if len(spans) == 1:
            return self.read_span(*spans[0])
        return np.concatenate([self.read_span(a, b) for a, b in spans])

    def read_run_ids(self, start: int, stop: int) -> np.ndarray:
        """The run_id column of global rows start..stop-1."""
        raw = self.read_span(start, stop, legal=False)
        return np.ascontiguousarray(raw[:, :4]).view("<u4").reshape(-1)


class Selection:
    """Some runs of a pack (ascending ids), as `Pack.select` returns them.

    In a shuffled pack (or one without a run index) a selection's rows are found through
    each row's `run_id`: one pass over the pack, the first time a batch method needs them,
    kept as two bits per row of the pack."""

    def __init__(self, pack, run_ids: np.ndarray, where: str | None = None,
                 params=None):
        self.pack = pack
        self.run_ids = np.asarray(run_ids, dtype=np.int64)
        self.where = where
        self.params = params
        ids, steps = of(pack).runs()
        self.num_rows = int(steps[np.searchsorted(ids, self.run_ids)].sum())
        self._rows = None
        # How to make it again on another version of the pack (`rebase`): set by `selected`.
        self._query = None

    def _row_set(self) -> RowSet:
        """The selection's rows found by run_id (computed once)."""
        if self._rows is None:
            data = of(self.pack)
            found = RowSet(len(data), self.run_ids, data.read_run_ids)
            if found.total != self.num_rows:
                raise PackError(
                    f"{self.pack.path}: the selected runs hold {found.total} rows in the "
                    f"shards but {self.num_rows} by metadata.db's runs.steps (run "
                    f"`dataset-packer validate {self.pack.path}`)")
            self._rows = found
        return self._rows

    @property
    def num_runs(self) -> int:
        return int(self.run_ids.size)

    def __len__(self) -> int:
        return self.num_rows

    def __repr__(self) -> str:
        what = f" where {self.where!r}" if self.where is not None else ""
        return f"Selection({self.num_runs} runs, {self.num_rows} rows{what})"

    def batches(self, batch_size: int, **options) -> Iterator[dict]:
        return self.pack.batches(batch_size, select=self, **options)

    def windows(self, length: int, batch_size: int, **options) -> Iterator[dict]:
        return self.pack.windows(length, batch_size, select=self, **options)

    def sample(self, n: int, rng=None, **options) -> dict:
        return self.pack.sample(n, rng, select=self, **options)

    def split(self, fraction: float, seed: int = 0) -> tuple["Selection", "Selection"]:
        """(train, validation) of this selection's runs: `Pack.split` over them."""
        return self.pack.split(fraction, seed, select=self)


def selected(pack, run_ids: np.ndarray, where, runs, params) -> Selection:
    """The selection `pack.select(where, runs=runs, params=params)` found, which `rebase`
    makes again on another version of the pack."""
    found = Selection(pack, run_ids, where, params)
    found._query = (where, runs, params)
    return found


def resolve(pack, select) -> Selection | None:
    """What a `select=` argument of a batch method means: a Selection (or None) as it is,
    SQL or run ids through `pack.select`."""
    if select is None or isinstance(select, Selection):
        return select
    if isinstance(select, str):
        return pack.select(select)
    return pack.select(runs=select)


def rebase(selection: Selection | None, view) -> Selection | None:
    """A selection of a pack as the same selection of one of its versions. One made by
    `select` is made again there (its SQL then sees the version's runs, as it did when the
    version was the pack); any other (a split) keeps its runs that the version holds, which
    is what it selected then, since a run's side never changes and in-place changes only add
    runs, with higher ids."""
    if selection is None or selection.pack is view:
        return selection
    if selection._query is not None:
        where, runs, params = selection._query
        if runs is not None:
            runs = runs[runs <= of(view).last_run_id()]
        return view.select(where, runs=runs, params=params)
    ids = selection.run_ids
    kept = ids[np.isin(ids, of(view).runs()[0])]
    return Selection(view, kept, selection.where, selection.params)
