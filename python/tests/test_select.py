"""`Pack.select` against sqlite3: a WHERE expression or a full query returning run ids, with
parameters bound as sqlite3 binds them, on every fixture pack (shuffled and index-less ones
through each row's run_id); and every way a selection could be silently wrong refused."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from conftest import copy_pack
from dataset_packer import EmptySelectionError, Pack, PackError, RunIndexError, SelectionError

ALL_PACKS = ("plain", "sharded", "merged", "findings", "legacy", "shuffled", "no_index")

# (SQL, params, how sqlite3 runs it: "query" as written, "where" inside WHERE (…))
CASES = [
    ("SELECT id FROM runs WHERE max_score > 4000", None, "query"),
    ("SELECT id FROM runs WHERE max_score > 5000", None, "query"),
    ("SELECT id FROM runs WHERE id > 0 AND max_score > 3000", None, "query"),
    ("SELECT id FROM runs WHERE max_score BETWEEN ? AND ?", [2500, 4200], "query"),
    ("select run_id from run_details where depth = :d order by run_id desc", {"d": 6}, "query"),
    ("WITH best AS (SELECT id FROM runs ORDER BY max_score DESC LIMIT 3) SELECT id FROM best",
     None, "query"),
    ("-- the short games\n(SELECT id FROM runs WHERE steps < ?)", (230,), "query"),
    ("max_score > ? AND depth = ?", [2500, 7], "where"),
    ("depth = :depth OR steps < :steps", {"depth": 6, "steps": 200}, "where"),
]


def sqlite3_ids(pack_path, sql, params, how) -> list[int]:
    db = sqlite3.connect(f"file:{pack_path / 'metadata.db'}?mode=ro", uri=True)
    try:
        if how == "query":
            text = sql.split("\n", 1)[-1] if sql.startswith("--") else sql
            text = text.strip()
            if text.startswith("("):
                text = text[1:-1]
            return sorted({rid for (rid,) in db.execute(text, params or ())})
        return [rid for (rid,) in db.execute(
            "SELECT runs.id FROM runs LEFT JOIN run_details ON run_details.run_id = runs.id "
            f"WHERE ({sql}) ORDER BY runs.id", params or ())]
    finally:
        db.close()


@pytest.mark.parametrize("name", ALL_PACKS)
@pytest.mark.parametrize("sql,params,how", CASES)
def test_select_returns_exactly_what_sqlite3_returns(packs, name, sql, params, how):
    want = sqlite3_ids(packs[name], sql, params, how)
    with Pack(packs[name]) as pack:
        if not want:
            with pytest.raises(EmptySelectionError, match="matches no runs"):
                pack.select(sql, params=params)
            return
        sel = pack.select(sql, params=params)
        assert sel.run_ids.tolist() == want
        everything = pack.rows(slice(None))["run_id"]
        rows = np.flatnonzero(np.isin(everything, want))
        assert len(sel) == rows.size
        ordered = np.concatenate([b["row"] for b in sel.batches(97, shuffle=False)])
        np.testing.assert_array_equal(ordered, rows)
        shuffled = np.concatenate([b["row"] for b in pack.batches(64, select=sel, seed=3)])
        np.testing.assert_array_equal(np.sort(shuffled), rows)
        assert pack.num_batches(64, select=sel) == -(-rows.size // 64)
        drawn = pack.sample(500, 1, select=sel)
        assert np.isin(drawn["run_id"], want).all()


def test_the_cases_test_both_first_ids(packs):
    """A query read as a scalar subquery selected all runs or none depending on its first id;
    the cases hold queries whose first id is 0 and queries whose first id is not, each
    selecting some runs but not all."""
    firsts = set()
    total = Pack(packs["plain"]).num_runs
    for sql, params, how in CASES:
        want = sqlite3_ids(packs["plain"], sql, params, how)
        assert 0 < len(want) < total, sql
        firsts.add(want[0] == 0)
    assert firsts == {True, False}


def test_shuffled_packs_select_through_run_id_and_name_what_needs_run_order(packs):
    shuffled, plain = Pack(packs["shuffled"]), Pack(packs["sharded"])
    sel = shuffled.select("SELECT run_id FROM run_details WHERE depth = ?", params=[7])
    rows = np.concatenate([b["row"] for b in sel.batches(100, shuffle=False)])
    got = shuffled.rows(rows)
    assert set(got["run_id"].tolist()) == set(sel.run_ids.tolist())
    want = plain.rows(slice(None))
    want = want[np.isin(want["run_id"], sel.run_ids)]
    # The same rows as in the unshuffled pack, in the shuffled pack's order.
    key = lambda r: sorted(zip(r["run_id"].tolist(), r["step_index"].tolist()))  # noqa: E731
    assert key(got) == key(want)
    with pytest.raises(RunIndexError, match="shuffled pack.*run\\(\\)"):
        shuffled.run(int(sel.run_ids[0]))
    with pytest.raises(RunIndexError, match="shuffled pack.*windows\\(\\)"):
        next(sel.windows(8, 4))


@pytest.mark.parametrize("sql,params,message", [
    ("SELECT id, seed FROM runs", None, "returns 2 columns \\(id, seed\\)"),
    ("SELECT max_score FROM runs", None, "10 values that are not a run id of the pack"),
    ("SELECT NULL", None, "row 1 of the query's result is NULL"),
    ("SELECT 'x' FROM runs", None, "'x' \\(str\\), not a run id"),
    ("SELECT id * 1.5 FROM runs WHERE id = 1", None, "1.5 \\(float\\)"),
    ("DELETE FROM runs", None, "this is a DELETE statement"),
    ("SELECT id FROM runs; DELETE FROM runs", None, "only one statement is allowed"),
    ("WITH t AS (SELECT 1) DELETE FROM runs", None, "would change metadata.db"),
    ("SELECT id FROM runs WHERE max_scor > 1", None, "did you mean max_score"),
    ("SELECT id FROM runs WHERE depth = 7", None,
     "no column depth in the tables the query reads: depth is a column of run_details"),
    ("SELECT id FROM runs WHERE max_score > ?", None,
     "1 positional parameter \\(\\?\\) and 0 values were given"),
    ("max_score > ?", [1, 2], "and 2 values were given"),
    ("max_score > :min", {"max": 3}, "no parameter :max \\(it has :min\\)"),
    ("max_score > :min", {}, ":min has no value"),
    ("max_score > :min", [3], "pass params as a dict"),
    ("max_score > ?", {"x": 3}, "no parameter :x"),
])
def test_wrong_queries_and_params_are_refused(packs, sql, params, message):
    pack = Pack(packs["plain"])
    with pytest.raises(SelectionError, match=message):
        pack.select(sql, params=params)
    assert Pack(packs["plain"]).num_runs == 10


def test_params_need_a_where(packs):
    pack = Pack(packs["plain"])
    with pytest.raises(ValueError, match="no `where`"):
        pack.select(runs=[1], params=[3])
    with pytest.raises(TypeError, match="not str"):
        pack.select("max_score > ?", params="3")


@pytest.mark.parametrize("rows,block", [(1, 64), (1000, 64), (5000, 128), (70_001, 1 << 14)])
def test_a_row_set_finds_exactly_the_rows_of_its_runs(rows, block, monkeypatch):
    from dataset_packer._ranges import RowSet

    monkeypatch.setattr(RowSet, "BLOCK", block)
    rng = np.random.default_rng(rows)
    run_of = rng.integers(0, 50, rows).astype(np.uint32)
    for wanted in ([], [3], rng.choice(50, 20, replace=False), np.arange(50),
                   [7, 1 << 30]):  # an id too large for the lookup table
        found = RowSet(rows, np.asarray(wanted, dtype=np.int64),
                       lambda a, b: run_of[a:b])
        want = np.flatnonzero(np.isin(run_of, wanted))
        assert found.total == want.size
        np.testing.assert_array_equal(found.rows_at(np.arange(want.size)), want)
        if want.size:
            items = rng.integers(0, want.size, 300)
            np.testing.assert_array_equal(found.rows_at(items), want[items])
            lo, hi = sorted(rng.integers(0, want.size + 1, 2).tolist())
            spans = found.spans(lo, hi)
            got = np.concatenate([np.arange(a, b) for a, b in spans]) if spans else []
            np.testing.assert_array_equal(got, want[lo:hi])


def test_a_split_by_game_is_stable_across_packs_of_the_same_games(packs):
    """The side of each game depends only on its fingerprint: the same in a pack, in its
    shuffled copy and in a merge of two packs of its halves (where run ids differ)."""
    sides = {}
    for name in ("plain", "sharded", "merged", "shuffled"):
        pack = Pack(packs[name])
        train, val = pack.split(0.3, seed=5)
        assert not set(train.run_ids.tolist()) & set(val.run_ids.tolist())
        assert sorted(train.run_ids.tolist() + val.run_ids.tolist()) == list(range(10))
        fp = dict(pack.db().execute("SELECT run_id, fingerprint FROM run_details"))
        sides[name] = {fp[r] for r in val.run_ids.tolist()}
        rows = np.concatenate([b["row"] for b in val.batches(100)])
        assert set(pack.rows(rows)["run_id"].tolist()) == set(val.run_ids.tolist())
        assert len(train) + len(val) == len(pack)
    assert len({frozenset(v) for v in sides.values()}) == 1
    # Another seed gives another split; a larger fraction only adds games to validation.
    pack = Pack(packs["plain"])
    seeds = {tuple(pack.split(0.5, seed=s)[1].run_ids.tolist()) for s in range(6)}
    assert len(seeds) > 1
    small, large = pack.split(0.2, seed=1)[1], pack.split(0.6, seed=1)[1]
    assert set(small.run_ids.tolist()) <= set(large.run_ids.tolist())
    # Combined with a selection: only its runs, split the same way.
    depth7 = pack.select("depth = 7")
    train7, val7 = depth7.split(0.3, seed=5)
    train, val = pack.split(0.3, seed=5)
    assert set(val7.run_ids.tolist()) == set(val.run_ids.tolist()) & set(depth7.run_ids.tolist())
    assert set(train7.run_ids.tolist()) == (set(train.run_ids.tolist())
                                            & set(depth7.run_ids.tolist()))


def test_split_arguments(packs, tmp_path):
    pack = Pack(packs["plain"])
    for bad in (0, 1, -0.5, 2):
        with pytest.raises(ValueError, match="between 0 and 1"):
            pack.split(bad)
    with pytest.raises(EmptySelectionError, match="validation side"):
        pack.split(1e-9)
    dest = copy_pack(packs, "plain", tmp_path)
    with sqlite3.connect(dest / "metadata.db") as db:
        db.execute("UPDATE run_details SET fingerprint = NULL WHERE run_id = 4")
    db.close()
    with pytest.raises(PackError, match="run 4 has no fingerprint"):
        Pack(dest).split(0.1)
    with sqlite3.connect(dest / "metadata.db") as db:
        db.execute("ALTER TABLE run_details DROP COLUMN fingerprint")
    db.close()
    with pytest.raises(PackError, match="records no run fingerprints"):
        Pack(dest).split(0.1)


# ---------------------------------------------------------------- issue 30: SQL that escapes

@pytest.mark.parametrize("sql", [
    "0) UNION SELECT 1000000 WHERE (1",
    "0) UNION SELECT id FROM runs WHERE (1",
    "1) LIMIT 1 --",
    # Inside a `$name(…)` parameter SQLite takes the quote and the comment as part of the
    # name, so the ')' after them is a real one.
    "$a(')\n) UNION SELECT 7 WHERE (1 = '1'",
    "$a(--)\n) UNION SELECT 7 WHERE ((1",
])
def test_an_expression_cannot_become_a_compound_query(packs, sql):
    with Pack(packs["plain"]) as pack:
        with pytest.raises(SelectionError, match="parentheses must pair up"):
            pack.select(sql)


def test_every_id_a_selection_returns_is_a_run_id(packs):
    with Pack(packs["plain"]) as pack:
        with pytest.raises(SelectionError, match="1 value that is not a run id of the pack: "
                                                 "1000000"):
            pack.select("SELECT id FROM runs UNION SELECT 1000000")
        with pytest.raises(SelectionError, match="more than 1000 values that are not a run id"):
            pack.select("WITH RECURSIVE t(x) AS (SELECT 1000 UNION ALL SELECT x + 1 FROM t) "
                        "SELECT x FROM t")
        with pytest.raises(SelectionError, match="NUL character"):
            pack.select("1\0) UNION SELECT 9 --")


def test_comments_may_start_a_selection(packs):
    with Pack(packs["plain"]) as pack:
        want = pack.select("depth = 7").run_ids.tolist()
        assert pack.select("-- the deep ones\ndepth = 7").run_ids.tolist() == want
        assert pack.select("/* the deep ones */ depth = 7").run_ids.tolist() == want
        with pytest.raises(SelectionError, match="the expression is empty"):
            pack.select("-- nothing else")


ENDLESS = "WITH RECURSIVE t(x) AS (SELECT 0 UNION ALL SELECT x FROM t) SELECT x FROM t"
GROWING = ("WITH RECURSIVE t(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM t) "
           "SELECT length(group_concat(hex(randomblob(1000)))) % 1 FROM t")


def test_a_selection_that_never_ends_is_stopped_with_a_message(packs):
    with Pack(packs["plain"]) as pack:
        with pytest.raises(SelectionError, match=r"stopped after 0\.3 s, its time limit"):
            pack.select(ENDLESS, sql_timeout=0.3)
        with pytest.raises(SelectionError, match="its time limit"):
            pack.select(f"id IN ({ENDLESS})", sql_timeout=0.3)
        # The connection is as good as before: the handler is gone.
        assert pack.select("depth = 7").run_ids.size > 0


def test_a_selection_that_grows_without_end_is_stopped_with_a_message(packs):
    with Pack(packs["plain"]) as pack:
        with pytest.raises(SelectionError, match=r"more than 32\.0 MiB of memory, its limit"):
            pack.select(GROWING, sql_memory=32 << 20, sql_timeout=30)


def test_limits_must_be_sensible(packs):
    with Pack(packs["plain"]) as pack:
        for bad in (0, -1, float("nan"), "5"):
            with pytest.raises(SelectionError, match="sql_timeout"):
                pack.select("depth = 7", sql_timeout=bad)
        with pytest.raises(SelectionError, match="sql_memory"):
            pack.select("depth = 7", sql_memory=0)


def test_ctrl_c_stops_a_selection_promptly(packs):
    """SIGINT during a query that never ends raises KeyboardInterrupt (sqlite3 would turn an
    exception inside the progress handler into 'interrupted')."""
    import os
    import signal
    import threading
    import time

    with Pack(packs["plain"]) as pack:
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        began = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                pack.select(ENDLESS, sql_timeout=20)
        finally:
            timer.cancel()
        assert time.monotonic() - began < 10
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert pack.select("depth = 7").run_ids.size > 0


def test_parameter_names_are_read_as_sqlite_reads_them(packs):
    with Pack(packs["plain"]) as pack:
        want = pack.select("max_score > 3000").run_ids.tolist()
        for sql, params in [("max_score > :é", {"é": 3000}),
                            ("max_score > $a::b", {"a::b": 3000}),
                            ("max_score > $lim(hi)", {"lim(hi)": 3000}),
                            ("max_score > :1", {"1": 3000}),
                            ("max_score > @m AND :m = :m", {"m": 3000}),
                            ("max_score > ?2 AND ?1 = 1", [1, 3000])]:
            assert pack.select(sql, params=params).run_ids.tolist() == want, sql
        with pytest.raises(SelectionError, match=r"no parameter :a \(it has \$a::b\)"):
            pack.select("max_score > $a::b", params={"a": 1, "b": 2})
        with pytest.raises(SelectionError, match=r"\$a::b has no value"):
            pack.select("max_score > $a::b", params={})


@pytest.mark.parametrize("value,match", [
    (1 << 63, "beyond SQLite's 64-bit integers"),
    (-(1 << 63) - 1, "beyond SQLite's 64-bit integers"),
    (float("nan"), "NaN"),
    ("\ud800", "not valid UTF-8"),
    ([1], "a list"),
    (object(), "a object"),
])
def test_every_refused_value_is_a_selection_error(packs, value, match):
    with Pack(packs["plain"]) as pack:
        with pytest.raises(SelectionError, match=match):
            pack.select("max_score > ?", params=[value])
        with pytest.raises(SelectionError, match=match):
            pack.select("max_score > :v", params={"v": value})


def test_numpy_and_edge_values_bind_exactly(packs):
    with Pack(packs["plain"]) as pack:
        want = pack.select("max_score > 3000").run_ids.tolist()
        assert pack.select("max_score > ?", params=[np.int64(3000)]).run_ids.tolist() == want
        assert pack.select("max_score > ?", params=[np.float32(3000)]).run_ids.tolist() == want
        everything = pack.select("1").run_ids.tolist()
        assert pack.select("max_score < ?", params=[(1 << 63) - 1]).run_ids.tolist() == everything
        assert pack.select("max_score > ?", params=[-(1 << 63)]).run_ids.tolist() == everything
