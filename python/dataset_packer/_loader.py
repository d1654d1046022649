"""The logic behind `dataset_packer.torch`, kept free of PyTorch so it is tested without it.

`EpochStream` holds what an epoch of batches depends on (pack, batch size, options, epoch,
resume point) and yields the batches of one (rank, worker) share. Which share is decided by
`partition()` from what the caller found out: PyTorch's worker info (id, num_workers) and
`torch.distributed` (rank, world size), or values given explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ._order import Part
from ._pack import Pack


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
    """Batches of a pack for one epoch at a time (`set_epoch`), by (rank, worker) share.

    `window`: yield `Pack.windows(window, batch_size, ...)` instead of `Pack.batches`.
    Other keyword options are those of `Pack.batches` (shuffle, seed, select, drop_last,
    augment, illegal_ev, companions; `stride` too with `window`)."""

    def __init__(self, pack, batch_size: int, *, window: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None, **options):
        self.pack = pack if isinstance(pack, Pack) else Pack(pack)
        self.batch_size = batch_size
        self.window = window
        self.rank = rank
        self.world_size = world_size
        for fixed in ("epoch", "start_batch", "worker", "num_workers"):
            if fixed in options:
                raise TypeError(f"{fixed} is not an option here: use set_epoch(epoch, "
                                "start_batch) and the data loader's workers")
        if options.get("select") is not None:
            # Resolved once: SQL is run here, not again every epoch and in every worker (and a
            # shuffled pack's rows are found by run_id once, then travel with the selection).
            options["select"] = self.pack._selection(options["select"])
        self.options = options
        self.epoch = 0
        self.start_batch = 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """The epoch the next iteration yields, from batch `start_batch` of each rank."""
        self.epoch = int(epoch)
        self.start_batch = int(start_batch)

    def num_batches(self, world_size: int = 1) -> int:
        """Batches per rank in an epoch (all workers together), from `start_batch` on."""
        total = self.pack.num_batches(
            self.batch_size, select=self.options.get("select"), world_size=world_size,
            drop_last=self.options.get("drop_last", False), window=self.window,
            stride=self.options.get("stride"))
        return max(0, total - self.start_batch)

    def batches(self, part: Part) -> Iterator[dict]:
        """The batches of the current epoch that this (rank, worker) share reads."""
        common = dict(self.options, epoch=self.epoch, start_batch=self.start_batch,
                      rank=part.rank, world_size=part.world_size, worker=part.worker,
                      num_workers=part.num_workers)
        if self.window is None:
            return self.pack.batches(self.batch_size, **common)
        return self.pack.windows(self.window, self.batch_size, **common)


def split_fields(batch: dict) -> dict:
    """The batch with each structured array (a structured-dtype companion) replaced by a dict
    of its fields, recursively, each a contiguous array: what tensors can be made of."""
    return {key: _fields(value) for key, value in batch.items()}


def _fields(value):
    if isinstance(value, np.ndarray) and value.dtype.names is not None:
        return {name: _fields(np.ascontiguousarray(value[name])) for name in value.dtype.names}
    return value
