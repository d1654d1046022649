"""The logic behind `dataset_packer.torch`, kept free of PyTorch so it is tested without it.

`EpochStream` holds what an epoch of batches depends on (pack, batch size, options, epoch,
resume point) and yields the batches of one (rank, worker) share. Which share is decided by
`partition()` from what the caller found out: PyTorch's worker info (id, num_workers) and
`torch.distributed` (rank, world size), or values given explicitly.

The epoch and the resume point live in shared memory (a `multiprocessing.RawArray` made with
the stream), so data-loader workers see `set_epoch` even when they outlive an epoch
(`persistent_workers=True`): each iteration reads them afresh. The array travels to workers by
inheritance (fork) or with the worker's start-up arguments (spawn); a stream pickled any other
way (a deep copy) gets an array of its own with the same values.

An `Iteration` is one pass of a share over the epoch that counts the batches it has yielded,
so that a state taken while it runs says where that share stands: what torchdata's
`StatefulDataLoader` saves for each worker after every batch, and restores in the worker.

The epoch's order (`order=`) is the pack's global permutation (`Pack.batches`), or shard
windows (`_windows`): a few shards at a time, read from the same plan of positions, the
next window brought in while the current one is read. "auto" takes shard windows for a
remote pack whose shards do not fit in half its cache, and for a local pack larger than
half the memory the process may use (read once, when the stream is made: `_memory`). A
state saved in a shard-window epoch records the order and its window size ("order",
"window_bytes"), so that the rest of that epoch is read in the same order whatever the
cache or the memory is at resume; a state without them was saved in a global-order epoch.
"""

from __future__ import annotations

import multiprocessing
import weakref
from dataclasses import dataclass
from multiprocessing import context as _mp_context
from typing import Iterator, Optional

import numpy as np

from ._data import rebase, resolve
from ._memory import available_memory
from ._order import Part
from ._mixture import Mixture
from ._pack import Pack
from ._versions import saved_versions
from ._windows import check_order as check_pack_order
from ._windows import choose_order, prefetch_all, shard_window_batches


@dataclass(frozen=True)
class WorkerInfo:
    """The parts of `torch.utils.data.get_worker_info()` that matter here."""

    id: int
    num_workers: int


def partition(worker: Optional[WorkerInfo], dist_rank: Optional[int],
              dist_world_size: Optional[int], rank: Optional[int] = None,
              world_size: Optional[int] = None) -> Part:
    """This process's share: explicit rank/world_size win over torch.distributed's; outside
    a data-loader worker there is one worker."""
    if rank is None:
        rank = dist_rank if dist_rank is not None else 0
    if world_size is None:
        world_size = dist_world_size if dist_world_size is not None else 1
    if worker is None:
        return Part(rank, world_size, 0, 1)
    return Part(rank, world_size, worker.id, worker.num_workers)


class EpochStream:
    """Batches of a pack (or a `Mixture`) for one epoch at a time (`set_epoch`), by (rank,
    worker) share.

    `window`: yield `Pack.windows(window, batch_size, ...)` instead of `Pack.batches`.
    `order`: "global" (the pack's permutation), "shards" (shard windows of at most
    `window_bytes` bytes, by default half the cache limit, or 1 GiB locally; see the module
    docstring) or "auto" (shards for a remote pack whose shards do not fit in half its
    cache, or a local pack larger than half the memory the process may use).
    Other keyword options are those of `Pack.batches` (shuffle, seed, select, drop_last,
    augment, illegal_ev, companions; `stride` too with `window`).

    A state loaded from an earlier version of the pack (`load_state_dict`) finishes its
    epoch over that version (the same rows in the same order); the versions to read are
    kept in shared memory with the epoch, so workers see them too. The next `set_epoch`
    goes back to the stream's own pack."""

    def __init__(self, pack, batch_size: int, *, window: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 order: str = "auto", window_bytes: Optional[int] = None, **options):
        self.pack = pack if isinstance(pack, (Pack, Mixture)) else Pack(pack)
        self.batch_size = batch_size
        self.window = window
        self.rank = rank
        self.world_size = world_size
        self.order = check_order(order, window_bytes, self.pack)
        self.window_bytes = None if window_bytes is None else int(window_bytes)
        # Read once, here: every worker (and a resume) must choose the order this one does.
        self.memory, _ = available_memory()
        for fixed in ("epoch", "start_sample", "start_batch", "worker", "num_workers"):
            if fixed in options:
                raise TypeError(f"{fixed} is not an option here: use set_epoch(epoch, "
                                "start_sample=…) and the data loader's workers")
        if options.get("select") is not None:
            # Resolved once: SQL is run here, not again every epoch and in every worker (and a
            # shuffled pack's rows are found by run_id once, then travel with the selection).
            options["select"] = _resolved(self.pack, options["select"])
        self.options = options
        self._own_versions = _versions_of(self.pack)
        # epoch, start_sample, start_batch, the saved epoch's order (0: as chosen, 1:
        # global, 2: shards) and window bytes, whether the epoch reads saved versions, and
        # those versions (one per source)
        self._shared = multiprocessing.RawArray("q", _SHARED + len(self._own_versions))
        # Readers of saved versions by versions, with their options (not pickled: a worker
        # opens its own).
        self._readers: dict = {}

    @property
    def epoch(self) -> int:
        return int(self._shared[0])

    @property
    def start_sample(self) -> int:
        return int(self._shared[1])

    @property
    def start_batch(self) -> int:
        return int(self._shared[2])

    def set_epoch(self, epoch: int, start_batch: int = 0, *, start_sample: int = 0) -> None:
        """The epoch the next iteration yields, resumed after its first `start_sample`
        positions (any world size, batch size or workers) or at each rank's batch
        `start_batch` (the shorthand for an unchanged batch size and world size). Seen by
        every worker at its next iteration, persistent ones included. It reads the stream's
        own pack (a saved version loaded by `load_state_dict` is for the saved epoch)."""
        for value, name in ((epoch, "epoch"), (start_sample, "start_sample"),
                            (start_batch, "start_batch")):
            if isinstance(value, bool) or int(value) != value or value < 0:
                raise ValueError(f"{name} must be an integer ≥ 0, not {value!r}")
        if start_batch and start_sample:
            raise ValueError("give start_sample or start_batch, not both")
        self._shared[:_SHARED] = [int(epoch), int(start_sample), int(start_batch), 0, 0, 0]

    def _reader(self, versions: Optional[tuple] = None):
        """(reader, options) of an epoch over these versions of the pack (or of the
        mixture's sources); default: the current epoch's."""
        if versions is None:
            versions = self._epoch_versions()
        if versions == self._own_versions:
            return self.pack, self.options
        found = self._readers.get(versions)
        if found is None:
            reader = _at_versions(self.pack, versions)
            options = dict(self.options)
            if options.get("select") is not None:
                options["select"] = rebase(options["select"], reader)
            found = self._readers[versions] = (reader, options)
        return found

    def _epoch_versions(self) -> tuple:
        """The versions the current epoch reads: those `load_state_dict` set for the saved
        epoch, else the stream's own."""
        if self._shared[_SHARED - 1]:
            return tuple(self._shared[_SHARED:])
        return self._own_versions

    def _items(self, versions: Optional[tuple] = None) -> int:
        """Positions in an epoch: the selection's rows, or its windows."""
        reader, options = self._reader(versions)
        return reader.epoch_length(options.get("select"), self.window, options.get("stride"))

    def state_dict(self, batches: int = 0, world_size: int = 1) -> dict:
        """Where to resume: the epoch, and the position after `batches` batches per rank of
        `world_size` ranks from the resume point (elastic: any world size, batch size or
        workers can resume from it), with the seed and the identity of the pack the epoch
        reads (`pack_id`, `version`, `rows`; a Mixture's per source, as `sources`)."""
        state = {"epoch": self.epoch, "start_sample": self._start(world_size),
                 "seed": self.options.get("seed", 0), **self._reader()[0].identity,
                 **order_state(self.epoch_order())}
        return self.advance(state, batches, world_size)

    def epoch_order(self, versions: Optional[tuple] = None) -> tuple:
        """The current epoch's order: ("global", None) or ("shards", window bytes): the one
        a loaded state saved, else the one `order=` chooses for the pack."""
        code = self._shared[3]
        if code:
            return ("global", None) if code == 1 else ("shards", int(self._shared[4]))
        return self.chosen_order(versions)

    def chosen_order(self, versions: Optional[tuple] = None) -> tuple:
        """What `order=` (and `window_bytes=`) choose for the pack an epoch reads (for a
        local pack, from the memory read when the stream was made: `_memory`)."""
        reader, options = self._reader(versions)
        if isinstance(reader, Mixture):
            return "global", None
        return choose_order(reader, self.order, self.window_bytes, self.memory,
                            options.get("companions"))

    def _start(self, world_size: int) -> int:
        """The resume point as a position: `start_sample` as set (a batch plan refuses one
        past the epoch's end), or `start_batch` steps of `world_size` ranks, at most the
        whole epoch."""
        if self.start_batch:
            return min(self.start_batch * self.batch_size * world_size, self._items())
        return self.start_sample

    def advance(self, state: dict, batches: int, world_size: int = 1) -> dict:
        """`state` moved on by `batches` batches per rank of `world_size` ranks (capped at
        the end of the epoch)."""
        step = self.batch_size * world_size
        items = self._items(_saved_versions(self.pack, state))
        return dict(state, start_sample=min(state["start_sample"] + int(batches) * step, items))

    def load_state_dict(self, state: dict) -> None:
        """Resumes from `state_dict()`: the next iteration continues that epoch, over the
        version of the pack it was saved on."""
        versions = self.check_state(state)
        if WORKER_BATCHES in state:
            raise ValueError(
                f"this is the state of one DataLoader worker (worker {state['worker']} of "
                f"{state['num_workers']}), which only that worker can resume: restore it "
                "through the StatefulDataLoader that saved it, or resume from "
                "PackLoader.state_dict(), which holds for every worker and rank")
        self.set_epoch(state["epoch"], start_sample=state["start_sample"])
        order, window_bytes = saved_order(state)
        self._shared[3:5] = [2 if order == "shards" else 1, window_bytes or 0]
        if versions != self._own_versions:
            self._shared[_SHARED - 1:] = [1, *versions]

    def check_state(self, state: dict) -> tuple:
        """Refuses a state saved with another seed, or on another pack or a version this
        pack's history does not hold (`VersionError`, naming both): it would not continue
        the same order. Gives the versions the saved epoch goes on reading."""
        seed = self.options.get("seed", 0)
        if state.get("seed", seed) != seed:
            raise ValueError(f"the state was saved with seed={state['seed']}, this stream has "
                             f"seed={seed}: resuming would not continue the same epoch order")
        versions = _saved_versions(self.pack, state)
        self._reader(versions)  # opens the versions now: a problem shows here
        saved_order(state)
        return versions

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_readers"] = {}
        if _mp_context.get_spawning_popen() is None:
            # Not a worker start-up: a copy, which gets shared memory of its own.
            state["_shared"] = list(self._shared)
        return state

    def __setstate__(self, state):
        if isinstance(state["_shared"], list):
            values = state["_shared"]
            state["_shared"] = multiprocessing.RawArray("q", len(values))
            state["_shared"][:] = values
        self.__dict__.update(state)

    def num_batches(self, world_size: int = 1) -> int:
        """Batches per rank in an epoch (all workers together), from the resume point on."""
        reader, options = self._reader()
        return reader.num_batches(
            self.batch_size, select=options.get("select"), world_size=world_size,
            drop_last=options.get("drop_last", False), window=self.window,
            stride=options.get("stride"), start_sample=self.start_sample,
            start_batch=self.start_batch)

    def batches(self, part: Optional[Part] = None) -> Iterator[dict]:
        """The batches of the current epoch that this (rank, worker) share reads (by
        default the stream's rank of its world size, one worker)."""
        return iter(self.iteration(part))

    def iteration(self, part: Optional[Part] = None,
                  state: Optional[dict] = None) -> "Iteration":
        """This share's pass over the epoch from the shared epoch and resume point, or from
        `state` (a `state_dict()`, or an `Iteration.state_dict()` of this very share); its
        `state_dict()` says where it stands. `part` as in `batches`."""
        if part is None:
            part = Part(self.rank or 0, self.world_size or 1, 0, 1)
        if state is None:
            versions = self._epoch_versions()
            return Iteration(self, part, self.epoch, self._start(part.world_size), 0,
                             versions, self.epoch_order(versions))
        versions = self.check_state(state)
        done = 0
        if WORKER_BATCHES in state:
            if (state["worker"], state["num_workers"]) != (part.worker, part.num_workers):
                raise ValueError(
                    f"this state was saved by DataLoader worker {state['worker']} of "
                    f"{state['num_workers']}, and is loaded into worker {part.worker} of "
                    f"{part.num_workers}: resume with as many workers as before, or from "
                    "PackLoader.state_dict(), which holds for any number of workers")
            done = state[WORKER_BATCHES]
        return Iteration(self, part, state["epoch"], state["start_sample"], done, versions,
                         saved_order(state))

    def _batches(self, part: Part, epoch: int, start_sample: int,
                 versions: Optional[tuple] = None,
                 order: tuple = ("global", None)) -> Iterator[dict]:
        reader, options = self._reader(versions)
        common = dict(options, epoch=epoch, start_sample=start_sample, rank=part.rank,
                      world_size=part.world_size, worker=part.worker,
                      num_workers=part.num_workers)
        if order[0] == "shards":
            return shard_window_batches(reader, self.batch_size, self.window, order[1], common)
        if not isinstance(reader, Mixture):
            prefetch_all(reader, options.get("companions"))
        if self.window is None:
            return reader.batches(self.batch_size, **common)
        return reader.windows(self.window, self.batch_size, **common)


#: Shared slots before the versions: epoch, start_sample, start_batch, saved order, its
#: window bytes, versions-in-use flag (the last: the versions follow it).
_SHARED = 6

def check_order(order: str, window_bytes, reader) -> str:
    """`order=` and `window_bytes=` checked (a Mixture reads its sources in its own order)."""
    check_pack_order(order, window_bytes)
    if order == "shards" and isinstance(reader, Mixture):
        raise ValueError('order="shards" reads one pack a few shards at a time; a Mixture '
                         'interleaves its sources in an order of its own: give order="global" '
                         'or "auto"')
    return order


def order_state(order: tuple) -> dict:
    """What a state records of a shard-window epoch's order (nothing for the global one,
    which states saved before there was a choice also meant)."""
    if order[0] == "shards":
        return {"order": "shards", "window_bytes": int(order[1])}
    return {}


def saved_order(state: dict) -> tuple:
    """The order of the epoch a state was saved in (checked)."""
    order = state.get("order", "global")
    if order == "global":
        return "global", None
    window_bytes = state.get("window_bytes")
    if order != "shards" or not isinstance(window_bytes, int) or window_bytes < 1:
        raise ValueError(f"the state's order ({order!r}, window_bytes={window_bytes!r}) is not "
                         "one this package saves: \"shards\" with a window_bytes ≥ 1")
    return "shards", window_bytes


# A reader is a Pack or a Mixture: what the stream asks of either.

def _versions_of(reader) -> tuple:
    """The versions a reader reads: its pack's, or each source's of a Mixture."""
    return reader._versions() if isinstance(reader, Mixture) else (reader.version,)


def _saved_versions(reader, state: dict) -> tuple:
    """The versions to go on reading an epoch saved in `state` (checked against it)."""
    if isinstance(reader, Mixture):
        return reader._saved_versions(state)
    return saved_versions(reader, state)


def _at_versions(reader, versions: tuple):
    """The reader over those versions of its pack (or of the mixture's sources)."""
    if isinstance(reader, Mixture):
        return reader._at_versions(versions)
    return reader.at_version(versions[0])


def _resolved(reader, select):
    """A `select=` option resolved once (a Mixture refuses one: it selects through its
    sources)."""
    if isinstance(reader, Mixture):
        return reader._selection(select)
    return resolve(reader, select)


#: The key of a worker's own state: how many of its batches it has yielded.
WORKER_BATCHES = "worker_batches"


class Iteration:
    """One pass of a (rank, worker) share over an epoch from `start_sample`, after the first
    `done` of its own batches; `done` counts on as batches are yielded. `versions`: those
    of the pack (of each source) the epoch reads."""

    def __init__(self, stream: EpochStream, part: Part, epoch: int, start_sample: int,
                 done: int = 0, versions: Optional[tuple] = None,
                 order: tuple = ("global", None)):
        self.stream, self.part = stream, part
        self.epoch, self.start_sample, self.done = int(epoch), int(start_sample), int(done)
        self.versions = stream._own_versions if versions is None else tuple(versions)
        self.order = tuple(order)

    def __iter__(self) -> Iterator[dict]:
        part, stream = self.part, self.stream
        start = self.start_sample
        # The share's next batch is the rank's batch `first`; the epoch resumed at that
        # batch's step, read round-robin as worker 0 of as many, is the rest of this share.
        first = part.worker + self.done * part.num_workers
        if first:
            step = stream.batch_size * part.world_size
            start = min(start + first * step, stream._items(self.versions))
        rest = Part(part.rank, part.world_size, 0, part.num_workers)
        for batch in stream._batches(rest, self.epoch, start, self.versions, self.order):
            # Counted before it is handed on: a state taken once the batch is out includes it.
            self.done += 1
            yield batch

    def state_dict(self) -> dict:
        """Where this share stands. Without other workers, the elastic state (epoch, samples
        consumed by all ranks, seed, the identity of the pack read); a worker's own state
        adds (worker, num_workers, worker_batches), since the other workers' progress is not
        known here."""
        stream = self.stream
        state = {"epoch": self.epoch, "start_sample": self.start_sample,
                 "seed": stream.options.get("seed", 0),
                 **stream._reader(self.versions)[0].identity, **order_state(self.order)}
        if self.part.num_workers == 1:
            return stream.advance(state, self.done, self.part.world_size)
        return dict(state, worker=self.part.worker, num_workers=self.part.num_workers,
                    **{WORKER_BATCHES: self.done})


def split_fields(batch: dict) -> dict:
    """The batch with each structured array (a structured-dtype companion) replaced by a dict
    of its fields, recursively, each a contiguous array: what tensors can be made of."""
    return {key: _fields(value) for key, value in batch.items()}


def _fields(value):
    if isinstance(value, np.ndarray) and value.dtype.names is not None:
        return {name: _fields(np.ascontiguousarray(value[name])) for name in value.dtype.names}
    return value


#: Each array of a packed batch starts at a multiple of this many bytes, so that every
#: column can be viewed in place with its own dtype.
_ALIGN = 64


def pack_batch(batch: dict, into=None) -> tuple[np.ndarray, tuple, dict]:
    """The batch's arrays in one uint8 buffer, for one transfer from a data-loader worker
    instead of one per column: (buffer, layout, rest). `layout` holds (path, dtype, shape,
    offset) per array, the path a tuple of keys (a structured companion's fields nest under
    its key); `rest` the arrays that cannot be viewed in a buffer (objects), as they are.
    `into(size)` gives the buffer (a shared-memory slot), or None to have a new one made;
    then the buffer returned is None."""
    flat, rest = [], {}
    _flatten((), split_fields(batch), flat, rest)
    layout, offset = [], 0
    for path, array in flat:
        layout.append((path, array.dtype.str, array.shape, offset))
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    buffer = np.empty(offset, dtype=np.uint8) if into is None else into(offset)
    if buffer is None:
        return None, tuple(layout), rest
    for (_, _, shape, at), (_, array) in zip(layout, flat):
        np.ndarray(shape, array.dtype, buffer, at)[...] = array
    return buffer, tuple(layout), rest


class BatchRing:
    """Shared-memory slots through which data-loader workers hand packed batches to the
    main process: a few slots per worker, made before the workers start (they travel with
    the dataset). A worker packs a batch straight into a free slot of its own and sends
    only (slot, ticket) through its result pipe; the main process views the batch in place
    (no copy), and the slot is free again once the last array or tensor of that batch is
    gone. Nothing waits: a worker that finds no free slot (the training loop still holds
    its batches), or a batch that does not fit, sends the batch through the pipe as before.

    A slot is FREE, WRITING (a worker packs into it), FULL (packed, not taken) or READING
    (the main process holds the batch); the changes happen under the worker's lock, whose
    acquire and release also order the data written or read before them. Each packed batch
    gets a new ticket, checked when it is taken, so a batch is never read from a slot that
    holds another, and a slot is never written while its batch is held. Batches of an
    iteration the main process left stay FULL until `reclaim()`, called when the next
    iteration starts."""

    FREE, WRITING, FULL, READING = 0, 1, 2, 3

    def __init__(self, workers: int, slot_bytes: int, slots: int, context=None):
        context = context or multiprocessing.get_context()
        self.slots = int(slots)
        self.slot_bytes = -(-int(slot_bytes) // _ALIGN) * _ALIGN
        self._data = context.RawArray("B", int(workers) * self.slots * self.slot_bytes)
        # Per slot: state, ticket; per worker, at the end: the last ticket given.
        self._table = context.RawArray("q", int(workers) * (self.slots * 2 + 1))
        # Reentrant: a held batch's slot is freed by a finalizer, which the garbage
        # collector may run in the middle of another slot change of the same thread.
        self._locks = [context.RLock() for _ in range(int(workers))]
        self._view = None
        self._memoryview = None

    def _bytes(self) -> np.ndarray:
        if self._view is None:  # per process: the array's memory as NumPy bytes
            self._view = np.frombuffer(self._data, dtype=np.uint8)
        return self._view

    def _memory(self) -> memoryview:
        if self._memoryview is None:  # per process: the array's memory as bytes
            self._memoryview = memoryview(self._data).cast("B")
        return self._memoryview

    def __getstate__(self):
        return dict(self.__dict__, _view=None, _memoryview=None)

    def _row(self, worker: int) -> int:
        return worker * (self.slots * 2 + 1)

    def put(self, worker: int, batch: dict):
        """Packs the batch into a free slot of `worker`'s: (slot, ticket, size, layout,
        rest), or None (no slot free, or too big): the caller sends the batch itself."""
        claimed = []

        def into(size):
            if size > self.slot_bytes:
                return None
            slot = self._claim(worker)
            if slot is None:
                return None
            claimed.append(slot)
            start = (worker * self.slots + slot[0]) * self.slot_bytes
            return self._bytes()[start:start + size]
        try:
            buffer, layout, rest = pack_batch(batch, into)
        except BaseException:
            for slot, _ in claimed:
                self._set(worker, slot, self.FREE)
            raise
        if buffer is None:
            return None
        slot, ticket = claimed[0]
        self._set(worker, slot, self.FULL)
        return slot, ticket, buffer.size, layout, rest

    def _claim(self, worker: int):
        row, table = self._row(worker), self._table
        with self._locks[worker]:
            for slot in range(self.slots):
                if table[row + 2 * slot] == self.FREE:
                    ticket = table[row + 2 * self.slots] + 1
                    table[row + 2 * self.slots] = ticket
                    table[row + 2 * slot] = self.WRITING
                    table[row + 2 * slot + 1] = ticket
                    return slot, ticket
        return None

    def _set(self, worker: int, slot: int, state: int) -> None:
        with self._locks[worker]:
            self._table[self._row(worker) + 2 * slot] = state

    def take(self, worker: int, slot: int, ticket: int, size: int) -> np.ndarray:
        """The buffer `put` packed, in its slot (no copy). The slot stays READING while
        this array, or any array or tensor made from it, lives, and is FREE once the last
        of them is gone."""
        row, table = self._row(worker), self._table
        with self._locks[worker]:
            if (table[row + 2 * slot], table[row + 2 * slot + 1]) != (self.FULL, ticket):
                raise RuntimeError(
                    f"a batch of DataLoader worker {worker} is no longer in its shared-memory "
                    "slot (a batch of an iteration left before, taken after a new one "
                    "started); iterate a PackLoader one iteration at a time")
            table[row + 2 * slot] = self.READING
        start = (worker * self.slots + slot) * self.slot_bytes
        buffer = np.frombuffer(self._memory()[start:start + size], dtype=np.uint8)
        # Watched through the memoryview NumPy keeps as the array's base: every view and
        # tensor of the batch holds it (NumPy gathers chains of views onto their first base
        # that is not an array), however they were made.
        release = weakref.finalize(buffer.base, self._release, worker, slot, ticket)
        release.atexit = False  # at exit, the shared memory goes with the workers
        return buffer

    def _release(self, worker: int, slot: int, ticket: int) -> None:
        """Frees the slot of a batch taken, once nothing holds it (checked against the
        batch's ticket: the slot is only ever freed for the batch that held it)."""
        row, table = self._row(worker), self._table
        with self._locks[worker]:
            if (table[row + 2 * slot], table[row + 2 * slot + 1]) == (self.READING, ticket):
                table[row + 2 * slot] = self.FREE

    def reclaim(self) -> None:
        """Frees the FULL slots: called as an iteration starts, when no batch packed
        before it will be taken (a new ticket is needed to fill them again)."""
        for worker, lock in enumerate(self._locks):
            row = self._row(worker)
            with lock:
                for slot in range(self.slots):
                    if self._table[row + 2 * slot] == self.FULL:
                        self._table[row + 2 * slot] = self.FREE


def unpack_batch(buffer: np.ndarray, layout, rest, convert=None) -> dict:
    """The batch `pack_batch` packed, nested as it was: each array a NumPy view of `buffer`
    (no copy), passed through `convert` when given (e.g. `torch.from_numpy`)."""
    out: dict = {}
    for path, dtype, shape, at in layout:
        view = np.ndarray(shape, dtype, buffer, at)
        _put(out, path, view if convert is None else convert(view))
    for path, value in rest.items():
        _put(out, path, value)
    return out


def _flatten(path: tuple, value, flat: list, rest: dict) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(path + (key,), inner, flat, rest)
    elif isinstance(value, np.ndarray) and not value.dtype.hasobject:
        flat.append((path, np.ascontiguousarray(value)))
    else:
        rest[path] = value


def _put(out: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        out = out.setdefault(key, {})
    out[path[-1]] = value



def select_columns(batch: dict, columns) -> dict:
    """The batch restricted to `columns` (None: all of it); an unknown name is an error."""
    if columns is None:
        return batch
    unknown = [c for c in columns if c not in batch]
    if unknown:
        raise KeyError(f"no column {unknown[0]!r} in a batch (it has {', '.join(batch)})")
    return {c: batch[c] for c in columns}


def rename_columns(batch: dict, keys) -> dict:
    """The batch as `keys` names it: {new key: batch key}, only those (None: the batch as
    it is). How a trainer that reads `batch["tokens"]` gets `exps` under that name
    (`keys={"tokens": "exps", "move_targets": "move"}`); an unknown batch key is an error."""
    if keys is None:
        return batch
    unknown = [c for c in keys.values() if c not in batch]
    if unknown:
        raise KeyError(f"no column {unknown[0]!r} in a batch (it has {', '.join(batch)})")
    return {new: batch[old] for new, old in keys.items()}


def check_keys(keys, columns) -> Optional[dict]:
    """`keys` as a dict of str → str, refused alongside `columns` (which it replaces)."""
    if keys is None:
        return None
    if columns is not None:
        raise ValueError("give columns= or keys= (which names the columns it keeps), not both")
    if not isinstance(keys, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in keys.items()):
        raise TypeError(f"keys= is a dict of new key → batch key, e.g. {{'tokens': 'exps'}}, "
                        f"not {keys!r}")
    return dict(keys)
