"""Packs in object storage: where a pack is (`parse_location`: a folder, or an `s3://`,
`gs://`, `az://`, `http(s)://` URL), the client (`obstore`, installed by the `[s3]` extra),
a pack's commit records (`Commit`), and a remote pack as a reader sees it (`RemotePack`: its
metadata.db in a private view folder, its files fetched on demand through the node's cache,
`_cache.Cache`).

A pack in a bucket is a table of commits (docs/object-storage.md, "The layout in a bucket"):
`P/_versions/{2**64-1-N:020}.json` records commit N's files, each an object written once (usually
`P/_objects/<writer>/<file name>`); the highest N is the latest. A reader reads one commit
(`RemotePack.commit`) for as long as it lives, and so do its copies in other processes
(pickled, forked): no later commit changes an object it names. A pack published before this
layout (no record; `P/metadata.db` and its files beside it) is read as it is, and a reader
of it says when it changed under it (`PackChangedError`).

A remote pack's `metadata.db` and `valuation_types.json` are downloaded fresh on each open
into a private view folder, `<dir>/views/<pid>-<n>/`, whose `.lock` its process holds while
it lives; an open removes the views nobody holds (and never looks at a view being made).

A process forked after obstore was used (a DataLoader worker) cannot use it: its runtime's
threads stayed in the parent. There requests go through a helper process (`_Helper`, a
fresh interpreter, one per forked process), and the copies of cache locks other threads
held at the fork are closed.

The base install is NumPy only: `obstore`, `google-crc32c` and `xxhash` are imported when a
remote pack is opened, and a missing one is a `PackError` saying what to install.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ._cache import (Cache, CacheLimitError, CorruptError, Entry, _close, _handed_over,
                     _lock_entry, _require, _try_lock_entry, ranges_refused)
from ._crc import combine_blocks
from ._errors import NotAPackError, PackChangedError, PackError

#: The cache's limit when none is given (as the binary's): 50 GiB.
DEFAULT_LIMIT = 50 << 30
CACHE_VAR = "DATASET_PACKER_CACHE"
CACHE_LIMIT_VAR = "DATASET_PACKER_CACHE_LIMIT"
_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "azure": "az",
            "http": "http", "https": "https"}


class UrlError(PackError, ValueError):
    """Text shaped like a URL that names no pack: an unknown scheme (`ftp://…`), a known one
    without `//` (`s3:bucket`), no bucket, or empty/`.`/`..` parts in the key."""


class RemoteError(PackError):
    """A request to the object store that failed: wrong credentials, access denied, the
    server unreachable after the retries (the message names the URL)."""


# ---------------------------------------------------------------------------- locations


class Url:
    """An object-store URL: scheme (`s3`, `gs`, `az`, `http`, `https`), bucket (for http,
    `host[:port]`) and key prefix (no leading or trailing `/`). Written as the binary writes
    it (`s3://bucket/prefix`); `url / "steps-00000.npy"` is a file under it and `.name` its
    last part, as for a `Path`, so messages name the URL."""

    __slots__ = ("scheme", "bucket", "prefix")

    def __init__(self, scheme: str, bucket: str, prefix: str):
        self.scheme, self.bucket, self.prefix = scheme, bucket, prefix

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")

    def __repr__(self) -> str:
        return f"Url({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Url) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __truediv__(self, name: str) -> "Url":
        prefix = self.prefix
        for segment in str(name).split("/"):
            _check_segment(segment, f"{self}/{name}")
            prefix = f"{prefix}/{segment}" if prefix else segment
        return Url(self.scheme, self.bucket, prefix)

    @property
    def name(self) -> str:
        """The last part of the key (the file name); empty for a bucket's root."""
        return self.prefix.rsplit("/", 1)[-1]

    @property
    def read_only(self) -> bool:
        return self.scheme in ("http", "https")


def parse_location(text) -> Path | Url:
    """What a user gave as a pack's place: a `Path`, or a `Url` (the binary's rules:
    `file:///abs` is a path; an unknown scheme, a known one without `//`, no bucket and
    empty/`.`/`..` key parts are `UrlError`, never a local folder named `s3:`)."""
    if isinstance(text, Url):
        return text
    if not isinstance(text, str):
        return Path(text)
    split = _split_scheme(text)
    if split is None:
        return Path(text)
    scheme, rest = split
    if not rest.startswith("//"):
        if scheme.lower() in _SCHEMES or scheme.lower() == "file":
            raise UrlError(f"{text!r}: a URL is written {scheme}://…")
        return Path(text)
    rest = rest[2:]
    if scheme.lower() == "file":
        if not rest.startswith("/"):
            raise UrlError(f"{text!r}: a file URL is written file:///absolute/path")
        return Path(rest)
    kind = _SCHEMES.get(scheme.lower())
    if kind is None:
        raise UrlError(f"{text!r}: unknown URL scheme {scheme!r} (a pack is a local folder or "
                       "an s3://, gs://, az://, http:// or https:// URL)")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise UrlError(f"{text!r}: the URL names no bucket ({scheme}://BUCKET/prefix)")
    key = key.rstrip("/")
    for segment in key.split("/") if key else []:
        _check_segment(segment, text)
    return Url(kind, bucket, key)


def _split_scheme(text: str):
    """(scheme, rest) when the text starts with something shaped like a URL scheme (a
    letter, then letters, digits, `+-.`), two characters at least (`C:` stays a path)."""
    scheme, colon, rest = text.partition(":")
    if not colon or len(scheme) < 2 or not (scheme[0].isascii() and scheme[0].isalpha()):
        return None
    if not all(c.isascii() and (c.isalnum() or c in "+-.") for c in scheme):
        return None
    return scheme, rest


def _check_segment(segment: str, whole: str) -> None:
    if segment in ("", ".", ".."):
        raise UrlError(f"{whole!r}: empty, `.` and `..` parts have no meaning in an object key")


# ---------------------------------------------------------------------------- configuration


def parse_size(text) -> int:
    """A size in bytes as a user writes it (the binary's rules): `50GiB`, `512MiB`, `1.5G`,
    `4096`, `10GB` (K/M/G/T and KiB… powers of 1024; KB, MB, GB, TB powers of 1000); an int
    is bytes."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a size like 50GiB, 512MiB or 1000000")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a size cannot be negative ({text})")
        return text
    t = str(text).strip()
    split = next((i for i, c in enumerate(t) if not (c.isascii() and c.isdigit()) and c != "."),
                 len(t))
    number, unit = t[:split], t[split:].strip().lower()
    scales = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
              "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40, "kb": 10**3,
              "mb": 10**6, "gb": 10**9, "tb": 10**12}
    try:
        value = float(number) if number not in ("", ".") else None
    except ValueError:
        value = None
    if value is None or unit not in scales or value * scales[unit] >= 2.0**64:
        raise ValueError(f"{text!r} is not a size like 50GiB, 512MiB or 1000000")
    return int(value * scales[unit])


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/dataset-packer`, else `~/.cache/dataset-packer` (the binary's)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if base:
        return Path(base) / "dataset-packer"
    home = os.environ.get("HOME")
    if not home:
        raise PackError("no cache folder: neither XDG_CACHE_HOME nor HOME is set; give one "
                        "(cache=…)")
    return Path(home) / ".cache" / "dataset-packer"


def cache_config(cache=None, cache_limit=None) -> tuple[Path, int]:
    """The cache folder and limit: the arguments, else `DATASET_PACKER_CACHE` /
    `DATASET_PACKER_CACHE_LIMIT`, else the default folder and 50 GiB."""
    if cache is None:
        cache = os.environ.get(CACHE_VAR) or None
    folder = Path(cache) if cache is not None else default_cache_dir()
    if cache_limit is None:
        text = os.environ.get(CACHE_LIMIT_VAR, "")
        try:
            limit = parse_size(text) if text.strip() else DEFAULT_LIMIT
        except ValueError as e:
            raise ValueError(f"{CACHE_LIMIT_VAR}={text}: {e}") from None
    else:
        limit = parse_size(cache_limit)
    return folder, limit


# ---------------------------------------------------------------------------- the client


class Client:
    """Blocking downloads from object storage through `obstore` (the Python binding of the
    Rust `object_store` the binary uses), one store per bucket, configured as the binary
    configures it: the environment's `AWS_*` (`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP=true`…),
    `GOOGLE_*`, `AZURE_*` variables; 10 retries with backoff 100 ms → 15 s within 3 minutes;
    a 60 s request timeout. Counts what it downloaded (`downloads`, `bytes_downloaded`)."""

    def __init__(self):
        self._obstore = _require("obstore")
        self._stores: dict[tuple, object] = {}
        self._lock = threading.Lock()
        self.downloads = 0
        self.bytes_downloaded = 0

    def _store(self, url: Url):
        key = (url.scheme, url.bucket)
        with self._lock:
            found = self._stores.get(key)
            if found is None:
                found = self._stores[key] = self._build(url)
            return found

    def _build(self, url: Url):
        stores = self._obstore.store
        retry = {"max_retries": 10, "retry_timeout": timedelta(minutes=3),
                 "backoff": {"init_backoff": timedelta(milliseconds=100),
                             "max_backoff": timedelta(seconds=15), "base": 2}}
        options = {"timeout": timedelta(seconds=60), "connect_timeout": timedelta(seconds=5),
                   **_client_options_from_env(url.scheme)}
        if url.scheme == "s3":
            _check_credentials(url)
            _check_plain_http(url)
            return stores.S3Store(url.bucket, client_options=options, retry_config=retry)
        if url.scheme == "gs":
            return stores.GCSStore(url.bucket, client_options=options, retry_config=retry)
        if url.scheme == "az":
            return stores.AzureStore(url.bucket, client_options=options, retry_config=retry)
        return stores.HTTPStore.from_url(f"{url.scheme}://{url.bucket}",
                                         client_options={**options, "allow_http": True},
                                         retry_config=retry)

    def download_file(self, url: Url, path: Path, start: int | None = None,
                      length: int | None = None, at: int = 0) -> tuple[int, int]:
        """Streams the object at `url` (with `start` and `length`: those bytes of it, by one
        ranged request) into the file `path` from its byte `at` (created if needed, never
        truncated: a cache download's `.part` is reserved at full length); (bytes written,
        their CRC-32C). Only the server's errors become `remote_error`s: a local one (a full
        disk) is raised as it is.

        In a process forked after this package used obstore, obstore's runtime (threads of
        the parent) is gone and a request would wait forever: there the download runs in a
        helper process of its own (`_Helper`), started once, which does the same."""
        if _runtime_pid is not None and _runtime_pid != os.getpid():
            written, crc = _helper().download_file(url, path, start, length, at)
        else:
            written, crc = self._download_here(url, path, start, length, at)
        self._count(written)
        return written, crc

    def download_blocks(self, url: Url, path: Path, size: int,
                        block_bytes: int) -> list[tuple[int, int]]:
        """The object at `url` (`size` bytes) written into the file `path` by one ranged
        request per block of `block_bytes`, `RANGES_IN_FLIGHT` at once (a shard arrives at
        the speed of several connections, and a window's last shard does not leave the link
        to one); (bytes written, their CRC-32C) of each block, in order. The first request to
        fail cancels those not started and is raised."""
        pool = _RANGES.executor()
        starts = range(0, size, block_bytes)
        futures = [pool.submit(self.download_file, url, path, a, min(block_bytes, size - a), a)
                   for a in starts]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()
            for f in futures:
                if not f.cancelled():
                    f.exception()  # waited for: nothing writes into the file after this

    def _download_here(self, url: Url, path: Path, start: int | None = None,
                       length: int | None = None, at: int = 0) -> tuple[int, int]:
        global _runtime_pid
        crc32c = _require("google_crc32c")
        _runtime_pid = os.getpid()
        if start is not None:
            try:
                data = memoryview(self._obstore.get_range(self._store(url), url.prefix,
                                                          start=start, length=length))
            except Exception as e:
                raise remote_error(url, e) from None
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                done = 0
                while done < len(data):
                    done += os.pwrite(fd, data[done:], at + done)
            finally:
                os.close(fd)
            crc = 0
            for piece in range(0, len(data), 1 << 20):
                # (The C extension takes bytes only: a MiB copied at a time, not the range.)
                crc = crc32c.extend(crc, bytes(data[piece:piece + (1 << 20)]))
            return len(data), crc
        try:
            stream = iter(self._obstore.get(self._store(url), url.prefix).stream(
                min_chunk_size=1 << 20))
        except Exception as e:
            raise remote_error(url, e) from None
        written, crc = 0, 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        os.lseek(fd, at, os.SEEK_SET)
        with open(fd, "wb", buffering=1 << 20) as out:
            while True:
                try:
                    chunk = next(stream)
                except StopIteration:
                    break
                except Exception as e:
                    raise remote_error(url, e) from None
                out.write(chunk)
                crc = crc32c.extend(crc, bytes(chunk))
                written += len(chunk)
        return written, crc

    def list_names(self, url: Url) -> list[str]:
        """The names of the objects directly under `url` (as in a folder), in name order
        (one listing; the client reads every page of it). Through the helper process in a
        forked one, as `download_file`."""
        if _runtime_pid is not None and _runtime_pid != os.getpid():
            return _helper().list_names(url)
        return self._list_here(url)

    def first_names(self, url: Url, most: int) -> list[str]:
        """The keys below `url` of the first `most` objects under it at any depth, in name
        order: one request for up to 1,000 (the listing is not read further)."""
        if _runtime_pid is not None and _runtime_pid != os.getpid():
            return _helper().first_names(url, most)
        return self._first_here(url, most)

    def _first_here(self, url: Url, most: int) -> list[str]:
        global _runtime_pid
        _runtime_pid = os.getpid()
        prefix = url.prefix + "/" if url.prefix else ""
        try:
            stream = self._obstore.list(self._store(url), url.prefix or None, chunk_size=most)
            batch = next(iter(stream), [])
        except Exception as e:
            raise remote_error(url, e, "listing") from None
        return [str(meta["path"])[len(prefix):] for meta in batch][:most]

    def _list_here(self, url: Url) -> list[str]:
        global _runtime_pid
        _runtime_pid = os.getpid()
        try:
            listed = self._obstore.list_with_delimiter(self._store(url), url.prefix or None)
        except Exception as e:
            raise remote_error(url, e, "listing") from None
        depth = len(url.prefix.split("/")) if url.prefix else 0
        names = {str(meta["path"]).split("/")[depth] for meta in listed["objects"]
                 if len(str(meta["path"]).split("/")) == depth + 1}
        return sorted(names)

    def _count(self, size: int) -> None:
        with self._lock:
            self.downloads += 1
            self.bytes_downloaded += size


#: The HTTP client's settings the environment may give (`AWS_ALLOW_HTTP=true`, …), which
#: object_store reads there unless the program gives client options, as this one does.
_CLIENT_FLAGS = ("allow_http", "allow_invalid_certificates")
_CLIENT_TEXTS = ("proxy_url", "proxy_ca_certificate", "proxy_excludes")


def _client_options_from_env(scheme: str) -> dict:
    """`<PREFIX>_ALLOW_HTTP` and the other client settings of the environment, as the
    binary's store reads them (its variables override its defaults)."""
    prefix = {"s3": "AWS_", "gs": "GOOGLE_", "az": "AZURE_"}.get(scheme)
    if prefix is None:
        return {}
    found = {}
    for key in _CLIENT_FLAGS + _CLIENT_TEXTS:
        value = os.environ.get(prefix + key.upper())
        if value is None:
            continue
        found[key] = (value.strip().lower() in ("true", "1", "yes", "y", "on")
                      if key in _CLIENT_FLAGS else value)
    return found


#: The process that started obstore's runtime (None: not yet): a process forked from it
#: cannot use it (its threads stayed in the parent).
_runtime_pid: int | None = None
_helpers: dict[int, "_Helper"] = {}
_helpers_lock = threading.Lock()


def _helper() -> "_Helper":
    """This process's download helper (started on first use)."""
    with _helpers_lock:
        found = _helpers.get(os.getpid())
        if found is None:
            found = _helpers[os.getpid()] = _Helper()
        return found


class _Helper:
    """A fresh Python process (not a fork) that downloads for a forked one: requests and
    answers are JSON lines on its standard input and output, each with an id, so that
    several threads' requests are under way at once (the helper runs them on threads of its
    own); it ends when its input closes, so it never outlives the process it serves."""

    def __init__(self):
        import subprocess
        import sys
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from dataset_packer._remote import _serve; _serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).resolve().parents[1])] +
                [p for p in [os.environ.get("PYTHONPATH")] if p])})
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, list] = {}  # id → [event, answer]
        self._ended = False
        threading.Thread(target=self._answers, name="dataset-packer-helper",
                         daemon=True).start()

    def download_file(self, url: Url, path: Path, start: int | None = None,
                      length: int | None = None, at: int = 0) -> tuple[int, int]:
        answer = self._ask({"op": "get", "url": str(url), "path": str(path), "start": start,
                            "length": length, "at": at}, url)
        return answer["written"], answer["crc"]

    def list_names(self, url: Url) -> list[str]:
        return self._ask({"op": "list", "url": str(url)}, url)["names"]

    def first_names(self, url: Url, most: int) -> list[str]:
        return self._ask({"op": "first", "url": str(url), "most": most}, url)["names"]

    def _ask(self, request: dict, url: Url) -> dict:
        slot = [threading.Event(), None]
        with self._lock:
            if not self._ended:
                self._next += 1
                self._waiting[self._next] = slot
                try:
                    self._process.stdin.write(json.dumps({**request, "id": self._next}) + "\n")
                    self._process.stdin.flush()
                except OSError:  # it has ended: its answers' reader says so to the others
                    self._waiting.pop(self._next, None)
                    slot[0].set()
            else:
                slot[0].set()
        slot[0].wait()
        answer = slot[1]
        if answer is None:
            raise RemoteError(f"{url}: the download helper process ended "
                              f"(exit code {self._process.poll()})")
        if "error" in answer:
            kind = {"NotAPackError": NotAPackError, "RemoteError": RemoteError,
                    "CorruptError": CorruptError, "UrlError": UrlError}.get(answer["type"],
                                                                             PackError)
            raise kind(answer["error"])
        return answer

    def _answers(self) -> None:
        """Hands each answer to the thread that asked; when the helper ends, every thread
        still waiting is told so."""
        try:
            for line in self._process.stdout:
                answer = json.loads(line)
                with self._lock:
                    slot = self._waiting.pop(answer["id"], None)
                if slot is not None:
                    slot[1] = answer
                    slot[0].set()
        finally:
            # (Also when a line is not an answer: no thread is left waiting forever.)
            with self._lock:
                self._ended = True
                waiting, self._waiting = self._waiting, {}
            for slot in waiting.values():
                slot[0].set()


def _serve() -> None:
    """The helper's loop (see `_Helper`)."""
    import sys
    client = Client()
    printing = threading.Lock()

    def answer(request: dict) -> None:
        try:
            url = parse_location(request["url"])
            if request.get("op") == "list":
                found = {"names": client._list_here(url)}
            elif request.get("op") == "first":
                found = {"names": client._first_here(url, request["most"])}
            else:
                written, crc = client._download_here(url, Path(request["path"]),
                                                     request.get("start"),
                                                     request.get("length"),
                                                     request.get("at", 0))
                found = {"written": written, "crc": crc}
        except Exception as e:
            found = {"error": str(e), "type": type(e).__name__}
        with printing:
            print(json.dumps({**found, "id": request["id"]}), flush=True)

    with ThreadPoolExecutor(max_workers=2 * RANGES_IN_FLIGHT,
                            thread_name_prefix="dataset-packer-helper") as pool:
        for line in sys.stdin:
            pool.submit(answer, json.loads(line))


def _check_credentials(url: Url) -> None:
    """No key and no `AWS_SKIP_SIGNATURE`: the client would wait on the instance-metadata
    address for credentials; say what is missing instead (unless a web identity, a
    container's endpoint or `AWS_METADATA_ENDPOINT` may provide them). The binary decides
    alike (src/store/client.rs)."""
    env = os.environ
    if any(env.get(v) for v in ("AWS_ACCESS_KEY_ID", "AWS_SKIP_SIGNATURE",
                                "AWS_WEB_IDENTITY_TOKEN_FILE",
                                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                                "AWS_METADATA_ENDPOINT")):
        return
    raise RemoteError(f"{url}: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                      "(and AWS_REGION, AWS_ENDPOINT_URL for an S3-compatible server), or "
                      "AWS_SKIP_SIGNATURE=true for a public bucket, or AWS_METADATA_ENDPOINT "
                      "to take them from the cloud instance")


def _check_plain_http(url: Url) -> None:
    """An `http://` endpoint without `AWS_ALLOW_HTTP=true`: the client refuses every
    request to it with "URL scheme is not allowed"; say what to set instead (as the binary
    does)."""
    env = os.environ
    endpoint = (env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT") or "").strip()
    if (endpoint.lower().startswith("http://")
            and env.get("AWS_ALLOW_HTTP", "").strip().lower() != "true"):
        raise RemoteError(f"{url}: the endpoint {endpoint} is plain http://, which is used "
                          "only with AWS_ALLOW_HTTP=true set (for a server on a trusted "
                          "network, such as a local test server); set it, or give an https:// "
                          "endpoint")


def remote_error(url: Url, e: BaseException, action: str = "reading") -> PackError:
    """A failed request on `url` (`action`: reading or listing it) in words a user can act
    on (the binary's messages)."""
    if isinstance(e, PackError):
        return e
    detail = f"{type(e).__name__}: {e}"
    has = lambda *codes: any(code in detail for code in codes)  # noqa: E731
    if has("NoSuchBucket"):
        return NotAPackError(f"{url}: the bucket {url.bucket!r} does not exist")
    if has("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"):
        return RemoteError(f"{url}: the server does not accept these credentials (check "
                           "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
    if has("NoSuchKey") or type(e).__name__ == "NotFoundError" or isinstance(
            e, FileNotFoundError):
        return NotAPackError(f"{url} does not exist")
    if has("AccessDenied") or type(e).__name__ in ("PermissionDeniedError",
                                                   "UnauthenticatedError"):
        return RemoteError(f"{url}: access denied {action} it (the credentials are not "
                           "allowed to)")
    if "after" in detail and "retries" in detail:
        return RemoteError(f"{url}: {action} failed, retries exhausted ({_first_line(e)})")
    return RemoteError(f"{url}: {action} failed ({_first_line(e)})")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


# ---------------------------------------------------------------------------- commit records

#: The folder of a pack's commit records below its URL.
VERSIONS = "_versions"
#: What a record's `format` says, and the record layout this package reads.
RECORD_FORMAT = "dataset-packer commit"
RECORD_FORMAT_VERSION = 1


class FileRef(NamedTuple):
    """One file of a pack at a commit: its object's key below the pack's URL, and what its
    bytes must be."""
    key: str
    bytes: int
    crc32c: int


class Commit:
    """Commit `number`'s record (`url`, `P/_versions/{2**64-1-number:020}.json`) of a pack in the
    table layout: `files` maps each file name of the pack (`metadata.db` and
    `valuation_types.json` included) to its object (`FileRef`), as the binary writes it
    (src/store/table.rs)."""

    __slots__ = ("number", "url", "files")

    def __init__(self, number: int, url: Url, files: dict[str, FileRef]):
        self.number, self.url, self.files = number, url, files

    def file(self, name: str) -> FileRef:
        found = self.files.get(name)
        if found is None:
            raise CorruptError(f"{self.url}: commit {self.number} lists no {name}, which "
                               "every commit of a pack lists")
        return found


#: The largest record name: commit N's record is named `LAST - N`, so that later commits
#: list first (as Lance names its manifests).
_LAST = 2**64 - 1

#: The objects an S3 listing returns a request.
_PAGE = 1000


def record_key(number: int) -> str:
    """The key of commit `number`'s record below the pack's URL."""
    return f"{VERSIONS}/{_LAST - number:020d}.json"


def parse_record_name(name: str) -> int | None:
    """The commit number of a record's name (`18446744073709551613.json` for commit 2); None
    for any other name under `_versions/`."""
    digits = name[:-5] if name.endswith(".json") else ""
    if len(digits) != 20 or not all(c in "0123456789" for c in digits):
        return None
    number = _LAST - int(digits)
    return number if number > 0 else None


def commit_numbers(client: Client, pack: Url) -> list[int]:
    """The numbers of the commits recorded under `pack`, in order (the whole listing)."""
    numbers = (parse_record_name(name) for name in client.list_names(pack / VERSIONS))
    return sorted(n for n in numbers if n is not None)


def latest_number(client: Client, pack: Url) -> int | None:
    """The latest commit's number: the first record name of the first page of a listing of
    `_versions/` (one request, however many commits there are), or, when that page holds
    other names only, of the whole listing."""
    names = client.first_names(pack / VERSIONS, _PAGE)
    numbers = [n for n in map(parse_record_name, names) if n is not None]
    if numbers or len(names) < _PAGE:
        return max(numbers, default=None)
    return max(commit_numbers(client, pack), default=None)


def latest_by_probing(client: Client, pack: Url, scratch: Path) -> Commit | None:
    """The latest commit of a pack on a web server, which cannot list: records 1, 2, 4, …
    asked for until one is missing, then the gap halved (about 2·log2(N) requests for N
    commits, numbered from 1 without gaps); None when there is no record 1."""
    def record(n: int) -> Commit | None:
        try:
            return read_commit(client, pack, n, scratch)
        except NotAPackError:
            return None

    found = record(1)
    if found is None:
        return None
    low = 1
    while (later := record(low * 2)) is not None:
        low, found = low * 2, later
    high = low * 2
    while high - low > 1:
        mid = (low + high) // 2
        if (middle := record(mid)) is not None:
            low, found = mid, middle
        else:
            high = mid
    return found


def read_commit(client: Client, pack: Url, number: int, scratch: Path) -> Commit:
    """Commit `number`'s record, downloaded through the file `scratch` (removed after)."""
    url = pack / record_key(number)
    try:
        client.download_file(url, scratch)
        text = scratch.read_bytes()
    finally:
        scratch.unlink(missing_ok=True)
    return parse_commit(text, pack, number, url)


def parse_commit(text: bytes, pack: Url, number: int, url: Url) -> Commit:
    """A record's JSON, checked: its format and layout (a layout this package does not know
    is refused, saying to upgrade), its number, and each file's key, size and CRC-32C."""
    try:
        record = json.loads(text)
    except ValueError as e:
        raise CorruptError(f"{url}: not a commit record ({e})") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        found = record.get("format") if isinstance(record, dict) else None
        raise CorruptError(f"{url}: not a commit record (format {found!r})")
    if record.get("format_version") != RECORD_FORMAT_VERSION:
        raise PackError(f"{url}: a commit record of layout {record.get('format_version')!r}, "
                        "which this version of dataset_packer does not read (it reads layout "
                        f"{RECORD_FORMAT_VERSION}); upgrade dataset_packer")
    if record.get("commit") != number:
        raise CorruptError(f"{url}: not the record of commit {number} (it says commit "
                           f"{record.get('commit')!r})")
    files = record.get("files")
    if not isinstance(files, dict):
        raise CorruptError(f"{url}: a commit record without its files")
    return Commit(number, url, {str(name): _file_ref(url, pack, name, ref)
                                for name, ref in files.items()})


def _file_ref(url: Url, pack: Url, name: str, ref) -> FileRef:
    def whole(value, top: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < top

    if not (isinstance(ref, dict) and isinstance(ref.get("key"), str)
            and whole(ref.get("bytes"), 1 << 64) and whole(ref.get("crc32c"), 1 << 32)):
        raise CorruptError(f"{url}: the record of {name} is not a key, a size and a CRC-32C "
                           f"({ref!r})")
    try:
        pack / ref["key"]
    except UrlError:
        raise CorruptError(f"{url}: {name}'s key {ref['key']!r} is not an object key below "
                           "the pack") from None
    return FileRef(ref["key"], ref["bytes"], ref["crc32c"])


# ---------------------------------------------------------------------------- a remote pack

_view_numbers = itertools.count()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_views(views: Path) -> None:
    """Removes the view folders (`<pid>-<n>`) of processes that are gone: a view whose
    `.lock` no process holds (its owner holds it while the view lives: this works across
    containers sharing the folder, where process ids do not), or without one (the binary's),
    whose process id is not running. A view being made (`.<pid>-<n>.new`) is not one."""
    try:
        listing = list(views.iterdir())
    except OSError:
        return
    for view in listing:
        pid, dash, n = view.name.partition("-")
        if not (dash and pid.isdigit() and n.isdigit()):
            continue
        lock = view / ".lock"
        try:
            if lock.exists():
                fd = _try_lock_entry(lock)
                if fd is None:
                    continue
                shutil.rmtree(view, ignore_errors=True)
                _close(fd)
            elif not _pid_alive(int(pid)):
                shutil.rmtree(view, ignore_errors=True)
        except OSError:
            continue  # removed meanwhile by another process's sweep


def _make_view(views: Path) -> tuple[Path, int]:
    """A new view folder `<pid>-<n>` and the lock its `.lock` holds. The folder is made
    under a name the sweep ignores and gets its name once its lock is held, so another
    process's sweep never sees it unlocked."""
    while True:
        name = f"{os.getpid()}-{next(_view_numbers)}"
        staging = views / f".{name}.new"
        try:
            staging.mkdir()
        except FileExistsError:
            continue
        lock = _handed_over(_lock_entry(staging / ".lock", fcntl.LOCK_SH))
        view = views / name
        try:
            # Never over a view that holds something (a folder of a process long gone with
            # this process's id: the sweep removes it).
            if view.exists():
                raise FileExistsError(view)
            os.rename(staging, view)
        except OSError:
            os.close(lock)
            shutil.rmtree(staging, ignore_errors=True)
            continue
        return view, lock


def _remove_view(folder: Path, pid: int, lock_fd: int) -> None:
    # A forked child shares its parent's view: only the process that made it removes it.
    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(lock_fd)


class RemotePack:
    """A pack at a URL as the reader sees it: `view`, a private folder in the cache
    (`<cache>/views/<pid>-<n>/`, removed when this object goes, never touched by eviction)
    holding its `metadata.db` and `valuation_types.json`, downloaded fresh on each open; and
    its files (shards, companions), fetched through the cache by the size and CRC-32C that
    the latest version records (`record`, `fetch`).

    `commit` is the commit read (`Commit`): the latest when the pack is opened, or the one
    given (`commit=N`: a reader re-opened in another process reads what its original read);
    None for a pack in the layout before commit records, whose files are its URL's own."""

    def __init__(self, url: Url, cache=None, cache_limit=None, commit: int | None = None):
        self.url = url
        folder, limit = cache_config(cache, cache_limit)
        self.client = Client()
        self.cache = Cache(folder, limit, self.client)
        views = self.cache.dir / "views"
        _sweep_views(views)
        views.mkdir(parents=True, exist_ok=True)
        self.view, lock = _make_view(views)
        self._finalizer = weakref.finalize(self, _remove_view, self.view, os.getpid(), lock)
        self._records: dict[str, tuple[int, int]] | None = None
        self._rows: dict[str, int] = {}
        #: file name → whether its recorded blocks combine into its CRC-32C.
        self._combined: dict[str, bool] = {}
        #: family ("steps" or a companion's name) → its file names in the latest version.
        self.families: dict[str, list[str]] = {}
        self._pool = _Pool(4, "dataset-packer-fetch")
        self.commit: Commit | None = None
        try:
            self.commit = self._find_commit(commit)
            for name in ("metadata.db", "valuation_types.json"):
                self._download_to_view(name)
        except BaseException:
            self._finalizer()
            raise

    @property
    def commit_number(self) -> int | None:
        """The number of the commit read (None: a pack in the layout before commits)."""
        return None if self.commit is None else self.commit.number

    def _find_commit(self, number: int | None) -> Commit | None:
        """Commit `number`'s record, else the latest's; None when the pack has no record
        (the layout before commits)."""
        scratch = self.view / ".record.json"
        if number is None and self.url.read_only:
            return latest_by_probing(self.client, self.url, scratch)
        if number is None:
            number = latest_number(self.client, self.url)
            if number is None:
                return None
        return read_commit(self.client, self.url, number, scratch)

    def _download_to_view(self, name: str) -> None:
        """`metadata.db` or `valuation_types.json` into the view: the object the commit
        names, checked against its record; for a pack without records, the file of that
        name at its URL (nothing records what it must be)."""
        if self.commit is None:
            try:
                self.client.download_file(self.url / name, self.view / name)
            except NotAPackError as e:
                if "bucket" in str(e):
                    raise
                raise NotAPackError(f"{self.url} is not a pack: it has no {name} ({e})") from None
            return
        ref = self.commit.file(name)
        source = self.url / ref.key
        written, crc = self.client.download_file(source, self.view / name)
        if (written, crc) != (ref.bytes, ref.crc32c):
            raise CorruptError(f"{source}: downloaded {written} bytes with CRC-32C {crc:08x}, "
                               f"expected {ref.bytes} bytes with {ref.crc32c:08x} (as "
                               f"{self.commit.url} records it)")

    def object_url(self, name: str) -> Url:
        """Where the pack's file `name` is: the object its commit names, else (a pack without
        records) the file of that name at its URL."""
        if self.commit is None:
            return self.url / name
        return self.url / self.commit.file(name).key

    @property
    def limit(self) -> int:
        return self.cache.limit

    def close(self) -> None:
        self._finalizer()
        self._pool.shutdown()

    def load_records(self, db) -> dict[str, tuple[int, int]]:
        """file name → (bytes, CRC-32C) of every file of the latest version: its
        `version_files` rows, or for a pack without history the `shards` and `companions`
        tables. A pack that records no CRC for its shards cannot be read remotely (each
        file is checked before use)."""
        if self._records is not None:
            return self._records
        tables = {name for (name,) in db.execute(
            "SELECT name FROM main.sqlite_master WHERE type = 'table'")}
        rows = []
        if "version_files" in tables and "versions" in tables:
            rows = db.execute("SELECT file_name, bytes, crc32c, rows, family FROM "
                              "main.version_files WHERE version = (SELECT MAX(version) FROM "
                              "main.versions)").fetchall()
        if not rows:
            if "shards" in tables:
                rows += db.execute("SELECT file_name, bytes, crc32c, rows, 'steps' FROM "
                                   "main.shards").fetchall()
            if "companions" in tables:
                rows += db.execute("SELECT file_name, bytes, crc32c, rows, name FROM "
                                   "main.companions").fetchall()
        if not any(family == "steps" for *_, family in rows):
            raise PackError(f"{self.url}: metadata.db records no sizes and CRC-32C of its "
                            "shards (a pack from an older tool), which reading it from object "
                            "storage needs to check each file; rewrite it with `dataset-packer "
                            "export PACK --format pack --output NEW` and publish that")
        records, file_rows, families = {}, {}, {}
        for name, size, crc, count, family in rows:
            try:
                records[str(name)] = (int(size), int(str(crc), 16))
            except (TypeError, ValueError):
                raise PackError(f"{self.url / 'metadata.db'}: {name} has an unreadable "
                                f"crc32c {crc!r}") from None
            file_rows[str(name)] = int(count)
            families.setdefault(str(family), []).append(str(name))
        self._check_commit(records)
        self._records, self._rows, self.families = records, file_rows, families
        self._blocks = _recorded_blocks(db, tables, records, self.url)
        return records

    def blocks(self, name: str):
        """(block size, each block's CRC-32C) that metadata.db records for the file `name`,
        when it records them (a pack from an older tool does not: its files are fetched
        whole)."""
        return getattr(self, "_blocks", {}).get(name)

    def read_block(self, name: str, index: int, into: int, at: int) -> None:
        """Block `index` of the file `name`, written into the file `into` (a descriptor) at
        byte `at`: through the cache, an entry of its own fetched by one ranged request and
        checked against the CRC-32C metadata.db records for it; copied by the kernel
        (`copy_file_range`), never through this process's memory."""
        block_bytes, crcs = self.blocks(name)
        size, _ = self.record(name)
        start = index * block_bytes
        entry = self._checked(name, lambda: self.cache.fetch(
            self.object_url(name), min(block_bytes, size - start), int(crcs[index]), start))
        try:
            _copy_into(entry.path, into, at)
        finally:
            entry.release()

    def blocks_cached(self, name: str) -> bool:
        """Whether the cache holds every block of the file `name` (looked at, not pinned:
        what decides how a whole file is read, not what is read)."""
        block_bytes, crcs = self.blocks(name)
        size, _ = self.record(name)
        url = self.object_url(name)
        return all(self.cache.holds(url, min(block_bytes, size - b * block_bytes), int(crc),
                                    b * block_bytes)
                   for b, crc in enumerate(crcs))

    def holds(self, name: str) -> bool:
        """Whether the cache holds the file `name` whole now (looked at, not pinned)."""
        size, crc = self.record(name)
        return self.cache.holds(self.object_url(name), size, crc)

    def _check_commit(self, records: dict[str, tuple[int, int]]) -> None:
        """metadata.db's sizes and CRC-32C of the files against the commit's record: one
        writer wrote both, so a difference is a corrupt pack."""
        if self.commit is None:
            return
        for name, (size, crc) in records.items():
            ref = self.commit.file(name)
            if (ref.bytes, ref.crc32c) != (size, crc):
                raise CorruptError(
                    f"{self.url / ref.key}: {self.commit.url} records {ref.bytes} bytes with "
                    f"CRC-32C {ref.crc32c:08x}, the pack's metadata.db {size} bytes with "
                    f"{crc:08x}: the pack is corrupt")

    def file_rows(self, db) -> dict[str, int]:
        """file name → rows of the latest version's files."""
        self.load_records(db)
        return self._rows

    def record(self, name: str) -> tuple[int, int]:
        """(bytes, CRC-32C) the latest version records for the file `name`."""
        found = (self._records or {}).get(name)
        if found is None:
            raise PackError(f"{self.url / name}: metadata.db records no size and CRC-32C for "
                            "it, so it cannot be read from object storage")
        return found

    def fetch(self, name: str) -> Entry:
        """The file `name` of the pack, pinned in the cache (downloaded if needed).
        `PackChangedError` when, in a pack without commit records, it no longer matches
        because the pack changed since it was opened (the objects a commit names never
        change)."""
        size, crc = self.record(name)
        blocks = self._blocks_of_whole(name)
        return self._checked(name, lambda: self.cache.fetch(self.object_url(name), size, crc,
                                                            blocks=blocks))

    def _blocks_of_whole(self, name: str):
        """The blocks the whole file `name` is downloaded by (several ranged requests at
        once): those metadata.db records, when they combine into the file's CRC-32C; None
        (one request) otherwise."""
        blocks = self.blocks(name)
        if blocks is None or len(blocks[1]) < 2:
            return None
        if name not in self._combined:
            size, crc = self.record(name)
            self._combined[name] = combine_blocks(blocks[1], blocks[0], size) == crc
        return blocks if self._combined[name] else None

    def _checked(self, name: str, fetch) -> Entry:
        """`fetch()` of (a block of) the file `name`, a corrupt download of a pack changed
        since it was opened said as such."""
        try:
            return fetch()
        except CorruptError as e:
            if self.commit is not None or not self._changed_since_opened():
                raise
            raise PackChangedError(
                f"{self.url} changed while this reader had it open: a new version was "
                f"published since its metadata.db was downloaded, and {name} now holds other "
                "bytes than the version read records (packs in object storage are rewritten "
                f"in place); open the pack again to read the new version ({e})") from None

    def _changed_since_opened(self) -> bool:
        """Whether the store's metadata.db is no longer the one downloaded at open."""
        fresh = self.view / "metadata.db.now"
        try:
            self.client.download_file(self.url / "metadata.db", fresh)
            return fresh.read_bytes() != (self.view / "metadata.db").read_bytes()
        except Exception:
            return False
        finally:
            fresh.unlink(missing_ok=True)

    def prefetch(self, names: list[str]):
        """Starts fetching these files in the background (a small thread pool); a future
        per file, giving its `Entry` (or raising what the fetch raised)."""
        pool = self._pool.executor()
        return [pool.submit(self.fetch, name) for name in names]


class RemoteShards:
    """The steps shards of a remote pack as `PackData` reads them: a list of row arrays
    (`len`, `[i]`), each fetched through the cache, checked (its `.npy` header against what
    metadata.db records) and memory-mapped on first access, and pinned until `release`.
    `prefetch` starts the downloads ahead of the reads."""

    def __init__(self, remote: RemotePack, shards: list):
        self.remote = remote
        self.shards = shards
        self._arrays = [None] * len(shards)
        self._entries: dict[int, Entry] = {}
        self._pending: dict[int, object] = {}
        self._files: list[Entry] = []
        #: Shards read block by block (`_BlockFile`): those first read before any prefetch.
        self._sparse: dict[int, _BlockFile] = {}
        #: Other files read block by block (`open_file`), by their path in the view.
        self._lazy_files: dict[Path, _BlockFile] = {}
        self._lock = threading.RLock()
        self._pid = os.getpid()

    @property
    def limit(self) -> int:
        return self.remote.limit

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, i: int):
        found = self._arrays[i]
        return found if found is not None else self._map(i)

    def fetch_file(self, name: str) -> Path:
        """Another file of the pack (a companion's), pinned until `close`."""
        entry = self.remote.fetch(name)
        with self._lock:
            self._files.append(entry)
        return entry.path

    def open_file(self, name: str) -> Path:
        """Another file of the pack (a companion's), to be read in part: where metadata.db
        records its blocks, the cache does not hold it whole and it is larger than
        `HEAD_BYTES`, a sparse file in the view holding only its npy header
        (`_BlockFile.read_header`), whose blocks each read asks for first
        (`lazy_file(path).ensure`); else `fetch_file`."""
        size, _ = self.remote.record(name)
        if self.remote.blocks(name) is None or self.remote.holds(name) or size <= HEAD_BYTES:
            return self.fetch_file(name)
        sparse = _BlockFile(self.remote, name, self.remote.view)
        try:
            sparse.read_header()
        except BaseException:
            sparse.close()
            raise
        with self._lock:
            self._lazy_files[sparse.path] = sparse
        return sparse.path

    def open_files(self, names: list[str]) -> list[Path]:
        """`open_file` of each of `names`, `HEADERS_IN_FLIGHT` at once: each is a small read
        whose time is the store's latency, and a family has a file per shard."""
        if len(names) < 2:
            return [self.open_file(name) for name in names]
        with ThreadPoolExecutor(max_workers=min(HEADERS_IN_FLIGHT, len(names)),
                                thread_name_prefix="dataset-packer-header") as pool:
            return list(pool.map(self.open_file, names))

    def lazy_file(self, path: Path):
        """The `_BlockFile` behind a path `open_file` gave, or None (a whole file)."""
        return self._lazy_files.get(Path(path))

    def prefetch_files(self, lazies) -> None:
        """Starts fetching these `_BlockFile`s whole (with the shards' prefetches)."""
        pool = self.remote._pool.executor()
        for lazy in lazies:
            pool.submit(lazy.fill_whole)

    def file_bytes(self, i: int) -> int:
        return self.remote.record(self.shards[i].path.name)[0]

    def _forked(self) -> None:
        # Futures of the parent's pool never complete in a forked child: forget them.
        if self._pid != os.getpid():
            self._pending = {}
            self._pid = os.getpid()

    def rows_at(self, i: int, local: np.ndarray):
        """Shard `i`'s rows array, ready to read rows `local` (indices in it): a shard read
        block by block has the blocks they lie in fetched first."""
        array = self[i]
        sparse = self._sparse.get(i)
        if sparse is not None and local.size:
            shard = self.shards[i]
            first = shard.data_offset + np.asarray(local, dtype=np.int64) * shard.row_bytes
            self._filled(i, sparse, first, first + shard.row_bytes - 1)
        return array

    def rows_span(self, i: int, a: int, z: int):
        """Shard `i`'s rows array, ready to read rows a..z-1 (see `rows_at`). All of a shard
        not read yet is fetched whole (one entry, as the binary's commands fetch it), unless
        the cache holds its blocks."""
        name = self.shards[i].path.name
        if z - a == self.shards[i].rows and self._arrays[i] is None and not (
                self.remote.blocks(name) is not None and self.remote.blocks_cached(name)):
            self.prefetch([i])
        array = self[i]
        sparse = self._sparse.get(i)
        if sparse is not None and z > a:
            shard = self.shards[i]
            first = np.array([shard.data_offset + a * shard.row_bytes], dtype=np.int64)
            self._filled(i, sparse, first, first + (z - a) * shard.row_bytes - 1)
        return array

    def _filled(self, i: int, sparse: _BlockFile, first, last) -> None:
        if sparse.ensure(first, last):
            # The header's block, checked now: the header against metadata.db.
            self._check(self.shards[i], sparse.path)

    def _map(self, i: int):
        from ._format import map_shard
        with self._lock:
            self._forked()
            if self._arrays[i] is not None:
                return self._arrays[i]
            future = self._pending.pop(i, None)
            shard = self.shards[i]
            entry = None
            if future is None and self.remote.blocks(shard.path.name) is not None:
                # Read block by block, unless the cache holds the whole file already
                # (then fetched, pinned and checked, below).
                if not self.remote.holds(shard.path.name):
                    return self._map_sparse(i)
        if future is not None:
            try:
                entry = future.result()
            except Exception:
                # Fetched again here: what failed then (room in the cache) may not now, and
                # if it does, the error is raised by the read that needs the shard.
                entry = None
        if entry is None:
            entry = self.remote.fetch(shard.path.name)
        try:
            self._check(shard, entry.path)
            array = map_shard(_replace_path(shard, entry.path))
        except BaseException:
            entry.release()
            raise
        with self._lock:
            if self._arrays[i] is not None:  # mapped meanwhile by another thread
                entry.release()
                return self._arrays[i]
            self._entries[i] = entry
            self._arrays[i] = array
            return array

    def _map_sparse(self, i: int):
        """Shard `i` read block by block: its sparse file in the view, mapped (rows only)."""
        shard = self.shards[i]
        name = shard.path.name
        sparse = _BlockFile(self.remote, name, self.remote.view)
        array = np.memmap(sparse.path, dtype=np.uint8, mode="r", offset=shard.data_offset,
                          shape=(shard.rows, shard.row_bytes)) if shard.rows else \
            np.zeros((0, shard.row_bytes), dtype=np.uint8)
        self._sparse[i] = sparse
        self._arrays[i] = array
        return array

    @staticmethod
    def _check(shard, local: Path) -> None:
        """The downloaded file's header against the shard as metadata.db describes it."""
        from ._format import read_shard_header
        try:
            found = read_shard_header(local)
        except PackError as e:
            raise PackError(str(e).replace(str(local), str(shard.path))) from None
        if (found.row_bytes, found.data_offset) != (shard.row_bytes, shard.data_offset) or \
                found.rows < shard.rows:
            raise PackError(f"{shard.path}: its header says {found.rows} rows of "
                            f"{found.row_bytes} bytes after {found.data_offset} header bytes, "
                            f"metadata.db {shard.rows} rows of {shard.row_bytes} bytes after "
                            f"{shard.data_offset}")

    def prefetch(self, shards) -> None:
        with self._lock:
            self._forked()
            wanted = [int(i) for i in shards
                      if self._arrays[int(i)] is None and int(i) not in self._pending]
            if not wanted:
                return
            futures = self.remote.prefetch([self.shards[i].path.name for i in wanted])
            self._pending.update(zip(wanted, futures))

    def release(self, shards) -> None:
        with self._lock:
            self._forked()
            for i in shards:
                i = int(i)
                self._arrays[i] = None
                sparse = self._sparse.pop(i, None)
                if sparse is not None:
                    sparse.close()
                entry = self._entries.pop(i, None)
                if entry is not None:
                    entry.release()
                future = self._pending.pop(i, None)
                if future is not None and not future.cancel():
                    future.add_done_callback(_release_result)

    def close(self) -> None:
        """Releases every shard and the other files fetched (the pack is closed)."""
        with self._lock:
            self.release(range(len(self.shards)))
            files, self._files = self._files, []
            lazies, self._lazy_files = list(self._lazy_files.values()), {}
        for entry in files:
            entry.release()
        for lazy in lazies:
            lazy.close()


def _recorded_blocks(db, tables: set, records: dict, url: Url) -> dict:
    """file name → (block size, its blocks' CRC-32C as uint32) from metadata.db's
    `file_blocks`, for the files of `records` (name → (bytes, CRC-32C)) it records blocks
    of under that same CRC."""
    if "file_blocks" not in tables:
        return {}
    found = {}
    for name, crc, block_bytes, blob in db.execute(
            "SELECT file_name, crc32c, block_bytes, block_crc32c FROM main.file_blocks"):
        record = records.get(str(name))
        if record is None or f"{record[1]:08x}" != str(crc):
            continue
        count = -(-record[0] // int(block_bytes)) if int(block_bytes) > 0 else -1
        crcs = np.frombuffer(bytes(blob), dtype="<u4")
        if count < 0 or crcs.size != count:
            raise CorruptError(f"{url / 'metadata.db'}: file_blocks of {name}: {crcs.size} "
                               f"CRCs for {count} blocks of {block_bytes} bytes (metadata.db "
                               "is damaged)")
        found[str(name)] = (int(block_bytes), crcs)
    return found


def _copy_into(source: Path, into: int, at: int) -> None:
    """The file `source` written into the file `into` (a descriptor) at byte `at`, by the
    kernel (`copy_file_range`), never through this process's memory."""
    with open(source, "rb") as f:
        left, offset = source.stat().st_size, 0
        while left:
            done = os.copy_file_range(f.fileno(), into, left, offset, at + offset)
            if done == 0:
                raise PackError(f"{source}: ended {left} bytes early")
            left, offset = left - done, offset + done


class _BlockFile:
    """A remote file read block by block: a sparse file in the reader's view folder, of the
    file's full size, into which each block is written, checked, the first time a read
    needs it (`ensure`). Holes are never read: every read of the file's rows asks first.

    A forked process shares its parent's view folder and inherits its open `_BlockFile`s:
    each file is named for the process that made it and numbered
    (`<view>/<name>.<pid>-<n>.blocks`), so that no two readers ever make the same one (a
    past version of the pack, read beside the latest, reads its files too), and its space
    is given back (`release`) only by that process and only if it has not forked since,
    since a child may still read it."""

    def __init__(self, remote: RemotePack, name: str, view: Path):
        self.remote, self.name = remote, name
        self.path = view / f"{name}.{os.getpid()}-{next(_block_files)}.blocks"
        size, _ = remote.record(name)
        self.block_bytes, crcs = remote.blocks(name)
        self.filled = np.zeros(crcs.size, dtype=bool)
        self._lock = threading.Lock()
        self._made = (os.getpid(), _forks)
        #: The unchecked header bytes `read_header` wrote (none: every block is checked).
        self._head = b""
        with open(self.path, "wb") as f:
            f.truncate(size)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)

    def ensure(self, first: np.ndarray, last: np.ndarray) -> bool:
        """Makes sure the byte ranges first[k]..=last[k] are in the file; whether block 0
        (the header's) was fetched now."""
        lo, hi = first // self.block_bytes, last // self.block_bytes
        wanted = np.unique(np.concatenate([lo, hi])) if lo.size else lo
        # A range over more than two blocks (a run's rows) needs the ones between too.
        spans = hi - lo > 1
        if spans.any():
            inner = [np.arange(a, b) for a, b in zip(lo[spans] + 1, hi[spans])]
            wanted = np.unique(np.concatenate([wanted, *inner]))
        with self._lock:
            missing = wanted[~self.filled[wanted]]
            if missing.size == 0:
                return False
            try:
                # Each block written as it arrives: memory holds the blocks in flight.
                filled = ([self._fill_block(missing[0])] if missing.size == 1 else
                          _BLOCKS.executor().map(self._fill_block, missing))
                for index in filled:
                    self.filled[index] = True
            except RemoteError as e:
                if not ranges_refused(e):
                    raise
                # A web server that serves whole files only: this file is fetched whole.
                self._fill_whole()
                return True
            return bool(missing[0] == 0)

    def read_header(self) -> None:
        """Writes the file's npy header into the sparse file, read by one small ranged
        request (a second for a longer header), not through the cache: its block is fetched
        and checked only when rows in it are read, and must then hold these same bytes
        (`_check_head`)."""
        from ._format import HeaderError, header_size
        size, _ = self.remote.record(self.name)
        url = self.remote.object_url(self.name)
        client = self.remote.client
        got, _ = client.download_file(url, self.path, 0, min(HEAD_BYTES, size), 0)
        try:
            wanted = min(header_size(os.pread(self._fd, 12, 0)), size)
        except HeaderError:
            wanted = got  # the reader of the header says what is wrong with it
        if wanted > got:
            got += client.download_file(url, self.path, got, wanted - got, got)[0]
        self._head = os.pread(self._fd, min(wanted, got), 0)

    def _check_head(self, index: int) -> None:
        """That block `index`, just written (checked), holds the header read at open where
        the two overlap."""
        start = index * self.block_bytes
        if start >= len(self._head):
            return
        now = os.pread(self._fd, min(len(self._head) - start, self.block_bytes), start)
        if now != self._head[start:start + len(now)]:
            raise CorruptError(f"{self.remote.object_url(self.name)}: its first bytes changed "
                               "between two reads (the header read at open is not the one its "
                               "checked first block holds)")

    def fill_whole(self) -> None:
        """All of the file here: fetched whole (one cache entry, as the binary's commands
        and a shard's prefetch fetch it) and copied in, unless every block is here."""
        with self._lock:
            if not self.filled.all():
                self._fill_whole()

    def release(self) -> None:
        """Gives the blocks' space back (a hole punched over the whole file, whose size
        stays): the next read of them fetches them again (from the cache, if it still holds
        them)."""
        with self._lock:
            if self._made != (os.getpid(), _forks):
                return  # another process may read it: its blocks stay
            size = os.fstat(self._fd).st_size
            if size and self.filled.any():
                _punch_hole(self._fd, size)
            self.filled[:] = False

    def _fill_block(self, index) -> int:
        self.remote.read_block(self.name, int(index), self._fd, int(index) * self.block_bytes)
        self._check_head(int(index))
        return index

    def _fill_whole(self) -> None:
        entry = self.remote.fetch(self.name)
        try:
            _copy_into(entry.path, self._fd, 0)
        finally:
            entry.release()
        for index in range(-(-len(self._head) // self.block_bytes)):
            self._check_head(index)
        self.filled[:] = True

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass
        if self._made[0] == os.getpid():
            self.path.unlink(missing_ok=True)


#: Files opened at once by `open_files` (the binary's `lazy::PARALLEL_HEADERS`).
HEADERS_IN_FLIGHT = 64

#: Numbers the `_BlockFile`s of this process.
_block_files = itertools.count()

#: Forks of this process so far (`_BlockFile.release` punches no file a child may read).
_forks = 0


def _count_fork() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_parent=_count_fork)


def _punch_hole(fd: int, size: int) -> None:
    """Frees the disk space of a file's first `size` bytes; they then read as zeros
    (fallocate's FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE; where the file system cannot,
    the space stays taken, and what is read stays right: every read asks first)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate(ctypes.c_int(fd), ctypes.c_int(0x02 | 0x01), ctypes.c_int64(0),
                   ctypes.c_int64(size))


class _Pool:
    """A small thread pool for requests (they wait on the network), made on first use and
    again in a forked process: threads do not survive a fork."""

    def __init__(self, workers: int, name: str):
        self._workers, self._name = workers, name
        self._pool, self._pid, self._lock = None, None, threading.Lock()

    def executor(self) -> ThreadPoolExecutor:
        """This process's pool."""
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(max_workers=self._workers,
                                                thread_name_prefix=self._name)
                self._pid = os.getpid()
            return self._pool

    def shutdown(self) -> None:
        """Cancels what is queued (only this process's own pool: a forked child's copy of
        its parent's has no threads)."""
        with self._lock:
            pool, self._pool = self._pool, None
            if pool is not None and self._pid == os.getpid():
                pool.shutdown(wait=False, cancel_futures=True)


#: The bytes of a companion file read block by block that are fetched when it is opened,
#: enough for its npy header (a longer one takes a second request): the binary's
#: `lazy::HEAD_BYTES`.
HEAD_BYTES = 4 << 10

#: Block requests: 8 in flight, shared by every pack of the process.
_BLOCKS = _Pool(8, "dataset-packer-block")

#: Ranged requests of whole files fetched by blocks (`Client.download_blocks`), shared by
#: every pack of the process: enough to keep a link busy whose connections are each slower
#: than the whole and 25 ms away (bench/README.md, "A cold epoch through a shaped link").
RANGES_IN_FLIGHT = 8
_RANGES = _Pool(RANGES_IN_FLIGHT, "dataset-packer-range")


def _release_result(future) -> None:
    """Unpins what a prefetch that is no longer wanted fetched."""
    if not future.cancelled() and future.exception() is None:
        future.result().release()


def _replace_path(shard, path: Path):
    from dataclasses import replace
    return replace(shard, path=path)


def remote_shards(remote: RemotePack, db, files: list[tuple[str, int]]) -> list:
    """The `Shard`s of a remote pack's steps files, (file name, rows of the version read)
    each, described from what metadata.db records (no request): rows, header size and row
    width (48 bytes, or the legacy 46), checked against the file when it is mapped."""
    from ._format import LEGACY_ROW_BYTES, ROW_BYTES, Shard
    full_rows = remote.file_rows(db)
    shards = []
    for name, rows in files:
        size, _ = remote.record(name)
        whole = full_rows.get(name, rows)
        if whole < rows:
            raise PackError(f"{remote.url / name}: {whole} rows, but the version read has "
                            f"{rows} rows in it (was the pack rewritten?)")
        row_bytes = ROW_BYTES if size - whole * ROW_BYTES >= 10 else LEGACY_ROW_BYTES
        shards.append(Shard(path=remote.url / name, rows=rows, row_bytes=row_bytes,
                            data_offset=size - whole * row_bytes))
    return shards
