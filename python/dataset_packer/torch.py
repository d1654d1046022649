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
The dataset yields whole batches, so a plain DataLoader needs `batch_size=None` (`PackLoader`
sets it, and refuses any other). Each worker reads its own batches (from `get_worker_info()`),
each rank its own share (from `torch.distributed` when initialised, or `rank=`/`world_size=`);
the DataLoader's round-robin over workers gives back the rank's batches in order. Tensors are
made with `torch.from_numpy` (no copy).

`set_epoch` is called in the main process before iterating; the epoch and resume point are
kept in shared memory, so workers see them whether they are started anew each epoch or kept
(`persistent_workers=True`). `PackLoader` counts the batches the training loop took, and its
`state_dict()` is (epoch, samples consumed, seed): `load_state_dict` resumes after those
samples with any world size, batch size or number of workers (`PackDataset.state_dict()` /
`load_state_dict()` do the same for the dataset alone, at the start of its current resume
point).
"""

from __future__ import annotations

from typing import Iterator, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ._loader import (EpochStream, WorkerInfo, pack_batch, partition, select_columns,
                      split_fields, unpack_batch)


def _distributed() -> tuple[Optional[int], Optional[int]]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None, None


def _worker() -> Optional[WorkerInfo]:
    info = get_worker_info()
    return None if info is None else WorkerInfo(info.id, info.num_workers)


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
    (less to decode into tensors and to send from the workers)."""

    def __init__(self, pack, batch_size: int, *, window: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 columns=None, **options):
        super().__init__()
        self.stream = EpochStream(pack, batch_size, window=window, rank=rank,
                                  world_size=world_size, **options)
        self.columns = None if columns is None else list(columns)
        # Set by PackLoader, which unpacks: workers then send one buffer per batch.
        self.packed = False

    def set_epoch(self, epoch: int, start_batch: int = 0, *, start_sample: int = 0) -> None:
        """The next iteration yields this epoch, after its first `start_sample` samples (any
        world size, batch size or workers), or from each rank's batch `start_batch` on."""
        self.stream.set_epoch(epoch, start_batch, start_sample=start_sample)

    def state_dict(self) -> dict:
        """(epoch, start_sample, seed) of the next iteration: its resume point."""
        return self.stream.state_dict(0, self._part().world_size)

    def load_state_dict(self, state: dict) -> None:
        """Resumes from a `state_dict()` of this dataset or of a `PackLoader`."""
        self.stream.load_state_dict(state)

    def _part(self):
        dist_rank, dist_world = _distributed()
        return partition(_worker(), dist_rank, dist_world, self.stream.rank,
                         self.stream.world_size)

    def __iter__(self) -> Iterator[dict]:
        in_worker = get_worker_info() is not None
        for batch in self.stream.batches(self._part()):
            batch = select_columns(batch, self.columns)
            if self.packed and in_worker:
                buffer, layout, rest = pack_batch(batch)
                yield _Packed(torch.from_numpy(buffer), layout, rest)
            else:
                yield to_tensors(batch)

    def __len__(self) -> int:
        """Batches per rank in the current epoch (all workers together)."""
        return self.stream.num_batches(self._part().world_size)


class _Packed:
    """A batch as one tensor (and its layout) on its way from a worker to PackLoader."""

    def __init__(self, buffer, layout, rest):
        self.buffer, self.layout, self.rest = buffer, layout, rest

    def unpack(self) -> dict:
        rest = {path: _tensor(value) for path, value in self.rest.items()}
        return unpack_batch(self.buffer, self.layout, rest, _torch_view)


def _torch_view(buffer, start: int, stop: int, dtype, shape):
    return buffer[start:stop].view(_TORCH_DTYPES[dtype.str]).view(shape)


_TORCH_DTYPES = {np.dtype(t).str: torch.from_numpy(np.zeros(1, dtype=t)).dtype
                 for t in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64,
                           np.uint16, np.uint32, np.uint64, np.float16, np.float32,
                           np.float64)}


class PackLoader(DataLoader):
    """A DataLoader over a `PackDataset` (whole batches: `batch_size=None`) that counts the
    batches the training loop has taken in the current epoch, so that `state_dict()` says
    where to resume: the epoch, the samples consumed by all ranks together, and the seed.
    `load_state_dict()` resumes there with any world size, batch size or workers."""

    def __init__(self, dataset: PackDataset, **options):
        if not isinstance(dataset, PackDataset):
            raise TypeError(f"PackLoader reads a PackDataset, not {type(dataset).__name__}")
        if options.setdefault("batch_size", None) is not None:
            raise ValueError("a PackDataset yields whole batches: give its batch size to "
                             "PackDataset, and batch_size=None (the default here) to the loader")
        # Workers send each batch as one buffer, unpacked here into views: one transfer
        # instead of one per column.
        dataset.packed = True
        super().__init__(dataset, **options)
        self._taken = 0
        self._state = dataset.state_dict()

    def __iter__(self):
        # The resume point this iteration starts from, kept should set_epoch be called before
        # state_dict is asked for.
        self._state = self.dataset.state_dict()
        self._taken = 0
        for batch in super().__iter__():
            self._taken += 1
            yield batch.unpack() if isinstance(batch, _Packed) else batch

    def state_dict(self) -> dict:
        """Where to resume: after the batches taken so far in this epoch, on every rank."""
        world = self.dataset._part().world_size
        return self.dataset.stream.advance(self._state, self._taken, world)

    def load_state_dict(self, state: dict) -> None:
        """The next iteration continues the saved epoch after its consumed samples."""
        self.dataset.load_state_dict(state)
