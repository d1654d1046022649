"""The data-loader logic (`dataset_packer._loader`) without PyTorch, then
`dataset_packer.torch` itself when torch is importable (skipped otherwise)."""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys

import numpy as np
import pytest

from dataset_packer._loader import EpochStream, WorkerInfo, partition

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
HAVE_TORCHDATA = HAVE_TORCH and importlib.util.find_spec("torchdata") is not None
needs_torchdata = pytest.mark.skipif(not HAVE_TORCHDATA, reason="torchdata is not installed")


def round_robin(streams):
    """What a DataLoader does with its workers' iterators: one batch from each in turn."""
    return [b for group in itertools.zip_longest(*streams) for b in group if b is not None]


def test_importing_the_package_does_not_import_torch():
    code = ("import sys, numpy as np, dataset_packer; dataset_packer.Pack; "
            "print('torch' in sys.modules, 'dataset_packer.torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_partition_reads_workers_and_distributed_state():
    assert partition(None, None, None) == partition(None, 0, 1)
    p = partition(WorkerInfo(2, 4), 3, 8)
    assert (p.rank, p.world_size, p.worker, p.num_workers) == (3, 8, 2, 4)
    p = partition(WorkerInfo(1, 2), 3, 8, rank=0, world_size=2)
    assert (p.rank, p.world_size, p.worker, p.num_workers) == (0, 2, 1, 2)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_workers_in_round_robin_give_the_ranks_batches_in_order(sharded, workers):
    stream = EpochStream(sharded, 128, shuffle=True, seed=5, augment=True)
    stream.set_epoch(4)
    for world in (1, 2):
        for rank in range(world):
            want = list(sharded.batches(128, seed=5, epoch=4, augment=True, rank=rank,
                                        world_size=world))
            got = round_robin([stream.batches(partition(WorkerInfo(w, workers), rank, world))
                               for w in range(workers)])
            assert [b["row"].tolist() for b in got] == [b["row"].tolist() for b in want]
            assert stream.num_batches(world) == len(want)
    stream.set_epoch(4, start_batch=5)
    got = round_robin([stream.batches(partition(WorkerInfo(w, workers), None, None))
                       for w in range(workers)])
    want = list(sharded.batches(128, seed=5, epoch=4, augment=True))[5:]
    assert [b["row"].tolist() for b in got] == [b["row"].tolist() for b in want]
    assert stream.num_batches() == len(want)


def test_windows_stream(sharded):
    stream = EpochStream(sharded.path, 8, window=16, seed=1)
    batch = next(iter(stream.batches(partition(None, None, None))))
    assert batch["exps"].shape == (8, 16, 16)
    with pytest.raises(TypeError, match="set_epoch"):
        EpochStream(sharded, 8, epoch=3)


@needs_torch
def test_torch_dataset_yields_tensors_without_copying(sharded):
    import torch

    from dataset_packer.torch import PackDataset

    data = PackDataset(sharded.path, 256, seed=2)
    data.set_epoch(1)
    batches = list(data)
    assert len(batches) == len(data) == 9
    first = batches[0]
    assert isinstance(first["exps"], torch.Tensor) and first["exps"].shape == (256, 16)
    want = next(sharded.batches(256, seed=2, epoch=1))
    for key, value in want.items():
        np.testing.assert_array_equal(first[key].numpy(), value)


@needs_torch
@pytest.mark.parametrize("workers", [0, 2])
def test_torch_dataloader_with_workers_keeps_the_order(sharded, workers):
    import torch

    from dataset_packer.torch import PackDataset

    data = PackDataset(sharded.path, 100, seed=3, augment=True)
    data.set_epoch(2, start_batch=3)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers)
    got = [b["row"].numpy() for b in loader]
    want = [b["row"] for b in sharded.batches(100, seed=3, epoch=2, augment=True)][3:]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_selection_by_sql_is_resolved_once(packs):
    """A `select=` given as SQL is run once, when the stream is made; on a shuffled pack the
    rows are found by run_id once and travel (pickled) to the workers with the selection."""
    import pickle

    from dataset_packer import Pack, Selection

    shuffled = Pack(packs["shuffled"])
    stream = EpochStream(shuffled, 100, select="SELECT run_id FROM run_details WHERE depth = 7")
    selection = stream.options["select"]
    assert isinstance(selection, Selection) and selection.num_runs == 5
    assert stream.num_batches() == -(-selection.num_rows // 100)
    assert selection._rows is not None
    worker = pickle.loads(pickle.dumps(stream))
    assert worker.options["select"]._rows is not None
    got = np.concatenate([b["row"] for b in worker.batches(partition(None, None, None))])
    want = np.concatenate([b["row"] for b in shuffled.batches(100, select=selection)])
    np.testing.assert_array_equal(got, want)
    assert set(shuffled.rows(got)["run_id"].tolist()) == set(selection.run_ids.tolist())


def _persistent_worker(stream, commands, results):
    """A worker that outlives epochs, as with persistent_workers=True: every command starts a
    new iteration of the same stream object, which was handed over when the process
    started."""
    for part in iter(commands.get, None):
        results.put([b["row"].tolist() for b in stream.batches(part)])


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_persistent_workers_see_each_epoch_and_resume_point(sharded, method):
    import multiprocessing

    context = multiprocessing.get_context(method)
    stream = EpochStream(sharded.path, 300, seed=4)
    commands, results = context.Queue(), context.Queue()
    worker = context.Process(target=_persistent_worker, args=(stream, commands, results))
    worker.start()
    try:
        part = partition(WorkerInfo(1, 2), None, None)
        for epoch, start in [(0, 0), (1, 0), (1, 1000), (5, 7)]:
            stream.set_epoch(epoch, start_sample=start)
            commands.put(part)
            got = results.get(timeout=60)
            want = [b["row"].tolist() for b in sharded.batches(
                300, seed=4, epoch=epoch, start_sample=start, worker=1, num_workers=2)]
            assert got == want, (epoch, start)
        assert got != [b["row"].tolist() for b in sharded.batches(
            300, seed=4, epoch=0, worker=1, num_workers=2)]
    finally:
        commands.put(None)
        worker.join(60)


def test_a_copied_stream_has_its_own_epoch(sharded):
    import copy

    stream = EpochStream(sharded.path, 100, seed=1)
    stream.set_epoch(3, start_sample=50)
    twin = copy.deepcopy(stream)
    assert (twin.epoch, twin.start_sample) == (3, 50)
    twin.set_epoch(4)
    assert (stream.epoch, stream.start_sample) == (3, 50)


def test_state_dict_resumes_elastically(sharded):
    stream = EpochStream(sharded.path, 100, seed=6, augment=True)
    stream.set_epoch(2)
    # Two ranks took 4 batches each: 800 samples of the epoch.
    state = stream.state_dict(batches=4, world_size=2)
    assert state == {"epoch": 2, "start_sample": 800, "seed": 6, **sharded.identity}
    # Resumed on three ranks with another batch size: the rest of the same order.
    other = EpochStream(sharded.path, 64, seed=6, augment=True)
    other.load_state_dict(state)
    per_rank = [[b["row"] for b in other.batches(partition(None, rank, 3))] for rank in range(3)]
    rest = np.concatenate([np.concatenate(step) for step in zip(*per_rank)])
    full = np.concatenate([b["row"] for b in sharded.batches(len(sharded), seed=6, epoch=2)])
    padding = len(rest) - (len(sharded) - 800)
    assert 0 <= padding < 3
    np.testing.assert_array_equal(rest, np.concatenate([full[800:], full[:padding]]))
    assert stream.state_dict(batches=99, world_size=2)["start_sample"] == len(sharded)
    # start_batch counts batches of every rank: 3 batches of 2 ranks, then 1 more each.
    stream.set_epoch(2, start_batch=3)
    assert stream.state_dict(batches=1, world_size=2)["start_sample"] == 800
    with pytest.raises(ValueError, match="seed=6"):
        EpochStream(sharded.path, 64, seed=7).load_state_dict(state)
    with pytest.raises(ValueError, match="epoch must be"):
        stream.set_epoch(-1)
    stream.set_epoch(2, start_sample=len(sharded) + 1)
    with pytest.raises(ValueError, match="past the end of an epoch"):
        next(stream.batches(partition(None, None, None)))
    with pytest.raises(ValueError, match="not both"):
        stream.set_epoch(2, 1, start_sample=5)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_an_iteration_resumes_from_its_own_state(sharded, workers):
    """Each worker's iteration, stopped mid-epoch and resumed from its own state (what
    StatefulDataLoader saves and restores per worker), yields the rest of its share: in
    round-robin, exactly the batches the uninterrupted epoch had left."""
    stream = EpochStream(sharded, 100, seed=5, augment=True)
    stream.set_epoch(1, start_sample=150)
    want = [b["row"].tolist() for b in sharded.batches(100, seed=5, epoch=1, start_sample=150,
                                                        augment=True)]
    parts = [partition(WorkerInfo(w, workers), None, None) for w in range(workers)]
    runs = [stream.iteration(part) for part in parts]
    running = [iter(run) for run in runs]
    taken = [next(running[k % workers])["row"].tolist() for k in range(7)]
    states = [run.state_dict() for run in runs]
    if workers == 1:
        assert states == [{"epoch": 1, "start_sample": 150 + 700, "seed": 5, **sharded.identity}]
    else:
        assert [s["worker_batches"] for s in states] == [len(range(w, 7, workers))
                                                         for w in range(workers)]
    # A new stream (a restarted job, whose shared epoch is another) resumes from the states.
    again = EpochStream(sharded, 100, seed=5, augment=True)
    again.set_epoch(9)
    resumed = [again.iteration(part, state) for part, state in zip(parts, states)]
    nxt = 7 % workers
    rest = round_robin([iter(r) for r in resumed[nxt:] + resumed[:nxt]])
    assert taken + [b["row"].tolist() for b in rest] == want
    if workers > 1:
        with pytest.raises(ValueError, match="worker 0 of 2"):
            again.iteration(partition(WorkerInfo(0, 3), None, None),
                            dict(states[0], num_workers=2))
        with pytest.raises(ValueError, match="only that worker can resume"):
            again.load_state_dict(states[0])


@needs_torch
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_size", [4, 1, "default"])
def test_a_dataloader_that_would_stack_batches_is_refused(sharded, workers, batch_size):
    """Forgetting batch_size=None (or giving any batch size) would stack several batches
    into (n, B, …) tensors: the iteration refuses it, in the main process and in workers,
    windows and structured companions alike. A collate_fn of one's own gets the whole
    batches as they are; batch_size=None gives them unchanged."""
    import torch

    from dataset_packer.torch import PackDataset, WholeBatch

    data = PackDataset(sharded.path, 100, seed=3)
    given = {} if batch_size == "default" else {"batch_size": batch_size}
    loader = torch.utils.data.DataLoader(data, num_workers=workers, **given)
    with pytest.raises(ValueError, match=r"yields whole batches \(of 100\).*batch_size=None"):
        next(iter(loader))
    windows = PackDataset(sharded.path, 10, window=4, columns=["exps"], seed=3)
    with pytest.raises(ValueError, match=r"PackDataset yields whole batches \(of 10\)"):
        next(iter(torch.utils.data.DataLoader(windows, num_workers=workers, **given)))
    custom = torch.utils.data.DataLoader(data, batch_size=2, num_workers=workers,
                                         collate_fn=lambda batches: batches)
    assert [len(b["row"]) for b in next(iter(custom))] == [100, 100]
    right = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers)
    got = list(itertools.islice(right, 2))
    assert [type(b) for b in got] == [WholeBatch, WholeBatch]
    want = list(itertools.islice(sharded.batches(100, seed=3), 2))
    for b, w in zip(got, want):
        assert b.keys() == w.keys() and b["exps"].shape == w["exps"].shape
        np.testing.assert_array_equal(b["row"].numpy(), w["row"])
    # The check itself: a clone updated with values of one more leading dimension.
    batch = WholeBatch({"row": torch.arange(3), "notes": {"a": torch.zeros(3, 2)}}, 3, "X")
    batch.update(row=torch.arange(3) + 1)
    assert batch["row"].tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match=r"X yields whole batches \(of 3\)"):
        batch.update({"notes": {"a": torch.zeros(1, 3, 2)}})


@needs_torchdata
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_stateful_dataloader_resumes_mid_epoch(sharded, workers):
    """torchdata's StatefulDataLoader saves the dataset's state (per worker) and restores it
    in a new loader: the rest of the epoch comes exactly, then the next epoch in full."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataset_packer.torch import PackDataset

    def make():
        data = PackDataset(sharded.path, 100, seed=3, augment=True)
        return data, StatefulDataLoader(data, batch_size=None, num_workers=workers,
                                        persistent_workers=workers > 0)

    def epoch(e):
        return [(b["row"].tolist(), b["exps"].tobytes())
                for b in sharded.batches(100, seed=3, epoch=e, augment=True)]

    def seen(batches):
        return [(b["row"].numpy().tolist(), b["exps"].numpy().tobytes()) for b in batches]

    data, loader = make()
    data.set_epoch(2)
    taken = seen(itertools.islice(loader, 5))
    state = loader.state_dict()
    data.set_epoch(7)  # what the saving job does next must not change the saved state
    assert seen(loader) == epoch(7)

    data, loader = make()
    loader.load_state_dict(state)
    assert taken + seen(loader) == epoch(2)
    data.set_epoch(3)
    assert seen(loader) == epoch(3)


@needs_torchdata
def test_stateful_dataloader_needs_the_same_workers_to_resume(sharded):
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataset_packer.torch import PackDataset

    data = PackDataset(sharded.path, 100, seed=3)
    loader = StatefulDataLoader(data, batch_size=None, num_workers=2)
    next(iter(loader))
    state = loader.state_dict()
    again = StatefulDataLoader(PackDataset(sharded.path, 100, seed=3), batch_size=None,
                               num_workers=3)
    again.load_state_dict(state)
    with pytest.raises(ValueError, match="as many workers as before"):
        list(again)
    other_seed = StatefulDataLoader(PackDataset(sharded.path, 100, seed=4), batch_size=None,
                                    num_workers=2)
    other_seed.load_state_dict(state)
    with pytest.raises(ValueError, match="seed=3"):
        list(other_seed)


@needs_torch
def test_torch_persistent_workers_follow_set_epoch(sharded):
    from dataset_packer.torch import PackDataset, PackLoader

    data = PackDataset(sharded.path, 200, seed=7, augment=True)
    loader = PackLoader(data, num_workers=2, persistent_workers=True)
    for epoch, start in [(0, 0), (1, 0), (1, 700), (4, 0)]:
        data.set_epoch(epoch, start_sample=start)
        got = [b["row"].numpy().tolist() for b in loader]
        want = [b["row"].tolist() for b in sharded.batches(200, seed=7, epoch=epoch,
                                                            augment=True, start_sample=start)]
        assert got == want, (epoch, start)


@needs_torch
def test_torch_loader_state_resumes_on_another_world_size(sharded):
    from dataset_packer.torch import PackDataset, PackLoader

    data = PackDataset(sharded.path, 100, seed=3, rank=1, world_size=2)
    loader = PackLoader(data, num_workers=2)
    data.set_epoch(5)
    for k, _ in enumerate(loader):
        if k == 3:
            break
    state = loader.state_dict()
    assert state == {"epoch": 5, "start_sample": 800, "seed": 3, **sharded.identity}
    # Three ranks of 64 rows take over after the 800 samples two ranks of 100 consumed.
    rest = []
    for rank in range(3):
        resumed = PackDataset(sharded.path, 64, seed=3, rank=rank, world_size=3)
        again = PackLoader(resumed, num_workers=1)
        again.load_state_dict(state)
        rest.append([b["row"].numpy() for b in again])
    got = np.concatenate([np.concatenate(step) for step in zip(*rest)])
    order = np.concatenate([b["row"] for b in sharded.batches(len(sharded), seed=3, epoch=5)])
    np.testing.assert_array_equal(got[:len(sharded) - 800], order[800:])
    with pytest.raises(ValueError, match="batch_size=None"):
        PackLoader(data, batch_size=4)
    with pytest.raises(ValueError, match="in_order=True"):
        PackLoader(data, num_workers=2, in_order=False)
    # Resumed with start_batch on two ranks, then two more batches taken: 3 steps of 2 × 100.
    data.set_epoch(5, start_batch=1)
    for k, _ in enumerate(loader):
        if k == 1:
            break
    assert loader.state_dict()["start_sample"] == 600
    assert data.state_dict()["start_sample"] == 200


@needs_torch
def test_torch_reads_a_mixture(packs):
    from dataset_packer import Mixture, Pack
    from dataset_packer.torch import PackDataset, PackLoader

    mix = Mixture([Pack(packs["plain"]), Pack(packs["merged"])], weights=[3, 1], length=1000)
    loader = PackLoader(PackDataset(mix, 250, seed=1), num_workers=2)
    got = [b["source"].numpy().tolist() for b in loader]
    want = [b["source"].tolist() for b in mix.batches(250, seed=1)]
    assert got == want and sum(map(sum, got)) == 250


def test_a_packed_batch_unpacks_to_the_same_arrays(sharded):
    from dataset_packer._loader import pack_batch, select_columns, unpack_batch

    batch = next(sharded.batches(37, seed=1, augment=True))
    batch["notes"] = np.zeros(37, dtype=[("a", "<i2"), ("b", "<f8", (3,))])
    batch["notes"]["b"][:, 1] = np.arange(37)
    batch["names"] = np.array(["x"] * 37, dtype=object)
    buffer, layout, rest = pack_batch(batch)
    assert buffer.dtype == np.uint8 and all(at % 64 == 0 for _, _, _, at in layout)
    back = unpack_batch(buffer, layout, rest)
    for key in batch:
        if key == "notes":
            for field in ("a", "b"):
                np.testing.assert_array_equal(back["notes"][field], batch["notes"][field])
        elif key == "names":
            assert back["names"] is batch["names"]
        else:
            np.testing.assert_array_equal(back[key], batch[key])
            assert back[key].dtype == batch[key].dtype
    assert list(select_columns(batch, ["move", "exps"])) == ["move", "exps"]
    with pytest.raises(KeyError, match="no column 'board'"):
        select_columns(batch, ["board"])


def _ring_worker(ring, batches, out):
    for batch in batches:
        out.put(ring.put(0, batch))


def assert_same_batch(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, key
        assert got[key].tobytes() == want[key].tobytes(), key  # NaN EVs too


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_batch_ring_hands_batches_over_in_shared_memory(sharded, method):
    import multiprocessing

    from dataset_packer._loader import BatchRing, pack_batch, unpack_batch

    context = multiprocessing.get_context(method)
    batches = list(sharded.batches(100, seed=1, augment=True))[:6]
    ring = BatchRing(1, pack_batch(batches[0])[0].size, 2, context)
    out = context.Queue()
    worker = context.Process(target=_ring_worker, args=(ring, batches[:2], out))
    worker.start()
    sent = [out.get(timeout=60) for _ in range(2)]
    worker.join(60)
    assert None not in sent
    # Both slots are full: a third batch is not packed (its sender sends it itself).
    assert ring.put(0, batches[2]) is None
    for want, (slot, ticket, size, layout, rest) in zip(batches, sent):
        assert_same_batch(unpack_batch(ring.take(0, slot, ticket, size), layout, rest), want)
    with pytest.raises(RuntimeError, match="no longer in its shared-memory slot"):
        ring.take(0, *sent[0][:3])
    # A batch never taken (its iteration was left) holds its slot until reclaim().
    left = ring.put(0, batches[3])
    assert ring.put(0, batches[4]) is not None and ring.put(0, batches[5]) is None
    ring.reclaim()
    again = ring.put(0, batches[5])
    assert again is not None and again[0] == left[0]
    with pytest.raises(RuntimeError, match="no longer in its shared-memory slot"):
        ring.take(0, *left[:3])
    assert_same_batch(unpack_batch(ring.take(0, *again[:3]), again[3], again[4]), batches[5])
    ring.reclaim()
    assert ring.put(0, next(sharded.batches(200))) is None  # bigger than a slot


def test_a_taken_batch_holds_its_slot_while_any_of_its_arrays_lives(sharded):
    """The main process views a batch in its slot, without a copy: the slot is not
    written again while an array made from the batch lives (a column, a view of a view),
    and is free once the last one is gone."""
    import gc

    from dataset_packer._loader import BatchRing, pack_batch, unpack_batch

    batches = list(sharded.batches(100, seed=2))[:5]
    ring = BatchRing(1, pack_batch(batches[0])[0].size, 2)
    first, second = ring.put(0, batches[0]), ring.put(0, batches[1])
    batch = unpack_batch(ring.take(0, *first[:3]), first[3], first[4])
    kept = batch["evs"][10:][::2]  # a view of a view of one column
    want = batches[0]["evs"][10:][::2].tobytes()
    del batch
    gc.collect()
    # The second slot is full and the first held by `kept`: nothing is packed over either.
    assert ring.put(0, batches[2]) is None
    unpack_batch(ring.take(0, *second[:3]), second[3], second[4])  # taken, dropped at once
    third = ring.put(0, batches[3])
    assert third is not None and third[0] == second[0]
    assert ring.put(0, batches[4]) is None
    assert kept.tobytes() == want
    del kept
    gc.collect()
    fourth = ring.put(0, batches[4])
    assert fourth is not None and fourth[0] == first[0]
    for sent, want in ((third, batches[3]), (fourth, batches[4])):
        assert_same_batch(unpack_batch(ring.take(0, *sent[:3]), sent[3], sent[4]), want)


@needs_torch
@pytest.mark.parametrize("context", [None, "spawn"])
def test_packloader_batches_come_through_shared_memory(sharded, context):
    """PackLoader's workers hand batches over in shared-memory slots: the batches are
    those of the pack, through an epoch left in the middle and the epochs after it. Each
    batch is dropped once checked, as a training loop does, so its slot serves again (a
    loop that keeps its batches gets the rest through the pipe: the next test)."""
    from dataset_packer.torch import PackDataset, PackLoader

    data = PackDataset(sharded.path, 128, seed=6, augment=True)
    loader = PackLoader(data, num_workers=2, persistent_workers=True,
                        multiprocessing_context=context)
    ring = loader._ring[0]
    for epoch, stop in [(0, 3), (1, None), (2, 5), (3, None)]:
        data.set_epoch(epoch)
        want = list(sharded.batches(128, seed=6, epoch=epoch, augment=True))[:stop]
        for a, b in zip(itertools.islice(loader, stop), want, strict=True):
            assert_same_batch({k: v.numpy() for k, v in a.items()}, b)
    tickets = [ring._table[ring._row(w) + 2 * ring.slots] for w in range(2)]
    assert min(tickets) > 0 and sum(tickets) >= 20


@needs_torch
def test_packloader_tensors_keep_their_batch_after_the_loop_moves_on(sharded):
    """The tensors PackLoader yields are views of the batch's shared-memory slot: one kept
    (a view of a column) still holds its rows after the workers have packed many batches
    since, and once every batch is dropped no slot is held."""
    import gc

    from dataset_packer.torch import PackDataset, PackLoader

    data = PackDataset(sharded.path, 32, seed=4)
    loader = PackLoader(data, num_workers=1, prefetch_factor=1)
    ring = loader._ring[0]
    want = list(sharded.batches(32, seed=4))
    kept = {}
    for i, batch in enumerate(loader):
        if i % 5 == 0:
            kept[i] = batch["exps"][3:]
    assert len(want) > 3 * ring.slots
    assert {i: t.numpy().tobytes() for i, t in kept.items()} == {
        i: want[i]["exps"][3:].tobytes() for i in kept}
    del batch, kept
    gc.collect()
    states = [ring._table[ring._row(0) + 2 * slot] for slot in range(ring.slots)]
    assert ring.READING not in states and ring.WRITING not in states


@needs_torch
def test_packed_batches_are_pinned_by_the_pin_memory_thread(sharded, monkeypatch):
    """With `pin_memory=True` the DataLoader's pin-memory thread hands what a worker sent
    to torch's `pin_memory()`, which passes an object it does not know on as it is, unless
    the object has a `pin_memory` method: PackLoader's transfers have one, which unpacks
    the batch and pins its tensors. (Pinning needs an accelerator: a recording stand-in
    for `Tensor.pin_memory` here.)"""
    import torch
    from torch.utils.data._utils.pin_memory import pin_memory

    from dataset_packer import torch as dp_torch
    from dataset_packer._loader import BatchRing, pack_batch

    pinned = []

    def pin(tensor):
        pinned.append(tensor.data_ptr())
        return tensor.clone()
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    batch = next(sharded.batches(100, seed=3))
    ring = BatchRing(1, pack_batch(batch)[0].size, 1)
    monkeypatch.setitem(dp_torch._RINGS, "test", ring)
    for sent in (dp_torch._Packed(*pack_batch(batch)),
                 dp_torch._InRing("test", 0, *ring.put(0, batch))):
        pinned.clear()
        # As the thread gets it: in a bundle of the worker's batches.
        got = pin_memory(dp_torch._Bundle(0, [sent])).batches
        assert len(got) == 1 and isinstance(got[0], dict) and len(pinned) == len(batch)
        assert_same_batch({k: v.numpy() for k, v in got[0].items()}, batch)


@needs_torch
def test_bundles_are_put_in_order_round_by_round():
    """`_in_order` on bundles as a DataLoader hands them: round-robin over the workers still
    reading. A round ends with the last worker's bundle or, once workers have stopped, when
    the next one begins; inside a round the i-th batches come before the (i+1)-th."""
    from dataset_packer.torch import _Bundle, _in_order

    def bundle(worker, first, count):
        return _Bundle(worker, [(worker, first + i) for i in range(count)])
    items = [bundle(0, 0, 2), bundle(1, 0, 2), bundle(2, 0, 2),  # a full round
             bundle(0, 2, 2), bundle(1, 2, 1),                   # worker 2 has stopped
             bundle(0, 4, 1)]                                    # so has worker 1
    assert list(_in_order(iter(items), 3)) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1),
                   (0, 2), (1, 2), (0, 3), (0, 4)]
    # Each bundle's first batch is handed on before the next bundle is asked for.
    seen = []

    def handed():
        for item in items[:3]:
            seen.append(item.worker)
            yield item
    assert [(b, list(seen)) for b in itertools.islice(_in_order(handed(), 3), 2)] == [
        ((0, 0), [0]), ((1, 0), [0, 1])]


@needs_torch
@pytest.mark.parametrize("batches, bundle_bytes, per_item",
                         [(2, None, 4), (7, None, 4), (13, None, 4), (30, None, 4), (7, 1, 1)])
def test_packloader_puts_the_workers_bundles_back_in_order(sharded, monkeypatch, batches,
                                                           bundle_bytes, per_item):
    """Each PackLoader worker sends its batches four at a time (small ones; one at a time
    when they are big); the loader hands them on in the rank's order, whatever the epoch's
    batches are against 3 workers × 4 (fewer batches than workers, short last rounds,
    several rounds), from a resume point off the batches' bounds, and after an iteration
    left in the middle of a round."""
    from dataset_packer import torch as dp_torch
    from dataset_packer.torch import PackDataset, PackLoader

    if bundle_bytes is not None:
        monkeypatch.setattr(dp_torch, "BUNDLE_BYTES", bundle_bytes)
    size = -(-len(sharded) // batches)
    data = PackDataset(sharded.path, size, seed=8)
    loader = PackLoader(data, num_workers=3, persistent_workers=True)
    assert loader._ring[2] == per_item

    def rows(got):
        return [b["row"].tolist() for b in got]
    for epoch, start, stop in [(0, 0, 4), (1, 0, None), (2, size * 3 // 2, None), (3, 0, None)]:
        data.set_epoch(epoch, start_sample=start)
        want = list(sharded.batches(size, seed=8, epoch=epoch, start_sample=start))[:stop]
        got = list(itertools.islice(loader, stop))
        assert rows(got) == rows(want)
        assert loader.state_dict()["start_sample"] == min(start + len(got) * size, len(sharded))


def _count_worker(counter, worker_id):
    with counter.get_lock():
        counter.value += 1 + worker_id * 10


@needs_torch
def test_packloader_runs_the_users_worker_init_fn(sharded):
    import functools
    import multiprocessing

    from dataset_packer.torch import PackDataset, PackLoader

    counter = multiprocessing.Value("i", 0)
    loader = PackLoader(PackDataset(sharded.path, 300, seed=2), num_workers=2,
                        worker_init_fn=functools.partial(_count_worker, counter))
    assert len(list(loader)) == len(sharded) // 300 + 1
    assert counter.value == 1 + 11


@needs_torch
def test_packed_batches_from_workers_equal_the_plain_ones(sharded):
    import torch

    from dataset_packer.torch import PackDataset, PackLoader

    data = PackDataset(sharded.path, 300, seed=2, augment=True)
    packed = list(PackLoader(data, num_workers=2))
    # The same dataset in a plain DataLoader afterwards: PackLoader left it as it was.
    plain = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2)
    for a, b in zip(plain, packed, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            assert a[key].numpy().tobytes() == b[key].numpy().tobytes(), key  # NaN EVs too
    some = PackLoader(PackDataset(sharded.path, 300, seed=2, columns=["exps", "move"]),
                      num_workers=2)
    assert [sorted(b) for b in some][0] == ["exps", "move"]
