"""`Pack`: a read-only view of one pack folder (`Selection`, some of its runs, is in `_data`).

Opening a pack checks every shard header and memory-maps the shards once; `metadata.db` is
opened read-only (`file:…?mode=ro`). A local pack's open is a snapshot of one version
(`_snapshot`): every file is opened at once and read through afterwards, and the open is done
again when a publish overlapped it. Nothing else is loaded until used: the run table (ids,
row counts, first rows) is read on the first call that needs it, so memory stays
proportional to shards and runs, never to rows.

The pack's data (shards, offsets, runs, how rows are read, selections) is a
`_data.PackData`, which `Pack` opens and delegates to; here are what a pack is to its users
(identity, versions, companions, selection by SQL, splits) and how an epoch's batches are
put together from rows (decoded, augmented, with companion rows). A batch of consecutive
rows inside one shard is decoded straight from the memory map, without a copy.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Iterator

import numpy as np

from ._codec import apply_symmetries, as_records, decode_rows, zero_padding
from ._companions import Companion, add_rows, open_family, recorded, requested, scan
from ._data import PackData, Selection, rebase, resolve, selected
from ._errors import EmptySelectionError, NotAPackError, PackError
from ._format import (METADATA_NAME, ROW_BYTES, STEP_ROW_DTYPE, VALUATION_NAME,
                      find_shard_paths, read_shard_header, read_valuation_names)
from ._order import EpochPlan, plan_epoch, start_position, symmetries_for, validation_side
from ._cache import CacheLimitError
from ._memory import available_memory
from ._remote import Url, parse_location
from ._windows import check_order, choose_order, pack_bytes, shard_window_batches
from ._select import has_table, run_ids
from . import _snapshot, _versions

NAN = float("nan")
#: What `Pack(legacy_legal=…)` takes: how a legacy pack's `ev_legal` is read.
LEGACY_LEGAL = ("recompute", "stored")


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

    A pack in object storage is opened by its URL, `Pack("s3://bucket/prefix")` (also
    `gs://`, `az://`, `http(s)://`; needs the `s3` extra, `pip install "PATH[s3]"` where PATH
    is the checkout the package was installed from, or `pip install obstore google-crc32c
    xxhash`): the metadata.db of its latest commit is downloaded (a copy of the reader in
    another process, pickled or forked, reads the same commit, whatever was committed
    since), and each shard is fetched into the node's cache when first read, checked
    against its recorded CRC-32C (each time it is taken from the cache too), and
    memory-mapped from there. `cache=` (a
    folder) and `cache_limit=` (bytes, or "50GiB") default to `DATASET_PACKER_CACHE` /
    `DATASET_PACKER_CACHE_LIMIT`, else `~/.cache/dataset-packer` and 50 GiB, as for the
    command line, which shares the same cache. `path` is then the URL (`pack.path / name`
    names a file of it).
    """

    def __init__(self, path, version=None, *, legacy_legal: str = "recompute", cache=None,
                 cache_limit=None):
        self._open_at(path, version, legacy_legal, cache, cache_limit, commit=None)

    @classmethod
    def _at_commit(cls, path, version, legacy_legal: str, cache, cache_limit,
                   commit: int | None) -> "Pack":
        """`Pack(path, version, …)` of a remote pack read at commit `commit` (the one
        another reader read), not the latest."""
        pack = cls.__new__(cls)
        pack._open_at(path, version, legacy_legal, cache, cache_limit, commit)
        return pack

    def _open_at(self, path, version, legacy_legal: str, cache, cache_limit,
                 commit: int | None) -> None:
        if legacy_legal not in LEGACY_LEGAL:
            raise ValueError(f"legacy_legal must be one of {LEGACY_LEGAL}, not {legacy_legal!r}")
        location = parse_location(path)
        self._remote = None
        self._held = None
        self._released = []
        self._conn = None
        self._conn_pid = None
        self._restriction = None
        if isinstance(location, Url):
            from ._remote import RemotePack
            self.path = location
            self._remote = RemotePack(location, cache, cache_limit, commit)
            # metadata.db and valuation_types.json, downloaded into a private folder.
            self._folder = self._remote.view
            paths = None
        else:
            self.path = self._folder = location
            if not self.path.is_dir():
                raise NotAPackError(f"{self.path} is not a pack: no such folder")
            # One snapshot of one version, even while another process publishes into the
            # folder (_snapshot).
            _snapshot.consistently(self.path,
                                   lambda: self._open_local(version, legacy_legal),
                                   self._discard)
            return
        try:
            self._open(None, version, legacy_legal)
        except BaseException as e:
            if self._remote is None:
                raise
            self._remote.close()
            if not isinstance(e, PackError):
                raise
            # Name the URL, never the private folder the files were downloaded into.
            raise type(e)(str(e).replace(str(self._folder), str(self.path))) from None

    def _open_local(self, version, legacy_legal: str) -> None:
        """One try at opening a local pack: every file held first, then read through."""
        if not (self.path / METADATA_NAME).is_file():
            raise NotAPackError(f"{self.path} is not a pack: it has no {METADATA_NAME}"
                                + _snapshot.publishing_note(self.path))
        self._held = _snapshot.Held(self.path)
        if not self._held.has(METADATA_NAME):
            raise NotAPackError(f"{self.path} is not a pack: it has no {METADATA_NAME}")
        paths = find_shard_paths(self.path, self._held.names())
        self._open(paths, version, legacy_legal)
        # The shards' maps hold their files now.
        self._released = [s.path.name for s in self._data.shards]
        self._held.release(self._released)

    def _discard(self) -> None:
        """Undoes a try at opening that is thrown away (the pack changed under it)."""
        if self._conn is not None:
            self._conn.close()
        self._conn = self._conn_pid = self._restriction = None
        if getattr(self, "_data", None) is not None:
            self._data.close()
        if self._held is not None:
            self._held.close()
            self._held = None

    def _file_names(self) -> set[str]:
        """The names of the local pack's files as it was opened."""
        if self._held is not None:
            return set(self._held.names()) | set(self._released)
        return {p.name for p in self._folder.iterdir()}

    def _source(self, name: str) -> Path:
        """Where the file `name` of the pack is read from: as it was opened with the pack."""
        return self._held.source(name) if self._held is not None else self._folder / name

    def _open(self, paths, version, legacy_legal: str) -> None:
        self.valuation_names = read_valuation_names(self._source(VALUATION_NAME))
        self.session = self._read_session()
        history = _versions.History(self.db, self.path)
        version = history.resolve(version)
        # A past version: its steps files cut to its rows, and its runs (the smallest ids).
        past = version != history.latest
        run_limit = history.version_runs(version) if past else -1
        remote = None
        if self._remote is not None:
            shards = self._remote_shards(history, version)
            from ._remote import RemoteShards
            remote = RemoteShards(self._remote, shards)
        elif past:
            shards = _versions.version_shards(self, history, version, self._file_names(),
                                              self._source)
        else:
            shards = [read_shard_header(p, self._source(p.name)) for p in paths]
        if past:
            # Every SQL read (selections too) sees the version's runs only.
            self._restriction = _versions.restriction(self.db(), run_limit)
            self.db().executescript(self._restriction)
        self._data = PackData(self.path, self.db, shards, legacy_legal=legacy_legal,
                              shuffled=self.shuffled, history=history, version=version,
                              run_limit=run_limit, remote=remote, source=self._source,
                              file_names=self._file_names)
        self.num_runs = self._data.count_runs()
        if past:
            # The session's totals as the version had them (as the command line shows them).
            totals = {"total_rows": len(self), "total_runs": self.num_runs,
                      "shard_count": len(shards)}
            self.session.update({k: str(v) for k, v in totals.items() if k in self.session})
        else:
            self._data.check_recorded_shards()
        self._check_version()
        self._companions: dict[str, Companion] = {}

    def _remote_shards(self, history, version: int) -> list:
        """The steps shards of a remote pack at `version`, described from metadata.db (the
        files are fetched when read)."""
        from ._remote import remote_shards
        db = self.db()
        self._remote.load_records(db)
        if history.recorded:
            files = [(name, rows) for _, name, rows in history.files(version, "steps")]
        else:
            files = [(str(n), int(r)) for n, r in db.execute(
                "SELECT file_name, rows FROM shards ORDER BY shard")]
        if not files:
            raise PackError(f"{self.path / METADATA_NAME}: version {version} lists no steps "
                            "files")
        return remote_shards(self._remote, db, files)

    # ------------------------------------------------------------------ basics

    def __len__(self) -> int:
        return self._data.rows

    def __repr__(self) -> str:
        data = self._data
        at = f" version {data.version} of {data.history.latest}" if data.past else ""
        count = len(data.shards)
        return (f"Pack({str(self.path)!r}{at}: {data.rows} rows, {self.num_runs} runs, "
                f"{count} shard{'s' if count != 1 else ''})")

    @property
    def shards(self) -> list[Path]:
        """The shard files, in shard order."""
        return [s.path for s in self._data.shards]

    @property
    def legacy(self) -> bool:
        """Whether the shards use the legacy packed 46-byte layout (rows come back as 48)."""
        return self._data.legacy

    @property
    def legacy_legal(self) -> str:
        """How a legacy pack's `ev_legal` is read: "recompute" or "stored" (`LEGACY_LEGAL`)."""
        return self._data.legacy_legal

    @legacy_legal.setter
    def legacy_legal(self, value: str) -> None:
        self._data.legacy_legal = value

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
        return self._data.version

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
        history = self._data.history
        return history.listing() if history.recorded else _versions.unrecorded_listing(self)

    def at_version(self, version) -> "Pack":
        """This pack read at another version (a number or a tag): `Pack(path, version)`."""
        if version == self.version:
            return self
        if self._remote is not None:
            # The same commit: its metadata.db holds every version this reader knows of.
            return Pack._at_commit(self.path, version, self.legacy_legal, self._remote.cache.dir,
                                   self._remote.limit, self._remote.commit_number)
        return Pack(self.path, version, legacy_legal=self.legacy_legal)

    @property
    def identity(self) -> dict:
        """What a resume state records of the pack it was saved on: `pack_id`, `version` and
        `rows` (give it back as `saved_at=` of `batches` to check a resume point)."""
        return _versions.identity(self.pack_id, self.version, len(self))

    def _for_saved(self, saved) -> "Pack":
        """The reader of an epoch whose resume point was saved at `saved`: this pack, or
        the version of it the state was saved on (refused when it is not this pack's)."""
        return self.at_version(_versions.saved_versions(self, saved)[0])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._data.close()
        self._companions = {}
        if self._remote is not None:
            self._remote.close()
        if self._held is not None:
            self._held.close()
            self._held = None

    def __enter__(self) -> "Pack":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self):
        # The version number, not "latest": a pack that grows before a worker opens it is
        # read there as it was here. A remote pack is opened again (its metadata.db
        # downloaded again) on the same cache, which the processes share, and at the same
        # commit: the worker reads the objects this reader reads, whatever came since.
        state = {"path": str(self.path), "version": self.version,
                 "legacy_legal": self.legacy_legal, "pack_id": self.pack_id}
        if self._remote is not None:
            state.update(cache=str(self._remote.cache.dir), cache_limit=self._remote.limit,
                         commit=self._remote.commit_number)
        return state

    def __setstate__(self, state):
        self._open_at(state["path"], state.get("version"), state.get("legacy_legal", "recompute"),
                      state.get("cache"), state.get("cache_limit"), state.get("commit"))
        if "pack_id" in state and self.pack_id != state["pack_id"]:
            was = state["pack_id"]
            self.close()
            raise PackError(f"{self.path} was replaced by another pack (pack_id {was} is now "
                            f"{self.pack_id}) since this reader was opened in the process that "
                            "sent it: its version cannot be read here")

    # ------------------------------------------------------------------ metadata.db

    def db(self) -> sqlite3.Connection:
        """The read-only connection to metadata.db (re-opened in a forked process)."""
        if self._conn is None or self._conn_pid != os.getpid():
            try:
                self._conn = (self._held.connect(_open_readonly) if self._held is not None
                              else _open_readonly(self._folder / METADATA_NAME))
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

    def _check_version(self) -> None:
        """The version read against what the history records of it: a mismatch means the
        pack was changed by a tool that does not record versions."""
        history, version = self._data.history, self.version
        rows, runs = history.version_rows(version), history.version_runs(version)
        if rows is not None and (rows, runs) != (len(self), self.num_runs):
            raise PackError(
                f"{self.path}: metadata.db records {rows} rows and {runs} runs for version "
                f"{version}, but the pack holds {len(self)} rows and {self.num_runs} "
                f"runs: it was changed without recording a version; run `dataset-packer "
                f"validate {self.path}`")

    def run(self, run_id: int, decode: bool = False, illegal_ev: float | None = NAN):
        """One run's rows (STEP_ROW_DTYPE, in step order) found through `run_index`, or with
        `decode=True` its decoded columns. Raises KeyError for an unknown run id."""
        first, steps = self._data.run_span(run_id)
        if decode:
            return decode_rows(self._data.read_span(first, first + steps), illegal_ev)
        return self.rows(slice(first, first + steps))

    # ------------------------------------------------------------------ reading rows

    def rows(self, key):
        """Rows as the exact aligned STEP_ROW_DTYPE (a copy, padding bytes zero).

        `key` is an int (one record), a slice, or an integer array of any shape (rows in
        that order and shape)."""
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return self.rows(np.array([key]))[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                raw = np.array(self._data.read_span(start, max(start, stop)), copy=True)
                return as_records(zero_padding(raw))
            key = np.arange(start, stop, step)
        idx = self._data.indices(key)
        raw = zero_padding(self._data.gather(idx.reshape(-1)))
        return as_records(raw).reshape(idx.shape)

    def gather(self, indices, illegal_ev: float | None = NAN, *, companions=None) -> dict:
        """The rows at these global indices (1-d, in this order), decoded into a batch dict
        (with `row`, and the `companions`' rows): what `batches` yields, for indices of
        your own."""
        families = requested(self, companions)
        rows = self._data.indices(indices).reshape(-1)
        return self._decoded(rows, illegal_ev, families)

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
        if self._data.past:
            return self._data.history.families(self.version)
        if self._remote is not None:
            return sorted(set(recorded(self.db())) |
                          {f for f in self._remote.families if f != "steps"})
        return sorted(set(scan(self.path, self._file_names())) | set(recorded(self.db())))

    def companion(self, name: str) -> Companion:
        """The companion family `name`, checked against the shards (and metadata.db when it
        records it) and memory-mapped, once per Pack: rows by global index aligned with
        `rows()` (`companion(name).rows(key)` or `[key]`) and `companion(name).run(run_id)`.
        Raises CompanionError naming the file when it does not line up, KeyError when there
        is no such family."""
        found = self._companions.get(name)
        if found is None:
            opener = _versions.open_past_family if self._data.past else open_family
            found = self._companions[name] = opener(self, name)
        return found

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
        ids, _ = self._data.runs()
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
        return selected(self, chosen, where, None if runs is None else wanted, params)

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
        selection = resolve(self, select)
        ids = self._data.runs()[0] if selection is None else selection.run_ids
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

    # ------------------------------------------------------------------ batches

    def epoch_length(self, select=None, window: int | None = None,
                     stride: int | None = None) -> int:
        """Positions in an epoch (what `start_sample` counts): the selection's rows, or its
        windows with `window`."""
        selection = resolve(self, select)
        if window is None:
            return self._data.row_ranges(selection, "epoch_length()").total
        return self._data.windows(selection, window, stride or window, "epoch_length()").total

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
                companions=None, saved_at=None, order: str = "global",
                window_bytes: int | None = None) -> Iterator[dict]:
        """Decoded batches of one epoch: a pure function of (pack, selection, seed, epoch,
        order).

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
        refused (VersionError), since the epoch's order would be another one.

        `order="global"` (the default) permutes the whole selection. `order="shards"` reads
        shard windows: consecutive shards of at most `window_bytes` bytes together (1 GiB
        locally, half the cache remotely, when not given), the windows and the rows inside
        each permuted, the next window brought in while one is read; the same rows, each
        once, in another order. It keeps an epoch over a pack larger than memory (or than
        its cache) at the disk's (or the network's) sequential speed. `order="auto"` takes
        shard windows for a local pack larger than half the memory the process may use
        (the memory cgroup's limit, else MemAvailable) and a remote one whose shards do
        not fit in half its cache: an order that depends on the machine, so a resume
        elsewhere gives `order` and `window_bytes` as first chosen (`EpochStream` records
        them in its state). A global order on a remote pack whose shards do not fit in
        its cache is refused before the first batch (CacheLimitError)."""
        if saved_at is not None:
            reader = self._for_saved(saved_at)
            return reader.batches(
                batch_size, shuffle=shuffle, seed=seed, epoch=epoch,
                select=rebase(resolve(self, select), reader), rank=rank,
                world_size=world_size, worker=worker, num_workers=num_workers,
                drop_last=drop_last, start_sample=start_sample, start_batch=start_batch,
                augment=augment, illegal_ev=illegal_ev, companions=companions, order=order,
                window_bytes=window_bytes)
        chosen = self._chosen_order(order, window_bytes, select, companions)
        if chosen[0] == "shards":
            return shard_window_batches(self, batch_size, None, chosen[1], dict(
                shuffle=shuffle, seed=seed, epoch=epoch, select=select, rank=rank,
                world_size=world_size, worker=worker, num_workers=num_workers,
                drop_last=drop_last, start_sample=start_sample, start_batch=start_batch,
                augment=augment, illegal_ev=illegal_ev, companions=companions))
        families = requested(self, companions)
        ranges = self._data.row_ranges(resolve(self, select), "batches()")
        plan, rank, numbers, perm = plan_epoch(
            ranges.total, batch_size, shuffle, seed, epoch, rank, world_size, worker, num_workers,
            drop_last, start_sample, start_batch)
        return self._row_batches(ranges, plan, rank, numbers, perm,
                                 (seed, epoch) if augment else None, illegal_ev, families)

    def _chosen_order(self, order: str, window_bytes, select, companions) -> tuple:
        """`order=` of a batch method, checked and chosen (`_windows.choose_order`); a
        global order that a remote pack's cache cannot hold is refused here."""
        check_order(order, window_bytes)
        # Only "auto" of a local pack reads the memory figure (a few /proc files).
        memory = available_memory()[0] if order == "auto" else None
        chosen = choose_order(self, order, window_bytes, memory, companions)
        data = self._data
        if (chosen[0] == "global" and select is None and data.is_remote
                and data.cache_limit is not None and pack_bytes(data) > data.cache_limit):
            raise CacheLimitError(
                f"{self.path}: an epoch in the global order reads every shard from its first "
                f"batches on, and the shards ({pack_bytes(data):,} bytes) do not fit in the "
                f"cache ({data.cache_limit:,} bytes): read it in shard windows "
                f"(order=\"shards\" or \"auto\", as PackDataset does by default), or raise "
                f"cache_limit")
        return chosen

    def _row_batches(self, ranges, plan, rank, numbers, perm, augment, illegal_ev, families):
        for rows, spans in _batch_rows(ranges, plan, rank, numbers, perm):
            if spans is None:
                batch = self._decoded(rows, illegal_ev, families)
            else:
                batch = decode_rows(self._data.read_spans(spans), illegal_ev)
                batch["row"] = rows
                add_rows(batch, families, spans=spans)
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
                companions=None, saved_at=None, order: str = "global",
                window_bytes: int | None = None) -> Iterator[dict]:
        """Batches of windows of `length` consecutive steps of one run (never across runs):
        every key of `batches` shaped (B, length, …). Windows start every `stride` rows of a
        run (default `length`: disjoint windows; a run's last rows that do not fill one are
        left out). Order, partition, resume and augmentation (one symmetry per window) work
        as in `batches`, over windows instead of rows; `companions` too, shaped
        (B, length, *shape), `saved_at`, `order` and `window_bytes`. Needs the run index."""
        if saved_at is not None:
            reader = self._for_saved(saved_at)
            return reader.windows(
                length, batch_size, stride=stride, shuffle=shuffle, seed=seed, epoch=epoch,
                select=rebase(resolve(self, select), reader), rank=rank,
                world_size=world_size, worker=worker, num_workers=num_workers,
                drop_last=drop_last, start_sample=start_sample,
                start_batch=start_batch, augment=augment, illegal_ev=illegal_ev,
                companions=companions, order=order, window_bytes=window_bytes)
        chosen = self._chosen_order(order, window_bytes, select, companions)
        if chosen[0] == "shards":
            return shard_window_batches(self, batch_size, length, chosen[1], dict(
                stride=stride, shuffle=shuffle, seed=seed, epoch=epoch, select=select,
                rank=rank, world_size=world_size, worker=worker, num_workers=num_workers,
                drop_last=drop_last, start_sample=start_sample, start_batch=start_batch,
                augment=augment, illegal_ev=illegal_ev, companions=companions))
        families = requested(self, companions)
        length = int(length)
        if length < 1:
            raise ValueError(f"length must be ≥ 1, not {length}")
        stride = length if stride is None else int(stride)
        if stride < 1:
            raise ValueError(f"stride must be ≥ 1, not {stride}")
        windows = self._data.windows(resolve(self, select), length, stride, "windows()")
        plan, rank, numbers, perm = plan_epoch(
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
            batch = self._decoded(rows, illegal_ev, families)
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
        families = requested(self, companions)
        rng = np.random.default_rng(rng)
        ranges = self._data.row_ranges(resolve(self, select), "sample()")
        rows = ranges.rows_at(rng.integers(0, ranges.total, int(n)))
        batch = self._decoded(rows, illegal_ev, families)
        if augment:
            symmetry = rng.integers(0, 8, int(n)).astype(np.uint8)
            apply_symmetries(batch, symmetry)
            batch["symmetry"] = symmetry
        return batch

    def _decoded(self, rows: np.ndarray, illegal_ev, families) -> dict:
        """The batch of these global rows (int64, in range): decoded, with `row` and the
        families' rows (read with the same grouping by shard)."""
        groups = self._data.groups(rows)
        batch = decode_rows(self._data.gather(rows, groups), illegal_ev)
        batch["row"] = rows
        add_rows(batch, families, groups)
        return batch


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
