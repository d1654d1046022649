"""The shard-window epoch order (`order="shards"`) and its read-ahead.

First the order itself (`_order.ShardWindows`, `shard_items`, `EpochPlan(pad_from_end=…)`)
on random shard layouts; then epochs of a real pack with many small shards whose data is
made to look remote: a `PackData` that records every `prefetch`, `release` and access to a
shard's rows (each simulated process — a (rank, worker) share — gets its own Pack, as a
DataLoader worker would). The epochs are checked exhaustively over ranks × workers × batch
sizes × resume points: every row exactly once, the same order whatever the partition,
each shard fetched at most once per share and read only while held, and never more than
the cache's limit held at once. py-remote's tests cover real downloads through moto.
"""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest

from dataset_packer import CacheLimitError, Pack
from dataset_packer._data import PackData, of
from dataset_packer._loader import EpochStream, WorkerInfo, partition
from dataset_packer._mixture import Mixture
from dataset_packer._order import (EpochPlan, Part, Permutation, ShardWindows, items_before,
                                   shard_items)

from conftest import cli

# ---------------------------------------------------------------------- the order alone


def random_layout(rng, shards: int):
    counts = rng.integers(0, 25, shards)
    counts[rng.integers(0, shards)] += 1  # at least one item
    cuts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return cuts, np.arange(shards, dtype=np.int64), rng.integers(1, 100, shards)


@pytest.mark.parametrize("shuffle", [True, False])
def test_shard_windows_is_a_bijection_read_window_by_window(shuffle):
    rng = np.random.default_rng(11)
    for case in range(80):
        shards = int(rng.integers(1, 30))
        cuts, reach, sizes = random_layout(rng, shards)
        budget = int(rng.integers(1, 400))
        order = ShardWindows(cuts, reach, sizes, budget, seed=case, epoch=3, shuffle=shuffle)
        n = int(cuts[-1])
        items = order(np.arange(n))
        np.testing.assert_array_equal(np.sort(items), np.arange(n))
        if not shuffle:
            np.testing.assert_array_equal(items, np.arange(n))
        # Position by position, or in any grouping: the same items.
        cut = int(rng.integers(0, n + 1))
        np.testing.assert_array_equal(
            np.concatenate([order(np.arange(cut)), order(np.arange(cut, n))]), items)
        held = np.flatnonzero(np.diff(cuts) > 0)
        seen = []
        assert order.starts[0] == 0 and order.starts[-1] == n
        for k in range(order.windows):
            a, z = order.span(k)
            assert a < z
            shard_of = np.searchsorted(cuts, items[a:z], side="right") - 1
            assert set(shard_of.tolist()) <= set(order.reads(k))
            assert set(order.reads(k)) <= set(held.tolist())
            size = sizes[order.reads(k)].sum()
            assert size <= budget or len(order.reads(k)) == 1
            seen += order.reads(k)
        assert sorted(seen) == held.tolist()  # each held shard in exactly one window
        if shuffle and n > 40:
            assert not np.array_equal(items, np.arange(n))


def test_shard_windows_depend_on_seed_and_epoch_only():
    rng = np.random.default_rng(5)
    cuts, reach, sizes = random_layout(rng, 20)
    n = int(cuts[-1])
    one = ShardWindows(cuts, reach, sizes, 150, seed=1, epoch=2)(np.arange(n))
    np.testing.assert_array_equal(ShardWindows(cuts, reach, sizes, 150, 1, 2)(np.arange(n)), one)
    assert not np.array_equal(ShardWindows(cuts, reach, sizes, 150, 1, 3)(np.arange(n)), one)
    assert not np.array_equal(ShardWindows(cuts, reach, sizes, 150, 2, 2)(np.arange(n)), one)
    # The global permutation (stream 0) is the one of before streams existed.
    np.testing.assert_array_equal(Permutation(100, 4, 5)(np.arange(100)),
                                  Permutation(100, 4, 5, stream=0)(np.arange(100)))
    assert not np.array_equal(Permutation(100, 4, 5, stream=1)(np.arange(100)),
                              Permutation(100, 4, 5)(np.arange(100)))


def test_items_before_and_the_shards_of_windows_of_rows():
    rng = np.random.default_rng(3)
    for _ in range(40):
        first_rows = np.sort(rng.integers(0, 500, int(rng.integers(1, 60))))
        bounds = np.sort(rng.integers(0, 520, 12))
        want = [(first_rows < b).sum() for b in bounds]
        got = items_before(lambda i: first_rows[i], first_rows.size, bounds)
        assert got.tolist() == want
        shard_rows = rng.integers(1, 80, 9)
        offsets = np.concatenate([[0], np.cumsum(shard_rows)])
        items = first_rows[first_rows + 4 < offsets[-1]]
        length = 5
        cuts, reach = shard_items(lambda i: items[i], items.size, shard_rows, length)
        for s in range(shard_rows.size):
            mine = items[(items >= offsets[s]) & (items < offsets[s + 1])]
            assert cuts[s + 1] - cuts[s] == mine.size
            if mine.size:
                last = mine[-1] + length - 1
                assert reach[s] == np.searchsorted(offsets, last, side="right") - 1


@pytest.mark.parametrize("items", [1, 2, 7, 50, 101])
def test_padding_from_the_end_repeats_the_last_positions(items):
    for batch_size, world, start, drop_last in itertools.product(
            (1, 3, 8), (1, 2, 3, 5), (0, items // 2, items - 1), (False, True)):
        plan = EpochPlan(items, batch_size, world, drop_last, start, pad_from_end=True)
        plain = EpochPlan(items, batch_size, world, drop_last, start)
        assert plan.batches_per_rank == plain.batches_per_rank
        got = []
        for b in range(plan.batches_per_rank):
            for r in range(world):
                positions = plan.positions(r, b)
                spans = plan.spans(r, b)
                assert np.concatenate([np.arange(a, z) for a, z in spans]).tolist() == \
                    positions.tolist()
                got += positions.tolist()
        body = got[:len(got) - plan.padding]
        if drop_last:
            assert plan.padding == 0 and len(set(body)) == len(body)
            continue
        assert body == list(range(start, items))
        padding = got[len(body):]
        assert len(padding) < world
        assert padding == [(p - plan.padding) % items for p in range(items, items + len(padding))]


# ---------------------------------------------------------------------- a pack read "remotely"


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    """The fixture logs in shards of 97 rows (runs straddle them)."""
    from conftest import FIXTURES

    out = tmp_path_factory.mktemp("epoch") / "many"
    cli("pack", "--input", FIXTURES / "raw", "--output", out, "--shard-rows", 97, "--quiet")
    return out


class Log:
    """What one simulated process's pack data was asked: prefetches, releases, and each
    access to a shard's rows, checked as they happen."""

    def __init__(self, data, limit, strict):
        self.data, self.limit, self.strict = data, limit, strict
        self.windows: list[list[int]] = []  # each prefetch's shards
        self.prefetched: list[int] = []
        self.released: list[int] = []
        self.held: set[int] = set()
        self.peak = 0
        self.read: list[int] = []  # shards in the order their rows were read

    def prefetch(self, shards):
        assert not set(shards) & self.held, f"prefetched again while held: {shards}"
        self.windows.append(list(shards))
        self.prefetched += list(shards)
        self.held |= set(shards)
        self.peak = max(self.peak, sum(self.data.shard_bytes(s) for s in self.held))

    def release(self, shards):
        assert set(shards) <= self.held, f"released what was not held: {shards}"
        self.released += list(shards)
        self.held -= set(shards)

    def access(self, shard):
        if self.strict:
            assert shard in self.held, f"shard {shard} read while not held"
        if not self.read or self.read[-1] != shard:
            self.read.append(shard)


class Watched(list):
    """A PackData's shard maps, telling the log of each access."""

    def __init__(self, maps, log):
        super().__init__(maps)
        self.log = log

    def __getitem__(self, i):
        if isinstance(i, (int, np.integer)):
            self.log.access(int(i))
        return super().__getitem__(i)


class FakeRemote(PackData):
    """A local pack's data presented as a remote one's: a cache limit, and prefetch and
    release recorded (py-remote's PackData fetches; here the shards are all on disk)."""

    @property
    def is_remote(self) -> bool:
        return True

    @property
    def cache_limit(self):
        return self.fake_limit

    def prefetch(self, shards):
        self.log.prefetch(shards)

    def release(self, shards):
        self.log.release(shards)


def remote(path, limit, strict=True) -> tuple[Pack, Log]:
    """The pack at `path` opened as a remote pack with a cache of `limit` bytes (`strict`:
    a shard read while not held fails the test)."""
    pack = Pack(path)
    data = of(pack)
    data.__class__ = FakeRemote
    data.fake_limit = limit
    data.log = Log(data, limit, strict)
    data._maps = Watched(data._maps, data.log)
    return pack, data.log


def pack_bytes(pack) -> int:
    data = of(pack)
    return sum(data.shard_bytes(s) for s in range(len(data.shards)))


def epoch_rows(path, limit, batch_size, world, workers, start=0, epoch=1, **options):
    """The rows of an epoch read by `world` ranks of `workers` workers each (a fresh
    "process" per share), put in the epoch's order (step by step, rank by rank); and the
    logs of the shares."""
    per_rank, logs = [], []
    for rank in range(world):
        shares = []
        for worker in range(workers):
            pack, log = remote(path, limit)
            stream = EpochStream(pack, batch_size, seed=4, **options)
            stream.set_epoch(epoch, start_sample=start)
            part = partition(WorkerInfo(worker, workers), rank, world)
            shares.append(list(stream.batches(part)))
            logs.append(log)
        # The rank's batches, as the DataLoader hands them over: round-robin.
        per_rank.append([b for group in itertools.zip_longest(*shares) for b in group
                         if b is not None])
    steps = [np.concatenate([b["row"] for b in step]) for step in zip(*per_rank)]
    return (np.concatenate(steps) if steps else np.zeros(0, dtype=np.int64)), logs


def check_logs(logs, limit, pack, most=1):
    """Each share fetched each shard at most `most` times, released all it fetched, and
    never held more than `limit` bytes."""
    data = of(pack)
    for log in logs:
        counts = np.bincount(log.prefetched, minlength=1)
        assert counts.max() <= most, f"a shard fetched {counts.max()} times"
        assert sorted(log.released) == sorted(log.prefetched), "not all released at the end"
        assert not log.held
        assert log.peak <= limit
        assert all(0 <= s < len(data.shards) for s in log.read)


def test_a_shard_window_epoch_reads_every_row_once_in_one_order(many_shards):
    """Ranks × workers × batch sizes × resume points: the rows after the resume point,
    exactly once, in the one order of the epoch (the uninterrupted single reader's)."""
    pack = Pack(many_shards)
    n = len(pack)
    limit = pack_bytes(pack) // 3  # windows of a sixth of the pack: several of them
    full, logs = epoch_rows(many_shards, limit, 50, 1, 1)
    np.testing.assert_array_equal(np.sort(full), np.arange(n))
    # Not the pack's global permutation: its own order, a few shards at a time.
    assert not np.array_equal(full, np.concatenate(
        [b["row"] for b in pack.batches(n, seed=4, epoch=1)]))
    check_logs(logs, limit, pack)
    for world, workers, batch_size in itertools.product((1, 2, 3), (1, 2, 3), (64, 101)):
        for start in (0, 1, 1000, n - 5):
            got, logs = epoch_rows(many_shards, limit, batch_size, world, workers, start)
            padding = got.size - (n - start)
            assert 0 <= padding < world
            np.testing.assert_array_equal(got[:n - start], full[start:])
            # Padding repeats the epoch's last rows (still in the last window).
            np.testing.assert_array_equal(got[n - start:], full[n - padding:] if padding else [])
            check_logs(logs, limit, pack)


def test_shards_are_read_one_window_at_a_time(many_shards):
    pack, log = remote(many_shards, pack_bytes(Pack(many_shards)) // 4)
    stream = EpochStream(pack, 50, seed=4)
    assert stream.epoch_order() == ("shards", pack_bytes(pack) // 8)
    rows = np.concatenate([b["row"] for b in stream.batches(Part())])
    data = of(pack)
    offsets = np.concatenate([[0], np.cumsum([data.shard_rows(s) for s in
                                              range(len(data.shards))])])
    shard = np.searchsorted(offsets, rows, side="right") - 1
    # Once the reader leaves a shard's window, it never comes back to it.
    runs = [s for s, _ in itertools.groupby(shard.tolist())]
    windows = []
    for s in runs:
        w = next(k for k, group in enumerate(log.windows) if s in group)
        if not windows or windows[-1] != w:
            windows.append(w)
    assert windows == sorted(set(windows))
    assert len(windows) > 3
    check_logs([log], pack_bytes(pack) // 4, pack)


@pytest.mark.parametrize("world,workers", [(1, 1), (2, 3)])
def test_windows_of_rows_are_read_in_shard_windows_too(many_shards, world, workers):
    pack = Pack(many_shards)
    limit = pack_bytes(pack) // 3
    want = sorted(b for b in _window_firsts(pack, 6, 3))
    per_rank = []
    logs = []
    for rank in range(world):
        shares = []
        for worker in range(workers):
            p, log = remote(many_shards, limit)
            stream = EpochStream(p, 16, window=6, stride=3, seed=2, augment=True)
            shares.append(list(stream.batches(partition(WorkerInfo(worker, workers), rank,
                                                        world))))
            logs.append(log)
        per_rank.append([b for g in itertools.zip_longest(*shares) for b in g if b is not None])
    batches = [b for step in zip(*per_rank) for b in step]
    firsts = np.concatenate([b["row"][:, 0] for b in batches])
    assert batches[0]["exps"].shape[1:3] == (6, 16)
    padding = firsts.size - len(want)
    assert 0 <= padding < world
    assert sorted(firsts[:len(want)].tolist()) == want
    for b in batches:
        np.testing.assert_array_equal(b["row"], b["row"][:, :1] + np.arange(6))
    # A shard that windows of rows cross into from another window's shard is fetched for
    # that window too.
    check_logs(logs, limit, pack, most=2)


def _window_firsts(pack, length, stride):
    return np.concatenate([b["row"][:, 0] for b in pack.windows(length, 1000, stride=stride,
                                                                   shuffle=False)]).tolist()


def test_batches_equal_the_packs_own_reading_of_the_same_rows(many_shards):
    """A shard-window batch is what `Pack.gather` (so `Pack.batches`) makes of its rows:
    decoded, augmented, with companions; without shuffle, the pack's own order."""
    pack, _ = remote(many_shards, 10 ** 12)
    local = Pack(many_shards)
    stream = EpochStream(pack, 64, order="shards", window_bytes=4000, shuffle=False,
                         augment=True, seed=9)
    got = list(stream.batches(Part()))
    want = list(local.batches(64, shuffle=False, augment=True, seed=9, epoch=0))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_auto_takes_shard_windows_only_when_the_pack_does_not_fit_half_the_cache(many_shards):
    size = pack_bytes(Pack(many_shards))
    local = EpochStream(Pack(many_shards), 64)
    assert local.epoch_order() == ("global", None)
    assert EpochStream(Pack(many_shards), 64, order="shards").epoch_order() == \
        ("shards", 1 << 30)
    fits, log = remote(many_shards, 2 * size)
    stream = EpochStream(fits, 64, seed=3)
    assert stream.epoch_order() == ("global", None)
    # The global order of a remote pack that fits: every shard fetched ahead, at once.
    rows = np.concatenate([b["row"] for b in stream.batches(Part())])
    np.testing.assert_array_equal(rows, np.concatenate(
        [b["row"] for b in Pack(many_shards).batches(64, seed=3, epoch=0)]))
    assert log.windows == [list(range(len(of(fits).shards)))]
    tight, _ = remote(many_shards, 2 * size - 1)
    assert EpochStream(tight, 64).epoch_order() == ("shards", size - 1)
    assert EpochStream(tight, 64, window_bytes=5000).epoch_order() == ("shards", 5000)
    assert EpochStream(tight, 64, order="global").epoch_order() == ("global", None)
    with pytest.raises(ValueError, match="order must be one of"):
        EpochStream(tight, 64, order="windows")
    with pytest.raises(ValueError, match="window_bytes"):
        EpochStream(tight, 64, window_bytes=0)
    with pytest.raises(ValueError, match="Mixture"):
        EpochStream(Mixture([Pack(many_shards), Pack(many_shards)]), 64, order="shards")


def test_a_saved_shard_window_epoch_resumes_in_its_own_order(many_shards):
    """The state records the order and its window size; a job resumed with another cache
    (another window size, or one where the pack fits) finishes the saved epoch in the saved
    order, then goes on with its own."""
    size = pack_bytes(Pack(many_shards))
    pack, _ = remote(many_shards, size // 2)
    stream = EpochStream(pack, 100, seed=8)
    stream.set_epoch(2)
    state = stream.state_dict(batches=3, world_size=2)
    assert (state["order"], state["window_bytes"], state["start_sample"]) == \
        ("shards", size // 4, 600)
    full = np.concatenate([b["row"] for b in stream.batches(Part())])
    for limit in (size // 5, 4 * size):
        other, _ = remote(many_shards, limit)
        again = EpochStream(other, 64, seed=8)
        again.load_state_dict(state)
        assert again.epoch_order() == ("shards", size // 4)
        assert again.state_dict()["window_bytes"] == size // 4
        rest = np.concatenate([b["row"] for b in again.batches(Part())])
        np.testing.assert_array_equal(rest, full[600:])
        again.set_epoch(3)
        assert again.epoch_order() == (("shards", limit // 2) if limit < size * 2
                                       else ("global", None))
    # A worker's own state carries the order too.
    run = stream.iteration(Part(0, 1, 1, 2))
    next(iter(run))
    assert run.state_dict()["order"] == "shards"
    # A state without an order was saved in a global epoch: resumed in the global order.
    glob = {k: v for k, v in state.items() if k not in ("order", "window_bytes")}
    # The global order of a pack larger than the cache is refused before its first batch,
    # naming the order that reads it.
    small = EpochStream(remote(many_shards, size // 2, strict=False)[0], 100, seed=8)
    small.load_state_dict(glob)
    with pytest.raises(CacheLimitError, match=r'do not fit in the cache.*order="shards"'):
        next(iter(small.batches(Part())))
    again = EpochStream(remote(many_shards, 4 * size, strict=False)[0], 100, seed=8)
    again.load_state_dict(glob)
    assert again.epoch_order() == ("global", None)
    np.testing.assert_array_equal(
        np.concatenate([b["row"] for b in again.batches(Part())]),
        np.concatenate([b["row"] for b in Pack(many_shards).batches(100, seed=8, epoch=2,
                                                                    start_sample=600)]))
    with pytest.raises(ValueError, match="not one this package saves"):
        again.load_state_dict(dict(state, window_bytes="big"))


# ---------------------------------------------------------------------- from object storage

try:  # the moto server and publishing of the remote reader's tests (issue 32)
    from test_remote import publish  # (the moto server is conftest's `s3`)
except ImportError:
    publish = None
needs_remote = pytest.mark.skipif(publish is None, reason="no Pack(url) on this branch yet")


@needs_remote
def test_a_remote_pack_larger_than_its_cache_is_downloaded_once_an_epoch(s3, many_shards,
                                                                         tmp_path):
    """Against moto: a pack twice its cache's size is read in shard windows, in the order a
    local copy gives, each shard downloaded once; the global order on that cache gives up
    (its shards stay mapped)."""
    url = "s3://packs/epoch/many"
    publish(many_shards, url)
    size = pack_bytes(Pack(many_shards))
    pack = Pack(url, cache=tmp_path / "cache", cache_limit=size // 2)
    stream = EpochStream(pack, 50, seed=4)
    stream.set_epoch(1)
    assert stream.epoch_order() == ("shards", size // 4)
    opened = pack._remote.client.downloads
    rows = np.concatenate([b["row"] for b in stream.batches(Part())])
    assert pack._remote.client.downloads - opened == len(of(pack).shards)
    local = EpochStream(Pack(many_shards), 50, seed=4, order="shards", window_bytes=size // 4)
    local.set_epoch(1)
    np.testing.assert_array_equal(rows, np.concatenate([b["row"] for b in
                                                        local.batches(Part())]))
    naive = EpochStream(Pack(url, cache=tmp_path / "naive", cache_limit=size // 2), 50,
                        seed=4, order="global")
    with pytest.raises(Exception, match="cache_limit"):
        for _ in naive.batches(Part()):
            pass


# ---------------------------------------------------------------------- through PyTorch

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed")


@needs_torch
def test_packloader_reads_shard_windows_through_workers_and_resumes(many_shards):
    """Real DataLoader workers (processes) read a shard-window epoch in its order; the
    loader's state records it, and a loader configured otherwise resumes in it."""
    import torch
    from dataset_packer.torch import PackDataset, PackLoader

    stream = EpochStream(Pack(many_shards), 64, order="shards", window_bytes=20000, seed=4)
    stream.set_epoch(1)
    want = np.concatenate([b["row"] for b in stream.batches(Part())])
    data = PackDataset(many_shards, 64, order="shards", window_bytes=20000, seed=4)
    loader = PackLoader(data, num_workers=2)
    data.set_epoch(1)
    rows = []
    for batch in loader:
        rows.append(batch["row"])
        if len(rows) == 5:
            state = loader.state_dict()
    np.testing.assert_array_equal(torch.cat(rows).numpy(), want)
    assert (state["order"], state["window_bytes"], state["start_sample"]) == \
        ("shards", 20000, 320)
    other = PackDataset(many_shards, 50, order="global", seed=4)
    resumed = PackLoader(other, num_workers=3)
    resumed.load_state_dict(state)
    rest = torch.cat([b["row"] for b in resumed]).numpy()
    np.testing.assert_array_equal(rest, want[320:])
