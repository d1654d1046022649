"""PyTorch glue: an IterableDataset over a pack (imported only when used; needs torch).

    from dataset_packer.torch import PackDataset, PackLoader
    data = PackDataset("packs/d6", 4096, shuffle=True, seed=0, augment=True)
    loader = PackLoader(data, num_workers=4, persistent_workers=True)
    for epoch in range(10):
        data.set_epoch(epoch)
        for batch in loader:          # dict of tensors: exps, move, evs, legal, …
            ...
            checkpoint = {"data": loader.state_dict(), ...}   # resumable at any world size

`companions=["embeddings"]` (an option of `Pack.batches`) adds companion rows as tensors too.
The dataset yields whole batches, so a plain DataLoader needs `batch_size=None`, which is how
torch turns its automatic batching off (`PackLoader` sets it, and refuses any other); a
DataLoader that would stack several of them into one (any `batch_size`, its default 1
included) gets a ValueError as it collates the first of them. The batches say so themselves:
each is a `dict` marked as a whole batch (`WholeBatch`), and torch's collation keeps a
mapping's type by cloning it and updating the clone with the collated values (stacked ones
have one more dimension than the batch's own); with `batch_size=None` torch converts each
batch alone, keeping its shape. A `collate_fn` of your own with a `batch_size` gets the list
of whole batches as they are.

Each worker reads its own batches (from `get_worker_info()`), each rank its own share (from
`torch.distributed` when initialised, or `rank=`/`world_size=`); the DataLoader's round-robin
over workers gives back the rank's batches in order. Tensors are made with `torch.from_numpy`
(no copy). Under `PackLoader`, a worker packs each batch into one buffer in shared memory
(`BatchRing`: a few slots per worker, made by the loader) and sends only where it is, a few
batches per DataLoader item (torch's own cost per item is paid once for them; PackLoader puts
them back in the rank's order); the main process makes the batch's tensors straight from the
slot (no copy), and the slot serves again once the last of them is gone. A worker whose slots
are all full or held (a loop that keeps its batches) sends the packed batch through its
result pipe instead. With `pin_memory=True` the DataLoader's pin-memory thread unpacks each
batch and pins its tensors.

`set_epoch` is called in the main process before iterating; the epoch and resume point are
kept in shared memory, so workers see them whether they are started anew each epoch or kept
(`persistent_workers=True`). `PackLoader` counts the batches the training loop took, and its
`state_dict()` is (epoch, samples consumed, seed, and the pack's `pack_id`, `version` and
`rows`): `load_state_dict` resumes after those samples with any world size, batch size or
number of workers, over the version of the pack the state was saved on when the pack has
grown since (the rest of that epoch; docs/versions.md).

`order="auto"` (the default) reads a remote pack larger than half its cache, and a local pack
larger than half the memory the process may use, in shard windows (a few shards at a time,
the next ones brought in ahead), and any other pack in its global order; `order="global"` /
`"shards"` and `window_bytes=` choose (docs/object-storage.md, "Epochs over a pack larger
than the cache"; docs/larger-than-memory.md). A state saved in a shard-window epoch records
the order, and resumes in it.

`PackDataset.state_dict()` / `load_state_dict()` are what torchdata's `StatefulDataLoader`
calls (`batch_size=None` there too): while an iteration runs in a process, the state says how
far that process got. In the main process (`num_workers=0`) it is the elastic (epoch, samples
consumed, seed); in a worker, that worker's own place (which of its batches come next), which
StatefulDataLoader restores in the same worker: it resumes with the same number of workers.
"""

from __future__ import annotations

import multiprocessing
import uuid
import weakref
from typing import Iterator, Optional

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ._loader import (BatchRing, EpochStream, WorkerInfo, check_keys, pack_batch, partition,
                      rename_columns, select_columns, split_fields, unpack_batch)
from ._order import Part


def _distributed() -> tuple[Optional[int], Optional[int]]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None, None


def _worker() -> Optional[WorkerInfo]:
    info = get_worker_info()
    return None if info is None else WorkerInfo(info.id, info.num_workers)


class WholeBatch(dict):
    """A batch as `PackDataset` yields it: a dict of tensors of `batch_size` rows (or
    windows), which refuses to be stacked with other batches into one.

    torch's collation (`default_collate` with a loader's `batch_size`; `default_convert`
    with `batch_size=None`; the pin-memory thread) keeps a mutable mapping's type: it clones
    the batch and `update`s the clone with each key's collated value. A value stacked from
    several batches has one more leading dimension than the batch's own, and that update
    is refused with a ValueError that says what to do."""

    def __init__(self, values=(), batch_size: Optional[int] = None, dataset: str = "dataset"):
        super().__init__(values)
        #: The batch size the dataset was given, and its type's name (for the message).
        self.batch_size, self.dataset = batch_size, dataset

    def __copy__(self) -> "WholeBatch":
        # What torch's collation clones (copy.copy would go through __reduce_ex__, slower).
        return WholeBatch(self, self.batch_size, self.dataset)

    def update(self, other=(), **more) -> None:
        new = dict(other, **more)
        # Collation stacks every key alike: the first key with a shape tells.
        for key, value in new.items():
            stacked = _stacked(dict.get(self, key), value)
            if stacked is not None:
                if stacked:
                    raise ValueError(
                        f"{self.dataset} yields whole batches (of {self.batch_size}), but "
                        "this DataLoader has a batch_size (its default is 1) and would "
                        "stack several of them into one: give it batch_size=None, or use "
                        "PackLoader, which does")
                break
        super().update(new)


def _stacked(own, collated) -> Optional[bool]:
    """Whether `collated` is `own` stacked with others: one more leading dimension, the
    rest of its shape the same (a structured companion: its first field's). None when
    either has no shape to tell."""
    if isinstance(own, dict) and isinstance(collated, dict):
        key = next(iter(own), None)
        return None if key is None else _stacked(own[key], collated.get(key))
    shape, new = getattr(own, "shape", None), getattr(collated, "shape", None)
    if shape is None or new is None:
        return None
    return len(new) == len(shape) + 1 and tuple(new[1:]) == tuple(shape)


def to_tensors(batch: dict) -> dict:
    """A decoded batch as tensors sharing the arrays' memory. A structured-dtype companion
    becomes a dict of its fields' tensors; an array torch has no dtype for (bytes, strings)
    stays a NumPy array."""
    return {key: _tensor(value) for key, value in split_fields(batch).items()}


def _tensor(value):
    if isinstance(value, dict):
        return {key: _tensor(v) for key, v in value.items()}
    try:
        return torch.from_numpy(value)
    except TypeError:
        return value


class PackDataset(IterableDataset):
    """Batches of a pack as dicts of tensors; see the module docstring and `Pack.batches`.

    `pack` is a path, a `Pack` or a `Mixture`; `window=L` yields (B, L, …) windows
    (`Pack.windows`); `columns=["exps", "move", …]` keeps only those keys of each batch
    (less to decode into tensors and to send from the workers); `keys={"tokens": "exps",
    "move_targets": "move"}` keeps those columns under the names a training step reads;
    `order=` and `window_bytes=` choose the epoch's order (`EpochStream`)."""

    def __init__(self, pack, batch_size: int, *, window: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 columns=None, keys=None, **options):
        super().__init__()
        self.stream = EpochStream(pack, batch_size, window=window, rank=rank,
                                  world_size=world_size, **options)
        self.keys = check_keys(keys, columns)
        self.columns = None if columns is None else list(columns)
        # Whether set_epoch or load_state_dict chose the next iteration's epoch since the
        # last one started (PackLoader's auto_epoch then leaves it alone).
        self._epoch_given = False
        # This process's iteration under way (for state_dict), and in a worker the state
        # StatefulDataLoader restored for its next iteration.
        self._iteration = None
        self._restored = None

    def set_epoch(self, epoch: int, start_batch: int = 0, *, start_sample: int = 0) -> None:
        """The next iteration yields this epoch, after its first `start_sample` samples (any
        world size, batch size or workers), or from each rank's batch `start_batch` on."""
        self._iteration = None
        self.stream.set_epoch(epoch, start_batch, start_sample=start_sample)
        self._epoch_given = True

    def state_dict(self) -> dict:
        """Where to resume: while this process iterates, after the batches it has yielded
        (in a DataLoader worker, that worker's own state); otherwise the resume point of the
        next iteration, (epoch, start_sample, seed)."""
        if self._iteration is not None:
            return self._iteration.state_dict()
        return self._resume_point()

    def _resume_point(self) -> dict:
        return self.stream.state_dict(0, self._part().world_size)

    def load_state_dict(self, state: dict) -> None:
        """Resumes from a `state_dict()` of this dataset or of a `PackLoader`. In a
        DataLoader worker (StatefulDataLoader restoring one) it holds for that worker's next
        iteration only: the shared resume point belongs to the main process."""
        if get_worker_info() is None:
            self._iteration = None
            self.stream.load_state_dict(state)
            self._epoch_given = True
        else:
            self.stream.check_state(state)
            self._restored = state

    def _part(self):
        dist_rank, dist_world = _distributed()
        return partition(_worker(), dist_rank, dist_world, self.stream.rank,
                         self.stream.world_size)

    def __iter__(self) -> Iterator[dict]:
        # Not a generator: the resume point is read when the loader asks for the iterator.
        state, self._restored = self._restored, None
        self._iteration = self.stream.iteration(self._part(), state)
        return self._tensors(self._iteration)

    def _shape(self, batch: dict) -> dict:
        """The batch with only the `columns` kept, or renamed as `keys` says."""
        return rename_columns(select_columns(batch, self.columns), self.keys)

    def _tensors(self, batches) -> Iterator:
        worker = get_worker_info()
        if _PACKING is None or worker is None:
            name = type(self).__name__
            for batch in batches:
                yield WholeBatch(to_tensors(self._shape(batch)), self.stream.batch_size, name)
            return
        ring, token, per_item = _PACKING
        bundle = []
        for batch in batches:
            batch = self._shape(batch)
            sent = None if ring is None else ring.put(worker.id, batch)
            bundle.append(_Packed(*pack_batch(batch)) if sent is None else
                          _InRing(token, worker.id, *sent))
            if len(bundle) == per_item:
                yield _Bundle(worker.id, bundle)
                bundle = []
        if bundle:
            yield _Bundle(worker.id, bundle)

    def __len__(self) -> int:
        """Batches per rank in the current epoch (all workers together)."""
        return self.stream.num_batches(self._part().world_size)


#: A PackLoader worker sends several batches per DataLoader item, so that torch's own cost
#: per item (its index and result queues, the unpickling, the profiler's record_function) is
#: paid once for them: at most MAX_BUNDLE, and no more than fit in BUNDLE_BYTES packed (the
#: shared-memory slots grow with the batches in flight).
MAX_BUNDLE = 4
BUNDLE_BYTES = 2 << 20

#: PackLoaders' rings by token, for the batches workers left in them.
_RINGS: "weakref.WeakValueDictionary[str, BatchRing]" = weakref.WeakValueDictionary()

#: In a worker of a PackLoader (set by its worker_init_fn): (ring, token, batches per item)
#: of that loader, or (None, None, 1) without a ring. Workers of any other loader yield
#: tensors as usual.
_PACKING: Optional[tuple] = None


class _PackingWorker:
    """PackLoader's worker_init_fn: marks the worker as one whose batches PackLoader unpacks,
    and hands it the loader's shared-memory slots; then runs the user's worker_init_fn.
    (The dataset itself is left as the user made it, for any other loader.)"""

    def __init__(self, ring: Optional[tuple], then=None):
        self.ring, self.then = ring, then

    def __call__(self, worker_id: int) -> None:
        global _PACKING
        _PACKING = self.ring or (None, None, 1)
        if self.then is not None:
            self.then(worker_id)


class _Transfer:
    """A batch on its way from a worker to PackLoader, unpacked there by its `unpack()`."""

    def pin_memory(self) -> dict:
        """The batch unpacked, its tensors in pinned memory: what the DataLoader's
        pin-memory thread (`pin_memory=True`) asks of an object it does not know, which it
        would otherwise pass on as it is (PackLoader's batches came out not pinned)."""
        return _pinned(self.unpack())


def _pinned(value):
    if isinstance(value, dict):
        return {key: _pinned(v) for key, v in value.items()}
    return value.pin_memory() if isinstance(value, torch.Tensor) else value


class _Bundle:
    """A worker's next few batches (fewer at the end of its share), on their way to
    PackLoader as one DataLoader item."""

    def __init__(self, worker: int, batches: list):
        self.worker, self.batches = worker, batches

    def pin_memory(self) -> "_Bundle":
        """Each batch unpacked and pinned (see `_Transfer.pin_memory`)."""
        return _Bundle(self.worker, [b.pin_memory() for b in self.batches])


def _in_order(items, num_workers: int):
    """The batches of the workers' bundles in the rank's order. The DataLoader hands the
    items round-robin, one from each worker that still reads, in worker order (a round);
    worker w's share is the rank's batches w, w + num_workers, …, so in a round the i-th
    batch of worker w's bundle comes before the i-th of worker w + 1's and after all the
    (i−1)-th. The first batch of each bundle is handed on as it arrives; the rest once the
    round is complete (its last worker's bundle is in, or the next round has begun)."""
    round_: list = []
    for item in items:
        if round_ and item.worker <= round_[-1].worker:
            yield from _rest_of_round(round_)
            round_ = []
        round_.append(item)
        yield item.batches[0]
        if item.worker == num_workers - 1:
            yield from _rest_of_round(round_)
            round_ = []
    yield from _rest_of_round(round_)


def _rest_of_round(round_: list):
    """The batches after each bundle's first, in the rank's order (a later worker's bundle
    is never longer than an earlier one's: its share is never larger)."""
    for i in range(1, max((len(b.batches) for b in round_), default=0)):
        for bundle in round_:
            if i < len(bundle.batches):
                yield bundle.batches[i]


class _Packed(_Transfer):
    """A batch as one buffer (and its layout) on its way from a worker to PackLoader. The
    buffer is a NumPy array, so that it travels pickled through the worker's result pipe:
    a tensor would go through a new shared-memory segment and a socket handshake with the
    worker for its file descriptor, which cost more than the copy (mostly in waiting for
    the worker's busy process to answer)."""

    def __init__(self, buffer, layout, rest):
        self.buffer, self.layout, self.rest = buffer, layout, rest

    def unpack(self) -> dict:
        rest = {path: _tensor(value) for path, value in self.rest.items()}
        return unpack_batch(self.buffer, self.layout, rest, _tensor)


class _InRing(_Transfer):
    """A batch a worker packed into a shared-memory slot of PackLoader's ring: only where
    it is travels through the pipe. Its tensors are views of the slot, which they hold
    until the last of them is gone."""

    def __init__(self, token, worker, slot, ticket, size, layout, rest):
        self.token, self.worker, self.slot, self.ticket = token, worker, slot, ticket
        self.size, self.layout, self.rest = size, layout, rest

    def unpack(self) -> dict:
        ring = _RINGS.get(self.token)
        if ring is None:
            raise RuntimeError("a batch left in the shared memory of a PackLoader that is "
                               "gone")
        buffer = ring.take(self.worker, self.slot, self.ticket, self.size)
        rest = {path: _tensor(value) for path, value in self.rest.items()}
        return unpack_batch(buffer, self.layout, rest, _tensor)


def _dtypes(dtypes) -> dict:
    """{key: torch.dtype} from torch dtypes or their names ("int64")."""
    out = {}
    for key, dtype in (dtypes or {}).items():
        if isinstance(dtype, str):
            found = getattr(torch, dtype, None)
            if not isinstance(found, torch.dtype):
                raise TypeError(f"dtypes[{key!r}]: {dtype!r} is not a torch dtype")
            dtype = found
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtypes[{key!r}] is a torch dtype (torch.int64), not {dtype!r}")
        out[key] = dtype
    return out


class PackLoader(DataLoader):
    """A DataLoader over a `PackDataset` (whole batches: `batch_size=None`) that counts the
    batches the training loop has taken in the current epoch, so that `state_dict()` says
    where to resume: the epoch, the samples consumed by all ranks together, and the seed.
    `load_state_dict()` resumes there with any world size, batch size or workers.

    With workers, it packs one batch when it is made, to size its shared-memory slots:
    (prefetch_factor + 2) × num_workers bundles of packed batches (all keys of a 4096-row
    batch are 336 KB, 4 to a bundle; `columns=` makes them smaller). Each worker sends its
    batches a bundle at a time (MAX_BUNDLE, fewer when they are big), put back in the
    rank's order here.

    For a training loop written for another loader: `device=` moves each batch there
    (`non_blocking=True`: asynchronous from pinned memory, so give `pin_memory=True`), and
    `dtypes={"tokens": torch.int64}` converts those keys after the move, on the device, so
    the narrow columns cross PCIe (a uint8 board is 16 bytes a row, int64 128); without a
    device they are converted here, in the main process, after the workers' transfer.
    `auto_epoch=True` starts the next epoch on each new iteration (for loops that call
    `iter()` again on StopIteration and never `set_epoch`), unless `set_epoch` or
    `load_state_dict` chose the epoch since the last iteration began; a state saved at the
    end of an epoch then resumes at the start of the next."""

    def __init__(self, dataset: PackDataset, *, device=None, dtypes=None,
                 auto_epoch: bool = False, **options):
        if not isinstance(dataset, PackDataset):
            raise TypeError(f"PackLoader reads a PackDataset, not {type(dataset).__name__}")
        if options.get("drop_last"):
            raise ValueError("drop_last is an option of PackDataset, which makes the batches: "
                             "PackDataset(..., drop_last=True) leaves out each epoch's last, "
                             "incomplete step; PackLoader itself takes no drop_last")
        if options.setdefault("batch_size", None) is not None:
            raise ValueError("a PackDataset yields whole batches: give its batch size to "
                             "PackDataset, and batch_size=None (the default here) to the loader")
        self.device = None if device is None else torch.device(device)
        self.dtypes = _dtypes(dtypes)
        self.auto_epoch = bool(auto_epoch)
        self._iterated = False
        if options.get("in_order", True) is False:
            # Its state counts the batches taken as the epoch's first ones.
            raise ValueError("PackLoader needs in_order=True: out of order, the batches taken "
                             "are not the epoch's first ones, and a resume from its "
                             "state_dict() would skip some rows and repeat others")
        super().__init__(dataset, **options)
        self._taken = 0
        self._state = dataset._resume_point()
        self._ring = self._make_ring() if self.num_workers > 0 else None
        # Workers send each batch as one buffer (in shared memory when a slot is free),
        # unpacked here into views: one transfer instead of one per column.
        self.worker_init_fn = _PackingWorker(self._ring, self.worker_init_fn)

    def _make_ring(self) -> Optional[tuple]:
        """(ring, token, batches per bundle): shared-memory slots for the batches in flight
        from the workers (the prefetched bundles and two more each), as big as a full packed
        batch: one is packed here to know. The workers get them with the dataset when they
        start."""
        stream = self.dataset.stream
        # In the epoch's own order: a shard-window epoch reads its first window's shards
        # only, where a global one could reach every shard of a remote pack.
        first = stream._batches(Part(0, 1, 0, 1), 0, 0, order=stream.epoch_order())
        try:
            batch = self.dataset._shape(next(iter(first)))
        except StopIteration:
            return None
        size = pack_batch(batch)[0].size
        context = self.multiprocessing_context or multiprocessing.get_context()
        per_item = max(1, min(MAX_BUNDLE, BUNDLE_BYTES // size))
        ring = BatchRing(self.num_workers, size, ((self.prefetch_factor or 1) + 2) * per_item,
                         context)
        token = uuid.uuid4().hex
        _RINGS[token] = ring
        return ring, token, per_item

    def __iter__(self):
        if self.auto_epoch:
            self._next_epoch()
        # The resume point this iteration starts from, kept should set_epoch be called before
        # state_dict is asked for.
        self._state = self.dataset._resume_point()
        self._taken = 0
        if self._ring is not None:
            # Batches packed for an earlier iteration will not be taken: their slots are
            # free again.
            self._ring[0].reclaim()
        items = super().__iter__()
        for batch in _in_order(items, self.num_workers) if self.num_workers else items:
            self._taken += 1
            # Unpacked already when the pin-memory thread pinned it.
            yield self._placed(batch.unpack() if isinstance(batch, _Transfer) else batch)

    def _next_epoch(self) -> None:
        """auto_epoch: the epoch after the last iteration's, unless set_epoch or
        load_state_dict chose one since; a resume point with no batch left in its epoch
        moves on to the next epoch's start."""
        data = self.dataset
        stream = data.stream
        if self._iterated and not data._epoch_given:
            data.set_epoch(stream.epoch + 1)
        elif ((stream.start_sample or stream.start_batch)
              and stream.num_batches(data._part().world_size) == 0):
            data.set_epoch(stream.epoch + 1)
        data._epoch_given = False
        self._iterated = True

    def _placed(self, batch: dict) -> dict:
        """The batch on `device` (copied without blocking), then with `dtypes` applied there.
        (The host tensors may go at once: a copy from pinned memory is tracked by torch's
        pinned-memory allocator until it completes, and one from pageable memory has read
        its source when `to` returns.)"""
        if self.device is None and not self.dtypes:
            return batch
        missing = [key for key in self.dtypes if key not in batch]
        if missing:
            raise KeyError(f"dtypes names {missing[0]!r}, which a batch does not have (it has "
                           f"{', '.join(batch)})")
        return {key: self._place(value, self.dtypes.get(key)) for key, value in batch.items()}

    def _place(self, value, dtype):
        if isinstance(value, dict):
            return {key: self._place(v, None) for key, v in value.items()}
        if not isinstance(value, torch.Tensor):
            return value
        if self.device is not None:
            value = value.to(self.device, non_blocking=True)
        return value if dtype is None else value.to(dtype)

    def state_dict(self) -> dict:
        """Where to resume: after the batches taken so far in this epoch, on every rank."""
        world = self.dataset._part().world_size
        return self.dataset.stream.advance(self._state, self._taken, world)

    def load_state_dict(self, state: dict) -> None:
        """The next iteration continues the saved epoch after its consumed samples."""
        self.dataset.load_state_dict(state)
