"""`Mixture`: each source's share of an epoch is exact, its rows follow its own epoch orders
without repeats until it is used up, and the epoch is split, resumed and augmented like a
pack's, with a `source` key."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dataset_packer import EpochPlan, Mixture, Pack, Permutation, _order
from dataset_packer._loader import EpochStream, partition


def stream_order(pack, sel, seed, epochs) -> np.ndarray:
    """A source's endless stream: its own epoch orders one after the other."""
    return np.concatenate([np.concatenate([b["row"] for b in pack.batches(
        10**6, seed=seed, epoch=k, select=sel)]) for k in range(epochs)])


def all_batches(mix, batch_size, **options):
    return list(mix.batches(batch_size, **options))


def test_each_source_gets_its_share_from_its_own_order(packs):
    plain, merged = Pack(packs["plain"]), Pack(packs["merged"])
    deep = merged.select("depth = 7")
    # plain: 2240 rows weighted 0.25; the depth-7 runs of merged: 1020 rows weighted 0.75, so
    # they are used up within the first epoch and continue into their next permutation.
    mix = Mixture([plain, deep], weights=[1, 3], length=2000)
    assert len(mix) == 2000 and mix.counts.tolist() == [500, 1500]
    assert len(deep) < 1500
    streams = [stream_order(plain, None, 4, 2), stream_order(merged, deep, 4, 5)]
    for epoch in range(3):
        batches = all_batches(mix, 128, seed=4, epoch=epoch)
        source = np.concatenate([b["source"] for b in batches])
        rows = np.concatenate([b["row"] for b in batches])
        assert len(rows) == 2000
        for i, count in enumerate(mix.counts):
            mine = rows[source == i]
            assert len(mine) == count
            want = streams[i][epoch * count:(epoch + 1) * count]
            # The epoch's share of the stream, in its order, interleaved with the other source.
            np.testing.assert_array_equal(mine, want)
    # No repeats inside one pass over a source.
    first_pass = streams[1][:len(deep)]
    assert len(np.unique(first_pass)) == len(deep)


def test_rows_decode_as_their_own_pack_does(packs):
    plain, merged = Pack(packs["plain"]), Pack(packs["merged"])
    mix = Mixture([plain, merged], weights=[0.5, 0.5])
    assert len(mix) == len(plain) + len(merged)
    batch = next(mix.batches(300, seed=1, illegal_ev=-1.0))
    for i, pack in enumerate((plain, merged)):
        mine = batch["source"] == i
        own = pack.gather(batch["row"][mine], illegal_ev=-1.0)
        for key in ("exps", "move", "evs", "legal", "board_eval", "run_id", "step_index"):
            np.testing.assert_array_equal(batch[key][mine], own[key])
        names = np.array(mix.valuation_names)[batch["valuation"][mine]]
        np.testing.assert_array_equal(names, np.array(pack.valuation_names)[own["valuation"]])


@pytest.mark.parametrize("world,workers,drop_last", [(1, 1, False), (3, 2, False), (2, 3, True)])
def test_ranks_workers_and_resume(packs, world, workers, drop_last):
    mix = Mixture([Pack(packs["plain"]), Pack(packs["shuffled"])], weights=[0.3, 0.7],
                  length=1001)
    options = dict(seed=2, epoch=1, drop_last=drop_last, augment=True)

    def steps(start_sample=0, batch_size=50, world=world):
        per_rank = []
        for rank in range(world):
            streams = [mix.batches(batch_size, rank=rank, world_size=world, worker=w,
                                   num_workers=workers, start_sample=start_sample, **options)
                       for w in range(workers)]
            per_rank.append([b for group in itertools.zip_longest(*streams)
                             for b in group if b is not None])
        assert len({len(r) for r in per_rank}) == 1
        return [{k: np.concatenate([b[k] for b in step]) for k in ("row", "source", "exps",
                                                                   "symmetry")}
                for step in zip(*per_rank)]

    whole = steps(world=1, batch_size=1001)[0]
    got = steps()
    key = lambda s: list(zip(s["source"].tolist(), s["row"].tolist()))  # noqa: E731
    seen = [pair for step in got for pair in key(step)]
    if drop_last:
        assert len(seen) == 1001 // (50 * world) * 50 * world
        assert seen == key(whole)[:len(seen)]
    else:
        assert seen[:1001] == key(whole) and len(seen) - 1001 < world
    assert mix.num_batches(50, world_size=world, drop_last=drop_last) == len(got)
    # Resumed after 300 samples with another world size: the rest of the same order.
    rest = [pair for step in steps(start_sample=300, batch_size=64, world=2)
            for pair in key(step)]
    assert rest[:701] == key(whole)[300:300 + len(rest)]
    assert len(rest) == (640 if drop_last else 702)
    # Augmentation is per row, as in a pack: the same rows get the same symmetry.
    np.testing.assert_array_equal(np.concatenate([s["symmetry"] for s in got])[:1001 if not
                                  drop_last else len(seen)],
                                  whole["symmetry"][:1001 if not drop_last else len(seen)])


def test_deterministic_and_reseeded(packs):
    mix = Mixture([Pack(packs["plain"]), Pack(packs["merged"])], weights=[0.5, 0.5])
    a = [b["row"].tolist() for b in mix.batches(256, seed=3, epoch=2)]
    b = [b["row"].tolist() for b in mix.batches(256, seed=3, epoch=2)]
    c = [b["row"].tolist() for b in mix.batches(256, seed=4, epoch=2)]
    assert a == b and a != c
    # shuffle=False: each source's rows in pack order, interleaved evenly.
    ordered = next(mix.batches(len(mix), shuffle=False))
    for i, pack in enumerate(mix.sources):
        np.testing.assert_array_equal(ordered["row"][ordered["source"] == i],
                                      np.arange(len(pack[0])))
    # Every run of 64 positions holds each source in proportion, to within a row.
    assert (np.abs(ordered["source"].reshape(-1, 64).sum(axis=1) - 32) <= 1).all()


def test_a_stream_over_a_mixture(packs):
    mix = Mixture([Pack(packs["plain"]), Pack(packs["merged"])], weights=[2, 1], length=900)
    stream = EpochStream(mix, 100, seed=5)
    stream.set_epoch(1, start_sample=200)
    got = [b["row"].tolist() for b in stream.batches(partition(None, None, None))]
    want = [b["row"].tolist() for b in mix.batches(100, seed=5, epoch=1, start_sample=200)]
    assert got == want and stream.num_batches() == len(want) == 7
    assert stream.state_dict(batches=2)["start_sample"] == 400


def test_bad_mixtures_are_refused(packs):
    plain = Pack(packs["plain"])
    with pytest.raises(ValueError, match="at least one source"):
        Mixture([])
    with pytest.raises(ValueError, match="2 sources need 2 weights"):
        Mixture([plain, plain], weights=[1])
    with pytest.raises(ValueError, match="not all 0"):
        Mixture([plain, plain], weights=[0, 0])
    with pytest.raises(ValueError, match="mix selections"):
        next(Mixture([plain]).batches(10, select="depth = 7"))
    with pytest.raises(ValueError, match="length must be"):
        Mixture([plain], length=0)


@pytest.mark.parametrize("weights", [[0.2, 0.0, 0.8], [1, 1, 1], [5, 1, 2, 1, 3]])
def test_many_sources_each_get_their_exact_share(packs, weights):
    names = ["plain", "merged", "sharded", "shuffled", "findings"][:len(weights)]
    sources = [Pack(packs[n]) for n in names]
    mix = Mixture(sources, weights=weights, length=3001)
    assert mix.counts.sum() == 3001
    expected = np.array(weights, dtype=float) / sum(weights) * 3001
    assert (np.abs(mix.counts - expected) < 1).all()
    batch = next(mix.batches(3001, seed=8, epoch=1))
    for i, pack in enumerate(sources):
        mine = batch["row"][batch["source"] == i]
        assert len(mine) == mix.counts[i]
        n = len(pack)
        stream = np.concatenate([np.concatenate([b["row"] for b in pack.batches(
            10**6, seed=8, epoch=k)]) for k in range(-(-2 * int(mix.counts[i]) // n) + 1)])
        want = stream[int(mix.counts[i]):2 * int(mix.counts[i])]
        np.testing.assert_array_equal(mine, want)


def reference_place(counts, t: int) -> tuple[int, int]:
    """The module docstring's rule, one position at a time: the range of sources halved
    by Bresenham's rule until one is left; (source, index among its positions)."""
    starts = [0] + list(itertools.accumulate(int(c) for c in counts))
    lo, hi = 0, len(counts)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        left, total = starts[mid] - starts[lo], starts[hi] - starts[lo]
        before = (t + 1) * left // total
        if before > t * left // total:
            t, hi = before - 1, mid
        else:
            t, lo = t - before, mid
    return lo, t


@pytest.mark.parametrize("weights", [[1], [1, 3], [3, 1, 2], [5, 1, 2, 1, 3]])
def test_sources_are_placed_by_the_documented_rule(packs, weights):
    names = ["plain", "merged", "sharded", "shuffled", "findings"][:len(weights)]
    mix = Mixture([Pack(packs[n]) for n in names], weights=weights, length=1999)
    want = [reference_place(mix.counts, t)[0] for t in range(len(mix))]
    got = np.concatenate([b["source"] for b in mix.batches(300, shuffle=False)])
    assert got.tolist() == want
    # Three ranks: their last batches are padded with the epoch's first positions.
    steps = zip(*[mix.batches(300, shuffle=False, rank=r, world_size=3) for r in range(3)])
    got = np.concatenate([b["source"] for step in steps for b in step])
    assert got.tolist() == want + want[:len(got) - len(want)] and len(got) > len(want)


def test_padding_of_an_up_weighted_source_follows_its_order(packs):
    """A source weighted above its size spans two of its permutations in one epoch; the
    padding that wraps round to the epoch's start is in the first, the rows before it in
    the second, inside one batch."""
    plain, merged = Pack(packs["plain"]), Pack(packs["merged"])
    mix = Mixture([plain, merged.select("depth = 7")], weights=[1, 3], length=2000)
    order = np.concatenate([b["row"] for b in mix.batches(2000, seed=2, epoch=0)])
    source = np.concatenate([b["source"] for b in mix.batches(2000, seed=2, epoch=0)])
    steps = zip(*[mix.batches(300, seed=2, rank=r, world_size=3) for r in range(3)])
    got = [(b["row"], b["source"]) for step in steps for b in step]
    rows = np.concatenate([r for r, _ in got])
    pad = len(rows) - len(order)
    assert 0 < pad < 3 and source[:pad].tolist() == [1] * pad
    np.testing.assert_array_equal(rows, np.concatenate([order, order[:pad]]))


def reference_rows(mix, in_order, positions, seed, epoch, shuffle=True) -> tuple[list, list]:
    """The module docstring's rule, one position at a time: the position's source and its
    index among the source's positions, that source's stream position epoch × count + index,
    and the row at that place of the source's epoch order of that cycle."""
    sources, rows, orders = [], [], {}
    for t in positions.tolist():
        i, index = reference_place(mix.counts, t)
        cycle, local = divmod(epoch * int(mix.counts[i]) + index, len(in_order[i]))
        if shuffle:
            if (i, cycle) not in orders:
                orders[(i, cycle)] = Permutation(len(in_order[i]), seed, cycle)(
                    np.arange(len(in_order[i])))
            local = orders[(i, cycle)][local]
        sources.append(i)
        rows.append(in_order[i][local])
    return sources, rows


@pytest.mark.parametrize("chunk", [1, 97, 400, 10**6])
@pytest.mark.parametrize("world,workers,batch_size,start_sample,drop_last,shuffle", [
    (1, 1, 100, 0, False, True), (1, 1, 64, 333, False, False), (3, 2, 50, 120, False, True),
    (2, 3, 37, 0, True, True),
])
def test_batches_worked_out_together_keep_each_batch_s_rows(packs, monkeypatch, chunk, world,
                                                          workers, batch_size, start_sample,
                                                          drop_last, shuffle):
    """The order of several batches is worked out at once (about CHUNK_POSITIONS positions:
    one permutation call per source and cycle, one pass placing the rows by source); wherever
    a chunk ends (inside a batch's worth of positions, at a source's cycle end, at the padded
    last batch, after a resume, between a worker's batches), every batch holds the rows and
    sources that the documented rule gives its positions. Three sources of two packs, one of
    them weighted above its size."""
    monkeypatch.setattr(_order, "CHUNK_POSITIONS", chunk)
    plain, merged = Pack(packs["plain"]), Pack(packs["merged"])
    sources = [plain, merged.select("depth = 7"), merged.select("depth = 6")]
    mix = Mixture(sources, weights=[1, 4, 1], length=1999)
    assert mix.counts[1] > len(sources[1])
    in_order = [np.concatenate([b["row"] for b in s.batches(10**6, shuffle=False)])
                for s in sources]
    plan = EpochPlan(len(mix), batch_size, world, drop_last, start_sample)
    for rank in range(world):
        for worker in range(workers):
            got = list(mix.batches(batch_size, shuffle=shuffle, seed=3, epoch=1, rank=rank,
                                   world_size=world, worker=worker, num_workers=workers,
                                   start_sample=start_sample, drop_last=drop_last))
            numbers = list(range(worker, plan.batches_per_rank, workers))
            assert len(got) == len(numbers)
            for b, batch in zip(numbers, got):
                source, rows = reference_rows(mix, in_order, plan.positions(rank, b), 3, 1,
                                              shuffle)
                assert batch["source"].tolist() == source
                assert batch["row"].tolist() == rows
                for i, pack in enumerate((plain, merged, merged)):
                    mine = batch["source"] == i
                    np.testing.assert_array_equal(batch["run_id"][mine],
                                                  pack.gather(batch["row"][mine])["run_id"])
