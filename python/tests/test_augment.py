"""Symmetry augmentation, checked the hard way: for every row and every one of the 8
symmetries, the legality of each move recomputed from the transformed board by playing it
(plain Python 2048 rules) equals the permuted `legal`; `board_eval` equals the heuristic
recomputed by hand; cells move as NumPy's rot90/flip/transpose move them."""

from __future__ import annotations

import numpy as np
import pytest

from dataset_packer import apply_symmetries

# The 8 symmetries as NumPy moves a 4×4 grid, in the package's order.
GRID_OPS = [
    lambda g: g,
    lambda g: np.rot90(g, k=-1),
    lambda g: np.rot90(g, k=2),
    lambda g: np.rot90(g, k=1),
    np.fliplr,
    np.flipud,
    lambda g: g.T,
    lambda g: g[::-1, ::-1].T,
]


def slide(line: list[int]) -> list[int]:
    """One line after sliding toward its index-0 end, merging equal pairs once."""
    tiles = [e for e in line if e]
    out = []
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] + 1)
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (4 - len(out))


def legal_by_playing(exps) -> list[bool]:
    """[up, down, left, right]: does playing the move change the board?"""
    g = [list(map(int, exps[4 * r: 4 * r + 4])) for r in range(4)]
    cols = [[g[r][c] for r in range(4)] for c in range(4)]
    return [
        any(slide(col) != col for col in cols),
        any(slide(col[::-1]) != col[::-1] for col in cols),
        any(slide(row) != row for row in g),
        any(slide(row[::-1]) != row[::-1] for row in g),
    ]


def macroxue_eval(exps) -> int:
    def line_score(line):
        tile = [e << e for e in line]
        score = tile[0]
        for a, b in zip(tile, tile[1:]):
            score += a + b if a >= b else (a - b) * 12
            score += a if a == b else 0
        return score

    g = [list(map(int, exps[4 * r: 4 * r + 4])) for r in range(4)]
    return sum(line_score(row) for row in g) + sum(line_score([g[r][c] for r in range(4)])
                                                   for c in range(4))


def decoded(pack) -> dict:
    parts = list(pack.batches(10_000, shuffle=False, illegal_ev=None))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def transformed(batch: dict, s: int) -> dict:
    copy = {k: v.copy() for k, v in batch.items()}
    return apply_symmetries(copy, np.full(len(copy["move"]), s))


@pytest.mark.parametrize("s", range(8))
def test_legality_by_playing_equals_the_permuted_legal(sharded, s):
    base = decoded(sharded)
    t = transformed(base, s)
    for i in range(len(t["move"])):
        assert legal_by_playing(t["exps"][i]) == t["legal"][i].tolist(), (s, i)
    # Every played move of the fixture drop is legal; it stays legal as transformed.
    assert t["legal"][np.arange(len(t["move"])), t["move"]].all()


@pytest.mark.parametrize("s", range(8))
def test_cells_move_as_numpy_moves_them_and_board_eval_follows(sharded, s):
    base = decoded(sharded)
    t = transformed(base, s)
    grids = base["exps"].reshape(-1, 4, 4)
    want = np.stack([GRID_OPS[s](g) for g in grids]).reshape(-1, 16)
    np.testing.assert_array_equal(t["exps"], want)
    for i in range(0, len(want), 7):
        assert t["board_eval"][i] == macroxue_eval(t["exps"][i]), (s, i)
    # EVs travel with their moves.
    for k in range(4):
        rows = base["move"] == k
        np.testing.assert_array_equal(t["evs"][rows, t["move"][rows][0]],
                                      base["evs"][rows, k])
    if s == 0:
        np.testing.assert_array_equal(t["board_eval"], base["board_eval"])


def test_65536_boards_transform_too(sharded):
    run3 = sharded.run(3, decode=True)
    for s in range(8):
        t = transformed(run3, s)
        assert ((t["exps"] == 16).sum(axis=1) == (run3["exps"] == 16).sum(axis=1)).all()
        for i in range(0, len(t["move"]), 5):
            assert legal_by_playing(t["exps"][i]) == t["legal"][i].tolist()
            assert t["board_eval"][i] == macroxue_eval(t["exps"][i])


def test_augmented_batches_draw_a_fixed_symmetry_per_row(sharded):
    a = list(sharded.batches(100, seed=1, epoch=2, augment=True))
    b = list(sharded.batches(37, shuffle=False, seed=1, epoch=2, augment=True, world_size=2,
                             rank=1))
    sym_a = dict(zip(np.concatenate([x["row"] for x in a]).tolist(),
                     np.concatenate([x["symmetry"] for x in a]).tolist()))
    for x in b:
        assert [sym_a[r] for r in x["row"].tolist()] == x["symmetry"].tolist()
    counts = np.bincount(np.array(list(sym_a.values())), minlength=8)
    assert counts.min() > len(sharded) / 8 * 0.7
    c = next(sharded.batches(100, seed=1, epoch=3, augment=True))
    assert (c["symmetry"] != np.array([sym_a[r] for r in c["row"].tolist()])).mean() > 0.6


def test_an_augmented_batch_is_the_plain_batch_transformed(sharded):
    for plain, aug in zip(sharded.batches(200, seed=9, epoch=1),
                          sharded.batches(200, seed=9, epoch=1, augment=True)):
        np.testing.assert_array_equal(plain["row"], aug["row"])
        redo = apply_symmetries({k: v.copy() for k, v in plain.items()}, aug["symmetry"])
        for k in ("exps", "move", "evs", "legal", "board_eval"):
            np.testing.assert_array_equal(redo[k], aug[k], err_msg=k)


def test_windows_get_one_symmetry_per_window(sharded):
    for b in sharded.windows(12, 20, seed=3, augment=True):
        assert b["symmetry"].shape == (len(b["exps"]),)
        for w in range(len(b["exps"])):
            grids = sharded.run(int(b["run_id"][w, 0]), decode=True)
            steps = b["step_index"][w]
            want = np.stack([GRID_OPS[b["symmetry"][w]](g.reshape(4, 4)).reshape(16)
                             for g in grids["exps"][steps]])
            np.testing.assert_array_equal(b["exps"][w], want)
        break
