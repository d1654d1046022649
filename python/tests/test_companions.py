"""Companion arrays (`NAME-NNNNN.npy` beside the shards) read through the package: every
companion row handed out (rows, run, batches, windows, sample, gather, the data-loader stream)
is the companion row of exactly the steps row beside it, and every way a family can fail to
line up is an error naming the file.

The pack is the fixture drop in 700-row shards (4 shards, runs straddling them) with three
families: `embeddings` (float32 (rows, 8) encoding each row's (run_id, step_index), attached
one array per shard), `notes` (a structured dtype with the row's run_id, step_index and board,
attached as one array for the whole pack) and `plain` (float64 (rows,), np.save'd beside the
shards without `attach`, so metadata.db does not record it)."""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, cli, vm_flags
from dataset_packer import Companion, CompanionError, Pack, PackError
from dataset_packer._data import of
from dataset_packer._loader import EpochStream, WorkerInfo, partition, split_fields

NOTES = np.dtype([("run_id", "<u4"), ("step_index", "<u4"), ("board", "<u8"), ("tag", "S4"),
                  ("v", "<f8", (2,))])


def embeddings_of(rows: np.ndarray) -> np.ndarray:
    out = np.zeros((len(rows), 8), np.float32)
    out[:, 0] = rows["run_id"]
    out[:, 1] = rows["step_index"]
    out[:, 2:] = np.arange(2, 8, dtype=np.float32) * 1000 + (rows["step_index"] % 7)[:, None]
    return out


def notes_of(rows: np.ndarray) -> np.ndarray:
    out = np.zeros(len(rows), NOTES)
    out["run_id"] = rows["run_id"]
    out["step_index"] = rows["step_index"]
    out["board"] = rows["board"]
    out["tag"] = np.char.encode(np.char.mod("r%d", rows["run_id"] % 1000), "ascii")
    out["v"][:, 0] = rows["step_index"] * 0.5
    out["v"][:, 1] = -rows["run_id"].astype(np.float64)
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(pack path, {family: the whole array, row i for global row i})."""
    root = tmp_path_factory.mktemp("companions")
    path = root / "pack"
    cli("pack", "--input", FIXTURES / "raw", "--output", path, "--shard-rows", 700, "--quiet")
    shards = sorted(path.glob("steps-*.npy"))
    assert len(shards) == 4
    per_shard = [np.load(s) for s in shards]
    emb_files = []
    for k, rows in enumerate(per_shard):
        emb_files.append(root / f"emb-{k}.npy")
        np.save(emb_files[-1], embeddings_of(rows))
        np.save(path / f"plain-{k:05d}.npy", rows["step_index"].astype(np.float64) + 0.25)
    every = np.concatenate(per_shard)
    np.save(root / "notes.npy", notes_of(every))
    cli("attach", path, "--name", "embeddings", "--from", *emb_files, "--quiet")
    cli("attach", path, "--name", "notes", "--from", root / "notes.npy", "--quiet")
    whole = {"embeddings": embeddings_of(every), "notes": notes_of(every),
             "plain": every["step_index"].astype(np.float64) + 0.25}
    return path, whole


@pytest.fixture(scope="module")
def pack(made):
    with Pack(made[0]) as p:
        yield p


@pytest.fixture(scope="module")
def whole(made):
    return made[1]


@pytest.fixture
def broken(made, tmp_path):
    """A fresh copy of the pack to break."""
    path = tmp_path / "pack"
    shutil.copytree(made[0], path)
    return path


def check_batch(pack: Pack, batch: dict, whole: dict, keys=("embeddings", "notes", "plain"),
                names=None) -> None:
    """Each companion row of the batch is the companion row of the batch's steps row: equal to
    the source array at `row`, and holding that steps row's identity."""
    names = names or dict(zip(keys, keys))
    rows = batch["row"]
    steps = pack.rows(rows)
    for key in keys:
        got = batch[key]
        want = whole[names[key]][rows]
        assert got.shape == want.shape and got.dtype == want.dtype, key
        np.testing.assert_array_equal(got, want, err_msg=key)
    if "embeddings" in keys:
        emb = batch["embeddings"]
        np.testing.assert_array_equal(emb[..., 0], steps["run_id"])
        np.testing.assert_array_equal(emb[..., 1], steps["step_index"])
        np.testing.assert_array_equal(emb[..., 0], batch["run_id"])
        np.testing.assert_array_equal(emb[..., 1], batch["step_index"])
    if "notes" in keys:
        notes = batch["notes"]
        for field in ("run_id", "step_index", "board"):
            np.testing.assert_array_equal(notes[field], steps[field], err_msg=field)


# ---------------------------------------------------------------------------------- opening


def test_families_are_listed_typed_and_memory_mapped(pack, whole):
    assert pack.companions == ["embeddings", "notes", "plain"]
    emb, notes, plain = (pack.companion(n) for n in pack.companions)
    assert isinstance(emb, Companion) and pack.companion("embeddings") is emb  # opened once
    assert (emb.dtype, emb.shape, len(emb)) == (np.dtype("<f4"), (8,), len(pack))
    assert (notes.dtype, notes.shape) == (NOTES, ())
    assert (plain.dtype, plain.shape) == (np.dtype("<f8"), ())
    assert emb.recorded and notes.recorded and not plain.recorded
    assert [f.name for f in emb.files] == [f"embeddings-{k:05d}.npy" for k in range(4)]
    for family in (emb, notes, plain):
        assert [len(a) for a in family.arrays] == [700, 700, 700, 140]
        for a, f in zip(family.arrays, family.files):
            # Mapped (the kernel's own record), with its read-around (a pack this small fits
            # in memory: test_memory.py has the larger ones, read at random).
            assert vm_flags(f) and not any("rr" in flags for flags in vm_flags(f)), f
            assert not a.flags.writeable
    np.testing.assert_array_equal(np.concatenate(emb.arrays), whole["embeddings"])
    assert "'<f4' (8,)" in repr(emb)
    with pytest.raises(KeyError, match="no companion 'nope'.*embeddings, notes, plain"):
        pack.companion("nope")


def test_a_pack_without_companions_lists_none(packs):
    with Pack(packs["sharded"]) as p:
        assert p.companions == []
        with pytest.raises(KeyError, match="it has none"):
            p.companion("embeddings")
        with pytest.raises(KeyError):
            next(p.batches(10, companions=["embeddings"]))


# ---------------------------------------------------------------------------------- rows, run


def test_rows_by_int_slice_and_array_are_aligned(pack, whole):
    n = len(pack)
    rng = np.random.default_rng(1)
    keys = [0, 699, 700, n - 1, -1, -700, np.int64(1400)]
    for name in pack.companions:
        family, source = pack.companion(name), whole[name]
        for k in keys:
            np.testing.assert_array_equal(family.rows(k), source[k])
            np.testing.assert_array_equal(family[k], source[k])
        for s in (slice(None), slice(650, 1450), slice(690, 700), slice(5, 5), slice(2239, 10),
                  slice(3, None, 7), slice(None, None, -3), slice(-50, None)):
            np.testing.assert_array_equal(family[s], source[s], err_msg=f"{name} {s}")
        idx = rng.integers(-n, n, (6, 9))
        got = family[idx]
        assert got.shape == (6, 9) + family.shape
        np.testing.assert_array_equal(got, source[idx])
        assert family[np.array([], dtype=np.int64)].shape == (0,) + family.shape
    emb = pack.companion("embeddings")
    idx = rng.integers(0, n, 500)
    steps = pack.rows(idx)
    np.testing.assert_array_equal(emb[idx][:, 0], steps["run_id"])
    np.testing.assert_array_equal(emb[idx][:, 1], steps["step_index"])
    # Copies: changing them changes nothing in the pack.
    chunk = emb[0:10]
    chunk[:] = -1
    assert emb[0][0] == whole["embeddings"][0][0]
    with pytest.raises(IndexError, match="out of range"):
        emb[n]
    with pytest.raises(TypeError):
        emb[np.array([True, False])]


def test_run_gives_the_runs_companion_rows(pack):
    ids = [int(i) for i in of(pack).runs()[0]]
    emb, notes = pack.companion("embeddings"), pack.companion("notes")
    straddling = 0
    for run_id in ids:
        steps = pack.run(run_id)
        e, n = emb.run(run_id), notes.run(run_id)
        assert len(e) == len(n) == len(steps)
        assert (e[:, 0] == run_id).all() and (n["run_id"] == run_id).all()
        np.testing.assert_array_equal(e[:, 1], steps["step_index"])
        np.testing.assert_array_equal(n["board"], steps["board"])
        first = of(pack).first_rows("test")[ids.index(run_id)]
        straddling += (first // 700) != ((first + len(steps) - 1) // 700)
    assert straddling > 0  # some runs cross a shard boundary
    with pytest.raises(KeyError):
        emb.run(10_000)


# ---------------------------------------------------------------------------------- batches


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("augment", [False, True])
def test_every_batch_row_has_its_companion_rows(pack, whole, shuffle, augment):
    seen = []
    for batch in pack.batches(333, shuffle=shuffle, seed=4, epoch=1, augment=augment,
                              companions=["embeddings", "notes", "plain"]):
        check_batch(pack, batch, whole)
        assert batch["embeddings"].shape == (len(batch["row"]), 8)
        seen.append(batch["row"])
    assert sorted(np.concatenate(seen).tolist()) == list(range(len(pack)))


def test_augmentation_leaves_companion_rows_as_stored(pack, whole):
    plain = next(pack.batches(256, seed=2, companions=["embeddings"]))
    turned = next(pack.batches(256, seed=2, augment=True, companions=["embeddings"]))
    assert (turned["symmetry"] != 0).any()
    assert not np.array_equal(plain["exps"], turned["exps"])
    np.testing.assert_array_equal(plain["embeddings"], turned["embeddings"])


@pytest.mark.parametrize("shuffle", [True, False])
def test_ranks_workers_and_resume_keep_companions_aligned(pack, whole, shuffle):
    everything = []
    for rank, worker in itertools.product(range(2), range(3)):
        for batch in pack.batches(100, shuffle=shuffle, seed=9, rank=rank, world_size=2,
                                  worker=worker, num_workers=3, companions=["embeddings",
                                                                            "notes"]):
            check_batch(pack, batch, whole, ("embeddings", "notes"))
            everything.append(batch["row"])
    rows = np.concatenate(everything)
    assert len(np.unique(rows)) == len(rows) == len(pack)
    full = list(pack.batches(100, shuffle=shuffle, seed=9, rank=1, world_size=2,
                             companions=["notes"]))
    resumed = list(pack.batches(100, shuffle=shuffle, seed=9, rank=1, world_size=2,
                                start_batch=5, companions=["notes"]))
    assert len(resumed) == len(full) - 5
    for a, b in zip(full[5:], resumed):
        np.testing.assert_array_equal(a["notes"], b["notes"])
        check_batch(pack, b, whole, ("notes",))


def test_selections_and_drop_last(pack, whole):
    sel = pack.select("depth = 7")
    total = 0
    for batch in sel.batches(64, seed=1, drop_last=True, companions=["embeddings"]):
        assert len(batch["row"]) == 64
        check_batch(pack, batch, whole, ("embeddings",))
        total += 64
    assert total == sel.num_rows // 64 * 64
    for batch in pack.batches(500, shuffle=False, select=sel, companions="plain"):
        check_batch(pack, batch, whole, ("plain",))


def test_windows_carry_companion_windows(pack, whole):
    count = 0
    for batch in pack.windows(16, 8, stride=5, seed=3, augment=True,
                              companions=["embeddings", "notes"]):
        b = len(batch["row"])
        assert batch["embeddings"].shape == (b, 16, 8) and batch["notes"].shape == (b, 16)
        check_batch(pack, batch, whole, ("embeddings", "notes"))
        # One run, consecutive steps, in each window.
        assert (batch["embeddings"][:, :, 0] == batch["embeddings"][:, :1, 0]).all()
        assert (np.diff(batch["embeddings"][:, :, 1], axis=1) == 1).all()
        count += b
    assert count == of(pack).windows(None, 16, 5, "test").total > 0
    for batch in pack.windows(4, 50, shuffle=False, companions=["plain"]):
        check_batch(pack, batch, whole, ("plain",))


def test_sample_and_gather(pack, whole):
    batch = pack.sample(700, 5, companions=["embeddings", "notes", "plain"], augment=True)
    check_batch(pack, batch, whole)
    idx = np.array([2239, 0, 700, 699, 1400, 5, 5, 2100])
    batch = pack.gather(idx, companions=["embeddings", "notes"])
    np.testing.assert_array_equal(batch["row"], idx)
    check_batch(pack, batch, whole, ("embeddings", "notes"))
    batch = pack.gather([], companions=["embeddings"])
    assert batch["embeddings"].shape == (0, 8)


def test_other_keys_and_clashes(pack, whole):
    batch = next(pack.batches(50, companions={"emb": "embeddings", "ann": "notes"}))
    assert "embeddings" not in batch
    check_batch(pack, batch, whole, ("emb", "ann"), {"emb": "embeddings", "ann": "notes"})
    # A family named like a batch key must be given another key (checked before any batch).
    with pytest.raises(ValueError, match="'row'.*another key"):
        pack.batches(50, companions={"row": "embeddings"})
    with pytest.raises(ValueError, match="'seed'"):
        pack.windows(4, 50, companions={"seed": "plain"})


def test_the_loader_stream_passes_companions_through(pack, whole):
    stream = EpochStream(pack, 128, seed=5, augment=True, companions=["embeddings", "notes"])
    stream.set_epoch(2, start_batch=1)
    streams = [list(stream.batches(partition(WorkerInfo(w, 2), None, None))) for w in range(2)]
    batches = [b for pair in itertools.zip_longest(*streams) for b in pair if b is not None]
    assert len(batches) == stream.num_batches()
    for batch in batches:
        check_batch(pack, batch, whole, ("embeddings", "notes"))
    fields = split_fields(batches[0])
    assert set(fields["notes"]) == set(NOTES.names)
    np.testing.assert_array_equal(fields["notes"]["v"], batches[0]["notes"]["v"])
    assert fields["notes"]["v"].flags.c_contiguous and fields["notes"]["v"].shape[1:] == (2,)
    windows = EpochStream(pack, 16, window=8, companions=["embeddings"])
    for batch in windows.batches(partition(None, None, None)):
        assert batch["embeddings"].shape[1:] == (8, 8)
        check_batch(pack, batch, whole, ("embeddings",))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_tensors_of_companions(pack, whole):
    from dataset_packer.torch import PackDataset

    data = PackDataset(pack, 64, seed=1, companions=["embeddings", "notes"])
    batch = next(iter(data))
    assert tuple(batch["embeddings"].shape) == (64, 8)
    np.testing.assert_array_equal(batch["embeddings"].numpy(),
                                  whole["embeddings"][batch["row"].numpy()])
    np.testing.assert_array_equal(batch["notes"]["board"].numpy(),
                                  pack.rows(batch["row"].numpy())["board"])
    assert isinstance(batch["notes"]["tag"], np.ndarray)  # bytes: no torch dtype


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("window", [None, 8])
def test_packloader_workers_carry_companions(pack, whole, window):
    """Through PackLoader's workers (and its shared-memory slots) a batch's companions, a
    structured one's fields and a field torch has no dtype for come out as in process."""
    from dataset_packer.torch import PackDataset, PackLoader

    options = dict(seed=1, companions=["embeddings", "notes"], window=window)
    loader = PackLoader(PackDataset(pack, 32, **options), num_workers=2)
    alone = PackDataset(pack, 32, **options)
    count = 0
    for got, want in zip(loader, alone, strict=True):
        for key, value in want.items():
            if isinstance(value, dict):
                for field, inner in value.items():
                    a = got[key][field]
                    a = a if isinstance(a, np.ndarray) else a.numpy()
                    b = inner if isinstance(inner, np.ndarray) else inner.numpy()
                    assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (key, field)
            else:
                assert got[key].shape == value.shape and torch_equal(got[key], value), key
        count += 1
    assert count == len(alone) and count > 2


def torch_equal(a, b) -> bool:
    return a.dtype == b.dtype and a.numpy().tobytes() == b.numpy().tobytes()


def test_pickled_pack_reopens_its_companions(pack, whole):
    import pickle

    again = pickle.loads(pickle.dumps(pack))
    np.testing.assert_array_equal(again.companion("notes")[10:20], whole["notes"][10:20])


def test_a_single_steps_npy_pack_pairs_with_name_npy(packs, tmp_path):
    path = tmp_path / "plain"
    shutil.copytree(packs["plain"], path)
    steps = np.load(path / "steps.npy")
    np.save(path / "emb.npy", embeddings_of(steps))
    with Pack(path) as p:
        assert p.companions == ["emb"]
        batch = next(p.batches(300, seed=0, companions=["emb"]))
        np.testing.assert_array_equal(batch["emb"], embeddings_of(steps)[batch["row"]])
    np.save(path / "emb-00000.npy", embeddings_of(steps))
    with Pack(path) as p, pytest.raises(CompanionError,
                                        match=r"emb-00000\.npy: named for a sharded pack"):
        p.companion("emb")


# ---------------------------------------------------------------------------------- errors


def opening(path: Path, name: str):
    """The error opening family `name` of the pack at `path` raises; the pack itself (steps
    rows) still reads, and batches asking for the family fail before yielding anything."""
    with Pack(path) as p:
        assert len(p.rows(slice(0, 10))) == 10
        with pytest.raises(CompanionError) as batches_error:
            p.batches(10, companions=[name])
        with pytest.raises(CompanionError) as error:
            p.companion(name)
    assert str(batches_error.value) == str(error.value)
    return str(error.value)


def test_a_missing_file_is_named(broken):
    (broken / "embeddings-00002.npy").unlink()
    message = opening(broken, "embeddings")
    assert "embeddings-00002.npy: missing" in message and "steps-00002.npy" in message
    assert "3 of 4 files" in message
    # A recorded family whose files are all gone is still listed, and named as missing.
    for f in broken.glob("notes-*.npy"):
        f.unlink()
    with Pack(broken) as p:
        assert "notes" in p.companions
    assert "notes-00000.npy: missing" in opening(broken, "notes")


def test_a_row_count_other_than_the_shards_is_named(broken):
    np.save(broken / "plain-00001.npy", np.zeros(699))
    message = opening(broken, "plain")
    assert "plain-00001.npy: 699 rows, but steps-00001.npy has 700" in message


def test_mixed_dtypes_and_shapes_are_named(broken):
    np.save(broken / "plain-00002.npy", np.zeros(700, np.float32))
    message = opening(broken, "plain")
    assert "plain-00002.npy: dtype '<f4', but plain-00000.npy has '<f8'" in message
    np.save(broken / "plain-00002.npy", np.zeros((700, 2)))
    assert "plain-00002.npy: dtype '<f8' (2,), but plain-00000.npy has '<f8'" in \
        opening(broken, "plain")


def test_a_file_without_a_shard_and_a_single_name_beside_shards_are_named(broken):
    np.save(broken / "plain-00004.npy", np.zeros(10))
    assert "plain-00004.npy: has no shard to pair with (the pack has 4 shards)" in \
        opening(broken, "plain")
    (broken / "plain-00004.npy").unlink()
    np.save(broken / "plain.npy", np.zeros(2240))
    assert "plain.npy: named for a pack of one steps.npy" in opening(broken, "plain")


def test_bad_headers_truncation_fortran_and_objects_are_named(broken):
    path = broken / "plain-00003.npy"
    path.write_bytes(path.read_bytes()[:-8])
    assert "plain-00003.npy" in (m := opening(broken, "plain")) and "truncated" in m
    path.write_bytes(b"not an npy file at all")
    assert "plain-00003.npy: bad .npy header: not a .npy file" in opening(broken, "plain")
    for k, rows in enumerate([700, 700, 700, 140]):
        np.save(broken / f"plain-{k:05d}.npy", np.asfortranarray(np.zeros((rows, 3))))
    assert "plain-00000.npy: Fortran-ordered" in opening(broken, "plain")
    for k, rows in enumerate([700, 700, 700, 140]):
        np.save(broken / f"plain-{k:05d}.npy", np.array([None] * rows, dtype=object),
                allow_pickle=True)
    assert "plain-00000.npy: holds Python objects" in opening(broken, "plain")


def test_a_family_other_than_metadata_records_is_named(broken, whole):
    # Consistent files, but not what `attach` recorded: another dtype …
    for k, rows in enumerate([700, 700, 700, 140]):
        np.save(broken / f"embeddings-{k:05d}.npy", np.zeros((rows, 8), np.float64))
    message = opening(broken, "embeddings")
    assert ("embeddings-00000.npy: dtype '<f8' (8,), but metadata.db records '<f4' (8,)"
            in message)
    # … another trailing shape …
    for k, rows in enumerate([700, 700, 700, 140]):
        np.save(broken / f"embeddings-{k:05d}.npy", np.zeros((rows, 4), np.float32))
    assert "but metadata.db records '<f4' (8,)" in opening(broken, "embeddings")
    # … the same rows rewritten with a longer header (bytes differ) …
    source = whole["embeddings"]
    for k, (a, z) in enumerate([(0, 700), (700, 1400), (1400, 2100), (2100, 2240)]):
        header = repr({"descr": "<f4", "fortran_order": False, "shape": (z - a, 8)})
        header = header.ljust(192 - 10 - 1).encode() + b"\n"
        (broken / f"embeddings-{k:05d}.npy").write_bytes(
            b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header
            + source[a:z].tobytes())
    assert np.array_equal(np.load(broken / "embeddings-00001.npy"), source[700:1400])
    assert "embeddings-00000.npy: 22592 bytes, but metadata.db records 22528" in \
        opening(broken, "embeddings")
    # … or records that do not pair with the shards.
    with sqlite3.connect(broken / "metadata.db") as db:
        db.execute("UPDATE companions SET file_name = 'notes-00009.npy' "
                   "WHERE name = 'notes' AND shard = 3")
    db.close()
    assert "metadata.db: companion notes: records notes-00009.npy, which pairs with no shard" \
        in opening(broken, "notes")


def test_errors_are_pack_errors():
    assert issubclass(CompanionError, PackError)


def test_a_mixture_carries_companion_rows_of_each_source(pack, whole):
    """Two selections of one pack mixed: every batch row has its own source's companion rows,
    as `pack.gather` gives them."""
    from dataset_packer import Mixture

    mix = Mixture([pack.select("depth = 6"), pack.select("depth = 7")], weights=[1, 3],
                  length=1500)
    for batch in mix.batches(256, seed=3, augment=True, companions=["embeddings", "notes"]):
        want = pack.gather(batch["row"], companions=["embeddings", "notes"])
        np.testing.assert_array_equal(batch["embeddings"], want["embeddings"])
        assert batch["notes"].tobytes() == want["notes"].tobytes()
        assert set(np.unique(batch["source"]).tolist()) == {0, 1}
