"""Epochs of batches: a pure function of (pack, selection, seed, epoch); (rank, worker) shares
partition each epoch exactly with the same rows per rank; resuming at batch k yields exactly
batches k, k+1, …; windows never cross runs; sample draws from the selection."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dataset_packer import EmptySelectionError, EpochPlan, Pack, Permutation, _order
from dataset_packer._data import PackData, of


def rows_of(batches) -> list[np.ndarray]:
    return [b["row"] for b in batches]


def same_batches(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 100, 1000, 2240, 4097])
def test_the_permutation_is_a_bijection(n):
    for seed, epoch in [(0, 0), (1, 0), (0, 1), (12345, 99)]:
        out = Permutation(n, seed, epoch)(np.arange(n))
        assert sorted(out.tolist()) == list(range(n))


def test_epochs_differ_and_repeat():
    a = Permutation(10_000, 0, 0)(np.arange(10_000))
    b = Permutation(10_000, 0, 1)(np.arange(10_000))
    c = Permutation(10_000, 1, 0)(np.arange(10_000))
    assert (a != b).mean() > 0.99 and (a != c).mean() > 0.99
    np.testing.assert_array_equal(a, Permutation(10_000, 0, 0)(np.arange(10_000)))
    # Shuffled enough that neighbours are not kept together.
    assert np.abs(np.diff(a)).mean() > 2000


@pytest.mark.parametrize("shuffle", [True, False])
def test_batches_are_a_pure_function_of_seed_and_epoch(sharded, shuffle):
    one = list(sharded.batches(300, shuffle=shuffle, seed=3, epoch=2, augment=True))
    two = list(Pack(sharded.path).batches(300, shuffle=shuffle, seed=3, epoch=2, augment=True))
    same_batches(one, two)
    if shuffle:
        other = list(sharded.batches(300, seed=3, epoch=3))
        assert not np.array_equal(one[0]["row"], other[0]["row"])


def test_one_epoch_is_one_permutation_of_the_selection(sharded):
    sel = sharded.select("depth = 7")
    rows = np.concatenate(rows_of(sharded.batches(128, select=sel, seed=5)))
    want = np.concatenate(rows_of(sharded.batches(10_000, select=sel, shuffle=False)))
    assert len(rows) == sel.num_rows == len(want)
    np.testing.assert_array_equal(np.sort(rows), want)
    assert not np.array_equal(rows, want)


@pytest.mark.parametrize("world_size,num_workers,batch_size,drop_last", [
    (1, 1, 100, False), (1, 3, 100, True), (2, 1, 128, False), (3, 2, 64, False),
    (4, 3, 50, True), (8, 4, 7, False), (3, 1, 1000, False), (5, 2, 2240, True),
])
def test_ranks_and_workers_partition_the_epoch(sharded, world_size, num_workers, batch_size,
                                               drop_last):
    n = len(sharded)
    plan = EpochPlan(n, batch_size, world_size, drop_last)
    seen = []
    per_rank = []
    for rank in range(world_size):
        rank_rows = []
        rank_batches = 0
        for worker in range(num_workers):
            got = rows_of(sharded.batches(batch_size, seed=11, epoch=1, rank=rank,
                                          world_size=world_size, worker=worker,
                                          num_workers=num_workers, drop_last=drop_last))
            rank_batches += len(got)
            rank_rows += got
        per_rank.append((rank_batches, sum(len(r) for r in rank_rows)))
        seen += rank_rows
    assert len(set(per_rank)) == 1, f"ranks differ: {per_rank}"
    assert per_rank[0] == (plan.batches_per_rank, plan.rows_per_rank)
    rows = np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)
    step = world_size * batch_size
    full = n // step * step
    if drop_last:
        assert len(np.unique(rows)) == len(rows) == full, "a row twice, or a step not full"
        assert all(len(batch) == batch_size for batch in seen)
    else:
        # As DistributedSampler: nothing left out, fewer than world_size rows padded in, and
        # the padding repeats the first rows of the epoch's order.
        np.testing.assert_array_equal(np.unique(rows), np.arange(n))
        padding = len(rows) - n
        assert 0 <= padding < world_size
        assert len(rows) == world_size * plan.rows_per_rank
        order = np.concatenate(rows_of(sharded.batches(n, seed=11, epoch=1)))
        values, counts = np.unique(rows, return_counts=True)
        np.testing.assert_array_equal(np.sort(values[counts > 1]), np.sort(order[:padding]))
        for batch in seen:
            assert len(batch) in (batch_size, -(-(n - full) // world_size))


@pytest.mark.parametrize("chunk", [1, 150, 333, 1000, 10**6])
@pytest.mark.parametrize("world_size,num_workers,batch_size,start_sample,drop_last", [
    (1, 1, 100, 0, False), (1, 1, 64, 250, False), (3, 2, 64, 101, False),
    (2, 3, 37, 1000, True), (4, 1, 150, 0, False),
])
def test_batches_looked_up_together_keep_each_batch_s_rows(sharded, monkeypatch, chunk,
                                                         world_size, num_workers, batch_size,
                                                         start_sample, drop_last):
    """The rows of several batches are looked up in one call (about CHUNK_POSITIONS
    positions); wherever the calls' ends fall (inside a batch's worth of positions, between
    batches, at the padded last batch, after a resume), each batch holds exactly the rows at
    its plan's positions of the epoch's permutation."""
    monkeypatch.setattr(_order, "CHUNK_POSITIONS", chunk)
    sel = sharded.select("depth = 7")
    in_order = np.concatenate(rows_of(sharded.batches(10**6, select=sel, shuffle=False)))
    perm = Permutation(len(in_order), 6, 2)
    plan = EpochPlan(len(in_order), batch_size, world_size, drop_last, start_sample)
    for rank in range(world_size):
        for worker in range(num_workers):
            got = list(sharded.batches(batch_size, select=sel, seed=6, epoch=2, rank=rank,
                                       world_size=world_size, worker=worker,
                                       num_workers=num_workers, start_sample=start_sample,
                                       drop_last=drop_last, augment=True))
            numbers = list(range(worker, plan.batches_per_rank, num_workers))
            assert len(got) == len(numbers)
            for b, batch in zip(numbers, got):
                want = in_order[perm(plan.positions(rank, b))]
                np.testing.assert_array_equal(batch["row"], want)
                own = sharded.gather(want)
                np.testing.assert_array_equal(batch["run_id"], own["run_id"])
                np.testing.assert_array_equal(batch["step_index"], own["step_index"])


def test_the_whole_epoch_is_covered_with_one_rank(sharded):
    rows = np.concatenate(rows_of(sharded.batches(333, seed=2, num_workers=1)))
    np.testing.assert_array_equal(np.sort(rows), np.arange(len(sharded)))


@pytest.mark.parametrize("k", [0, 1, 4, 9, 10, 50])
def test_start_batch_resumes_the_uninterrupted_epoch(sharded, k):
    options = dict(seed=4, epoch=7, world_size=2, rank=1, augment=True)
    full = list(sharded.batches(100, **options))
    same_batches(list(sharded.batches(100, start_batch=k, **options)), full[k:])
    # With workers: their union, in DataLoader round-robin order, is batches k, k+1, …
    for workers in (2, 3):
        streams = [sharded.batches(100, start_batch=k, worker=w, num_workers=workers, **options)
                   for w in range(workers)]
        merged = [b for group in itertools.zip_longest(*streams) for b in group if b is not None]
        same_batches(merged, full[k:])


@pytest.mark.parametrize("before,after", [
    ((100, 2, 1), (100, 2, 1)), ((100, 2, 1), (64, 3, 2)), ((128, 1, 3), (50, 4, 1)),
    ((7, 5, 2), (300, 1, 1)), ((100, 2, 2), (2240, 1, 1)),
])
def test_start_sample_resumes_with_another_world_size(sharded, before, after):
    """Stop after some global steps with (batch, world, workers), resume with others at the
    number of samples consumed: together, every row of the epoch exactly once (padding
    aside), and the positions after the resume point in the epoch's own order."""
    seed, epoch = 9, 3
    n = len(sharded)
    order = np.concatenate(rows_of(sharded.batches(n, seed=seed, epoch=epoch)))

    def global_steps(batch_size, world, workers, start_sample, steps=None):
        """Rows of each global step (all ranks), in order, from start_sample on."""
        per_rank = []
        for rank in range(world):
            streams = [sharded.batches(batch_size, seed=seed, epoch=epoch, rank=rank,
                                       world_size=world, worker=w, num_workers=workers,
                                       start_sample=start_sample) for w in range(workers)]
            per_rank.append([b["row"] for group in itertools.zip_longest(*streams)
                             for b in group if b is not None])
        out = [np.concatenate(step) for step in zip(*per_rank)]
        return out if steps is None else out[:steps]

    batch_size, world, workers = before
    done = global_steps(batch_size, world, workers, 0, steps=3)
    consumed = sum(len(step) for step in done)
    assert consumed == 3 * batch_size * world
    np.testing.assert_array_equal(np.concatenate(done), order[:consumed])
    batch_size, world, workers = after
    rest = np.concatenate(global_steps(batch_size, world, workers, consumed))
    padding = len(rest) - (n - consumed)
    assert 0 <= padding < world
    np.testing.assert_array_equal(rest[:n - consumed], order[consumed:])
    np.testing.assert_array_equal(rest[n - consumed:], order[:padding])
    assert sharded.num_batches(batch_size, world_size=world, start_sample=consumed) == (
        len(list(sharded.batches(batch_size, world_size=world, start_sample=consumed))))


def test_start_sample_and_start_batch(sharded):
    same_batches(list(sharded.batches(100, seed=2, world_size=2, start_batch=3)),
                 list(sharded.batches(100, seed=2, world_size=2, start_sample=600)))
    assert list(sharded.batches(100, start_sample=len(sharded))) == []
    with pytest.raises(ValueError, match="past the end"):
        sharded.batches(100, start_sample=len(sharded) + 1)
    with pytest.raises(ValueError, match="not both"):
        sharded.batches(100, start_sample=100, start_batch=1)
    windows = list(sharded.windows(8, 10, seed=1, start_sample=25))
    full = list(sharded.windows(8, 10, seed=1))
    got = np.concatenate([b["row"][:, 0] for b in windows])
    want = np.concatenate([b["row"][:, 0] for b in full])[25:]
    np.testing.assert_array_equal(got, want)


def test_start_batch_reads_nothing_before_it(sharded, monkeypatch):
    gathered = []
    original = PackData.gather

    def counting(self, rows, *rest):
        gathered.append(len(rows))
        return original(self, rows, *rest)

    monkeypatch.setattr(PackData, "gather", counting)
    batches = sharded.batches(100, seed=1, start_batch=20)
    assert gathered == []
    assert len(list(batches)) == 3 and gathered == [100, 100, 40]


def test_sequential_batches_read_in_pack_order_across_shards(sharded):
    got = list(sharded.batches(650, shuffle=False))
    np.testing.assert_array_equal(np.concatenate(rows_of(got)), np.arange(len(sharded)))
    assert [len(b["row"]) for b in got] == [650, 650, 650, 290]


def test_selection_arguments(sharded):
    by_sql = rows_of(sharded.batches(64, select="depth = 6", seed=1))
    by_sel = rows_of(sharded.batches(64, select=sharded.select("depth = 6"), seed=1))
    by_ids = rows_of(sharded.batches(64, select=[0, 1, 2, 3, 4], seed=1))
    for a, b in zip(by_sql, by_sel):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(by_sql, by_ids):
        np.testing.assert_array_equal(a, b)
    both = sharded.select("max_score > 1000", runs=[0, 1, 2, 7])
    assert set(both.run_ids.tolist()) <= {0, 1, 2, 7}


def test_windows_stay_inside_one_run(pack):
    for shuffle in (False, True):
        for b in pack.windows(16, 32, shuffle=shuffle, seed=2, stride=5):
            assert b["exps"].shape[1:] == (16, 16) and b["evs"].shape[1:] == (16, 4)
            assert (b["run_id"] == b["run_id"][:, :1]).all()
            assert (np.diff(b["row"], axis=1) == 1).all()


def test_windows_cover_every_run_once_without_overlap(sharded):
    ids, steps = of(sharded).runs()
    want = sum(int(s) // 20 for s in steps)
    firsts = np.concatenate([b["row"][:, 0] for b in sharded.windows(20, 50, seed=1)])
    assert len(firsts) == want and len(np.unique(firsts)) == want
    rows = np.concatenate([b["row"].reshape(-1) for b in sharded.windows(20, 50, seed=1)])
    assert len(np.unique(rows)) == len(rows)


def test_windows_partition_between_ranks(sharded):
    got = [np.concatenate([b["row"][:, 0] for b in
                           sharded.windows(8, 10, world_size=3, rank=r, seed=0, drop_last=True)])
           for r in range(3)]
    assert len({len(g) for g in got}) == 1
    allrows = np.concatenate(got)
    assert len(np.unique(allrows)) == len(allrows)


def test_sample_draws_rows_of_the_selection(sharded):
    sel = sharded.select("depth = 7")
    batch = sharded.sample(2000, np.random.default_rng(0), select=sel)
    assert set(np.unique(batch["run_id"]).tolist()) <= set(sel.run_ids.tolist())
    np.testing.assert_array_equal(batch["run_id"], sharded.rows(batch["row"])["run_id"])
    again = sharded.sample(2000, 0, select=sel)
    np.testing.assert_array_equal(batch["row"], again["row"])
    assert sel.sample(5, 1)["exps"].shape == (5, 16)


def test_empty_selections_are_refused(sharded, packs):
    with pytest.raises(EmptySelectionError, match="matches no runs"):
        sharded.select("max_score < 0")
    findings = Pack(packs["findings"])
    empty = [rid for rid, n in findings.db().execute("SELECT id, steps FROM runs") if n == 0]
    with pytest.raises(EmptySelectionError, match="no rows"):
        findings.batches(10, select=empty)
    with pytest.raises(EmptySelectionError, match="no run of the selection has 500 rows"):
        sharded.windows(500, 4)


def test_bad_arguments_are_refused(sharded):
    for bad in [dict(rank=2, world_size=2), dict(worker=3, num_workers=3), dict(world_size=0),
                dict(start_batch=-1)]:
        with pytest.raises(ValueError):
            sharded.batches(10, **bad)
    with pytest.raises(ValueError):
        sharded.batches(0)


def test_num_batches_matches_what_batches_yield(sharded):
    for bs, ws, dl in [(100, 1, False), (64, 3, True), (7, 4, False)]:
        n = sharded.num_batches(bs, world_size=ws, drop_last=dl)
        assert n == len(list(sharded.batches(bs, world_size=ws, drop_last=dl)))
    assert sharded.num_batches(10, window=16) == len(list(sharded.windows(16, 10)))


@pytest.mark.parametrize("n", [10, 37])
def test_the_permutation_looks_uniform_over_seeds(n):
    """Which item comes first, over 4000 seeds: a chi-squared per degree of freedom near 1."""
    firsts = np.array([Permutation(n, seed, 0)(np.arange(1))[0] for seed in range(4000)])
    counts = np.bincount(firsts, minlength=n)
    expected = 4000 / n
    assert ((counts - expected) ** 2 / expected).sum() / (n - 1) < 2.0
