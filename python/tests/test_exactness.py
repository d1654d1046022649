"""Decoded columns equal the tool's own output, for every row of every fixture pack:
`export --format parquet` (the Rust codec's decode), the shards' bytes, run_index and SQLite."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES, all_rows
from dataset_packer import STEP_ROW_DTYPE, EmptySelectionError, board_eval, legal_moves


def decoded_epoch(pack, **options) -> dict:
    """Every row, in pack order, decoded in a few uneven batches."""
    parts = list(pack.batches(333, shuffle=False, **options))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def parquet_columns(path) -> dict:
    table = pq.read_table(path)
    return {name: table.column(name) for name in table.column_names}


def fixed_list(column, width: int, dtype) -> np.ndarray:
    flat = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return flat.astype(dtype).reshape(-1, width)


def test_decoded_columns_equal_the_parquet_export(pack, pack_name, exports):
    got = decoded_epoch(pack, illegal_ev=None)
    want = parquet_columns(exports[pack_name])
    assert len(got["run_id"]) == len(pack) == len(want["run_id"])
    for ours, theirs in [("run_id", "run_id"), ("step_index", "step_index"),
                         ("board_eval", "board_eval"), ("move", "move_dir"),
                         ("max_rank", "max_rank"), ("seed", "seed")]:
        np.testing.assert_array_equal(got[ours], want[theirs].to_numpy(), err_msg=ours)
    np.testing.assert_array_equal(got["exps"], fixed_list(want["board"], 16, np.uint8))
    evs = fixed_list(want["branch_evs"], 4, np.float32)
    np.testing.assert_array_equal(got["evs"].view(np.uint32), evs.view(np.uint32))
    bits = want["ev_legal"].to_numpy()
    np.testing.assert_array_equal(got["legal"], (bits[:, None] >> np.arange(4)) & 1 == 1)
    names = np.array(pack.valuation_names)[got["valuation"]]
    assert names.tolist() == want["valuation_type"].to_pylist()


def test_65536_tiles_decode_as_exponent_16(packs):
    from dataset_packer import Pack

    expected = json.loads((FIXTURES / "raw_expected.json").read_text())
    run3 = Pack(packs["sharded"]).run(3, decode=True)
    with_16 = (run3["exps"] == 16).any(axis=1)
    assert with_16.sum() == 239 and not with_16[0] and with_16[1:].all()
    assert (run3["max_rank"][1:] == 16).all()
    assert (run3["exps"] <= 16).all()
    if "rows_with_65536" in expected:
        assert with_16.sum() == expected["rows_with_65536"]


def test_board_eval_and_legality_recomputed_equal_the_stored_columns(pack):
    got = decoded_epoch(pack, illegal_ev=None)
    np.testing.assert_array_equal(board_eval(got["exps"]), got["board_eval"])
    stored_bits = (got["legal"] * (1 << np.arange(4))).sum(axis=1)
    np.testing.assert_array_equal(legal_moves(got["exps"]), stored_bits)


def test_illegal_evs_are_nan_by_default_and_configurable(sharded):
    stored = decoded_epoch(sharded, illegal_ev=None)
    default = decoded_epoch(sharded)
    assert (~stored["legal"]).any()
    assert np.isnan(default["evs"][~default["legal"]]).all()
    legal = stored["legal"]
    np.testing.assert_array_equal(default["evs"][legal].view(np.uint32),
                                  stored["evs"][legal].view(np.uint32))
    neg = decoded_epoch(sharded, illegal_ev=-np.inf)
    assert np.isneginf(neg["evs"][~neg["legal"]]).all()
    np.testing.assert_array_equal(neg["evs"][legal].view(np.uint32),
                                  stored["evs"][legal].view(np.uint32))
    big = decoded_epoch(sharded, illegal_ev=-1e9)
    assert (big["evs"][~legal] == np.float32(-1e9)).all()
    zero = decoded_epoch(sharded, illegal_ev=0.0)
    np.testing.assert_array_equal(zero["evs"], stored["evs"])  # illegal EVs are stored as 0.0


def test_rows_are_the_shard_bytes_with_the_aligned_dtype(pack, pack_name, packs):
    want = all_rows(packs["sharded" if pack_name == "legacy" else pack_name])
    got = pack.rows(slice(None))
    assert got.dtype == STEP_ROW_DTYPE and got.dtype.isalignedstruct
    assert got.dtype.itemsize == 48 and got.flags.c_contiguous
    np.testing.assert_array_equal(got.view(np.uint8).reshape(-1, 48), want)
    assert not got.view(np.uint8).reshape(-1, 48)[:, 26:28].any()
    rng = np.random.default_rng(1)
    idx = rng.integers(0, len(pack), 500)
    np.testing.assert_array_equal(pack.rows(idx).view(np.uint8).reshape(-1, 48), want[idx])
    assert pack.rows(7).tobytes() == want[7].tobytes()
    assert pack.rows(-1).tobytes() == want[-1].tobytes()
    np.testing.assert_array_equal(pack.rows(slice(5, 900, 7)).view(np.uint8).reshape(-1, 48),
                                  want[5:900:7])
    grid = idx[:12].reshape(3, 4)
    assert pack.rows(grid).shape == (3, 4)
    np.testing.assert_array_equal(pack.rows(grid)["step_index"],
                                  want[grid][..., 4:8].copy().view(np.uint32)[..., 0])


def test_run_equals_the_rows_with_that_run_id(pack):
    everything = pack.rows(slice(None))
    for run_id in range(pack.num_runs):
        # (not everything[mask]: NumPy's boolean indexing leaves the padding uninitialised)
        want = pack.rows(np.flatnonzero(everything["run_id"] == run_id))
        got = pack.run(run_id)
        assert got.dtype == STEP_ROW_DTYPE
        assert not got.view(np.uint8).reshape(-1, 48)[:, 26:28].any()
        assert got.tobytes() == want.tobytes(), run_id
        decoded = pack.run(run_id, decode=True)
        assert (decoded["run_id"] == run_id).all() and len(decoded["run_id"]) == len(want)
    with pytest.raises(KeyError):
        pack.run(pack.num_runs)


def test_a_run_of_zero_rows(packs):
    from dataset_packer import Pack

    pack = Pack(packs["findings"])
    steps = dict(pack.db().execute("SELECT id, steps FROM runs"))
    empty = [rid for rid, n in steps.items() if n == 0]
    assert empty, "the findings fixture has an empty run"
    assert len(pack.run(empty[0])) == 0


@pytest.mark.parametrize("expr", [
    "max_score > 1000", "depth = 7", "max_score > 1000 AND depth = 7", "steps < 230",
    "highest_tile >= 2048 OR game_index = 0", "source_path LIKE '%worker02%'",
])
def test_select_equals_the_sql_in_sqlite(pack, pack_name, packs, expr):
    db = sqlite3.connect(f"file:{packs[pack_name] / 'metadata.db'}?mode=ro", uri=True)
    want = [rid for (rid,) in db.execute(
        "SELECT runs.id FROM runs LEFT JOIN run_details ON run_details.run_id = runs.id "
        f"WHERE ({expr}) ORDER BY runs.id")]
    steps = dict(db.execute("SELECT id, steps FROM runs"))
    if not want:
        with pytest.raises(EmptySelectionError, match="matches no runs"):
            pack.select(expr)
        return
    sel = pack.select(expr)
    assert sel.run_ids.tolist() == want
    assert sel.num_rows == sum(steps[r] for r in want)
    rows = np.concatenate([b["row"] for b in sel.batches(100, shuffle=False)])
    run_ids = pack.rows(rows)["run_id"]
    everything = pack.rows(slice(None))
    np.testing.assert_array_equal(rows, np.flatnonzero(np.isin(everything["run_id"], want)))
    assert set(run_ids.tolist()) == {r for r in want if steps[r] > 0}


def test_decoding_keeps_every_ev_bit_and_handles_65536_in_any_cell():
    from dataset_packer import encode_board
    from dataset_packer._codec import decode_rows

    rng = np.random.default_rng(5)
    n = 20_000  # more than one decode chunk
    exps = rng.integers(0, 17, (n, 16)).astype(np.uint8)
    board, mask = encode_board(exps)
    rows = np.zeros(n, dtype=STEP_ROW_DTYPE)
    rows["board"], rows["tile_65536_mask"] = board, mask
    rows["ev_legal"] = rng.integers(0, 16, n)
    evs = rng.standard_normal((n, 4)).astype(np.float32)
    evs[::7, 1] = -0.0
    evs[::11, 2] = np.float32(1e-40)  # subnormal
    rows["branch_evs"] = evs
    raw = rows.view(np.uint8).reshape(n, 48)
    for illegal in (None, float("nan"), -np.inf, np.inf):
        got = decode_rows(raw, illegal)
        np.testing.assert_array_equal(got["exps"], exps)
        legal = got["legal"]
        np.testing.assert_array_equal(got["evs"][legal].view(np.uint32),
                                      evs[legal].view(np.uint32))
        if illegal is not None:
            replaced = got["evs"][~legal]
            assert (np.isnan(replaced) if np.isnan(illegal) else replaced == illegal).all()
