"""The node's bounded cache of whole remote files (`Cache`, `Entry`), the Rust binary's
(src/store/cache.rs), bit for bit, so that the command line and Python processes on one node
share one folder and download each file once:
- `<dir>/CACHEDIR.TAG`, `<dir>/entries/NAME` (the file, CRC-checked), `NAME.lock` beside it
  and `NAME.part` while it downloads; `NAME` is
  `{xxh3_64(url):016x}-{crc32c:08x}-{bytes}-{file name, sanitised}`, the URL written as the
  Rust `Url` writes it (`_remote.Url.__str__`).
- `flock(2)` on `NAME.lock` (Python's `fcntl.flock` is flock(2), as Rust's `libc::flock`):
  exclusive while downloading or evicting, shared while an `Entry` lives. A shared lock is
  waited for (only a downloader or an evictor holds it exclusively, and neither waits for
  an entry's lock); an exclusive one is only ever tried, never waited for, so two processes
  that each pin an entry the other wants cannot wait for each other.
- An entry is never trusted blindly: each pin reads the whole file and checks its CRC-32C;
  a damaged file is reported (a warning naming it), removed and fetched again.
- A download reserves its full size (`NAME.part` made at full length) under
  `<dir>/.evict.lock`, is checked against the recorded size and CRC-32C, then renamed into
  place; a `.part` is never read as data.
- Eviction: least recently used first (the lock file's modification time, stamped on each
  fetch), only names of the cache's own pattern, never an entry another process holds.
- `entries/` may be deleted at any time (it is made again, and its lock files opened again
  by path, at each step of a fetch). An entry whose file is gone while a process still pins
  it (so its exclusive lock never comes) has its lock file replaced after about 2 s: the
  holder keeps its open file, everyone else starts over on a new lock.

A process forked while another thread of its parent held a lock of the cache gets a copy of
that lock, which would hold it for as long as the child lives: the child closes those copies
(`_close_other_threads_locks`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
import time
import warnings
from pathlib import Path

from ._errors import PackError

_TAG = "CACHEDIR.TAG"
_TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
             "# This folder is a cache made by dataset-packer: its entries/ can be deleted at "
             "any time.\n")
#: Tries of an entry's exclusive lock (`_RETRY_PAUSE` apart, about 2 s in all) before its
#: lock file is taken for one whose file is gone under a process that pins it.
_STALE_TRIES = 100
_RETRY_PAUSE = 0.02
#: What the `s3` extra installs, for machines where the package's own source is not at hand.
_PLAIN_INSTALL = "pip install obstore google-crc32c xxhash"


class CorruptError(PackError):
    """A downloaded file whose size or CRC-32C is not the one metadata.db (or the commit's
    record) records, the cache keeping nothing of it; or a commit record that is not one,
    or that disagrees with its metadata.db. The message names the URL."""


class CacheWarning(UserWarning):
    """A cache file found damaged (its CRC-32C is not the recorded one): it is removed and
    fetched again; the warning names the file."""


class CacheLimitError(PackError):
    """A file that cannot fit in the cache's limit (`cache_limit=`): larger than the limit,
    or the rest of the cache is in use."""


def install_hint() -> str:
    """The command that adds the `s3` extra where this package was installed from (a folder
    or a wheel file, as pip recorded it: PEP 610's direct_url.json), else the plain install
    of the extra's packages (the package is not on PyPI, so `dataset-packer[s3]` alone finds
    nothing)."""
    import json
    from urllib.parse import unquote, urlparse
    try:
        from importlib.metadata import distribution
        info = json.loads(distribution("dataset-packer").read_text("direct_url.json") or "{}")
    except Exception:  # not installed by pip (a PYTHONPATH checkout), or no record
        info = {}
    url = urlparse(info.get("url", ""))
    if url.scheme != "file":
        return _PLAIN_INSTALL
    path = unquote(url.path)
    if "dir_info" in info:
        editable = "-e " if info["dir_info"].get("editable") else ""
        return f'pip install {editable}"{path}[s3]" (or: {_PLAIN_INSTALL})'
    return f'pip install "dataset-packer[s3] @ file://{path}" (or: {_PLAIN_INSTALL})'


def _require(module: str):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise PackError(f"reading a pack in object storage needs the package {module!r}: "
                        f"{install_hint()}") from None


def entry_name(url, length: int, crc32c: int, start: int | None = None) -> str:
    """The cache entry of a file: `<xxh3_64 of the URL>-<crc>-<len>-<file name>`, the file
    name's characters other than ASCII letters, digits and `._-` written `_`, at most 100;
    of the block of it that starts at byte `start`, the same of `<URL>@<start>` and
    `<file name>@<start>` (the binary's `entry_name`, exactly)."""
    xxhash = _require("xxhash")
    key, name = str(url), url.name
    if start is not None:
        key, name = f"{key}@{start}", f"{name}@{start}"
    digest = xxhash.xxh3_64_intdigest(key.encode("utf-8"))
    file = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "_"
                   for c in name)[:100]
    return f"{digest:016x}-{crc32c:08x}-{length}-{file}"


def is_entry_name(name: str) -> bool:
    """Whether `name` is one the cache makes (and so a file it may remove)."""
    parts = name.split("-", 3)
    if len(parts) != 4:
        return False
    hexdigits = "0123456789abcdefABCDEF"
    return (len(parts[0]) == 16 and all(c in hexdigits for c in parts[0])
            and len(parts[1]) == 8 and all(c in hexdigits for c in parts[1])
            and parts[2] != "" and all(c in "0123456789" for c in parts[2])
            and not parts[3].endswith((".lock", ".part")))


class Entry:
    """A cached file in use (`path`): while it is held, no process evicts it. Release it
    with `release()` or a `with` block (or let it be collected)."""

    def __init__(self, path: Path, lock_fd: int):
        self.path = path
        self._fd = lock_fd

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)  # an Entry's own lock

    def __enter__(self) -> "Entry":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        self.release()


class Cache:
    """The node's cache folder of remote files, bounded by `limit` bytes, shared with every
    process (Python or the binary) that names the same folder (see the module docstring).
    """

    def __init__(self, folder, limit: int, client: Client):
        self.dir = Path(folder)
        self.entries = self.dir / "entries"
        self.limit = int(limit)
        self.client = client
        try:
            self.entries.mkdir(parents=True, exist_ok=True)
            tag = self.dir / _TAG
            if not tag.exists():
                tag.write_text(_TAG_TEXT)
        except OSError as e:
            raise PackError(f"creating the cache folder {self.entries}: {e}") from None

    def size(self) -> int:
        """The bytes the cache holds now (entries and downloads under way)."""
        return sum(size for _, size, _ in self._scan())

    def fetch(self, url, length: int, crc32c: int, start: int | None = None,
              blocks=None) -> Entry:
        """The file at `url` (`length` bytes, CRC-32C `crc32c`) as a local file pinned in the
        cache: from the cache (its CRC checked again), else downloaded once for the whole
        node (a process that wants it while another downloads it waits), checked and kept.
        `CorruptError` when the downloaded bytes do not match, `CacheLimitError` when it
        cannot fit. With `start`: the block of the file that starts there (`length` bytes
        with CRC-32C `crc32c`), an entry of its own fetched by one ranged request. With
        `blocks` (block size, each block's CRC-32C, which must combine into `crc32c`): the
        whole file downloaded by one ranged request per block, several at once, each block
        checked."""
        name = entry_name(url, length, crc32c, start)
        path = self.entries / name
        lock_path = self.entries / f"{name}.lock"
        stale = 0
        while True:
            # Made again at every step: `entries/` may be deleted under a running process.
            self._make_entries()
            fd = _open_entry_lock(lock_path)
            if fd is None:
                continue
            try:
                # Waited for: only a downloader or an evictor holds it exclusively, and they
                # never wait for an entry's lock.
                _flock(fd, fcntl.LOCK_SH)
                if _same_file(fd, lock_path) and _is_complete(path, length):
                    # Checked at every pin: a disk or a hand may have changed it since.
                    found = _file_crc32c(path)
                    if found == crc32c:
                        _stamp(fd)
                        return Entry(path, _handed_over(fd))
                    if found is not None:  # (None: removed meanwhile)
                        _warn_damaged(path, found, crc32c)
                        _remove(path)
                    _close(fd)
                    continue
            except BaseException:
                _close(fd)
                raise
            _close(fd)
            fd = _open_entry_lock(lock_path)
            if fd is None:
                continue
            if not _try_flock(fd, fcntl.LOCK_EX):
                # Another process pins it, or is between its look and its close. When an
                # entry's file is gone while a process pins it, the exclusive lock never
                # comes: after about 2 s the lock file is replaced (the holder keeps its open
                # file; every other process starts over on the new one).
                _close(fd)
                stale += 1
                if stale > _STALE_TRIES:
                    _remove(lock_path)
                    stale = 0
                time.sleep(_RETRY_PAUSE)
                continue
            entry = self._fill(fd, url, path, lock_path, length, crc32c, start, blocks)
            if entry is not None:
                return entry

    def holds(self, url, length: int, crc32c: int, start: int | None = None) -> bool:
        """Whether the cache holds the file at `url` (with `start`: that block of it) now:
        looked at, not pinned or checked (the binary's `Cache::holds`)."""
        return _is_complete(self.entries / entry_name(url, length, crc32c, start), length)

    def _fill(self, fd: int, url, path: Path, lock_path: Path, length: int,
              crc32c: int, start: int | None = None, blocks=None) -> Entry | None:
        """With the entry's exclusive lock (`fd`): downloads the file, then pins it; None (and
        `fd` closed) when the fetch must start over (also when another process downloaded it
        meanwhile: it is then pinned the checked way)."""
        try:
            if not _same_file(fd, lock_path):
                _close(fd)
                return None
            if _is_complete(path, length):
                # Another process downloaded it between the two looks: pin it the checked
                # way, under the shared lock.
                _close(fd)
                return None
            try:
                self._download(url, path, length, crc32c, start, blocks)
            except BaseException as e:
                if not _same_file(fd, lock_path):
                    if _local_file_missing(e):
                        # `entries/` was deleted during the download: start over in
                        # the new one.
                        _close(fd)
                        return None
                else:
                    # Nothing was kept: neither is the entry's lock file (removed
                    # while locked, as an eviction removes it).
                    _remove(lock_path)
                raise
            _stamp(fd)
            # Downgrading is not atomic: an evictor may take the entry in between, so look
            # again under the shared lock (no second CRC: the file was just checked).
            _flock(fd, fcntl.LOCK_SH)
        except BaseException:
            _close(fd)
            raise
        if _is_complete(path, length) and _same_file(fd, lock_path):
            return Entry(path, _handed_over(fd))
        _close(fd)
        return None

    def _make_entries(self) -> None:
        try:
            self.entries.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PackError(f"creating the cache folder {self.entries}: {e}") from None

    def _download(self, url, path: Path, length: int, crc32c: int,
                  start: int | None = None, blocks=None) -> None:
        part = path.with_name(f"{path.name}.part")
        with self._evict_lock():
            _remove(part)
            self._make_room(length, url)
            # Reserved at full length before the next process counts the cache's size.
            try:
                with open(part, "wb") as reserved:
                    reserved.truncate(length)
            except OSError:
                _remove(part)
                raise
        try:
            by_blocks = blocks is not None and start is None and len(blocks[1]) > 1
            if not (by_blocks and self._download_blocks(url, part, length, *blocks)):
                self._download_one(url, part, length, crc32c, start)
            os.rename(part, path)
        except BaseException:
            _remove(part)
            raise

    def _download_one(self, url, part: Path, length: int, crc32c: int,
                      start: int | None) -> None:
        """The file at `url` (with `start`: its block there) written into `part` by one
        request, checked."""
        if start is None:
            written, crc = self.client.download_file(url, part)
        else:
            written, crc = self.client.download_file(url, part, start, length)
        if written != length or crc != crc32c:
            what = "" if start is None else f" (bytes {start}..{start + length})"
            raise CorruptError(
                f"{url}{what}: downloaded {written} bytes with CRC-32C {crc:08x}, expected "
                f"{length} bytes with {crc32c:08x}; the cache keeps nothing of it")

    def _download_blocks(self, url, part: Path, length: int, block_bytes: int,
                         crcs) -> bool:
        """The file at `url` written into `part` block by block, each checked; False when
        the server serves whole files only (nothing written then)."""
        try:
            got = self.client.download_blocks(url, part, length, block_bytes)
        except Exception as e:
            if ranges_refused(e):
                return False
            raise
        for index, ((written, crc), expected) in enumerate(zip(got, crcs)):
            start = index * block_bytes
            size = min(block_bytes, length - start)
            if written != size or crc != int(expected):
                raise CorruptError(
                    f"{url} (bytes {start}..{start + size}): downloaded {written} bytes with "
                    f"CRC-32C {crc:08x}, expected {size} bytes with {int(expected):08x}; the "
                    "cache keeps nothing of the file")
        return True

    def _make_room(self, incoming: int, url) -> None:
        """Evicts least recently used entries not in use until `incoming` more bytes fit.
        Called with the eviction lock held."""
        if incoming > self.limit:
            raise CacheLimitError(f"{url} ({incoming} bytes) is larger than the cache's limit "
                                  f"({self.limit} bytes): raise cache_limit")
        files = self._scan()
        total = sum(size for _, size, _ in files)
        if total + incoming <= self.limit:
            return
        for name, size, _ in sorted(files, key=lambda f: f[2]):
            if total + incoming <= self.limit:
                break
            if self._evict(name):
                total -= size
        if total + incoming > self.limit:
            raise CacheLimitError(f"the cache {self.dir} cannot take {url} ({incoming} bytes): "
                                  f"{total} of its {self.limit} bytes are files in use "
                                  "(raise cache_limit)")

    def _evict(self, name: str) -> bool:
        """Removes the entry unless a process uses or downloads it; whether it did."""
        lock_path = self.entries / f"{name}.lock"
        fd = _try_lock_entry(lock_path)
        if fd is None:
            return False
        try:
            for file in (name, f"{name}.part"):
                _remove(self.entries / file)
            # Removed while locked: a process that opened the old lock file sees it is gone
            # (`_same_file`) and starts over.
            _remove(lock_path)
        finally:
            _close(fd)
        return True

    def _scan(self) -> list[tuple[str, int, float]]:
        """(name, bytes, last used) of the cache's own entries, in name order."""
        found: dict[str, int] = {}
        with os.scandir(self.entries) as listing:
            for item in listing:
                name = item.name[:-5] if item.name.endswith(".part") else item.name
                if not is_entry_name(name):
                    continue
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    found[name] = found.get(name, 0) + st.st_size
        out = []
        for name in sorted(found):
            try:
                used = os.stat(self.entries / f"{name}.lock").st_mtime
            except OSError:
                used = 0.0
            out.append((name, found[name], used))
        return out

    def _evict_lock(self):
        return _Locked(self.dir / ".evict.lock")


class _Locked:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.fd = _open_lock(self.path)
        _flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        _close(self.fd)


def ranges_refused(e: BaseException) -> bool:
    """Whether `e` is a server's refusal of ranged requests (a web server that serves whole
    files only): what is read by ranges is then fetched whole."""
    return "Range request not supported" in str(e)


def _is_complete(path: Path, length: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == length


def _file_crc32c(path: Path) -> int | None:
    """The CRC-32C of the whole file; None when it is gone (removed meanwhile)."""
    crc32c = _require("google_crc32c")
    crc = 0
    try:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                crc = crc32c.extend(crc, chunk)
    except FileNotFoundError:
        return None
    return crc


def _local_file_missing(e: BaseException) -> bool:
    """A local file or folder that is gone (not a missing object, a `NotAPackError`)."""
    return isinstance(e, FileNotFoundError) and not isinstance(e, PackError)


def _warn_damaged(path: Path, found: int, expected: int) -> None:
    warnings.warn(f"cache file {path} is damaged (CRC-32C {found:08x}, expected "
                  f"{expected:08x}); fetching it again", CacheWarning, stacklevel=4)


def _stamp(fd: int) -> None:
    try:
        os.utime(fd)
    except OSError:
        pass


def _open_lock(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    _working[fd] = threading.get_ident()
    return fd


# Lock files a fetch is working with (fd → the thread), until they are closed or handed to an
# `Entry`. A forked child gets copies of them, which would hold their locks for as long as
# the child lives, though the threads using them are not in the child: a prefetch that was
# downloading (an exclusive lock) would make every process wait for that file forever. The
# child closes the copies of other threads' locks (plain dict operations: no lock to be
# held at fork time).
_working: dict[int, int] = {}


def _close(fd: int) -> None:
    _working.pop(fd, None)
    os.close(fd)


def _handed_over(fd: int) -> int:
    """The lock now belongs to an object (an `Entry`, a view) that the child has too."""
    _working.pop(fd, None)
    return fd


def _close_other_threads_locks() -> None:
    me = threading.get_ident()
    for fd, owner in list(_working.items()):
        if owner != me:
            _working.pop(fd, None)
            try:
                os.close(fd)
            except OSError:
                pass


os.register_at_fork(after_in_child=_close_other_threads_locks)


def _flock(fd: int, op: int) -> None:
    while True:
        try:
            fcntl.flock(fd, op)
            return
        except InterruptedError:
            continue


def _lock_entry(path: Path, op: int) -> int:
    """The lock file at `path` opened and locked (`op`), waiting; starts over when the file
    was removed (evicted) while waiting."""
    while True:
        fd = _open_lock(path)
        try:
            _flock(fd, op)
        except BaseException:
            _close(fd)
            raise
        if _same_file(fd, path):
            return fd
        _close(fd)


def _open_entry_lock(path: Path) -> int | None:
    """The entry's lock file opened (created if needed); None when `entries/` was deleted
    meanwhile (the fetch makes it again and starts over)."""
    try:
        return _open_lock(path)
    except FileNotFoundError:
        return None


def _try_flock(fd: int, op: int) -> bool:
    """Whether the lock `op` was taken without waiting (False: another process holds it)."""
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR):
            return False
        raise


def _try_lock_entry(path: Path) -> int | None:
    """The exclusive lock on `path` if no process holds any lock on it, else None."""
    fd = _open_lock(path)
    try:
        taken = _try_flock(fd, fcntl.LOCK_EX)
    except BaseException:
        _close(fd)
        raise
    if taken and _same_file(fd, path):
        return fd
    _close(fd)
    return None


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev)


def _remove(path: Path) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
