"""Pack identity in resume states: a state saved before `pack --update` is not resumed
silently on the grown pack (its epoch order is another one)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import FIXTURES, cli
from dataset_packer import Mixture, Pack, VersionError
from dataset_packer._loader import EpochStream, partition

RAW = FIXTURES / "raw"


def grow(tmp_path):
    """A pack of the d6 runs (5 runs, 1,220 rows in 300-row shards), a copy of it as it was,
    and the raw folder to update it from: the pack, the copy, the raw folder."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in (RAW / "d6_10g_v1").iterdir():
        shutil.copy(f, raw)
    pack = tmp_path / "pack"
    cli("pack", "--input", raw, "--output", pack, "--shard-rows", 300, "--quiet")
    before = tmp_path / "before"
    shutil.copytree(pack, before)
    return pack, before, raw


def update(pack, raw):
    """`pack --update` with the d7 runs added to the raw folder (5 runs, 1,020 rows)."""
    for f in (RAW / "d7_10g_v1").iterdir():
        shutil.copy(f, raw)
    cli("pack", "--input", raw, "--output", pack, "--update", "--shard-rows", 300, "--quiet")


def test_a_state_saved_before_an_update_is_refused_after_it(tmp_path):
    pack, _, raw = grow(tmp_path)
    stream = EpochStream(pack, 61, seed=3)
    stream.set_epoch(0)
    state = stream.state_dict(batches=10)
    assert state["start_sample"] == 610 and state["rows"] == 1220
    assert state["version"] == Pack(pack).version
    assert state["pack_id"] == Pack(pack).pack_id
    # Unchanged: it resumes.
    EpochStream(pack, 61, seed=3).load_state_dict(state)
    update(pack, raw)
    grown = EpochStream(pack, 61, seed=3)
    with pytest.raises(VersionError, match=r"saved on pack .*@1, 1220 rows, but .* is "
                                           r".*@\d+, 2240 rows"):
        grown.load_state_dict(state)
    with pytest.raises(VersionError, match="1220 rows"):
        grown.iteration(partition(None, None, None), state)
    with pytest.raises(VersionError, match="1220 rows"):
        Pack(pack).batches(61, seed=3, start_sample=610, saved_at=state)
    with pytest.raises(VersionError, match="1220 rows"):
        Pack(pack).windows(8, 61, seed=3, start_sample=610, saved_at=state)
    mixed = Mixture([Pack(pack), Pack(tmp_path / "before")])
    with pytest.raises(VersionError, match="1220 rows"):
        mixed.batches(61, saved_at={"sources": [state, state]})


def test_a_mixture_state_records_each_source(tmp_path):
    pack, before, raw = grow(tmp_path)
    mixed = EpochStream(Mixture([Pack(pack), Pack(before)]), 50, seed=1)
    state = mixed.state_dict(batches=3)
    assert [s["rows"] for s in state["sources"]] == [1220, 1220]
    update(pack, raw)
    again = EpochStream(Mixture([Pack(pack), Pack(before)]), 50, seed=1)
    with pytest.raises(VersionError, match="2240 rows"):
        again.load_state_dict(state)


def test_a_state_without_identity_is_warned_about(tmp_path):
    pack, _, _ = grow(tmp_path)
    stream = EpochStream(pack, 61, seed=3)
    with pytest.warns(UserWarning, match="no pack identity"):
        stream.load_state_dict({"epoch": 1, "start_sample": 122, "seed": 3})
    got = np.concatenate([b["row"] for b in stream.batches(partition(None, None, None))])
    want = np.concatenate([b["row"] for b in Pack(pack).batches(61, seed=3, epoch=1)])
    np.testing.assert_array_equal(got, want[122:])
