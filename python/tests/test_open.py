"""Opening packs: facts, the valuation_types.json forms, legacy/shuffled packs, and clear
errors (not a pack, broken shards, a feature that needs the run index, bad SQL)."""

from __future__ import annotations

import json
import pickle
import sqlite3

import subprocess

import numpy as np
import pytest

from conftest import binary, cli, copy_pack
from dataset_packer import (NotAPackError, Pack, PackError, RunIndexError, SelectionError,
                            STEP_ROW_DTYPE)


def test_pack_facts(packs):
    pack = Pack(packs["sharded"])
    assert len(pack) == 2240 and pack.num_runs == 10
    assert pack.valuation_names == ["search", "tuple11", "tuple10", "tuple12"]
    assert [p.name for p in pack.shards] == [f"steps-{i:05d}.npy" for i in range(4)]
    assert pack.session["total_rows"] == "2240" and pack.session["shard_rows"] == "700"
    assert not pack.legacy and not pack.shuffled
    assert Pack(packs["legacy"]).legacy
    assert "2240 rows" in repr(pack)


def test_metadata_is_opened_read_only(packs):
    pack = Pack(packs["plain"])
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        pack.db().execute("DELETE FROM runs")
    with pytest.raises(SelectionError):
        pack.select("1); DELETE FROM runs; SELECT (1")
    assert Pack(packs["plain"]).num_runs == 10


@pytest.mark.parametrize("form", ["array", "id_to_name", "name_to_id"])
def test_all_three_valuation_forms(packs, tmp_path, form):
    dest = copy_pack(packs, "plain", tmp_path)
    names = ["search", "tuple11", "tuple10", "tuple12"]
    text = {"array": names, "id_to_name": {str(i): n for i, n in enumerate(names)},
            "name_to_id": {n: i for i, n in reversed(list(enumerate(names)))}}[form]
    (dest / "valuation_types.json").write_text(json.dumps(text))
    assert Pack(dest).valuation_names == names


def test_not_a_pack(tmp_path, packs):
    with pytest.raises(NotAPackError, match="no such folder"):
        Pack(tmp_path / "nothing")
    with pytest.raises(NotAPackError, match="no metadata.db"):
        Pack(tmp_path)
    dest = copy_pack(packs, "plain", tmp_path)
    (dest / "steps.npy").unlink()
    with pytest.raises(NotAPackError, match="no steps.npy"):
        Pack(dest)


def test_broken_shards_are_named(packs, tmp_path):
    dest = copy_pack(packs, "sharded", tmp_path)
    (dest / "steps-old.npy").write_bytes(b"")
    with pytest.raises(PackError, match="steps-old.npy is named like a shard"):
        Pack(dest)
    (dest / "steps-old.npy").unlink()
    shard = dest / "steps-00001.npy"
    shard.write_bytes(shard.read_bytes()[:-5])
    with pytest.raises(PackError, match="steps-00001.npy: .* truncated"):
        Pack(dest)
    np.save(shard, np.zeros(700, dtype=np.float64))
    with pytest.raises(PackError, match="not the pack's row dtype"):
        Pack(dest)
    shard.unlink()
    with pytest.raises(PackError, match="missing steps-00001.npy"):
        Pack(dest)


def test_a_feature_that_needs_the_run_index(packs):
    no_index = Pack(packs["no_index"])
    assert len(list(no_index.batches(500))) == 5  # whole-pack batches need no run index
    for call in (lambda: no_index.run(0), lambda: no_index.windows(8, 4)):
        with pytest.raises(RunIndexError, match="no run_index table"):
            call()
    # Selecting rows needs no run index: they are found through their run_id.
    rows = np.concatenate([b["row"] for b in no_index.batches(10, select="depth = 6")])
    assert set(no_index.rows(rows)["run_id"].tolist()) == set(range(5))
    shuffled = Pack(packs["shuffled"])
    assert shuffled.shuffled
    with pytest.raises(RunIndexError, match="shuffled pack"):
        shuffled.run(0)
    rows = np.concatenate([b["row"] for b in shuffled.batches(1000, seed=1)])
    assert sorted(rows.tolist()) == list(range(len(shuffled)))


def test_bad_sql_names_the_column(sharded):
    with pytest.raises(SelectionError, match="no column max_scor; did you mean max_score") as e:
        sharded.select("max_scor > 10")
    assert "highest_tile" in str(e.value) and "depth" in str(e.value)
    with pytest.raises(SelectionError, match="is never closed"):
        sharded.select("(depth = 6")
    with pytest.raises(SelectionError, match="syntax error"):
        sharded.select("depth = = 6")
    with pytest.raises(KeyError, match="no run 99"):
        sharded.select(runs=[1, 99])


def test_rows_index_errors(sharded):
    with pytest.raises(IndexError, match="row 2240 is out of range"):
        sharded.rows(2240)
    with pytest.raises(IndexError):
        sharded.rows(np.array([0, -2241]))
    with pytest.raises(TypeError):
        sharded.rows(np.array([0.5]))
    assert sharded.rows(np.array([], dtype=np.int64)).dtype == STEP_ROW_DTYPE
    assert len(sharded.rows(slice(10, 5))) == 0


def test_a_pack_pickles_by_path(sharded):
    again = pickle.loads(pickle.dumps(sharded))
    assert again.path == sharded.path and len(again) == len(sharded)
    sel = pickle.loads(pickle.dumps(sharded.select("depth = 7")))
    assert sel.num_rows == sharded.select("depth = 7").num_rows


def test_legacy_rows_come_back_aligned(packs):
    legacy, sharded = Pack(packs["legacy"]), Pack(packs["sharded"])
    idx = np.random.default_rng(3).integers(0, len(legacy), 300)
    got = legacy.rows(idx)
    assert got.dtype == STEP_ROW_DTYPE and got.dtype.itemsize == 48
    assert got.tobytes() == sharded.rows(idx).tobytes()


def test_a_run_missing_from_the_run_index_is_named(packs, tmp_path):
    dest = copy_pack(packs, "plain", tmp_path)
    with sqlite3.connect(dest / "metadata.db") as db:
        db.execute("DELETE FROM run_index WHERE run_id = 4")
    db.close()
    pack = Pack(dest)
    with pytest.raises(RunIndexError, match="no entry for run 4"):
        pack.batches(10, select="depth = 6")
    with pytest.raises(RunIndexError, match="no entry for run 4"):
        pack.run(4)


def test_python_m_dataset_packer_summarises_packs(packs, tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "dataset_packer", str(packs["plain"]),
                          str(packs["shuffled"]), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    plain, shuffled = (json.loads(line) for line in out.stdout.splitlines())
    db = sqlite3.connect(packs["plain"] / "metadata.db")
    runs, rows, best = db.execute("SELECT COUNT(*), SUM(steps), MAX(max_score) FROM runs"
                                  ).fetchone()
    assert (plain["runs"], plain["rows"], plain["max_score"]["max"]) == (runs, rows, best)
    assert sum(d["rows"] for d in plain["depths"]) == rows
    assert [d["depth"] for d in plain["depths"]] == [6, 7]
    assert shuffled["shuffled"] and not plain["shuffled"]
    text = subprocess.run([sys.executable, "-m", "dataset_packer", str(packs["plain"])],
                          capture_output=True, text=True, check=True).stdout
    assert f"{rows:,} in 1 shard" in text and "depth 6" in text
    bad = subprocess.run([sys.executable, "-m", "dataset_packer", str(tmp_path)],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "is not a pack" in bad.stderr


def _with_header(shard, dict_text: str, version=(1, 0), pad_to=None):
    """Rewrites a 384-byte-header shard with another header over the same rows."""
    data = shard.read_bytes()[384:]
    encoded = dict_text.encode("utf-8" if version == (3, 0) else "latin-1")
    prefix = 10 if version == (1, 0) else 12
    length = pad_to or -(-(prefix + len(encoded) + 1) // 64) * 64 - prefix
    text = encoded + b" " * (length - len(encoded) - 1) + b"\n"
    size = len(text).to_bytes(prefix - 8, "little")
    shard.write_bytes(b"\x93NUMPY" + bytes(version) + size + text + data)


def test_headers_are_read_by_the_rules_the_cli_follows(packs, tmp_path):
    from dataset_packer._format import STEP_ROW_DTYPE
    dest = copy_pack(packs, "plain", tmp_path)
    with sqlite3.connect(dest / "metadata.db") as db:
        db.execute("DROP TABLE shards")  # another tool's pack: no checksums to fail first
    db.close()
    shard = dest / "steps.npy"
    rows = len(Pack(dest))
    descr = repr(np.lib.format.dtype_to_descr(STEP_ROW_DTYPE))
    # Read as NumPy reads them: key order, quotes, versions 2.0 and 3.0, a long header.
    for text, version, pad_to in [
            (f'{{"shape": ({rows},), "fortran_order": False, "descr": {descr}}}', (1, 0), None),
            (f"{{'descr': {descr}, 'fortran_order': False, 'shape': (({rows},)), }}", (2, 0), None),
            (f"{{'descr': {descr}, 'fortran_order': False, 'shape': ({rows},), }}", (3, 0), None),
            (f"{{'descr': {descr}, 'fortran_order': False, 'shape': ({rows},), }}", (1, 0), 5000)]:
        _with_header(shard, text, version, pad_to)
        assert len(Pack(dest)) == rows == len(np.load(shard, mmap_mode="r"))
        assert f"{rows:,} rows read" in cli("stats", dest)
    # Refused with the CLI's words, naming the key (NumPy reads the first two silently).
    for text, words in [
            (f"{{'descr': {descr}, 'fortran_order': False, 'shape': ({rows},), "
             f"'shape': ({rows // 2},)}}",
             f"key 'shape' is given twice, as ({rows},) and as ({rows // 2},)"),
            (f"{{'descr': {descr}, 'descr': '<f8', 'fortran_order': False, 'shape': ({rows},)}}",
             "key 'descr' is given twice"),
            (f"{{'descr': {descr}, 'fortran_order': False, 'shape': ({rows},), 'x': 1}}",
             "key 'x' is not one of 'descr', 'fortran_order' and 'shape'"),
            (f"{{'descr': {descr}, 'fortran_order': False, 'shape': [{rows}]}}",
             f"'shape': [{rows}] is not a tuple of lengths"),
            (f"{{'descr': {descr}, 'fortran_order': False, 'shape': ({rows})}}",
             f"'shape': {rows} is not a tuple of lengths"),
            (f"{{'descr': {descr.replace(chr(39) + 'run_id' + chr(39), '1')}, "
             f"'fortran_order': False, 'shape': ({rows},)}}",
             "field name 1"),
            (f"{{'descr': {descr.replace(chr(39) + 'seed' + chr(39), '(' + repr('t') + ', ' + repr('seed') + ')')}, "
             f"'fortran_order': False, 'shape': ({rows},)}}",
             "has a title")]:
        _with_header(shard, text)
        with pytest.raises(PackError) as refused:
            Pack(dest)
        message = str(refused.value)
        assert f"{shard}: bad .npy header: " in message and words in message, message
        out = subprocess.run([str(binary()), "stats", str(dest)], capture_output=True, text=True)
        assert out.returncode == 1
        assert message.split("bad .npy header: ", 1)[1] in out.stderr, (message, out.stderr)
