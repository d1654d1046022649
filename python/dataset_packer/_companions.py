"""Companion arrays: `NAME-00000.npy`, `NAME-00001.npy`, … (or `NAME.npy` beside a single
`steps.npy`) aligned row by row with the shards, as docs/format.md "Companion arrays" defines
them: NAME matches `[a-z][a-z0-9_]*` and is not `steps`; file k pairs with shard k and holds
exactly its rows; one dtype and trailing shape in every file; any dtype (structured too).

A family is found by its file names and checked when first opened: every file's `.npy`
header (C order, no Python objects, size), its row count against its shard's, one dtype and
shape throughout, and, when `metadata.db` records the family (table `companions`), the files,
dtype, trailing shape, rows and bytes recorded. Any mismatch is a `CompanionError` naming the
file. Each file is then memory-mapped once, read-only; rows are read by global row index with
the same shard grouping as the steps rows, so companion row i is always steps row i.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np

from . import _data
from ._codec import _COLUMNS
from ._errors import CompanionError
from ._format import HeaderError, read_npy_header
from ._maps import READ_AHEAD, map_readonly, read_at_random, will_need
from ._select import has_table

FAMILY_NAME = re.compile(r"[a-z][a-z0-9_]*")
_SHARDED_FILE = re.compile(r"([a-z][a-z0-9_]*)-(\d{5})\.npy")
_SINGLE_FILE = re.compile(r"([a-z][a-z0-9_]*)\.npy")
#: The keys a batch already has: a companion added to it needs another key.
BATCH_KEYS = frozenset(_COLUMNS) | {"row", "symmetry"}


def parse_file_name(file: str) -> tuple[str, int | None] | None:
    """`NAME-NNNNN.npy` → (NAME, N), `NAME.npy` → (NAME, None); None for other names and
    for the pack's own shards (anything starting with `steps`)."""
    if file.startswith("steps"):
        return None
    m = _SHARDED_FILE.fullmatch(file)
    if m:
        return m.group(1), int(m.group(2))
    m = _SINGLE_FILE.fullmatch(file)
    return (m.group(1), None) if m else None


def scan(folder: Path, names=None) -> dict[str, list[tuple[int | None, str]]]:
    """Companion-named files in the folder (of its file `names`, by default those there
    now), by family name (files sorted)."""
    if names is None:
        names = [p.name for p in folder.iterdir() if p.is_file()]
    found: dict[str, list[tuple[int | None, str]]] = {}
    for name in names:
        parsed = parse_file_name(name)
        if parsed is not None:
            found.setdefault(parsed[0], []).append((parsed[1], name))
    return {name: sorted(files, key=lambda f: f[1]) for name, files in sorted(found.items())}


def recorded(conn) -> dict[str, list[tuple]]:
    """metadata.db's `companions` rows by family: (shard, file_name, descr, shape, rows,
    bytes), in shard order; empty when the table is absent."""
    if not has_table(conn, "companions"):
        return {}
    out: dict[str, list[tuple]] = {}
    for name, *rest in conn.execute("SELECT name, shard, file_name, descr, shape, rows, bytes "
                                    "FROM companions ORDER BY name, shard"):
        out.setdefault(name, []).append(tuple(rest))
    return out


def row_bytes(dtype: np.dtype, trailing: tuple) -> int:
    """The bytes of one row of a family: one item of `dtype` per element of `trailing`."""
    return dtype.itemsize * int(np.prod(trailing, dtype=np.int64))


def describe(dtype: np.dtype, trailing: tuple) -> str:
    """`'<f4' (8,)`, as the CLI prints a family's kind."""
    descr = repr(np.lib.format.dtype_to_descr(dtype))
    return descr if not trailing else f"{descr} {tuple(trailing)}"


def _read_header(path, local: Path):
    try:
        header, _ = read_npy_header(local)
    except HeaderError as e:
        raise CompanionError(f"{path}: bad .npy header: {e}") from None
    return (tuple(int(d) for d in header.shape), header.fortran_order, header.dtype,
            header.data_offset)


def _companion_file(name: str, shard: Path) -> str:
    """The companion file that pairs with a shard: steps-00003.npy → NAME-00003.npy."""
    if shard.name == "steps.npy":
        return f"{name}.npy"
    return f"{name}-{shard.name[len('steps-'):]}"


class Companion:
    """One companion family of a pack, opened and checked (see `Pack.companion`).

    `dtype` and `shape` (the trailing shape) describe one row; `len()` is the pack's row
    count. `rows(key)` / `companion[key]` read rows by global index exactly as `Pack.rows`
    does (int, slice, integer array of any shape), as copies; `run(run_id)` reads one run's
    rows in step order. `arrays` are the files themselves, memory-mapped read-only, one per
    shard (zero-copy access), and `files` their paths.

    Of a remote pack whose metadata.db records block checksums, the files are read block
    by block: a read fetches the blocks its rows lie in, a read of all of a file fetches it
    whole, and `arrays` fetches every file whole first (it gives access to any row)."""

    def __init__(self, pack, name: str, files: list[Path], arrays: list[np.ndarray],
                 dtype: np.dtype, shape: tuple, recorded: bool, lazies=None, offsets=None):
        self._data = _data.of(pack)
        self.name = name
        self.files = files
        self._arrays = arrays
        self.dtype = dtype
        self.shape = shape
        self.recorded = recorded
        #: Per file: its block reader (`PackData.lazy_file`), None for a whole file.
        self._lazies = lazies or [None] * len(arrays)
        self._offsets = offsets or [0] * len(arrays)

    @property
    def arrays(self) -> list[np.ndarray]:
        """The files, memory-mapped read-only, one per shard (each fetched whole first)."""
        for lazy in self._lazies:
            if lazy is not None:
                lazy.fill_whole()
        return self._arrays

    def _ready(self, shard: int, first: np.ndarray, stop: np.ndarray) -> None:
        """The blocks of rows first[k]..stop[k]-1 of the file of `shard`, fetched where it
        is read block by block."""
        lazy = self._lazies[shard]
        if lazy is not None and first.size:
            start = self._offsets[shard] + first.astype(np.int64) * self.row_bytes
            lazy.ensure(start, self._offsets[shard] + stop.astype(np.int64) * self.row_bytes - 1)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return (f"Companion({self.name!r}: {describe(self.dtype, self.shape)}, "
                f"{len(self)} rows in {len(self.files)} file{'s' if len(self.files) != 1 else ''})")

    def _take(self, shard: int, local: np.ndarray, out: np.ndarray | None = None):
        array = self._arrays[shard]
        if self._lazies[shard] is not None:
            local = np.clip(local, 0, max(len(array) - 1, 0))  # (as mode="clip" reads)
            self._ready(shard, local, local + 1)
        return np.take(array, local, axis=0, out=out, mode="clip")

    @property
    def row_bytes(self) -> int:
        """The bytes of one row."""
        return row_bytes(self.dtype, self.shape)

    def _prefetch(self, shards) -> None:
        """Brings these shards' files in, in the background: a local pack's into the page
        cache, a remote pack's read block by block fetched whole into their sparse files (a
        remote file fetched whole at open is there already)."""
        if not self._data.is_remote:
            READ_AHEAD.request([self._arrays[int(s)] for s in shards])
            return
        lazies = [self._lazies[int(s)] for s in shards if self._lazies[int(s)] is not None]
        if lazies:
            self._data.prefetch_files(lazies)

    def _release(self, shards) -> None:
        """Gives back the blocks of these shards' files read block by block (their space in
        the view; the cache may evict them): an epoch's finished window."""
        for s in shards:
            if self._lazies[int(s)] is not None:
                self._lazies[int(s)].release()

    def _gather_groups(self, groups) -> np.ndarray:
        """The rows `PackData.groups` grouped by shard (those of a batch's steps rows)."""
        return self._data.gather_with(groups, self._take, self.shape, self.dtype)

    def _read_span(self, start: int, stop: int) -> np.ndarray:
        spans = list(self._data.pieces(start, stop))
        for s, a, z in spans:
            if self._lazies[s] is not None and z - a == len(self._arrays[s]):
                self._lazies[s].fill_whole()  # all of it: one entry, fetched whole
            else:
                self._ready(s, np.array([a]), np.array([z]))
        pieces = [self._arrays[s][a:z] for s, a, z in spans]
        for piece in pieces:
            will_need(piece)  # read whole: asked for at once (`_maps`)
        if not pieces:
            return np.empty((0,) + self.shape, dtype=self.dtype)
        return np.concatenate(pieces) if len(pieces) > 1 else np.array(pieces[0], copy=True)

    def _read_spans(self, spans) -> np.ndarray:
        if len(spans) == 1:
            return self._read_span(*spans[0])
        return np.concatenate([self._read_span(a, b) for a, b in spans])

    def rows(self, key) -> np.ndarray:
        """Companion rows by global row index, aligned with `Pack.rows(key)`: an int gives
        one row (shape `shape`), a slice or an integer array gives `key`'s shape + `shape`."""
        data = self._data
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return self.rows(np.array([key]))[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(len(data))
            if step == 1:
                return self._read_span(start, max(start, stop))
            key = np.arange(start, stop, step)
        idx = data.indices(key)
        flat = self._gather_groups(data.groups(idx.reshape(-1)))
        return flat.reshape(idx.shape + self.shape)

    __getitem__ = rows

    def run(self, run_id: int) -> np.ndarray:
        """One run's companion rows, in step order (aligned with `Pack.run(run_id)`)."""
        first, steps = self._data.run_span(run_id)
        return self._read_span(first, first + steps)


def open_family(pack, name: str) -> Companion:
    """Finds, checks and memory-maps the family `name` of `pack`; CompanionError naming the
    file when it does not line up, KeyError when the pack has no such family."""
    folder = pack.path
    data = _data.of(pack)
    if data.is_remote:
        # A remote pack's files are those its latest version lists (no folder to scan).
        files = sorted((parsed[1], file) for file in data.remote_family(name)
                       if (parsed := parse_file_name(file)) is not None)
    else:
        files = scan(folder, data.file_names()).get(name, [])
    records = recorded(pack.db()).get(name, [])
    if not files and not records:
        known = pack.companions
        raise KeyError(f"no companion {name!r} in {folder} "
                       f"({'it has ' + ', '.join(known) if known else 'it has none'})")
    shards = pack.shards
    single = len(shards) == 1 and shards[0].name == "steps.npy"
    if single:
        wrong = [f for i, f in files if i is not None]
        if wrong:
            raise CompanionError(f"{folder / wrong[0]}: named for a sharded pack, but the pack is "
                                 f"one steps.npy (its companion would be {name}.npy)")
    else:
        wrong = [f for i, f in files if i is None]
        if wrong:
            raise CompanionError(f"{folder / wrong[0]}: named for a pack of one steps.npy, but "
                                 f"the pack has shards {shards[0].name} … (its companions "
                                 f"would be {name}-00000.npy …)")
    expected = [_companion_file(name, s) for s in shards]
    extra = [f for _, f in files if f not in expected]
    if extra:
        raise CompanionError(f"{folder / extra[0]}: has no shard to pair with (the pack has "
                             f"{len(shards)} shard{'s' if len(shards) != 1 else ''})")
    present = {f for _, f in files}
    for shard, want in zip(shards, expected):
        if want not in present:
            raise CompanionError(f"{folder / want}: missing; companion {name} has no file for "
                                 f"{shard.name} ({len(present)} of {len(shards)} files)")
    # Remote: each file as `local_files` gives it (its header read, its blocks when read, or
    # the whole file pinned in the cache while the pack is open).
    headers = _check_files(name, [(folder / file, shard.name, data.shard_rows(k), local)
                                  for k, (shard, file, local) in
                                  enumerate(zip(shards, expected, data.local_files(expected)))],
                           prefix=False)
    dtype, trailing = headers[0][4], headers[0][5]
    if records:
        _check_records(folder, name, records, expected, headers, dtype, trailing)
    return _mapped(pack, name, [(path, rows, offset, local)
                                for path, rows, offset, _, _, _, local in headers],
                   dtype, trailing, bool(records))


def requested(pack, companions) -> list[tuple[str, Companion]]:
    """(batch key, family) for a batch method's `companions=`: names (or one name), or a
    dict batch key → name; each family opened by `pack.companion`."""
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
        out.append((key, pack.companion(name)))
    return out


def add_rows(batch: dict, families, groups=None, spans=None) -> None:
    """Each family's rows of the batch's rows under its key: read as `groups` (from
    `PackData.groups`) grouped the steps rows, or as the row `spans` they were read in."""
    for key, family in families:
        batch[key] = (family._read_spans(spans) if spans is not None else
                      family._gather_groups(groups))


def open_prefix_family(pack, name: str, files: list[tuple]) -> Companion:
    """The family `name` as a past version of the pack had it: (path, shard file name, rows
    of the version[, local file]) per shard, each file holding at least those rows (in-place changes only
    append), read up to them. What metadata.db's `companions` table records is the family
    now, so it is not compared."""
    headers = _check_files(name, files, prefix=True)
    return _mapped(pack, name, [(path, want, offset, local) for (path, _, want, *_),
                                (_, _, offset, _, _, _, local) in zip(files, headers)],
                   headers[0][4], headers[0][5], True)


def _mapped(pack, name, files, dtype, trailing, recorded: bool) -> Companion:
    """The family's files memory-mapped: (path, rows, data offset[, local file]) each."""
    # Read at random as the steps rows are, where the family and the shards together do
    # not fit in half the memory (`_maps.read_at_random`).
    steps = _data.of(pack)
    random = steps.random or read_at_random(
        sum(f[1] for f in files) * row_bytes(dtype, trailing)
        + sum(steps.shard_bytes(s) for s in range(len(steps.shards))))
    arrays, lazies = [], []
    for path, rows, offset, *local in files:
        lazies.append(steps.lazy_file(local[0]) if local else None)
        if rows == 0:
            arrays.append(np.empty((0,) + trailing, dtype=dtype))
            continue
        arrays.append(map_readonly(local[0] if local else path, dtype, offset,
                                   (rows,) + trailing, random))
    return Companion(pack, name, [f[0] for f in files], arrays, dtype, trailing, recorded,
                     lazies, [f[2] for f in files])


def _check_files(name: str, files, prefix: bool) -> list[tuple]:
    """Each file's header checked against its shard's rows (`prefix`: at least that many)
    and against the first file's dtype and shape: (path, rows, data offset, size, dtype,
    trailing shape, local file) per file. A file is (path, shard name, rows[, local file]):
    the path names it in messages, the local file (the cache's copy of a remote file; by
    default the path) is read."""
    dtype, trailing, first = None, None, None
    headers = []
    for path, shard_name, shard_rows, *local in files:
        local = local[0] if local else path
        shape, fortran, file_dtype, offset = _read_header(path, local)
        if not shape:
            raise CompanionError(f"{path}: a 0-dimensional array has no rows")
        if fortran and len(shape) > 1:
            raise CompanionError(f"{path}: Fortran-ordered, so its rows are not contiguous; "
                                 "save it in C order")
        if file_dtype.hasobject:
            raise CompanionError(f"{path}: holds Python objects (dtype {file_dtype}), which "
                                 "are pointers, not data")
        rows, tail = shape[0], shape[1:]
        size_of_row = row_bytes(file_dtype, tail)
        if size_of_row <= 0:
            raise CompanionError(f"{path}: rows of {describe(file_dtype, tail)} are empty")
        if rows < shard_rows if prefix else rows != shard_rows:
            raise CompanionError(f"{path}: {rows} rows, but {shard_name} has {shard_rows} "
                                 f"(companion row i must be row i of its shard)")
        size = local.stat().st_size
        want = offset + rows * size_of_row
        if size != want:
            raise CompanionError(f"{path}: {size} bytes, but its header promises {want} "
                                 f"({rows} rows of {size_of_row} bytes after a {offset}-byte "
                                 "header): the file is truncated or has extra bytes")
        if first is None:
            first, dtype, trailing = path, file_dtype, tail
        elif file_dtype != dtype or tail != trailing:
            raise CompanionError(f"{path}: dtype {describe(file_dtype, tail)}, but {first.name} "
                                 f"has {describe(dtype, trailing)} (every file of a family has "
                                 "one dtype and shape)")
        headers.append((path, rows, offset, size, dtype, trailing, local))
    return headers


def _check_records(folder: Path, name: str, records, expected, headers, dtype, trailing):
    """The family on disk against what metadata.db records of it."""
    where = folder / "metadata.db"
    listed = [r[1] for r in records]
    if listed != expected:
        extra = [f for f in listed if f not in expected]
        what = (f"records {extra[0]}, which pairs with no shard" if extra else
                f"records files {listed[:3]}…, the pack's shards pair with {expected[:3]}…")
        raise CompanionError(f"{where}: companion {name}: {what}")
    for (shard, file, descr, shape, rows, size), (path, found_rows, _, found_size, *_) in zip(
            records, headers):
        try:
            want_dtype = np.lib.format.descr_to_dtype(ast.literal_eval(descr))
            want_shape = tuple(int(d) for d in json.loads(shape))
        except (ValueError, SyntaxError, TypeError) as e:
            raise CompanionError(f"{where}: companion {name} file {file}: unreadable descr "
                                 f"{descr!r} or shape {shape!r} ({e})") from None
        if want_dtype != dtype or want_shape != trailing:
            raise CompanionError(f"{path}: dtype {describe(dtype, trailing)}, but metadata.db "
                                 f"records {describe(want_dtype, want_shape)} for it")
        if rows != found_rows:
            raise CompanionError(f"{path}: {found_rows} rows, but metadata.db records {rows}")
        if size != found_size:
            raise CompanionError(f"{path}: {found_size} bytes, but metadata.db records {size} "
                                 "(the file was changed after it was attached)")
