"""Files mapped read-only, and what the kernel is told about how they are read.

The shards and companion files of a pack larger than half the memory are mapped with
`MADV_RANDOM` (`read_at_random`): the package reads rows by index (a batch takes 4,096 rows
from anywhere in the pack, or in a shard window), and without the hint each page fault on a
cold file reads up to `read_ahead_kb` around it (8 MiB on some disks), which is what made a
first batch of a cold 1B-row pack take 10 s. A pack that fits keeps the kernel's
read-around, which loads it fastest for an epoch that reads it all.

Where the package does know that bytes will be read in bulk, it says so instead, with
`MADV_WILLNEED` on that part of the map: the kernel then reads it in large sequential
requests, and the random faults that follow find the pages in memory. `will_need` does it
at once (a span about to be read), `ReadAheadThread` in the background (the next shard
window while the current one is read, or a whole pack that fits in memory:
`_windows`). The hint goes through the map, not the file's path: the path may name another
file by now (a newer version of the pack), the map never does.

Platforms without `madvise` (Windows) read the same bytes without hints.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import queue
import threading
from pathlib import Path

import numpy as np

from ._memory import available_memory

#: Bytes below which a span is read without a WILLNEED call (a few pages: the faults are
#: cheaper than the system call).
WILL_NEED_MIN = 1 << 20

#: The size of one WILLNEED request of the background thread: small enough that a window
#: being brought in does not hold the disk's queue for long against a batch's own faults.
CHUNK = 8 << 20


def read_at_random(total_bytes: int) -> bool:
    """Whether maps of a pack of `total_bytes` (the files an epoch reads) are advised
    `MADV_RANDOM`: where they are more than half the memory the process may use. A pack
    that fits is left to the kernel's read-around: its global epoch reaches every page from
    the first batches on, and each cold fault bringing in its neighbours loads the pack at
    the disk's sequential speed (the read-ahead thread does the rest)."""
    memory, _ = available_memory()
    return memory is not None and total_bytes > memory // 2


def map_readonly(path: Path, dtype, offset: int, shape: tuple, random: bool) -> np.ndarray:
    """A read-only array over `path`'s bytes from `offset`, mapped with `MADV_RANDOM` when
    `random` (`read_at_random`)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), offset - start + count * dtype.itemsize,
                           access=mmap.ACCESS_READ, offset=start)
    if random:
        advise_random(mapped)
    return np.frombuffer(mapped, dtype=dtype, count=count, offset=offset - start).reshape(shape)


def advise_random(mapped: mmap.mmap) -> None:
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mapped.madvise(mmap.MADV_RANDOM)


def mapping_of(array: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """The map `array` lies in (one `map_readonly` made) and its first byte's offset in it;
    None for an array in ordinary memory."""
    base = array
    while base is not None and not isinstance(base, memoryview):
        base = getattr(base, "base", None)
    if base is None or not isinstance(base.obj, mmap.mmap) or len(base.obj) == 0:
        return None
    mapped = base.obj
    start = np.frombuffer(mapped, np.uint8, count=1).__array_interface__["data"][0]
    return mapped, array.__array_interface__["data"][0] - start


def will_need(array: np.ndarray) -> None:
    """Asks the kernel to start reading the bytes of `array` (a view of a map) in large
    requests, and returns once they are queued. Nothing for a few pages, or an array in
    ordinary memory."""
    if array.nbytes >= WILL_NEED_MIN:
        _will_need_chunks(array)


def _will_need_chunks(array: np.ndarray) -> None:
    """MADV_WILLNEED over the array's pages, `CHUNK` bytes at a time."""
    found = mapping_of(array)
    if found is None or not hasattr(mmap, "MADV_WILLNEED"):
        return
    mapped, offset = found
    end = offset + array.nbytes
    # A map starts on a page: the array's address and its offset in the map are aligned
    # down alike.
    address = array.__array_interface__["data"][0] - offset % mmap.PAGESIZE
    offset -= offset % mmap.PAGESIZE
    madvise = _libc_madvise()
    try:
        while offset < end:
            step = min(CHUNK, end - offset)
            if madvise is not None:
                # Through ctypes, which lets go of the GIL: over pages already in memory
                # the call still walks them, and the batches' thread should not wait.
                madvise(ctypes.c_void_p(address), ctypes.c_size_t(step), mmap.MADV_WILLNEED)
                address += step
            else:
                mapped.madvise(mmap.MADV_WILLNEED, offset, step)
            offset += step
    except (OSError, ValueError):
        pass  # a hint only (a closed map, a platform without it): the read decides


@functools.cache
def _libc_madvise():
    """libc's madvise(2), or None where ctypes cannot find it."""
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


class ReadAheadThread:
    """One background thread per process that brings arrays of maps into the page cache
    (MADV_WILLNEED, `CHUNK` bytes at a time) in the order they were asked for. A forked
    process starts its own thread on its first request (threads do not survive a fork)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue | None = None
        self._pid = None

    def request(self, arrays) -> None:
        """Brings these arrays (views of maps) in, in the background."""
        with self._lock:
            if self._pid != os.getpid():
                self._queue = queue.SimpleQueue()
                self._pid = os.getpid()
                threading.Thread(target=self._run, args=(self._queue,), daemon=True,
                                 name="dataset-packer-read-ahead").start()
            for array in arrays:
                self._queue.put(array)

    @staticmethod
    def _run(work: queue.SimpleQueue) -> None:
        while True:
            _will_need_chunks(work.get())


#: The process's read-ahead thread.
READ_AHEAD = ReadAheadThread()
