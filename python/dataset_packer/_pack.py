"""`Pack`: a read-only view of one pack folder, and `Selection`: some of its runs.

Opening a pack checks every shard header and memory-maps the shards once; `metadata.db` is
opened read-only (`file:…?mode=ro`). Nothing else is loaded until used: the run table (ids,
row counts, first rows) is read on the first call that needs it, so memory stays
proportional to shards and runs, never to rows.

Rows are read by global index: the shard is found with `np.searchsorted` over the shard
offsets, indices are grouped by shard (one stable radix sort of small shard numbers), and
each shard's rows are gathered with one `np.take` on its `(rows, 48)` byte view. A batch of
consecutive rows inside one shard is decoded straight from the memory map, without a copy.
Companion arrays (`_companions.py`) are read with the same grouping, computed once per batch,
so companion row i is always steps row i.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Iterator

import numpy as np

from ._codec import (_COLUMNS, apply_symmetries, as_records, decode_rows, recompute_ev_legal,
                     zero_padding)
from ._companions import Companion, open_family, recorded, scan
from ._errors import EmptySelectionError, NotAPackError, PackError, RunIndexError
from ._format import (METADATA_NAME, ROW_BYTES, STEP_ROW_DTYPE, VALUATION_NAME,
                      find_shard_paths, map_shard, read_shard_header, read_valuation_names,
                      widen_legacy)
from ._order import (EpochPlan, Part, Permutation, start_position, symmetries_for,
                     validation_side)
from ._ranges import RowRanges, RowSet, WindowStarts
from ._select import has_table, run_ids
from . import _versions

NAN = float("nan")
#: What `Pack(legacy_legal=…)` takes: how a legacy pack's `ev_legal` is read.
LEGACY_LEGAL = ("recompute", "stored")
#: The keys a batch already has: a companion added to it needs another key.
BATCH_KEYS = frozenset(_COLUMNS) | {"row", "symmetry"}


def _open_readonly(path: Path) -> sqlite3.Connection:
    # A database left in WAL mode (the reference packer's) would get -shm and -wal files
    # created beside it: read it as immutable unless a -wal file holds part of it.
    mode = "immutable=1" if _wal_mode(path) and not Path(f"{path}-wal").exists() else "mode=ro"
    uri = f"{path.resolve().as_uri()}?{mode}"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)


def _wal_mode(path: Path) -> bool:
    """Whether the SQLite header says WAL mode (file format versions 2 at bytes 18, 19)."""
    with open(path, "rb") as f:
        header = f.read(20)
    return header[18:20] == b"\x02\x02"


class Pack:
    """A pack folder, read-only; `version=N` (or a tag) reads that version of its history
    (docs/versions.md), by default the latest.

    >>> pack = Pack("packs/d6")
    >>> len(pack), pack.num_runs, pack.valuation_names, pack.shards
    >>> Pack("packs/d6", version=3).version, pack.pack_id

    A legacy pack (46-byte rows, the reference packer's) has wrong `ev_legal` bits on its
    tuple rows: every read (`batches`, `windows`, `gather`, `sample`, `rows`, `run`, and so
    the torch adapter) recomputes them from the board, as the CLI's conversion does, unless
    `legacy_legal="stored"` asks for the bits as stored.
    """

    def __init__(self, path, version=None, *, legacy_legal: str = "recompute"):
        if legacy_legal not in LEGACY_LEGAL:
            raise ValueError(f"legacy_legal must be one of {LEGACY_LEGAL}, not {legacy_legal!r}")
        self.legacy_legal = legacy_legal
        self.path = Path(path)
        if not self.path.is_dir():
            raise NotAPackError(f"{self.path} is not a pack: no such folder")
        if not (self.path / METADATA_NAME).is_file():
            raise NotAPackError(f"{self.path} is not a pack: it has no {METADATA_NAME}")
        paths = find_shard_paths(self.path)
        self.valuation_names = read_valuation_names(self.path / VALUATION_NAME)
        self._conn = None
        self._conn_pid = None
        self._restriction = None
        self.session = self._read_session()
        self._history = _versions.History(self.db, self.path)
        self._version = self._history.resolve(version)
        # A past version: its steps files cut to its rows, and its runs (the smallest ids).
        self._past = self._version != self._history.latest
        shards = (_versions.version_shards(self, self._history, self._version) if self._past
                  else [read_shard_header(p) for p in paths])
        self._run_limit = self._history.version_runs(self._version) if self._past else -1
        if self._past:
            # Every SQL read (selections too) sees the version's runs only.
            self._restriction = _versions.restriction(self.db(), self._run_limit)
            self.db().executescript(self._restriction)
        self._set_shards(shards)
        self.num_runs = self._check_runs()
        if self._past:
            # The session's totals as the version had them (as the command line shows them).
            totals = {"total_rows": self._rows, "total_runs": self.num_runs,
                      "shard_count": len(shards)}
            self.session.update({k: str(v) for k, v in totals.items() if k in self.session})
        if not self._past:
            self._check_recorded_shards()
        self._check_version()
        self._run_table = None
        self._run_rows = None
        self._companions: dict[str, Companion] = {}

    def _set_shards(self, shards) -> None:
        self._shards = shards
        self._maps = [map_shard(s) for s in self._shards]
        counts = np.array([s.rows for s in self._shards], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._boundaries = self._offsets[1:-1]
        # Shards of one size (all but the last, which may be shorter): shard = row // size.
        sizes = set(counts[:-1].tolist())
        self._uniform_rows = sizes.pop() if len(sizes) == 1 and counts[0] > 0 else None
        self._rows = int(self._offsets[-1])

    # ------------------------------------------------------------------ basics

    def __len__(self) -> int:
        return self._rows

    def __repr__(self) -> str:
        at = f" version {self._version} of {self._history.latest}" if self._past else ""
        return (f"Pack({str(self.path)!r}{at}: {self._rows} rows, {self.num_runs} runs, "
                f"{len(self._shards)} shard{'s' if len(self._shards) != 1 else ''})")

    @property
    def shards(self) -> list[Path]:
        """The shard files, in shard order."""
        return [s.path for s in self._shards]

    @property
    def legacy(self) -> bool:
        """Whether the shards use the legacy packed 46-byte layout (rows come back as 48)."""
        return any(s.legacy for s in self._shards)

    @property
    def shuffled(self) -> bool:
        return self.session.get("shuffled") == "true"

    # ------------------------------------------------------------------ identity

    @property
    def pack_id(self) -> str | None:
        """The pack's random id (32 hex digits), made when it was created and kept by
        in-place changes; None for a pack made before packs had one."""
        return self.session.get("pack_id")

    @property
    def version(self) -> int:
        """The version of the pack this reader reads (1 for a pack made before versions)."""
        return self._version

    def versions(self) -> list[dict]:
        """The pack's history, oldest first: per version a dict of `version`,
        `created_utc`, `operation` (pack, update, attach, detach, merge, shuffle, export,
        write), `rows`, `runs`, `command` (the command line, a list of strings), `files`
        (family, shard, file_name, rows, bytes, crc32c per file), `families` (companion
        families), `tags` and `sources` (pack_id, version, path of each pack it was made
        from). A pack made before versions is version 1, as it is now.

        >>> [(v["version"], v["operation"], v["rows"]) for v in pack.versions()]
        [(1, 'pack', 1220), (2, 'update', 2240)]
        """
        if not self._history.recorded:
            return _versions.unrecorded_listing(self)
        return self._history.listing()

    def at_version(self, version) -> "Pack":
        """This pack read at another version (a number or a tag): `Pack(path, version)`."""
        if version == self._version:
            return self
        return Pack(self.path, version, legacy_legal=self.legacy_legal)

    @property
    def identity(self) -> dict:
        """What a resume state records of the pack it was saved on: `pack_id`, `version` and
        `rows` (give it back as `saved_at=` of `batches` to check a resume point)."""
        return _versions.identity(self.pack_id, self.version, self._rows)

    def _saved_versions(self, saved) -> tuple:
        """The version to go on reading an epoch saved at `saved` (a state or an identity),
        as a 1-tuple (a Mixture's has one per source); see `_versions.saved_version`."""
        found = _versions.saved_identity(saved)
        return (self.version if found is None else _versions.saved_version(self, found),)

    def _at_versions(self, versions: tuple) -> "Pack":
        return self.at_version(versions[0])

    def _for_saved(self, saved) -> "Pack":
        """The reader of an epoch whose resume point was saved at `saved`: this pack, or
        the version of it the state was saved on (refused when it is not this pack's)."""
        return self._at_versions(self._saved_versions(saved))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._maps = []
        self._companions = {}

    def __enter__(self) -> "Pack":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self):
        # The version number, not "latest": a pack that grows before a worker opens it is
        # read there as it was here.
        return {"path": str(self.path), "version": self._version,
                "legacy_legal": self.legacy_legal}

    def __setstate__(self, state):
        self.__init__(state["path"], state.get("version"),
                      legacy_legal=state.get("legacy_legal", "recompute"))

    # ------------------------------------------------------------------ metadata.db

    def db(self) -> sqlite3.Connection:
        """The read-only connection to metadata.db (re-opened in a forked process)."""
        if self._conn is None or self._conn_pid != os.getpid():
            try:
                self._conn = _open_readonly(self.path / METADATA_NAME)
                self._conn.execute("SELECT 1 FROM sqlite_master").fetchall()
            except sqlite3.DatabaseError as e:
                raise NotAPackError(f"{self.path / METADATA_NAME}: not an SQLite database "
                                    f"({e})") from None
            self._conn_pid = os.getpid()
            if self._restriction is not None:
                self._conn.executescript(self._restriction)
        return self._conn

    def _read_session(self) -> dict:
        if not has_table(self.db(), "session"):
            return {}
        return dict(self.db().execute("SELECT meta_key, meta_value FROM session"))

    def _check_runs(self) -> int:
        if not has_table(self.db(), "runs"):
            raise NotAPackError(f"{self.path / METADATA_NAME} has no runs table: not a pack")
        runs, steps = self.db().execute(
            "SELECT COUNT(*), COALESCE(SUM(steps), 0) FROM (SELECT steps FROM runs ORDER BY id "
            "LIMIT ?)", (self._run_limit,)).fetchone()
        if steps != self._rows:
            at = f" (version {self._version}'s {runs} runs)" if self._past else ""
            raise PackError(f"{self.path}: metadata.db counts {steps} rows in runs.steps{at}, "
                            f"the shards hold {self._rows}")
        return int(runs)

    def _check_version(self) -> None:
        """The version read against what the history records of it: a mismatch means the
        pack was changed by a tool that does not record versions."""
        rows = self._history.version_rows(self._version)
        runs = self._history.version_runs(self._version)
        if rows is not None and (rows, runs) != (self._rows, self.num_runs):
            raise PackError(
                f"{self.path}: metadata.db records {rows} rows and {runs} runs for version "
                f"{self._version}, but the pack holds {self._rows} rows and {self.num_runs} "
                f"runs: it was changed without recording a version; run `dataset-packer "
                f"validate {self.path}`")

    def _check_recorded_shards(self) -> None:
        if not has_table(self.db(), "shards"):
            return
        recorded = self.db().execute("SELECT file_name, rows FROM shards ORDER BY shard").fetchall()
        found = [(s.path.name, s.rows) for s in self._shards]
        if recorded != found:
            raise PackError(f"{self.path}: the shards on disk {found[:4]}… do not match those "
                            f"metadata.db records {recorded[:4]}…")

    # ------------------------------------------------------------------ runs

    def _runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, steps) of every run, ascending id (loaded once)."""
        if self._run_table is None:
            table = np.array(self.db().execute("SELECT id, steps FROM runs ORDER BY id LIMIT ?",
                                               (self._run_limit,)).fetchall(),
                             dtype=np.int64).reshape(-1, 2)
            self._run_table = (table[:, 0].copy(), table[:, 1].copy())
        return self._run_table

    def _require_run_index(self, feature: str) -> None:
        if self.shuffled:
            raise RunIndexError(
                f"{self.path} is a shuffled pack: a run's rows are spread over it, so "
                f"{feature} cannot find them; use the unshuffled pack it was made from")
        if not has_table(self.db(), "run_index"):
            raise RunIndexError(
                f"{self.path} has no run_index table (a legacy pack from before run indexes), "
                f"which {feature} needs; rewrite it with the current tool, e.g. "
                f"`dataset-packer export {self.path} --format pack --output NEW`")

    def _first_rows(self, feature: str) -> np.ndarray:
        """Each run's first global row, aligned with `_runs()` (needs run_index)."""
        self._require_run_index(feature)
        if self._run_rows is None:
            found = np.array(self.db().execute(
                "SELECT runs.id, COALESCE(run_index.global_row, -1) FROM runs LEFT JOIN "
                "run_index ON run_index.run_id = runs.id ORDER BY runs.id LIMIT ?",
                (self._run_limit,)).fetchall(),
                dtype=np.int64).reshape(-1, 2)
            missing = found[found[:, 1] < 0, 0]
            if missing.size:
                raise RunIndexError(f"{self.path}: run_index has no entry for run {missing[0]}")
            self._run_rows = found[:, 1].copy()
        return self._run_rows

    def run(self, run_id: int, decode: bool = False, illegal_ev: float | None = NAN):
        """One run's rows (STEP_ROW_DTYPE, in step order) found through `run_index`, or with
        `decode=True` its decoded columns. Raises KeyError for an unknown run id."""
        first, steps = self._run_span(run_id)
        if decode:
            return decode_rows(self._read_span(first, first + steps), illegal_ev)
        return self.rows(slice(first, first + steps))

    def _last_run_id(self) -> int:
        """The highest run id this version holds (-1 for none): its runs are the smallest."""
        ids = self._runs()[0]
        return int(ids[-1]) if ids.size else -1

    def _run_span(self, run_id: int) -> tuple[int, int]:
        """(first global row, steps) of a run, through run_index."""
        self._require_run_index("run()")
        row = self.db().execute(
            "SELECT runs.steps, run_index.global_row FROM runs LEFT JOIN run_index "
            "ON run_index.run_id = runs.id WHERE runs.id = ?", (int(run_id),)).fetchone()
        if row is None or (self._past and int(run_id) > self._last_run_id()):
            at = f" version {self._version}" if self._past else ""
            raise KeyError(f"no run {run_id} in {self.path}{at} ({self.num_runs} runs)")
        steps, first = row
        if first is None:
            raise RunIndexError(f"{self.path}: run_index has no entry for run {run_id}")
        return int(first), int(steps)

    # ------------------------------------------------------------------ reading rows

    def _take(self, shard: int, local: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        source = self._maps[shard]
        if self._shards[shard].legacy:
            rows = self._widen(np.take(source, local, axis=0, mode="clip"))
            if out is None:
                return rows
            out[...] = rows
            return out
        return np.take(source, local, axis=0, out=out, mode="clip")

    def _shard_of(self, rows: np.ndarray) -> np.ndarray:
        """The shard of each global row."""
        if self._uniform_rows is not None:
            shard = rows // self._uniform_rows
            np.minimum(shard, len(self._maps) - 1, out=shard)
            return shard
        return np.searchsorted(self._boundaries, rows, side="right")

    def _groups(self, rows: np.ndarray):
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

    def _gather_with(self, groups, take, row_shape: tuple, dtype) -> np.ndarray:
        """Rows read by `take(shard, local, out=None)` as `_groups` grouped them."""
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

    def _gather(self, rows: np.ndarray, groups=None) -> np.ndarray:
        """(n, 48) uint8 copies of the rows at these global indices (int64, in range)."""
        if groups is None:
            groups = self._groups(rows)
        return self._gather_with(groups, self._take, (ROW_BYTES,), np.uint8)

    def _widen(self, raw: np.ndarray, legal: bool = True) -> np.ndarray:
        """Legacy 46-byte rows as 48-byte rows, their `ev_legal` recomputed from the board
        (unless `legacy_legal="stored"`, or `legal=False` for a reader of other columns)."""
        rows = widen_legacy(raw)
        if legal and self.legacy_legal == "recompute":
            recompute_ev_legal(rows)
        return rows

    def _read_span(self, start: int, stop: int, legal: bool = True) -> np.ndarray:
        """(n, 48) uint8 rows start..stop-1: a view of the memory map when they lie in one
        48-byte shard, else a copy. (`legal=False`: a legacy row's `ev_legal` may be left as
        stored, for a caller that reads other columns.)"""
        pieces = []
        s = int(np.searchsorted(self._boundaries, start, side="right"))
        while start < stop:
            end = min(stop, int(self._offsets[s + 1]))
            local = slice(start - int(self._offsets[s]), end - int(self._offsets[s]))
            raw = self._maps[s][local]
            pieces.append(self._widen(raw, legal) if self._shards[s].legacy else raw)
            start = end
            s += 1
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return np.zeros((0, ROW_BYTES), dtype=np.uint8)
        return np.concatenate(pieces)

    def _read_spans(self, spans: list[tuple[int, int]]) -> np.ndarray:
        if len(spans) == 1:
            return self._read_span(*spans[0])
        return np.concatenate([self._read_span(a, b) for a, b in spans])

    def _indices(self, key) -> np.ndarray:
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
        idx = np.where(idx < 0, idx + self._rows, idx)
        if idx.min() < 0 or idx.max() >= self._rows:
            bad = idx[(idx < 0) | (idx >= self._rows)][0]
            raise IndexError(f"row {bad} is out of range for a pack of {self._rows} rows")
        return idx

    def rows(self, key):
        """Rows as the exact aligned STEP_ROW_DTYPE (a copy, padding bytes zero).

        `key` is an int (one record), a slice, or an integer array of any shape (rows in
        that order and shape)."""
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return self.rows(np.array([key]))[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(self._rows)
            if step == 1:
                raw = np.array(self._read_span(start, max(start, stop)), copy=True)
                return as_records(zero_padding(raw))
            key = np.arange(start, stop, step)
        idx = self._indices(key)
        raw = zero_padding(self._gather(idx.reshape(-1)))
        return as_records(raw).reshape(idx.shape)

    def gather(self, indices, illegal_ev: float | None = NAN, *, companions=None) -> dict:
        """The rows at these global indices (1-d, in this order), decoded into a batch dict
        (with `row`, and the `companions`' rows): what `batches` yields, for indices of
        your own."""
        families = self._companion_keys(companions)
        rows = self._indices(indices).reshape(-1)
        groups = self._groups(rows)
        batch = decode_rows(self._gather(rows, groups), illegal_ev)
        batch["row"] = rows
        self._add_companions(batch, families, groups)
        return batch

    @staticmethod
    def decode(records: np.ndarray, illegal_ev: float | None = NAN) -> dict:
        """Decodes STEP_ROW_DTYPE records (e.g. from `rows`) into a batch dict."""
        records = np.ascontiguousarray(records, dtype=STEP_ROW_DTYPE).reshape(-1)
        return decode_rows(records.view(np.uint8).reshape(-1, ROW_BYTES), illegal_ev)

    # ------------------------------------------------------------------ companions

    @property
    def companions(self) -> list[str]:
        """Names of the pack's companion families (files `NAME-NNNNN.npy` / `NAME.npy`, and
        families metadata.db records), sorted. Listed by name only: a family is checked
        when `companion(name)` (or `companions=` of a batch method) opens it. A past version
        lists the families it had (`versions()`)."""
        if self._past:
            return self._history.families(self._version)
        return sorted(set(scan(self.path)) | set(recorded(self.db())))

    def companion(self, name: str) -> Companion:
        """The companion family `name`, checked against the shards (and metadata.db when it
        records it) and memory-mapped, once per Pack: rows by global index aligned with
        `rows()` (`companion(name).rows(key)` or `[key]`) and `companion(name).run(run_id)`.
        Raises CompanionError naming the file when it does not line up, KeyError when there
        is no such family."""
        found = self._companions.get(name)
        if found is None:
            opener = _versions.open_past_family if self._past else open_family
            found = self._companions[name] = opener(self, name)
        return found

    def _companion_keys(self, companions) -> list[tuple[str, Companion]]:
        """(batch key, family) for a batch method's `companions=`: names (or one name), or
        a dict batch key → name."""
        if companions is None:
            return []
        if isinstance(companions, str):
            companions = [companions]
        pairs = (list(companions.items()) if isinstance(companions, dict) else
                 [(name, name) for name in dict.fromkeys(companions)])
        out = []
        for key, name in pairs:
            if key in BATCH_KEYS:
                raise ValueError(f"companion {name!r} would replace the batch's own {key!r}; "
                                 f"give it another key: companions={{'{key}_': '{name}'}}")
            out.append((key, self.companion(name)))
        return out

    @staticmethod
    def _add_companions(batch: dict, families, groups=None, spans=None) -> None:
        for key, family in families:
            batch[key] = (family._read_spans(spans) if spans is not None else
                          family._gather_groups(groups))

    # ------------------------------------------------------------------ selection

    def select(self, where: str | None = None, *, runs=None, params=None,
               sql_timeout: float | None = None, sql_memory: int | None = None
               ) -> "Selection":
        """The runs that the SQL `where` selects and/or those listed in `runs`; both given:
        runs in both. Nothing matched: EmptySelectionError.

        `where` is either a WHERE expression over the columns of `runs` and `run_details`
        (`"depth = 7 AND max_score > 600000"`), or a query returning run ids, run exactly as
        sqlite3 runs it (`"SELECT id FROM runs WHERE max_score BETWEEN ? AND ?"`), as
        `dataset-packer export --where` takes them. A query must return one column of run ids
        of this pack; anything else raises SelectionError. `params` are bound as sqlite3
        binds them: a sequence for `?`, a mapping for `:name`, matching the SQL exactly.

        The SQL runs for at most `sql_timeout` seconds (default 300) and with at most
        `sql_memory` bytes of SQLite memory (default 1 GiB), as `--sql-timeout` and
        `--sql-memory` limit the commands; past either, SelectionError says which. Ctrl-C
        stops it with KeyboardInterrupt.

        >>> train = pack.select("SELECT id FROM runs WHERE max_score BETWEEN ? AND ?",
        ...                     params=[50_000, 500_000])
        """
        ids, _ = self._runs()
        chosen = ids
        if runs is not None:
            wanted = np.unique(np.asarray(list(runs) if not isinstance(runs, np.ndarray)
                                          else runs, dtype=np.int64))
            unknown = np.setdiff1d(wanted, ids)
            if unknown.size:
                raise KeyError(f"no run {', '.join(map(str, unknown[:10]))} in {self.path} "
                               f"({self.num_runs} runs)")
            chosen = wanted
        if where is not None:
            chosen = np.intersect1d(chosen, run_ids(self.db(), where, params,
                                                    sql_timeout=sql_timeout,
                                                    sql_memory=sql_memory))
        elif params is not None:
            raise ValueError("params= binds the parameters of `where`, and there is no `where`")
        if chosen.size == 0:
            what = f"select({where!r})" if where is not None else "select(runs=[])"
            note = self._no_depth_note(where) if where is not None else None
            raise EmptySelectionError(f"{what} matches no runs of {self.path}"
                                      + (f": {note}" if note else ""))
        found = Selection(self, chosen, where, params)
        # How to make it again on another version of the pack (`_versions.rebase`).
        found._query = (where, None if runs is None else wanted, params)
        return found

    def _no_depth_note(self, where: str) -> str | None:
        """Why SQL naming `depth` matched nothing, when no run records a depth (a pack
        converted from the reference packer's): what to say and how to set it."""
        if re.search(r"(?<![A-Za-z0-9_])depth(?![A-Za-z0-9_])", where, re.IGNORECASE) is None:
            return None
        db = self.db()
        if has_table(db, "run_details") and "depth" in {
                row[1] for row in db.execute("PRAGMA table_info(run_details)")}:
            if db.execute("SELECT 1 FROM run_details WHERE depth IS NOT NULL LIMIT 1"
                          ).fetchone() is not None:
                return None
        return ("the pack records no depth (run_details.depth is NULL for every run, as in a "
                "pack converted from the reference packer's): re-pack the raw logs, or set it, "
                f"e.g. `sqlite3 {self.path / METADATA_NAME} \"UPDATE run_details SET depth = "
                "6\"` for a pack of one depth (docs/migration.md, \"depth\")")

    def split(self, fraction: float, seed: int = 0, *, select=None
              ) -> tuple["Selection", "Selection"]:
        """Splits the runs (or those of `select`) by game into (train, validation), about
        `fraction` of them in validation.

        A run's side depends only on its content fingerprint (`run_details.fingerprint`),
        the seed and the fraction: `pack --update`, `merge`, `shuffle` and `export` never
        move a game from one side to the other, and a game is never on both sides, even
        when it was logged twice. Combine with `select` (a Selection, SQL or run ids) to
        split part of a pack.

        >>> train, val = pack.split(0.1, seed=0)
        >>> train, val = pack.split(0.1, select="depth = 7")
        """
        fraction = float(fraction)
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fraction must be between 0 and 1, not {fraction}")
        selection = self._selection(select)
        ids = self._runs()[0] if selection is None else selection.run_ids
        side = validation_side(self._fingerprints(ids), seed, fraction)
        parts = []
        for name, chosen in (("train", ids[~side]), ("validation", ids[side])):
            if chosen.size == 0:
                raise EmptySelectionError(
                    f"split({fraction}, seed={seed}) puts none of the {ids.size} runs on the "
                    f"{name} side of {self.path}")
            parts.append(Selection(self, chosen, f"split {name} ({fraction}, seed={seed})"))
        return parts[0], parts[1]

    def _fingerprints(self, ids: np.ndarray) -> list[str]:
        """The content fingerprints of these runs (in this order)."""
        if not has_table(self.db(), "run_details") or "fingerprint" not in {
                row[1] for row in self.db().execute("PRAGMA table_info(run_details)")}:
            raise PackError(
                f"{self.path} records no run fingerprints (run_details.fingerprint), which a "
                f"split by game needs; rewrite it with the current tool: `dataset-packer "
                f"export {self.path} --format pack --output NEW`")
        found = dict(self.db().execute("SELECT run_id, fingerprint FROM run_details"))
        missing = [int(i) for i in ids if found.get(int(i)) is None]
        if missing:
            raise PackError(f"{self.path}: run {missing[0]} has no fingerprint in run_details "
                            f"({len(missing)} runs lack one); a split by game needs them all")
        return [found[int(i)] for i in ids]

    def _selection(self, select) -> "Selection | None":
        if select is None or isinstance(select, Selection):
            return select
        if isinstance(select, str):
            return self.select(select)
        return self.select(runs=select)

    def _runs_are_ranges(self) -> bool:
        """Whether each run's rows are one contiguous range that run_index locates."""
        return not self.shuffled and has_table(self.db(), "run_index")

    def _row_ranges(self, select, feature: str) -> "RowRanges | RowSet":
        selection = self._selection(select)
        if selection is None:
            ranges = RowRanges.everything(self._rows)
        elif not self._runs_are_ranges():
            ranges = selection._row_set()
        else:
            ids, steps = self._runs()
            first = self._first_rows(feature)
            slot = np.searchsorted(ids, selection.run_ids)
            ranges = RowRanges(first[slot], steps[slot])
        if ranges.total == 0:
            raise EmptySelectionError(f"{feature}: the selection holds no rows")
        return ranges

    def _read_run_ids(self, start: int, stop: int) -> np.ndarray:
        """The run_id column of global rows start..stop-1."""
        raw = self._read_span(start, stop, legal=False)
        return np.ascontiguousarray(raw[:, :4]).view("<u4").reshape(-1)

    def _windows(self, select, length: int, stride: int, feature: str) -> WindowStarts:
        ids, steps = self._runs()
        first = self._first_rows(feature)
        selection = self._selection(select)
        if selection is not None:
            slot = np.searchsorted(ids, selection.run_ids)
            first, steps = first[slot], steps[slot]
        windows = WindowStarts(first, steps, length, stride)
        if windows.total == 0:
            raise EmptySelectionError(f"{feature}: no run of the selection has {length} rows")
        return windows

    # ------------------------------------------------------------------ batches

    def epoch_length(self, select=None, window: int | None = None,
                     stride: int | None = None) -> int:
        """Positions in an epoch (what `start_sample` counts): the selection's rows, or its
        windows with `window`."""
        if window is None:
            return self._row_ranges(select, "epoch_length()").total
        return self._windows(select, window, stride or window, "epoch_length()").total

    def num_batches(self, batch_size: int, *, select=None, world_size: int = 1,
                    drop_last: bool = False, window: int | None = None,
                    stride: int | None = None, start_sample: int = 0,
                    start_batch: int = 0) -> int:
        """How many batches each rank gets per epoch (`window`: of `windows`), from the
        resume point on."""
        items = self.epoch_length(select, window, stride)
        start = start_position(start_sample, start_batch, batch_size, world_size, items)
        return EpochPlan(items, batch_size, world_size, drop_last, start).batches_per_rank

    def batches(self, batch_size: int, *, shuffle: bool = True, seed: int = 0, epoch: int = 0,
                select=None, rank: int = 0, world_size: int = 1, worker: int = 0,
                num_workers: int = 1, drop_last: bool = False, start_sample: int = 0,
                start_batch: int = 0, augment: bool = False, illegal_ev: float | None = NAN,
                companions=None, saved_at=None) -> Iterator[dict]:
        """Decoded batches of one epoch: a pure function of (pack, selection, seed, epoch).

        Each epoch is one permutation of the selected rows (`shuffle=False`: pack order),
        whatever the world size, workers or batch size. Global step g takes positions
        [g·B·W, (g+1)·B·W) of it (B = batch_size, W = world_size), rank r the r-th B of them;
        (worker, num_workers) split a rank's batches round-robin between its data-loader
        workers. Every rank gets the same number of batches, as with torch's
        DistributedSampler: `drop_last=False` (the default) leaves nothing out, padding the
        ranks' last batches with rows from the start of the epoch's order (at most W−1
        repeats); `drop_last=True` drops the incomplete last step, so that every batch is
        full. `start_sample=N` resumes after the first N positions of the epoch, with any
        world size, batch size or number of workers, without reading what comes before;
        `start_batch=k` is its shorthand for an unchanged B and W (N = k·B·W).
        `augment=True` applies one of the 8 symmetries of the square
        per row, fixed by (seed, epoch, row). Illegal moves' EVs are `illegal_ev` (NaN;
        None keeps the stored values). `companions=["embeddings", …]` adds each companion
        family's rows of exactly the batch's rows as `batch["embeddings"]` (B, *shape); a
        dict {key: name} picks other keys. Augmentation leaves companion rows as stored.
        See README "Python" for the keys and dtypes; `exps` ranges 0..16 (16 is the 65536
        tile), so an embedding of it needs 17 tokens.

        `saved_at=` the `pack.identity` recorded with a resume point (or a state that holds
        it): when it was saved on an earlier version of this pack, the epoch is read over
        that version, exactly as it went then (none of the rows added since); a resume point
        of another pack, or of a version this pack's history does not hold (rewritten), is
        refused (VersionError), since the epoch's order would be another one."""
        if saved_at is not None:
            reader = self._for_saved(saved_at)
            return reader.batches(
                batch_size, shuffle=shuffle, seed=seed, epoch=epoch,
                select=_versions.rebase(self._selection(select), reader), rank=rank,
                world_size=world_size, worker=worker, num_workers=num_workers,
                drop_last=drop_last, start_sample=start_sample, start_batch=start_batch,
                augment=augment, illegal_ev=illegal_ev, companions=companions)
        families = self._companion_keys(companions)
        ranges = self._row_ranges(select, "batches()")
        plan, rank, numbers, perm = _epoch(
            ranges.total, batch_size, shuffle, seed, epoch, rank, world_size, worker, num_workers,
            drop_last, start_sample, start_batch)
        return self._row_batches(ranges, plan, rank, numbers, perm,
                                 (seed, epoch) if augment else None, illegal_ev, families)

    def _row_batches(self, ranges, plan, rank, numbers, perm, augment, illegal_ev, families):
        for rows, spans in _batch_rows(ranges, plan, rank, numbers, perm):
            if spans is not None:
                raw = self._read_spans(spans)
                groups = None
            else:
                groups = self._groups(rows)
                raw = self._gather(rows, groups)
            batch = decode_rows(raw, illegal_ev)
            batch["row"] = rows
            self._add_companions(batch, families, groups, spans)
            if augment is not None:
                symmetry = symmetries_for(rows, *augment)
                apply_symmetries(batch, symmetry)
                batch["symmetry"] = symmetry
            yield batch

    def windows(self, length: int, batch_size: int, *, stride: int | None = None,
                shuffle: bool = True, seed: int = 0, epoch: int = 0, select=None,
                rank: int = 0, world_size: int = 1, worker: int = 0, num_workers: int = 1,
                drop_last: bool = False, start_sample: int = 0, start_batch: int = 0,
                augment: bool = False, illegal_ev: float | None = NAN,
                companions=None, saved_at=None) -> Iterator[dict]:
        """Batches of windows of `length` consecutive steps of one run (never across runs):
        every key of `batches` shaped (B, length, …). Windows start every `stride` rows of a
        run (default `length`: disjoint windows; a run's last rows that do not fill one are
        left out). Order, partition, resume and augmentation (one symmetry per window) work
        as in `batches`, over windows instead of rows; `companions` too, shaped
        (B, length, *shape), and `saved_at`. Needs the run index."""
        if saved_at is not None:
            reader = self._for_saved(saved_at)
            return reader.windows(
                length, batch_size, stride=stride, shuffle=shuffle, seed=seed, epoch=epoch,
                select=_versions.rebase(self._selection(select), reader), rank=rank,
                world_size=world_size, worker=worker, num_workers=num_workers,
                drop_last=drop_last, start_sample=start_sample,
                start_batch=start_batch, augment=augment, illegal_ev=illegal_ev,
                companions=companions)
        families = self._companion_keys(companions)
        length = int(length)
        if length < 1:
            raise ValueError(f"length must be ≥ 1, not {length}")
        stride = length if stride is None else int(stride)
        if stride < 1:
            raise ValueError(f"stride must be ≥ 1, not {stride}")
        windows = self._windows(select, length, stride, "windows()")
        plan, rank, numbers, perm = _epoch(
            windows.total, batch_size, shuffle, seed, epoch, rank, world_size, worker, num_workers,
            drop_last, start_sample, start_batch)
        return self._window_batches(windows, plan, rank, numbers, perm,
                                    (seed, epoch) if augment else None, illegal_ev, families)

    def _window_batches(self, windows, plan, rank, numbers, perm, augment, illegal_ev,
                        families):
        steps = np.arange(windows.length, dtype=np.int64)
        for b in numbers:
            items = plan.positions(rank, b)
            count = items.size
            first = windows.first_rows(items if perm is None else perm(items))
            rows = (first[:, None] + steps).reshape(-1)
            groups = self._groups(rows)
            batch = decode_rows(self._gather(rows, groups), illegal_ev)
            batch["row"] = rows
            self._add_companions(batch, families, groups)
            batch = {k: v.reshape((count, windows.length) + v.shape[1:]) for k, v in batch.items()}
            if augment is not None:
                symmetry = symmetries_for(first, *augment)
                apply_symmetries(batch, symmetry)
                batch["symmetry"] = symmetry
            yield batch

    def sample(self, n: int, rng=None, *, select=None, augment: bool = False,
               illegal_ev: float | None = NAN, companions=None) -> dict:
        """`n` random rows of the selection (with replacement), decoded. `rng` is a
        `np.random.Generator` or a seed; with `augment`, each row gets a random symmetry.
        `companions` as in `batches`."""
        families = self._companion_keys(companions)
        rng = np.random.default_rng(rng)
        ranges = self._row_ranges(select, "sample()")
        rows = ranges.rows_at(rng.integers(0, ranges.total, int(n)))
        groups = self._groups(rows)
        batch = decode_rows(self._gather(rows, groups), illegal_ev)
        batch["row"] = rows
        self._add_companions(batch, families, groups)
        if augment:
            symmetry = rng.integers(0, 8, int(n)).astype(np.uint8)
            apply_symmetries(batch, symmetry)
            batch["symmetry"] = symmetry
        return batch


class Selection:
    """Some runs of a pack (ascending ids), as `Pack.select` returns them.

    In a shuffled pack (or one without a run index) a selection's rows are found through
    each row's `run_id`: one pass over the pack, the first time a batch method needs them,
    kept as two bits per row of the pack."""

    def __init__(self, pack: Pack, run_ids: np.ndarray, where: str | None = None,
                 params=None):
        self.pack = pack
        self.run_ids = np.asarray(run_ids, dtype=np.int64)
        self.where = where
        self.params = params
        ids, steps = pack._runs()
        self.num_rows = int(steps[np.searchsorted(ids, self.run_ids)].sum())
        self._rows = None
        self._query = None

    def _row_set(self) -> RowSet:
        """The selection's rows found by run_id (computed once)."""
        if self._rows is None:
            found = RowSet(len(self.pack), self.run_ids, self.pack._read_run_ids)
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


def _batch_rows(ranges, plan, rank, numbers, perm):
    """Each batch's global rows, and without shuffle the row spans that hold them (read as
    spans, not row by row). Shuffled, the rows of several batches are looked up at once
    (`EpochPlan.chunks`) and handed out batch by batch."""
    if perm is None:
        for b in numbers:
            spans = [s for a, z in plan.spans(rank, b) for s in ranges.spans(a, z)]
            rows = (np.arange(*spans[0], dtype=np.int64) if len(spans) == 1 else
                    np.concatenate([np.arange(a, z, dtype=np.int64) for a, z in spans]))
            yield rows, spans
        return
    for group in plan.chunks(rank, numbers):
        rows = ranges.rows_at(perm(plan.chunk_positions(rank, group)))
        at = 0
        for _, count in group:
            yield rows[at:at + count], None
            at += count


def _epoch(total, batch_size, shuffle, seed, epoch, rank, world_size, worker, num_workers,
           drop_last, start_sample, start_batch):
    """One epoch over `total` items (rows or windows) for one (rank, worker): its batch plan
    from the resume point on, the rank as checked, the numbers of the batches this part
    yields, and the epoch's permutation (None without shuffle)."""
    part = Part(rank, world_size, worker, num_workers)
    start = start_position(start_sample, start_batch, batch_size, world_size, total)
    plan = EpochPlan(total, batch_size, world_size, drop_last, start)
    numbers = plan.batches_of(part)
    perm = Permutation(total, seed, epoch) if shuffle else None
    return plan, part.rank, numbers, perm
