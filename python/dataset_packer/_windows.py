"""Epochs read a few shards at a time: shard windows, the order that keeps a pack larger
than memory (or than its cache) off the disk's random-read path.

`ShardWindows` (`_order`) groups consecutive shards into windows of at most `window_bytes`
and permutes the windows and the rows inside each one. `shard_window_batches` reads a share
of such an epoch (what `Pack.batches` / `Pack.windows` yield for the same options, in that
order), with `ReadAhead` bringing in the next window while the current one is read: into
the cache for a remote pack (and releasing each finished window), into the page cache for a
local one (`_maps`). `choose_order` is what `order=` means for a pack: the global order or
shard windows, "auto" deciding from the cache's limit (remote) or the memory the process
may use (local: `_memory`).
"""

from __future__ import annotations

from typing import Iterator, Optional

import numpy as np

from ._codec import apply_symmetries
from ._companions import requested
from ._data import of, resolve
from ._format import ROW_BYTES
from ._memory import auto_order, available_memory
from ._order import ShardWindows, plan_epoch, shard_items, symmetries_for

#: `order=` values.
ORDERS = ("auto", "global", "shards")

#: The window size of `order="shards"` for a local pack when none is given.
DEFAULT_WINDOW_BYTES = 1 << 30


def check_order(order: str, window_bytes) -> str:
    """`order=` and `window_bytes=` checked."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(map(repr, ORDERS))}, not {order!r}")
    if window_bytes is not None and (isinstance(window_bytes, bool) or
                                     int(window_bytes) != window_bytes or window_bytes < 1):
        raise ValueError(f"window_bytes must be a number of bytes ≥ 1, not {window_bytes!r}")
    return order


def choose_order(pack, order: str, window_bytes: Optional[int], memory: Optional[int],
                 companions=None) -> tuple:
    """What `order=` (and `window_bytes=`) choose for an epoch of `pack` that reads these
    `companions`: ("global", None) or ("shards", window bytes). "auto" takes shard windows
    for a remote pack whose shards do not fit in half its cache (windows of half the
    cache), and for a local pack whose shards and companions read are more than half of
    `memory` (`_memory.auto_order`)."""
    data = of(pack)
    if order == "global":
        return "global", None
    limit = data.cache_limit
    if data.is_remote:
        window = window_bytes or (limit // 2 if limit else DEFAULT_WINDOW_BYTES)
        if order == "shards" or (limit is not None and pack_bytes(data) > limit // 2):
            return "shards", window
        return "global", None
    if order == "shards":
        return "shards", window_bytes or DEFAULT_WINDOW_BYTES
    read = read_bytes(pack, requested(pack, companions))
    chosen = auto_order(read, memory, pack_bytes(data) / read if read else 1.0)
    if chosen[0] == "shards" and window_bytes:
        return "shards", int(window_bytes)
    return chosen


def pack_bytes(data) -> int:
    """The bytes of a pack's shards."""
    return sum(data.shard_bytes(s) for s in range(len(data.shards)))


def read_bytes(pack, families) -> int:
    """The bytes an epoch of `pack` reads: its shards' and these companion families'."""
    data = of(pack)
    return pack_bytes(data) + sum(family.row_bytes * len(data) for _, family in families)


def prefetch_all(pack, companions=None) -> None:
    """A global-order epoch reaches every shard from its first batches on: a remote pack
    that fits its cache is fetched whole, ahead; a local one is brought into the page cache
    in the background, in large reads, with the companions the epoch reads (a pack that
    does not fit in memory is not: it would only push out what the batches read)."""
    data = of(pack)
    everything = list(range(len(data.shards)))
    if data.is_remote:
        if data.cache_limit is None or pack_bytes(data) <= data.cache_limit:
            data.prefetch(everything)
        return
    families = requested(pack, companions)
    memory, _ = available_memory()
    if memory is None or read_bytes(pack, families) <= memory // 2:
        data.prefetch(everything)
        for _, family in families:
            family._prefetch(everything)


class ReadAhead:
    """Which shards a share of a shard-window epoch holds, told batch by batch (`reading`):
    the windows its batch reads are fetched (ahead if they were not already), the windows
    before them released, and the next window fetched ahead at once. A share thus holds at
    most two windows, and every share of a node (ranks and workers, which go through the
    positions together, a few batches apart) holds the same two: at most the cache's size
    when a window is at most half of it. When the network is slower than the reading, the
    next window's transfers are asked for while the current one's last ones are still under
    way, so the link never runs dry between windows. (A share that starts a window while
    another is still finishing the one before finds no room for some of the next window's
    shards: those are fetched ahead by the last share to start the window, which finds the
    room, or else when they are read.) Each shard is fetched at most once per epoch; with
    windows of rows (`window=`), a shard that windows of rows cross into from a shard of
    another window is fetched for that window too (twice at most).

    A local pack's next window is brought in early only where two windows fit in half the
    memory: with less, it would push the current window's pages out of the page cache
    before they are read, and each would come back as a fault of its own. Each window is
    then brought in as its first batch starts (at the disk's sequential speed)."""

    def __init__(self, data, order: ShardWindows, families=()):
        self.data, self.order, self.families = data, order, [f for _, f in families]
        self.held: dict[int, list[int]] = {}  # window → its shards
        self._count: dict[int, int] = {}  # shard → held windows that read it
        self.early = data.is_remote or self._two_fit(available_memory()[0])

    def _two_fit(self, memory: Optional[int]) -> bool:
        """Whether two of the largest windows (with the companions read) fit in half of
        `memory`."""
        if memory is None:
            return True
        share = sum(f.row_bytes for f in self.families) / ROW_BYTES
        largest = max((sum(self.data.shard_bytes(s) for s in self.order.reads(w))
                       for w in range(self.order.windows)), default=0)
        return 2 * largest * (1 + share) <= memory // 2

    def reading(self, positions: np.ndarray) -> None:
        """The next batch reads these positions (in the epoch's order)."""
        if positions.size == 0:
            return
        window = self.order.window_of(positions)
        lo, hi = int(window.min()), int(window.max())
        for w in [w for w in self.held if w < lo]:
            self._release(w)
        for w in range(lo, hi + 1):
            self._hold(w)
        # (Not while a batch still reads the window before: that would make three.)
        if self.early and lo == hi and hi + 1 < self.order.windows:
            self._hold(hi + 1)

    def _hold(self, window: int) -> None:
        if window in self.held:
            return
        shards = self.order.reads(window)
        new = [s for s in shards if not self._count.get(s)]
        for s in shards:
            self._count[s] = self._count.get(s, 0) + 1
        self.held[window] = shards
        if new:
            self.data.prefetch(new)
            for family in self.families:
                family._prefetch(new)

    def _release(self, window: int) -> None:
        gone = []
        for s in self.held.pop(window):
            self._count[s] -= 1
            if not self._count[s]:
                gone.append(s)
        if gone:
            self.data.release(gone)
            for family in self.families:
                family._release(gone)

    def close(self) -> None:
        """The share is done (or left): everything it holds is released."""
        for w in list(self.held):
            self._release(w)


def shard_window_batches(reader, batch_size: int, window: Optional[int], window_bytes: int,
                         options: dict) -> Iterator[dict]:
    """A share's batches of a shard-window epoch of a Pack: what `Pack.batches` (or
    `Pack.windows`, with `window`) yields for the same options, in the `ShardWindows` order
    of the selection's rows (or windows), read through `Pack.gather` while `ReadAhead`
    fetches and releases the shards."""
    options = dict(options)
    known = {"shuffle", "seed", "epoch", "select", "rank", "world_size", "worker",
             "num_workers", "drop_last", "start_sample", "start_batch", "augment",
             "illegal_ev", "companions", "stride"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{unknown[0]} is not an option of a batch stream")
    if options.get("stride") is not None and window is None:
        raise TypeError("stride is an option of windows (give window=)")
    data = of(reader)
    selection = resolve(reader, options.get("select"))
    shuffle, seed, epoch = options.get("shuffle", True), options.get("seed", 0), options["epoch"]
    if window is None:
        items = data.row_ranges(selection, "batches()")
        item_rows, length = items.rows_at, 1
    else:
        if int(window) < 1:
            raise ValueError(f"length must be ≥ 1, not {window}")
        stride = int(options.get("stride") or window)
        if stride < 1:
            raise ValueError(f"stride must be ≥ 1, not {stride}")
        items = data.windows(selection, int(window), stride, "windows()")
        item_rows, length = items.first_rows, int(window)
    cuts, reach = shard_items(item_rows, items.total,
                              [data.shard_rows(s) for s in range(len(data.shards))], length)
    order = ShardWindows(cuts, reach, [data.shard_bytes(s) for s in range(len(data.shards))],
                         window_bytes, seed, epoch, shuffle)
    plan, rank, numbers, _ = plan_epoch(
        items.total, batch_size, False, seed, epoch, options.get("rank", 0),
        options.get("world_size", 1), options.get("worker", 0), options.get("num_workers", 1),
        options.get("drop_last", False), options.get("start_sample", 0),
        options.get("start_batch", 0), pad_from_end=True)
    return _read_windows(reader, data, order, plan, rank, numbers, item_rows, length, options)


def _read_windows(reader, data, order, plan, rank, numbers, item_rows, length,
                  options) -> Iterator[dict]:
    ahead = ReadAhead(data, order, requested(reader, options.get("companions")))
    steps = np.arange(length, dtype=np.int64)
    try:
        # The order is evaluated for a few batches at a time (as `Pack.batches` does it);
        # the shards are asked for batch by batch.
        for group in plan.chunks(rank, numbers):
            positions = plan.chunk_positions(rank, group)
            firsts = item_rows(order(positions))
            at = 0
            for _, count in group:
                ahead.reading(positions[at:at + count])
                yield _items_batch(reader, firsts[at:at + count], steps, options)
                at += count
    finally:
        ahead.close()


def _items_batch(reader, first: np.ndarray, steps: np.ndarray, options: dict) -> dict:
    """The batch of these items, given by their first rows (windows of `steps.size` rows;
    rows when 1): read through `Pack.gather`, shaped and augmented as `Pack.batches` and
    `Pack.windows` make theirs."""
    length = steps.size
    rows = first if length == 1 else (first[:, None] + steps).reshape(-1)
    batch = reader.gather(rows, options.get("illegal_ev", float("nan")),
                          companions=options.get("companions"))
    if length > 1:
        batch = {k: v.reshape((first.size, length) + v.shape[1:]) for k, v in batch.items()}
    if options.get("augment"):
        symmetry = symmetries_for(first, options.get("seed", 0), options["epoch"])
        apply_symmetries(batch, symmetry)
        batch["symmetry"] = symmetry
    return batch
