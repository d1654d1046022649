"""A pack in the reference packer's layout (2048former's `crates/dataset-packer`): 46-byte
rows under the header npyz writes (`'<u1'` one-byte fields, a trailing comma in the field
list), a WAL-mode `metadata.db` with only `runs` and an empty `session`, and
`valuation_types.json` as a name → id object. The reader opens it as a legacy pack, leaves no
file beside it, and agrees with what the Rust tool makes of it: `export --format pack` gives
the same rows with `ev_legal` recomputed from the board, which is what the reader's own
`legal_moves` computes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import cli
from dataset_packer import Pack
from dataset_packer._codec import decode_exps, legal_moves

#: The header dict as npyz 0.8 writes it for the reference packer's dtype.
NPYZ_DESCR = ("[('run_id', '<u4'), ('step_index', '<u4'), ('board', '<u8'), "
              "('board_eval', '<i4'), ('tile_65536_mask', '<u2'), ('move_dir', '<u1'), "
              "('valuation_type', '<u1'), ('ev_legal', '<u1'), ('max_rank', '<u1'), "
              "('seed', '<u4'), ('branch_evs', '<f4', (4,)), ]")


def npyz_header(rows: int) -> bytes:
    text = f"{{'descr': {NPYZ_DESCR}, 'fortran_order': False, 'shape': ({rows},), }}"
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode()


def make_reference_pack(src: Path, dst: Path, shard_rows: int) -> np.ndarray:
    """The pack of this tool at `src` as the reference packer wrote it; returns its rows
    (48-byte view) with every tuple row marked legal in all four moves, as that packer did."""
    dst.mkdir()
    names = json.loads((src / "valuation_types.json").read_text())
    raw = np.concatenate([np.fromfile(p, dtype=np.uint8, offset=384).reshape(-1, 48)
                          for p in sorted(src.glob("steps*.npy"))])
    tuple_ids = [i for i, n in enumerate(names) if n.startswith("tuple")]
    raw[np.isin(raw[:, 23], tuple_ids), 24] = 0b1111
    packed = np.concatenate([raw[:, :26], raw[:, 28:]], axis=1)
    for i, start in enumerate(range(0, len(packed), shard_rows)):
        part = packed[start:start + shard_rows]
        (dst / f"steps-{i:05}.npy").write_bytes(npyz_header(len(part)) + part.tobytes())
    with sqlite3.connect(src / "metadata.db") as s:
        runs = s.execute("SELECT id, seed, steps, max_score, highest_tile FROM runs").fetchall()
    s.close()
    db = sqlite3.connect(dst / "metadata.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript("""
        CREATE TABLE runs (id INTEGER PRIMARY KEY, seed BIGINT NOT NULL, steps INT NOT NULL,
                           max_score INT NOT NULL, highest_tile INT NOT NULL);
        CREATE TABLE session (meta_key TEXT PRIMARY KEY, meta_value TEXT NOT NULL);""")
    db.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?)", runs)
    db.commit()
    db.close()
    (dst / "valuation_types.json").write_text(
        json.dumps({n: i for i, n in reversed(list(enumerate(names)))}, indent=2) + "\n")
    return raw


@pytest.fixture(scope="module")
def reference(packs, tmp_path_factory):
    dst = tmp_path_factory.mktemp("reference") / "pack"
    raw = make_reference_pack(packs["sharded"], dst, 1000)
    return dst, raw


def test_the_reader_opens_it_as_a_legacy_pack(reference, packs):
    path, raw = reference
    before = sorted(p.name for p in path.iterdir())
    with Pack(path) as pack:
        assert pack.legacy and len(pack) == len(raw)
        assert pack.valuation_names == Pack(packs["sharded"]).valuation_names
        stored = Pack(path, legacy_legal="stored").rows(slice(0, len(pack)))
        assert stored.tobytes() == raw.tobytes()
    assert sorted(p.name for p in path.iterdir()) == before, "no -shm/-wal left beside it"


def test_it_agrees_with_the_rust_upgrade(reference, packs, tmp_path):
    path, raw = reference
    upgraded = tmp_path / "upgraded"
    out = cli("export", path, "--format", "pack", "--output", upgraded, "--quiet")
    with Pack(path, legacy_legal="stored") as legacy, Pack(upgraded) as full:
        old, new = legacy.rows(slice(0, len(legacy))), full.rows(slice(0, len(full)))
    assert not full.legacy
    recomputed = legal_moves(decode_exps(old["board"], old["tile_65536_mask"]))
    assert np.array_equal(new["ev_legal"], recomputed)
    changed = int(np.count_nonzero(old["ev_legal"] != recomputed))
    assert changed > 0
    assert f"changed {changed:,} rows" in out
    for field in old.dtype.names:
        if field != "ev_legal":
            assert np.array_equal(old[field], new[field]), field
    # And so the rows of the pack this tool made of the same games.
    with Pack(packs["sharded"]) as sharded:
        assert new.tobytes() == sharded.rows(slice(0, len(sharded))).tobytes()


# ---------------------------------------------------------------------------------------------
# Never read silently wrong: every reader recomputes `legal` from the board, as the CLI's
# conversion does, unless the stored bits are asked for.

def same_batch(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.fixture(scope="module")
def converted(reference, tmp_path_factory):
    path, _ = reference
    out = tmp_path_factory.mktemp("converted") / "pack"
    cli("export", path, "--format", "pack", "--output", out, "--quiet")
    return out


def test_every_reader_gives_the_converted_packs_legal_bits(reference, converted):
    path, raw = reference
    legacy, full = Pack(path), Pack(converted)
    assert legacy.legacy and legacy.legacy_legal == "recompute"
    wrong = raw[:, 24] != full.rows(slice(0, len(full)))["ev_legal"]
    assert wrong.sum() > 0, "the reference pack has wrong bits to fix"
    assert legacy.rows(slice(0, len(legacy))).tobytes() == full.rows(
        slice(0, len(full))).tobytes()
    idx = np.flatnonzero(wrong)[:50]
    assert legacy.rows(idx).tobytes() == full.rows(idx).tobytes()
    assert legacy.rows(int(idx[0])).tobytes() == full.rows(int(idx[0])).tobytes()
    same_batch(legacy.gather(idx), full.gather(idx))
    same_batch(legacy.sample(300, 5, augment=True), full.sample(300, 5, augment=True))
    for shuffle in (False, True):
        options = dict(shuffle=shuffle, seed=3, epoch=1, augment=shuffle)
        for a, b in zip(legacy.batches(256, **options), full.batches(256, **options),
                        strict=True):
            same_batch(a, b)
    # A selection (found by run_id: the reference pack has no run index) reads the same.
    ids = full.select("max_score > 1000").run_ids
    for a, b in zip(legacy.batches(128, select=legacy.select(runs=ids), seed=1),
                    full.batches(128, select=full.select(runs=ids), seed=1), strict=True):
        same_batch(a, b)


def test_stored_bits_only_when_asked(reference, converted):
    path, raw = reference
    stored = Pack(path, legacy_legal="stored")
    idx = np.arange(len(stored))
    assert np.array_equal(stored.gather(idx)["legal"],
                          (raw[:, 24, None] >> np.arange(4)) & 1 == 1)
    with pytest.raises(ValueError, match="legacy_legal must be one of"):
        Pack(path, legacy_legal="fix")
    import pickle
    assert pickle.loads(pickle.dumps(stored)).legacy_legal == "stored"


def test_run_recomputes_too(packs, tmp_path):
    """`run()` needs a run index, which the reference packer never wrote: a legacy pack of
    this tool's (46-byte rows, run index kept) with the reference packer's wrong bits."""
    from conftest import copy_pack
    path = copy_pack(packs, "legacy", tmp_path)
    names = Pack(path).valuation_names
    tuples = [i for i, n in enumerate(names) if n.startswith("tuple")]
    for shard in sorted(path.glob("steps-*.npy")):
        with open(shard, "rb") as f:
            np.lib.format.read_magic(f)
            np.lib.format.read_array_header_1_0(f)
            offset = f.tell()
        data = shard.read_bytes()
        rows = np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(-1, 46).copy()
        rows[np.isin(rows[:, 23], tuples), 24] = 0b1111
        shard.write_bytes(bytes(data[:offset]) + rows.tobytes())
    legacy, full = Pack(path), Pack(packs["sharded"])
    assert not np.array_equal(Pack(path, legacy_legal="stored").run(3)["ev_legal"],
                              full.run(3)["ev_legal"])
    for run_id in full.select(runs=range(full.num_runs)).run_ids[:8]:
        assert legacy.run(int(run_id)).tobytes() == full.run(int(run_id)).tobytes()
        same_batch(legacy.run(int(run_id), decode=True), full.run(int(run_id), decode=True))
    same_batch(next(legacy.windows(16, 8, seed=2)), next(full.windows(16, 8, seed=2)))


def test_the_torch_adapter_reads_the_recomputed_bits(reference, converted):
    torch = pytest.importorskip("torch")
    from dataset_packer.torch import PackDataset
    path, _ = reference
    for a, b in zip(PackDataset(path, 512, seed=4), PackDataset(converted, 512, seed=4),
                    strict=True):
        assert torch.equal(a["legal"], b["legal"]) and torch.equal(a["exps"], b["exps"])
