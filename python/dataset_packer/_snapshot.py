"""Opening a local pack while another process publishes into it: a `Pack` is a snapshot of
one version, as an SQLite read transaction is (the command line does the same).

Writers publish by rename only: the old `metadata.db` is moved out first, files are replaced
by renaming new ones over them (never rewritten in place), and the new `metadata.db` is moved
in last. So the `metadata.db` at the path is a new file (a new inode, a new change time)
whenever anything else in the folder may have changed. An open that finds the same
`metadata.db` before and after it opened every file of the pack holds one version; `Held`
keeps those files open, and every later read goes through them (on Linux as
`/proc/self/fd/N`, which a forked DataLoader worker inherits), whatever is renamed over their
names meanwhile.

`consistently` runs an open that way: again when `metadata.db` changed under it, and waiting
while a publish is visibly under way (no `metadata.db`, a complete staged pack).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from ._errors import PackBusyError
from ._format import METADATA_NAME

#: How long an open waits for a folder that keeps changing before it gives up.
PATIENCE = 10.0
STAGING = ".dataset-packer-staging"
COMPLETE = ".complete"
_PROC_FDS = Path("/proc/self/fd")


def identity(folder: Path):
    """What tells one `metadata.db` at `folder` from the next; None when there is none."""
    try:
        return _identity(os.stat(folder / METADATA_NAME))
    except FileNotFoundError:
        return None


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def publish_under_way(folder: Path) -> bool:
    """No `metadata.db`, and a complete staged pack: a publish is swapping files in (or was
    killed doing so; the next writer finishes it)."""
    return (not (folder / METADATA_NAME).exists()
            and (folder / STAGING / COMPLETE).is_file())


def publishing_note(folder: Path) -> str:
    """For a message about a folder without `metadata.db`: that a publish is under way."""
    if publish_under_way(folder):
        return (" (a publish into it is under way, or was interrupted; the next write into "
                "the folder finishes it): try again")
    return ""


def consistently(folder: Path, open_once, discard=lambda: None):
    """`open_once()` (which opens every file of the pack it will read) run until `metadata.db`
    is the same before and after it; `discard()` undoes a try that is not returned (thrown
    away, or failed: its files are closed either way). An error raised with `metadata.db`
    unchanged is the pack's own, and raised as it is."""
    started = time.monotonic()
    pause = 0.001
    tries = 0
    while True:
        tries += 1
        before = identity(folder)
        waited_enough = time.monotonic() - started >= PATIENCE
        # A publish under way is waited out without trying; after PATIENCE, the open says
        # what the folder is.
        if before is not None or not publish_under_way(folder) or waited_enough:
            try:
                opened = open_once()
            except BaseException as e:
                discard()
                if identity(folder) == before or not isinstance(e, Exception):
                    raise
            else:
                if identity(folder) == before:
                    return opened
                discard()
            if waited_enough:
                raise PackBusyError(
                    f"{folder} kept changing while it was opened ({tries} tries in "
                    f"{time.monotonic() - started:.1f} s): another process publishes into it "
                    "again and again; try again")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _pack_file(name: str) -> bool:
    return name.endswith(".npy") or name in (METADATA_NAME, "valuation_types.json")


class Held:
    """Every file of a local pack folder (`metadata.db`, shards, companions,
    `valuation_types.json`), opened now and kept open until `close`."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._fds: dict[str, int] = {}
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if _pack_file(entry.name) and entry.is_file():
                        try:
                            self._fds[entry.name] = os.open(entry.path,
                                                            os.O_RDONLY | os.O_CLOEXEC)
                        except FileNotFoundError:
                            pass  # renamed away meanwhile: the open is tried again
        except BaseException:
            self.close()
            raise

    def names(self) -> list[str]:
        """The names of the files held."""
        return sorted(self._fds)

    def has(self, name: str) -> bool:
        return name in self._fds

    def source(self, name: str) -> Path:
        """Where to read the held file `name` from: the file as it was opened (its path
        where this system cannot name an open file). A name not held reads from the folder,
        where it is reported missing."""
        fd = self._fds.get(name)
        if fd is None or not _PROC_FDS.is_dir():
            return self.folder / name
        return _PROC_FDS / str(fd)

    def release(self, names) -> None:
        """Closes the files `names` once nothing reads them through `source` any more (their
        memory maps hold them)."""
        for name in names:
            fd = self._fds.pop(name, None)
            if fd is not None:
                os.close(fd)

    def connect(self, open_readonly) -> sqlite3.Connection:
        """A connection to the held `metadata.db`, with `open_readonly(path)`. SQLite opens
        files by name (it resolves `/proc/self/fd/N` to the name), so the name is used while
        it is still the held file; once a publish has replaced it (a forked worker opening
        its own connection later), a private copy of the held file is."""
        path = self.folder / METADATA_NAME
        fd = self._fds.get(METADATA_NAME)
        if fd is None:
            return open_readonly(path)
        held = _identity(os.fstat(fd))
        if identity(self.folder) == held:
            conn = open_readonly(path)
            if identity(self.folder) == held:
                return conn
            conn.close()
        return _connect_copy(fd, open_readonly)

    def close(self) -> None:
        self.release(list(self._fds))


def _connect_copy(fd: int, open_readonly) -> sqlite3.Connection:
    """A read-only connection to a private copy of the open file `fd` (removed once the
    connection has it open)."""
    with tempfile.NamedTemporaryFile(prefix="dataset-packer-", suffix=".db",
                                     delete=False) as out:
        with os.fdopen(os.dup(fd), "rb") as src:
            src.seek(0)
            shutil.copyfileobj(src, out, 1 << 20)
    try:
        conn = open_readonly(Path(out.name))
        conn.execute("SELECT 1 FROM sqlite_master").fetchall()
        return conn
    finally:
        os.unlink(out.name)
