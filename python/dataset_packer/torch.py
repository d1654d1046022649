"""PyTorch glue: an IterableDataset over a pack (imported only when used; needs torch).

    from dataset_packer.torch import PackDataset
    data = PackDataset("packs/d6", 4096, shuffle=True, seed=0, augment=True)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=4)
    for epoch in range(10):
        data.set_epoch(epoch)
        for batch in loader:          # dict of tensors: exps, move, evs, legal, …
            ...

`companions=["embeddings"]` (an option of `Pack.batches`) adds companion rows as tensors too.
The dataset yields whole batches, so give the DataLoader `batch_size=None`. Each worker reads
its own batches (from `get_worker_info()`), each rank its own share (from `torch.distributed`
when initialised, or `rank=`/`world_size=`); the DataLoader's round-robin over workers gives
back the rank's batches in order. Tensors are made with `torch.from_numpy` (no copy).
`set_epoch` must be called in the main process before iterating, with the default
`persistent_workers=False` (workers are then started with the new epoch).
"""

from __future__ import annotations

from typing import Iterator, Optional

import torch
from torch.utils.data import IterableDataset, get_worker_info

from ._loader import EpochStream, WorkerInfo, partition, split_fields


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

    `pack` is a path or a `Pack`; `window=L` yields (B, L, …) windows (`Pack.windows`)."""

    def __init__(self, pack, batch_size: int, *, window: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None, **options):
        super().__init__()
        self.stream = EpochStream(pack, batch_size, window=window, rank=rank,
                                  world_size=world_size, **options)

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """The next iteration yields this epoch, from the rank's batch `start_batch` on."""
        self.stream.set_epoch(epoch, start_batch)

    def _part(self):
        dist_rank, dist_world = _distributed()
        return partition(_worker(), dist_rank, dist_world, self.stream.rank,
                         self.stream.world_size)

    def __iter__(self) -> Iterator[dict]:
        for batch in self.stream.batches(self._part()):
            yield to_tensors(batch)

    def __len__(self) -> int:
        """Batches per rank in the current epoch (all workers together)."""
        return self.stream.num_batches(self._part().world_size)
