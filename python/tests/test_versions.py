"""Pack versions in Python: `Pack(path, version=…)` reads a pack as it was, and a resume
state saved before `pack --update` finishes its epoch over the rows it was saved on.

Packs are made and grown by the real binary (d6's 5 runs, 1,220 rows in 300-row shards, then
d7's 5 runs, 1,020 rows, added by `pack --update`); a copy of the pack's folder taken before
each change is what "the pack at that time" is compared with. The binary records the
history (`metadata.db`'s versions tables) on every change.
"""

from __future__ import annotations

import itertools
import json
import pickle
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, cli
from dataset_packer import EmptySelectionError, Mixture, Pack, PackError, VersionError
from dataset_packer._loader import EpochStream, WorkerInfo, partition

from test_loader import needs_torch

RAW = FIXTURES / "raw"
V1_ROWS, V2_ROWS = 1220, 2240

def change(*args) -> None:
    """A command that makes or changes a pack (the binary records the version it makes)."""
    cli(*args, "--quiet")


def tag(pack: Path, name: str, version: int) -> None:
    cli("tag", pack, name, "--version", version)


def unversion(pack: Path) -> None:
    """Makes the pack one from before versions: no pack_id, no history tables."""
    with sqlite3.connect(pack / "metadata.db") as db:
        db.execute("DELETE FROM session WHERE meta_key = 'pack_id'")
        for table in ("versions", "version_files", "version_sources", "version_tags"):
            db.execute(f"DROP TABLE IF EXISTS {table}")
    db.close()


def grow(tmp_path, *flags):
    """A pack of the d6 runs, and the raw folder it was packed from."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in (RAW / "d6_10g_v1").iterdir():
        shutil.copy(f, raw)
    pack = tmp_path / "pack"
    change("pack", "--input", raw, "--output", pack, "--shard-rows", 300, *flags)
    return pack, raw


def snapshot(pack: Path, name: str) -> Path:
    """A copy of the pack's folder as it is now."""
    copy = pack.parent / name
    shutil.copytree(pack, copy)
    return copy


def update(pack: Path, raw: Path, *flags) -> None:
    """`pack --update` with the d7 runs added to the raw folder."""
    for f in (RAW / "d7_10g_v1").iterdir():
        shutil.copy(f, raw)
    change("pack", "--input", raw, "--output", pack, "--update",
        "--shard-rows", 300, *flags)


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """(pack after the update, copy of it before): version 1 = 1,220 rows, 2 = 2,240."""
    tmp = tmp_path_factory.mktemp("grown")
    pack, raw = grow(tmp, "--search-stats")
    before = snapshot(pack, "before")
    update(pack, raw, "--search-stats")
    return pack, before


def rows_of(batches) -> np.ndarray:
    return np.concatenate([b["row"] for b in batches])


def same_batch(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


# ---------------------------------------------------------------------- reading a version

def test_an_old_version_reads_as_the_pack_did(grown):
    pack, before = grown
    old, then = Pack(pack, version=1), Pack(before)
    assert (old.version, len(old), old.num_runs) == (1, V1_ROWS, 5)
    assert old.pack_id == Pack(pack).pack_id == then.pack_id and len(old.pack_id) == 32
    assert [p.name for p in old.shards] == [p.name for p in then.shards]
    assert old.rows(slice(None)).tobytes() == then.rows(slice(None)).tobytes()
    for run_id in range(5):
        assert old.run(run_id).tobytes() == then.run(run_id).tobytes()
    with pytest.raises(KeyError, match="no run 7 .* version 1"):
        old.run(7)
    for a, b in zip(old.batches(100, seed=4, epoch=1, augment=True, companions=["search"]),
                    then.batches(100, seed=4, epoch=1, augment=True, companions=["search"])):
        same_batch(a, b)
    assert old.companions == then.companions == ["search"]
    np.testing.assert_array_equal(old.companion("search")[:], then.companion("search")[:])
    for a, b in zip(old.windows(16, 8, seed=1), then.windows(16, 8, seed=1)):
        same_batch(a, b)
    np.testing.assert_array_equal(old.select("1 = 1").run_ids, np.arange(5))
    # The current version holds both.
    now = Pack(pack)
    assert (now.version, len(now), now.num_runs) == (2, V2_ROWS, 10)
    assert now.rows(slice(0, V1_ROWS)).tobytes() == then.rows(slice(None)).tobytes()
    assert Pack(pack, version="latest").version == Pack(pack, version=2).version == 2
    assert "version 1 of 2" in repr(old)
    assert (old.session["total_rows"], old.session["total_runs"], old.session["shard_count"]) \
        == (str(V1_ROWS), "5", "5") == tuple(then.session[k] for k in
                                              ("total_rows", "total_runs", "shard_count"))


def test_a_version_travels_to_workers_as_a_number(grown):
    pack, _ = grown
    old = pickle.loads(pickle.dumps(Pack(pack, version=1)))
    assert (old.version, len(old)) == (1, V1_ROWS)


def test_splits_are_stable_across_versions(grown):
    pack, before = grown
    old, now = Pack(pack, version=1), Pack(pack)
    checked = 0
    for seed in range(8):
        try:
            parts = old.split(0.5, seed=seed)
        except EmptySelectionError:  # 5 runs: a side may be empty
            continue
        for a, b, c in zip(parts, now.split(0.5, seed=seed),
                           Pack(before).split(0.5, seed=seed)):
            np.testing.assert_array_equal(a.run_ids, c.run_ids)
            np.testing.assert_array_equal(a.run_ids, b.run_ids[b.run_ids < 5])
        checked += 1
    assert checked >= 3


def test_versions_lists_the_history(grown):
    pack, _ = grown
    listed = Pack(pack).versions()
    assert [(v["version"], v["operation"], v["rows"], v["runs"]) for v in listed] == [
        (1, "pack", V1_ROWS, 5), (2, "update", V2_ROWS, 10)]
    first, second = listed
    assert first["families"] == second["families"] == ["search"]
    steps = [f for f in first["files"] if f["family"] == "steps"]
    assert [(f["file_name"], f["rows"]) for f in steps] == [
        (f"steps-{k:05d}.npy", 300) for k in range(4)] + [("steps-00004.npy", 20)]
    assert sum(f["rows"] for f in second["files"] if f["family"] == "steps") == V2_ROWS
    assert Path(second["command"][0]).name == "dataset-packer"
    assert second["command"][1] == "pack" and "--update" in second["command"]
    assert first["tags"] == [] and first["sources"] == []
    assert first["created_utc"].endswith("Z")


def test_unknown_versions_and_tags_are_refused_naming_what_there_is(grown, tmp_path):
    pack, _ = grown
    with pytest.raises(VersionError, match=rf"{pack} has no version 3: it has versions 1..2"):
        Pack(pack, version=3)
    with pytest.raises(VersionError, match="has no version tagged 'nightly'"):
        Pack(pack, version="nightly")
    with pytest.raises(TypeError):
        Pack(pack, version=1.5)


def test_tags_name_versions(tmp_path):
    pack, raw = grow(tmp_path)
    update(pack, raw)
    tag(pack, "first", 1)
    tag(pack, "paper", 2)
    assert Pack(pack, version="first").version == 1
    assert len(Pack(pack, version="paper")) == V2_ROWS
    assert [v["tags"] for v in Pack(pack).versions()] == [["first"], ["paper"]]
    assert Pack(pack, version="2").version == 2
    with pytest.raises(VersionError, match="tags first = 1, paper = 2"):
        Pack(pack, version="final")


def test_a_pack_without_history_is_version_1_of_itself(packs, tmp_path):
    shutil.copytree(packs["plain"], tmp_path / "plain")
    unversion(tmp_path / "plain")
    plain = Pack(tmp_path / "plain")
    assert (plain.version, plain.pack_id) == (1, None)
    listed = plain.versions()
    assert len(listed) == 1 and listed[0]["rows"] == len(plain)
    assert listed[0]["runs"] == plain.num_runs
    assert (listed[0]["operation"], listed[0]["command"], listed[0]["tags"]) == ("pack", [], [])
    assert [(f["family"], f["file_name"], f["rows"]) for f in listed[0]["files"]] == [
        ("steps", "steps.npy", len(plain))]
    assert len(Pack(tmp_path / "plain", version=1)) == len(plain)
    with pytest.raises(VersionError, match="version 1 only"):
        Pack(tmp_path / "plain", version=2)


def test_a_family_detached_later_is_refused_naming_the_version(tmp_path):
    pack, raw = grow(tmp_path)
    embeddings = np.arange(V1_ROWS * 3, dtype=np.float32).reshape(V1_ROWS, 3)
    np.save(tmp_path / "emb.npy", embeddings)
    change("attach", pack, "--name", "emb", "--from", tmp_path / "emb.npy")
    attached = snapshot(pack, "attached")
    update(pack, raw, "--drop-companion", "emb")
    v2 = Pack(pack, version=2)
    assert v2.companions == ["emb"]
    with pytest.raises(VersionError, match="'emb' .* at version 2 was detached in version 3"):
        v2.companion("emb")
    with pytest.raises(VersionError, match="detached in version 3"):
        next(v2.batches(10, companions=["emb"]))
    # Its rows still read, as they were.
    assert v2.rows(slice(None)).tobytes() == Pack(attached).rows(slice(None)).tobytes()
    np.testing.assert_array_equal(Pack(attached).companion("emb")[:], embeddings)
    with pytest.raises(KeyError, match="attached in version 2"):
        Pack(pack, version=1).companion("emb")
    assert Pack(pack, version=1).companions == [] and Pack(pack).companions == []
    # Attached again after the update: version 2's rows are not these.
    np.save(tmp_path / "again.npy", np.zeros((V2_ROWS, 3), dtype=np.float32))
    change("attach", pack, "--name", "emb", "--from", tmp_path / "again.npy")
    with pytest.raises(VersionError, match="detached in version 3"):
        Pack(pack, version=2).companion("emb")
    assert Pack(pack).companion("emb")[:].sum() == 0


def test_a_version_that_does_not_match_the_files_is_refused(tmp_path):
    pack, raw = grow(tmp_path)
    for f in (RAW / "d7_10g_v1").iterdir():
        shutil.copy(f, raw)
    cli("pack", "--input", raw, "--output", pack, "--update", "--shard-rows", 300, "--quiet")
    # As if grown by a tool that records no version: the history's latest is not the pack.
    with sqlite3.connect(pack / "metadata.db") as db:
        db.execute("DELETE FROM versions WHERE version = 2")
        db.execute("DELETE FROM version_files WHERE version = 2")
    db.close()
    with pytest.raises(PackError, match="records 1220 rows and 5 runs for version 1, but the "
                                        "pack holds 2240 rows"):
        Pack(pack)


# ---------------------------------------------------------------------- resume across growth

EPOCH, SEED, BATCH, WORLD, WORKERS = 2, 3, 61, 2, 2  # 1,220 rows: 10 steps of 2 × 61


def loader_of(stream, rank: int, state=None):
    """A rank's batches as a DataLoader with WORKERS workers yields them: round-robin over
    the workers' iterations (each from `state` when given, as StatefulDataLoader does)."""
    parts = [partition(WorkerInfo(w, WORKERS), rank, WORLD) for w in range(WORKERS)]
    runs = [iter(stream.iteration(p)) for p in parts]
    for group in itertools.zip_longest(*runs):
        yield from (b for b in group if b is not None)


def steps(per_rank: list[list[dict]]) -> list[dict]:
    """The ranks' batches in epoch order: step j is rank 0's batch j, then rank 1's."""
    return [b for step in zip(*per_rank) for b in step]


@pytest.mark.parametrize("taken", [0, 1, 4, 9, 10])
def test_a_resume_after_an_update_finishes_the_saved_epoch_exactly(tmp_path, taken):
    pack, raw = grow(tmp_path)
    before = snapshot(pack, "before")
    options = dict(shuffle=True, seed=SEED, augment=True)
    stream = EpochStream(Pack(pack), BATCH, **options)
    stream.set_epoch(EPOCH)
    seen = [list(itertools.islice(loader_of(stream, r), taken)) for r in range(WORLD)]
    state = stream.state_dict(batches=taken, world_size=WORLD)  # what PackLoader saves
    assert state["start_sample"] == taken * BATCH * WORLD
    assert (state["version"], state["rows"]) == (1, V1_ROWS)
    update(pack, raw)

    again = EpochStream(Pack(pack), BATCH, **options)
    again.load_state_dict(state)
    rest = [list(loader_of(again, r)) for r in range(WORLD)]
    rows = rows_of(steps(seen) + steps(rest))
    # Exactly one epoch of the old version: every row once, none of the new rows …
    assert np.array_equal(np.sort(rows), np.arange(V1_ROWS))
    # … each rank's batches as they were then: the same rows, order, symmetries and bytes.
    then = Pack(before)
    for r in range(WORLD):
        want = list(then.batches(BATCH, rank=r, world_size=WORLD, epoch=EPOCH, **options))
        assert len(seen[r]) + len(rest[r]) == len(want)
        for a, b in zip(seen[r] + rest[r], want):
            same_batch(a, b)
    # A state taken during the resumed epoch still names the version it reads.
    mid = again.state_dict(batches=0, world_size=WORLD)
    assert (mid["version"], mid["rows"], mid["pack_id"]) == (1, V1_ROWS, state["pack_id"])
    # The next epoch reads the grown pack.
    again.set_epoch(EPOCH + 1)
    nxt = rows_of(steps([list(loader_of(again, r)) for r in range(WORLD)]))
    assert set(nxt.tolist()) == set(range(V2_ROWS))
    assert again.state_dict()["version"] == 2


def test_worker_states_resume_across_an_update(tmp_path):
    """Each worker's own state (what StatefulDataLoader keeps), saved mid-epoch at version 1
    and restored in the workers of a reader of version 2."""
    pack, raw = grow(tmp_path)
    before = snapshot(pack, "before")
    stream = EpochStream(Pack(pack), BATCH, seed=SEED)
    stream.set_epoch(EPOCH)
    parts = [partition(WorkerInfo(w, WORKERS), 1, WORLD) for w in range(WORKERS)]
    runs = [stream.iteration(p) for p in parts]
    its = [iter(r) for r in runs]
    taken = [next(its[k % WORKERS])["row"] for k in range(3)]
    states = [r.state_dict() for r in runs]
    assert all(s["version"] == 1 and s["rows"] == V1_ROWS for s in states)
    update(pack, raw)
    again = EpochStream(Pack(pack), BATCH, seed=SEED)
    again.set_epoch(7)
    resumed = [again.iteration(p, s) for p, s in zip(parts, states)]
    order = resumed[3 % WORKERS:] + resumed[:3 % WORKERS]
    rest = [b["row"] for group in itertools.zip_longest(*map(iter, order)) for b in group
            if b is not None]
    want = [b["row"] for b in Pack(before).batches(BATCH, seed=SEED, epoch=EPOCH, rank=1,
                                                   world_size=WORLD)]
    assert len(taken + rest) == len(want)
    for a, b in zip(taken + rest, want):
        np.testing.assert_array_equal(a, b)


def test_pack_batches_resume_point_reads_the_saved_version(grown):
    pack, before = grown
    saved = Pack(before).identity
    assert saved == {"pack_id": Pack(pack).pack_id, "version": 1, "rows": V1_ROWS}
    got = list(Pack(pack).batches(BATCH, seed=SEED, epoch=1, start_sample=610,
                                  saved_at=saved, companions=["search"]))
    want = list(Pack(before).batches(BATCH, seed=SEED, epoch=1, start_sample=610,
                                     companions=["search"]))
    assert len(got) == len(want) == 10
    for a, b in zip(got, want):
        same_batch(a, b)
    got = list(Pack(pack).windows(8, 16, seed=SEED, start_sample=20, saved_at=saved))
    want = list(Pack(before).windows(8, 16, seed=SEED, start_sample=20))
    for a, b in zip(got, want):
        same_batch(a, b)
    # Saved at the reader's own version: the reader's epoch.
    now = Pack(pack)
    same_batch(next(now.batches(BATCH, seed=1, saved_at=now.identity)),
               next(now.batches(BATCH, seed=1)))


def test_a_selection_resumes_over_the_runs_it_had(tmp_path):
    """A split made at version 2 holds runs of both versions; a state saved at version 1
    with that version's split finishes over the version-1 runs of the split (the same
    ones: a run's side never changes)."""
    pack, raw = grow(tmp_path)
    before = snapshot(pack, "before")
    train = Pack(pack).split(0.4, seed=1)[0]
    stream = EpochStream(train.pack, 50, seed=SEED, select=train)
    stream.set_epoch(1)
    state = stream.state_dict(batches=3)
    update(pack, raw)
    grown_train = Pack(pack).split(0.4, seed=1)[0]
    assert grown_train.num_runs > train.num_runs
    again = EpochStream(grown_train.pack, 50, seed=SEED, select=grown_train)
    again.load_state_dict(state)
    got = rows_of(again.batches(partition(None, None, None)))
    then = Pack(before)
    want = rows_of(then.batches(50, seed=SEED, epoch=1, start_sample=150,
                                select=then.split(0.4, seed=1)[0]))
    np.testing.assert_array_equal(got, want)


def test_a_mixture_resumes_each_source_at_its_version(tmp_path, packs):
    pack, raw = grow(tmp_path)
    before = snapshot(pack, "before")
    other = Pack(packs["sharded"])
    stream = EpochStream(Mixture([Pack(pack), other]), 50, seed=1)
    stream.set_epoch(1)
    state = stream.state_dict(batches=7)
    assert [s["version"] for s in state["sources"]] == [1, 1]
    assert [s["rows"] for s in state["sources"]] == [V1_ROWS, len(other)]
    update(pack, raw)
    grown_mix = Mixture([Pack(pack), other])
    assert len(grown_mix) == V2_ROWS + len(other)
    again = EpochStream(grown_mix, 50, seed=1)
    again.load_state_dict(state)
    got = list(again.batches(partition(None, None, None)))
    want = list(Mixture([Pack(before), other]).batches(50, seed=1, epoch=1, start_sample=350))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a["row"], b["row"])
        np.testing.assert_array_equal(a["source"], b["source"])
        np.testing.assert_array_equal(a["exps"], b["exps"])
    assert again.state_dict()["sources"][0]["version"] == 1
    got = list(grown_mix.batches(50, seed=1, epoch=1, start_sample=350,
                                 saved_at={"sources": state["sources"]}))
    assert [b["row"].tolist() for b in got] == [b["row"].tolist() for b in want]
    again.set_epoch(2)
    assert again.state_dict()["sources"][0]["version"] == 2
    assert again._items() == len(grown_mix)


# ---------------------------------------------------------------------- refusals

def test_states_of_another_pack_or_a_rewritten_one_are_refused(tmp_path):
    pack, raw = grow(tmp_path)
    stream = EpochStream(Pack(pack), BATCH, seed=SEED)
    stream.set_epoch(0)
    state = stream.state_dict(batches=5)
    pack_id = state["pack_id"]
    update(pack, raw)
    grown_stream = EpochStream(Pack(pack), BATCH, seed=SEED)
    with pytest.raises(VersionError, match=rf"saved on pack {pack_id}@7, 1220 rows, but .* is "
                                           rf"{pack_id}@2, 2240 rows: its history holds no "
                                           r"version 7 \(it has versions 1..2"):
        grown_stream.load_state_dict(dict(state, version=7))
    with pytest.raises(VersionError, match="its version 1 has 1220 rows; the pack was "
                                           "rewritten"):
        grown_stream.load_state_dict(dict(state, rows=1000))
    with pytest.raises(VersionError, match=r"saved on pack unversioned@1, 1220 rows"):
        grown_stream.load_state_dict(dict(state, pack_id=None))
    # `pack --overwrite` makes a new pack: another pack_id.
    change("pack", "--input", raw, "--output", pack, "--shard-rows", 300,
        "--overwrite")
    new = Pack(pack)
    assert new.pack_id != pack_id and new.version == 1
    with pytest.raises(VersionError, match=rf"saved on pack {pack_id}@1, 1220 rows, but "
                                           rf".* is {new.pack_id}@1, 2240 rows: it is "
                                           "another pack"):
        EpochStream(new, BATCH, seed=SEED).load_state_dict(state)
    with pytest.raises(VersionError, match="another pack"):
        Pack(pack).batches(BATCH, start_sample=610, saved_at=state)


def test_a_state_saved_before_an_unrecorded_update_is_refused(tmp_path):
    """A pack without history grown by a tool that records none: the state's rows are not
    the pack's, and nothing says which they were."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in (RAW / "d6_10g_v1").iterdir():
        shutil.copy(f, raw)
    pack = tmp_path / "pack"
    cli("pack", "--input", raw, "--output", pack, "--shard-rows", 300, "--quiet")
    unversion(pack)
    stream = EpochStream(pack, BATCH, seed=SEED)
    state = stream.state_dict(batches=5)
    assert (state["pack_id"], state["version"], state["rows"]) == (None, 1, V1_ROWS)
    EpochStream(pack, BATCH, seed=SEED).load_state_dict(state)
    for f in (RAW / "d7_10g_v1").iterdir():
        shutil.copy(f, raw)
    cli("pack", "--input", raw, "--output", pack, "--update", "--shard-rows", 300, "--quiet")
    unversion(pack)  # grown by a tool that records no versions
    grown_stream = EpochStream(pack, BATCH, seed=SEED)
    with pytest.raises(VersionError, match=r"saved on pack unversioned@1, 1220 rows, but "
                                           r".* is unversioned@1, 2240 rows"):
        grown_stream.load_state_dict(state)
    with pytest.raises(VersionError, match="1220 rows"):
        grown_stream.iteration(partition(None, None, None), state)
    with pytest.raises(VersionError, match="1220 rows"):
        Pack(pack).windows(8, 61, seed=3, start_sample=610, saved_at=state)


def test_a_mixture_state_must_match_the_mixture(tmp_path, packs):
    pack, _ = grow(tmp_path)
    one = EpochStream(Pack(pack), 50).state_dict()
    mix = EpochStream(Mixture([Pack(pack), Pack(packs["sharded"])]), 50)
    with pytest.raises(VersionError, match="saved on one pack"):
        mix.load_state_dict(one)
    with pytest.raises(VersionError, match="mixture of 1 sources; this one has 2"):
        mix.load_state_dict(dict(mix.state_dict(), sources=mix.state_dict()["sources"][:1]))


def test_a_state_without_identity_is_warned_about(tmp_path):
    pack, _ = grow(tmp_path)
    stream = EpochStream(pack, 61, seed=3)
    with pytest.warns(UserWarning, match="no pack identity"):
        stream.load_state_dict({"epoch": 1, "start_sample": 122, "seed": 3})
    got = rows_of(stream.batches(partition(None, None, None)))
    want = rows_of(Pack(pack).batches(61, seed=3, epoch=1))
    np.testing.assert_array_equal(got, want[122:])


# ---------------------------------------------------------------------- with torch

@needs_torch
def test_packloader_with_workers_and_ranks_resumes_across_an_update(tmp_path):
    from dataset_packer.torch import PackDataset, PackLoader

    pack, raw = grow(tmp_path)
    before = snapshot(pack, "before")
    loaders = [PackLoader(PackDataset(pack, BATCH, seed=SEED, rank=r, world_size=WORLD),
                          num_workers=WORKERS) for r in range(WORLD)]
    seen = []
    for loader in loaders:
        loader.dataset.set_epoch(EPOCH)
        seen.append([b["row"].numpy() for b in itertools.islice(loader, 4)])
    states = [loader.state_dict() for loader in loaders]
    assert states[0] == states[1] and states[0]["version"] == 1
    update(pack, raw)
    rest = []
    for r in range(WORLD):
        loader = PackLoader(PackDataset(pack, BATCH, seed=SEED, rank=r, world_size=WORLD),
                            num_workers=WORKERS)
        loader.load_state_dict(states[r])
        rest.append([b["row"].numpy() for b in loader])
    rows = np.concatenate([b for step in zip(*seen) for b in step] +
                          [b for step in zip(*rest) for b in step])
    want = rows_of(Pack(before).batches(BATCH * WORLD, seed=SEED, epoch=EPOCH))
    np.testing.assert_array_equal(rows, want)
    assert np.array_equal(np.sort(rows), np.arange(V1_ROWS))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_persistent_worker_sees_the_saved_version_and_then_its_own(tmp_path, method):
    """A worker started before the state is loaded (persistent_workers=True) reads the
    saved version for the saved epoch, and the grown pack for the next."""
    import multiprocessing

    from test_loader import _persistent_worker

    pack, raw = grow(tmp_path)
    before = snapshot(pack, "before")
    state = EpochStream(Pack(pack), 100, seed=SEED).state_dict()
    state = dict(state, epoch=1, start_sample=300)
    update(pack, raw)
    context = multiprocessing.get_context(method)
    stream = EpochStream(Pack(pack), 100, seed=SEED)
    commands, results = context.Queue(), context.Queue()
    worker = context.Process(target=_persistent_worker, args=(stream, commands, results))
    worker.start()
    try:
        part = partition(WorkerInfo(1, 2), None, None)
        stream.load_state_dict(state)
        commands.put(part)
        want = [b["row"].tolist() for b in Pack(before).batches(
            100, seed=SEED, epoch=1, start_sample=300, worker=1, num_workers=2)]
        assert results.get(timeout=60) == want
        stream.set_epoch(2)
        commands.put(part)
        want = [b["row"].tolist() for b in Pack(pack).batches(
            100, seed=SEED, epoch=2, worker=1, num_workers=2)]
        assert results.get(timeout=60) == want
    finally:
        commands.put(None)
        worker.join(60)


def test_python_m_dataset_packer_names_the_version(grown):
    import subprocess
    import sys

    pack, _ = grown
    out = subprocess.run([sys.executable, "-m", "dataset_packer", str(pack), "--json"],
                         capture_output=True, text=True, check=True).stdout
    found = json.loads(out)
    assert (found["pack_id"], found["version"], found["versions"], found["rows"]) == (
        Pack(pack).pack_id, 2, 2, V2_ROWS)
    text = subprocess.run([sys.executable, "-m", "dataset_packer", str(pack)],
                          capture_output=True, text=True, check=True).stdout
    assert f"version     {Pack(pack).pack_id}@2 (2 versions)" in text


# ---------------------------------------------------------------------- the binary's history

def test_python_and_the_cli_list_the_same_history(tmp_path):
    pack, raw = grow(tmp_path, "--search-stats")
    update(pack, raw, "--search-stats")
    tag(pack, "first", 1)
    d7 = tmp_path / "d7"
    cli("pack", "--input", RAW / "d7_10g_v1", "--output", d7, "--shard-rows", 300, "--quiet")
    d6 = tmp_path / "d6"
    cli("pack", "--input", RAW / "d6_10g_v1", "--output", d6, "--shard-rows", 300, "--quiet")
    merged = tmp_path / "merged"
    cli("merge", "--input", d6, "--input", d7, "--output", merged, "--quiet")
    for path in (pack, merged):
        listed = json.loads(cli("versions", path, "--json"))
        assert listed["pack_id"] == Pack(path).pack_id
        assert Pack(path).versions() == listed["versions"]
    # Lineage: the merged pack names the packs it was made from.
    (made,) = Pack(merged).versions()
    assert made["operation"] == "merge"
    assert [(s["pack_id"], s["version"]) for s in made["sources"]] == [
        (Pack(d6).pack_id, 1), (Pack(d7).pack_id, 1)]
    assert Pack(merged).pack_id not in (Pack(d6).pack_id, Pack(d7).pack_id)


def test_detach_makes_a_version_whose_predecessor_keeps_its_rows(tmp_path):
    pack, _ = grow(tmp_path)
    np.save(tmp_path / "emb.npy", np.ones((V1_ROWS, 2), dtype=np.float32))
    cli("attach", pack, "--name", "emb", "--from", tmp_path / "emb.npy", "--quiet")
    cli("detach", pack, "--name", "emb")
    assert [(v["version"], v["operation"], v["families"]) for v in Pack(pack).versions()] == [
        (1, "pack", []), (2, "attach", ["emb"]), (3, "detach", [])]
    attached = Pack(pack, version=2)
    with pytest.raises(VersionError, match="detached in version 3"):
        attached.companion("emb")
    assert attached.rows(slice(None)).tobytes() == Pack(pack).rows(slice(None)).tobytes()
    # Same rows in every version: a state of any of them resumes on the reader's own.
    state = dict(EpochStream(attached, BATCH, seed=SEED).state_dict(), start_sample=122)
    assert state["version"] == 2
    stream = EpochStream(Pack(pack), BATCH, seed=SEED)
    stream.load_state_dict(state)
    assert stream.state_dict()["version"] == 3


def test_the_first_change_of_a_pack_from_before_versions(tmp_path):
    """Its first in-place change records version 1 (the pack before) and 2, and gives it a
    pack_id; a state saved before names no pack_id, and finishes its epoch on that version 1
    (the rows it was saved on), as a state of a recorded version would."""
    pack, raw = grow(tmp_path)
    unversion(pack)
    before = snapshot(pack, "before")
    state = EpochStream(Pack(pack), BATCH, seed=SEED).state_dict(batches=5)
    assert (state["pack_id"], state["version"], state["rows"]) == (None, 1, V1_ROWS)
    update(pack, raw)
    now = Pack(pack)
    assert now.pack_id is not None and now.version == 2
    assert [(v["version"], v["rows"]) for v in now.versions()] == [(1, V1_ROWS), (2, V2_ROWS)]
    old = Pack(pack, version=1)
    assert old.rows(slice(None)).tobytes() == Pack(before).rows(slice(None)).tobytes()
    resumed = EpochStream(now, BATCH, seed=SEED)
    resumed.load_state_dict(state)
    rest = [b["row"] for b in resumed.iteration(partition(None, None, None))]
    want = [b["row"] for b in Pack(before).batches(BATCH, seed=SEED, epoch=state["epoch"],
                                                   start_sample=state["start_sample"])]
    assert len(rest) == len(want) > 0
    for a, b in zip(rest, want):
        np.testing.assert_array_equal(a, b)
    # Rows that are not version 1's are still refused.
    with pytest.raises(VersionError, match=r"saved on pack unversioned@1, 1000 rows, but .* is "
                                           rf"{now.pack_id}@2, 2240 rows"):
        EpochStream(now, BATCH, seed=SEED).load_state_dict(dict(state, rows=1000))


def test_an_old_version_is_what_export_of_that_version_writes(grown, tmp_path):
    pack, _ = grown
    out = tmp_path / "v1"
    cli("export", pack, "--version", 1, "--format", "pack", "--output", out, "--quiet")
    exported, old = Pack(out), Pack(pack, version=1)
    assert exported.rows(slice(None)).tobytes() == old.rows(slice(None)).tobytes()
    np.testing.assert_array_equal(exported.companion("search")[:], old.companion("search")[:])
    assert [(s["pack_id"], s["version"]) for s in exported.versions()[0]["sources"]] == [
        (old.pack_id, 1)]


def test_a_pack_from_before_versions_lists_as_the_cli_lists_it(packs, tmp_path):
    for name in ("sharded", "findings"):
        shutil.copytree(packs[name], tmp_path / name)
        unversion(tmp_path / name)
        listed = json.loads(cli("versions", tmp_path / name, "--json"))
        assert listed["pack_id"] is None and not listed["recorded"]
        assert Pack(tmp_path / name).versions() == listed["versions"]


def test_sql_at_a_version_sees_only_its_runs(grown):
    pack, before = grown
    old, then = Pack(pack, version=1), Pack(before)
    for where in ("max_score >= (SELECT MAX(max_score) FROM runs)",
                  "SELECT run_id FROM run_details WHERE depth = 6",
                  "id IN (SELECT run_id FROM run_index)"):
        np.testing.assert_array_equal(old.select(where).run_ids, then.select(where).run_ids)
    (count,) = old.db().execute("SELECT COUNT(*) FROM runs").fetchone()
    assert count == 5
    # A forked worker re-opens the connection: it is restricted again.
    import multiprocessing

    context = multiprocessing.get_context("fork")
    found = context.Queue()
    child = context.Process(target=_count_runs, args=(old, found))  # inherited, not pickled
    child.start()
    assert found.get(timeout=60) == 5
    child.join(60)
    with pytest.raises(Exception, match="not a run id of the pack"):
        old.select("SELECT 7")


def _count_runs(pack, found) -> None:
    found.put(pack.db().execute("SELECT COUNT(*) FROM runs").fetchone()[0])


def test_a_selection_by_sql_is_made_again_on_the_saved_version(tmp_path):
    """SQL whose result depends on the other runs (here the mean score of the pack) selects
    other old runs once the pack has grown; the saved epoch goes on over the selection the
    SQL made on the saved version."""
    pack, raw = grow(tmp_path)
    before = snapshot(pack, "before")
    where = "max_score * 4 >= (SELECT AVG(max_score) FROM runs)"
    stream = EpochStream(Pack(pack), 40, seed=SEED, select=where)
    stream.set_epoch(1)
    state = stream.state_dict(batches=2)
    then = Pack(before).select(where)
    update(pack, raw)
    grown_selection = Pack(pack).select(where)
    old_runs = grown_selection.run_ids[grown_selection.run_ids < 5]
    assert not np.array_equal(old_runs, then.run_ids)  # the SQL selects otherwise now
    again = EpochStream(Pack(pack), 40, seed=SEED, select=where)
    again.load_state_dict(state)
    got = rows_of(again.batches(partition(None, None, None)))
    want = rows_of(Pack(before).batches(40, seed=SEED, epoch=1, start_sample=80, select=where))
    np.testing.assert_array_equal(got, want)
    # With runs= too, and through Pack.batches' saved_at.
    runs = [0, 1, 2, 3, 4, 6]
    mine = Pack(pack).select(where, runs=runs)
    got = rows_of(Pack(pack).batches(40, seed=SEED, epoch=1, select=mine,
                                     saved_at=Pack(before).identity))
    want = rows_of(Pack(before).batches(40, seed=SEED, epoch=1,
                                        select=Pack(before).select(where, runs=runs[:5])))
    np.testing.assert_array_equal(got, want)
