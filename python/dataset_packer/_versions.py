"""A pack's versions (docs/versions.md): its identity, its history, reading a past version,
and the check of a saved resume state against the pack a reader reads.

`metadata.db` keeps the history (tables `versions`, `version_files`, `version_tags`,
`version_sources`). In-place changes only append, so version N is the first `rows` rows
(each steps file cut to the rows it had then), the `runs` smallest run ids and the
families N lists; `History` reads the tables, `version_shards` and `open_past_family` open a
past version's files. A pack without the tables is version 1 of itself.

An epoch's order is a function of the rows it permutes, so a resume point (epoch,
start_sample) means something only on the rows it was saved on. Every resume state therefore
records the identity of the pack it was saved on: `pack_id` (None for a pack made before
packs had one), `version` and `rows`. `saved_version` finds the version on which a saved
epoch goes on as it would have (the saved one, from the history, when the pack has grown
since), and refuses, naming both identities, a state of another pack or of a version the
history does not hold, instead of resuming silently with another permutation.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from . import _data
from ._companions import open_prefix_family
from ._errors import PackError, VersionError
from ._format import Shard, read_shard_header
from ._select import has_table

#: The keys of a pack's identity in a resume state.
IDENTITY_KEYS = ("pack_id", "version", "rows")


def identity(pack_id: str | None, version: int, rows: int) -> dict:
    return {"pack_id": pack_id, "version": int(version), "rows": int(rows)}


def describe(found: Mapping) -> str:
    """`pack_id@version, N rows`, as messages name a pack's state."""
    pack_id = found.get("pack_id")
    return f"{pack_id if pack_id is not None else 'unversioned'}@{found.get('version')}, " \
           f"{found.get('rows')} rows"


def saved_identity(state: Mapping) -> dict | None:
    """The pack identity a state records, or None for a state saved before states recorded
    one (warned about: it cannot be checked)."""
    if all(key in state for key in IDENTITY_KEYS):
        return {key: state[key] for key in IDENTITY_KEYS}
    warnings.warn("this resume state records no pack identity (pack_id, version, rows): it was "
                  "saved by an older dataset_packer, so whether the pack changed since cannot "
                  "be checked; it is resumed as if it had not", stacklevel=3)
    return None


def refuse(path, saved: Mapping, current: Mapping, why: str) -> VersionError:
    return VersionError(
        f"this resume state was saved on pack {describe(saved)}, but {path} is "
        f"{describe(current)}: {why}; resuming would not continue the saved epoch's order")


def saved_versions(pack, saved: Mapping) -> tuple:
    """The version of `pack` to go on reading an epoch saved at `saved` (a state or an
    identity), as a 1-tuple (a Mixture's has one per source); see `saved_version`."""
    found = saved_identity(saved)
    return (pack.version if found is None else saved_version(pack, found),)


def saved_version(pack, saved: Mapping) -> int:
    """The version of `pack` on which an epoch saved at `saved` (an identity) goes on as it
    would have: the reader's own version when it has the saved rows, else the saved version
    from the pack's history. Refused, naming both identities, when the state is of another
    pack, or of a version the history does not hold (or holds with other rows)."""
    current = pack.identity
    if saved["pack_id"] is None:
        if int(saved["rows"]) == current["rows"]:
            return pack.version
        history = _data.of(pack).history
        if _began_before_versions(pack) and history.version_rows(1) == int(saved["rows"]):
            # Saved before the pack recorded versions: its first change in place recorded the
            # state the epoch was saved on as version 1.
            return 1
        raise refuse(pack.path, saved, current,
                     "the pack has changed since (a state saved on a pack without a pack_id "
                     "resumes only on the same rows, or on the version 1 its first recorded "
                     "change kept of it)")
    if saved["pack_id"] != current["pack_id"]:
        raise refuse(pack.path, saved, current, "it is another pack")
    history = _data.of(pack).history
    version = int(saved["version"])
    if not history.holds(version):
        raise refuse(pack.path, saved, current,
                     f"its history holds no version {version} ({history.what_it_has()}); "
                     "the pack was rewritten")
    rows = history.version_rows(version)
    rows = current["rows"] if rows is None else rows
    if rows != int(saved["rows"]):
        raise refuse(pack.path, saved, current,
                     f"its version {version} has {rows} rows; the pack was rewritten")
    if rows == current["rows"] and history.version_runs(version) in (None, pack.num_runs):
        return pack.version  # the same rows and runs (an attach, a detach): the same epochs
    return version


def _began_before_versions(pack) -> bool:
    """Whether the pack's version 1 is the state it was in before it recorded versions (the
    first change in place records it, with no command line)."""
    if not _data.of(pack).history.recorded:
        return False
    first = pack.versions()[0]
    return first["version"] == 1 and not first["command"]


# ---------------------------------------------------------------------- the history

class History:
    """A pack's versions as metadata.db records them (tables `versions`, `version_files`,
    `version_tags`, `version_sources`). Opening reads the `versions` table and the tags
    only (a few rows per version); the files of a version are read when that version is
    opened. A pack without the tables is version 1 of itself: its rows, runs and families.
    """

    def __init__(self, db, path):
        # `db()` is the pack's connection, re-opened in a forked worker: a connection is
        # never used across a fork.
        self.path = path
        self._db = db
        conn = db()
        self.recorded = has_table(conn, "versions")
        self.rows: dict[int, tuple] = {}
        self.tags: dict[str, int] = {}
        if self.recorded:
            for row in conn.execute("SELECT version, created_utc, operation, rows, runs, "
                                    "command FROM versions ORDER BY version"):
                self.rows[int(row[0])] = row
            if has_table(conn, "version_tags"):
                self.tags = {str(name): int(v) for name, v in conn.execute(
                    "SELECT name, version FROM version_tags ORDER BY name")}
        if self.recorded and not self.rows:
            raise PackError(f"{path}/metadata.db: the versions table is empty (a pack has at "
                            "least version 1); run `dataset-packer validate` on it")

    @property
    def latest(self) -> int:
        return max(self.rows) if self.rows else 1

    def numbers(self) -> list[int]:
        return sorted(self.rows) if self.rows else [1]

    def holds(self, version: int) -> bool:
        return version in self.numbers()

    def version_rows(self, version: int) -> int | None:
        """The rows of a recorded version (None when the history records none)."""
        row = self.rows.get(version)
        return None if row is None else int(row[3])

    def version_runs(self, version: int) -> int | None:
        row = self.rows.get(version)
        return None if row is None else int(row[4])

    def resolve(self, asked) -> int:
        """The version number `asked` names: None or "latest" the highest, a number (or a
        string of digits) that version, another string a tag. Anything else is refused,
        naming the pack and the versions it has."""
        if asked is None or asked == "latest":
            return self.latest
        if isinstance(asked, bool):
            raise TypeError(f"version must be a number or a tag name, not {asked!r}")
        if isinstance(asked, (int, np.integer)) or (isinstance(asked, str) and asked.isdigit()):
            number = int(asked)
            if self.holds(number):
                return number
            raise VersionError(f"{self.path} has no version {number}: {self.what_it_has()}")
        if isinstance(asked, str):
            if asked in self.tags:
                return self.tags[asked]
            raise VersionError(f"{self.path} has no version tagged {asked!r}: "
                               f"{self.what_it_has()}")
        raise TypeError(f"version must be a number or a tag name, not {asked!r}")

    def what_it_has(self) -> str:
        if not self.recorded:
            return ("it has version 1 only (it was made before packs recorded versions; "
                    "its first in-place change records the next)")
        numbers = self.numbers()
        listed = (f"1..{numbers[-1]}" if numbers == list(range(1, numbers[-1] + 1)) else
                  ", ".join(map(str, numbers)))
        tags = ", ".join(f"{name} = {v}" for name, v in sorted(self.tags.items()))
        return f"it has versions {listed}" + (f" and tags {tags}" if tags else " and no tags")

    def files(self, version: int, family: str) -> list[tuple[int, str, int]]:
        """(shard, file name, rows of the version) of one family's files in a version."""
        return [(int(s), str(f), int(r)) for s, f, r in self._db().execute(
            "SELECT shard, file_name, rows FROM version_files WHERE version = ? AND family = ? "
            "ORDER BY shard", (int(version), family))]

    def families(self, version: int) -> list[str]:
        """The companion families a recorded version lists."""
        return [str(f) for (f,) in self._db().execute(
            "SELECT DISTINCT family FROM version_files WHERE version = ? AND family != 'steps' "
            "ORDER BY family", (int(version),))]

    def removed_in(self, family: str, version: int) -> int | None:
        """The first version after `version` that does not list `family` (None: every later
        version lists it)."""
        listing = {int(v) for (v,) in self._db().execute(
            "SELECT DISTINCT version FROM version_files WHERE family = ? AND version > ?",
            (family, int(version)))}
        later = [v for v in self.numbers() if v > version]
        return next((v for v in later if v not in listing), None)

    def added_in(self, family: str, version: int) -> int | None:
        """The first version after `version` that lists `family`."""
        (found,) = self._db().execute(
            "SELECT MIN(version) FROM version_files WHERE family = ? AND version > ?",
            (family, int(version))).fetchone()
        return None if found is None else int(found)

    def listing(self) -> list[dict]:
        """Every version as a dict (see `Pack.versions`), oldest first."""
        conn = self._db()
        files: dict[int, list] = {}
        for v, family, shard, name, rows, size, crc in conn.execute(
                "SELECT version, family, shard, file_name, rows, bytes, crc32c FROM "
                "version_files ORDER BY version, family = 'steps' DESC, family, shard"):
            files.setdefault(int(v), []).append(
                {"family": family, "shard": int(shard), "file_name": name, "rows": int(rows),
                 "bytes": int(size), "crc32c": crc})
        tags: dict[int, list] = {}
        for name, v in sorted(self.tags.items()):
            tags.setdefault(v, []).append(name)
        sources: dict[int, list] = {}
        if has_table(conn, "version_sources"):
            for v, pack_id, source_version, path in conn.execute(
                    "SELECT version, pack_id, source_version, path FROM version_sources "
                    "ORDER BY rowid"):
                sources.setdefault(int(v), []).append(
                    {"pack_id": pack_id, "version": int(source_version), "path": path})
        out = []
        for v, (_, created, operation, rows, runs, command) in sorted(self.rows.items()):
            mine = files.get(v, [])
            out.append({
                "version": v, "created_utc": created, "operation": operation,
                "rows": int(rows), "runs": int(runs), "command": _command(command),
                "files": mine,
                "families": sorted({f["family"] for f in mine if f["family"] != "steps"}),
                "tags": tags.get(v, []), "sources": sources.get(v, [])})
        return out


def _command(text):
    """The recorded command line (a JSON array of strings), or the text as it is."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return text
    return value


def unrecorded_listing(pack) -> list[dict]:
    """`Pack.versions()` of a pack made before versions: version 1, as its tables describe
    it now (as `dataset-packer versions` lists it)."""
    conn = pack.db()
    files = []
    if has_table(conn, "shards"):
        files = [{"family": "steps", "shard": int(k), "file_name": name, "rows": int(rows),
                  "bytes": int(size), "crc32c": crc} for k, name, rows, size, crc in
                 conn.execute("SELECT shard, file_name, rows, bytes, crc32c FROM shards "
                              "ORDER BY shard")]
    if has_table(conn, "companions"):
        files += [{"family": name, "shard": int(k), "file_name": file, "rows": int(rows),
                   "bytes": int(size), "crc32c": crc} for name, k, file, rows, size, crc in
                  conn.execute("SELECT name, shard, file_name, rows, bytes, crc32c FROM "
                               "companions ORDER BY name, shard")]
    return [{"version": 1, "created_utc": pack.session.get("created_utc", ""),
             "operation": pack.session.get("command", "unknown"), "rows": len(pack),
             "runs": pack.num_runs, "command": [], "files": files,
             "families": sorted({f["family"] for f in files if f["family"] != "steps"}),
             "tags": [], "sources": []}]


def restriction(conn, runs: int) -> str:
    """SQL that shadows the run tables with TEMP views of a past version's runs (the `runs`
    smallest ids), as the command line reads a version: then every query of the read-only
    connection, a selection's included, sees only them."""
    found = conn.execute("SELECT id FROM main.runs ORDER BY id LIMIT 1 OFFSET ?",
                         (max(runs - 1, 0),)).fetchone() if runs else None
    last = -1 if found is None else int(found[0])
    sql = [f"CREATE TEMP VIEW runs AS SELECT * FROM main.runs WHERE id <= {last};"]
    for table, column in (("run_details", "run_id"), ("run_index", "run_id"),
                          ("findings", "run_id")):
        if has_table(conn, table):
            sql.append(f"CREATE TEMP VIEW {table} AS SELECT * FROM main.{table} "
                       f"WHERE {column} IS NULL OR {column} <= {last};")
    return "\n".join(sql)


def version_shards(pack, history: History, version: int, names, source) -> list[Shard]:
    """The steps files of a past version, each cut to the rows it had then (a prefix of the
    file now: in-place changes only append), of the pack's file `names`, each read from
    `source(name)`. A file that is gone, or holds fewer rows than the version had, means the
    pack was rewritten: refused, naming the file."""
    listed = history.files(version, "steps")
    if not listed:
        raise PackError(f"{pack.path}/metadata.db: version {version} lists no steps files")
    shards = []
    for _, name, rows in listed:
        path = pack.path / name
        if name not in names:
            raise VersionError(f"{path}: missing, but version {version} of {pack.path} has "
                               f"{rows} rows in it (was the pack rewritten?)")
        found = read_shard_header(path, source(name))
        if found.rows < rows:
            raise VersionError(f"{path}: {found.rows} rows, but version {version} of "
                               f"{pack.path} has {rows} rows in it (was the pack rewritten?)")
        shards.append(replace(found, rows=rows))
    total = sum(s.rows for s in shards)
    if total != history.version_rows(version):
        raise PackError(f"{pack.path}/metadata.db: version {version} has "
                        f"{history.version_rows(version)} rows, but its steps files list "
                        f"{total}; run `dataset-packer validate` on it")
    return shards


def open_past_family(pack, name: str):
    """The companion family `name` as the pack's past version had it. A family the version
    does not list is a KeyError; one that a later version no longer lists (detached since,
    and perhaps attached again with other rows) is refused, naming the version that removed
    it."""
    data = _data.of(pack)
    history, version = data.history, data.version
    if name not in history.families(version):
        added = history.added_in(name, version)
        since = f" (it was attached in version {added})" if added is not None else ""
        listed = history.families(version)
        raise KeyError(f"no companion {name!r} in {pack.path} at version {version}{since}; "
                       f"{'it has ' + ', '.join(listed) if listed else 'it has none'}")
    removed = history.removed_in(name, version)
    if removed is not None:
        raise VersionError(f"companion {name!r} of {pack.path} at version {version} was "
                           f"detached in version {removed}: its files no longer hold "
                           f"version {version}'s rows (the rows of version {version} still "
                           "read)")
    files = [(pack.path / file, shard.path.name, rows)
             for (_, file, rows), shard in zip(history.files(version, name), data.shards)]
    if not data.is_remote:
        held = data.file_names()
        missing = [path for path, _, _ in files if path.name not in held]
        if missing:
            raise VersionError(f"{missing[0]}: missing, but version {version} of {pack.path} "
                               f"lists it in companion {name!r}")
    # Each file as the latest version records it (in-place changes only append): a remote
    # one as `local_files` gives it, a local one as it was opened with the pack; read up to
    # the version's rows.
    locals_ = data.local_files([path.name for path, _, _ in files])
    return open_prefix_family(pack, name, [(path, shard, rows, local) for (path, shard, rows),
                                           local in zip(files, locals_)])
