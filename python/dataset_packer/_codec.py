"""Vectorised board codec and row decoding, the same rules as the Rust codec (`src/format/board.rs`).

- `board` is a little-endian u64 with cell 0 (top-left) in its most significant nibble,
  row-major; a cell whose bit is set in `tile_65536_mask` is exponent 16 whatever its nibble.
- `board_eval` is the Macroxue line heuristic summed over the 4 rows (left→right) and the 4
  columns (top→bottom), computed here through one table over all 17⁴ lines of exponents 0..=16.
- `ev_legal` bit k is set when move k (0 up, 1 down, 2 left, 3 right) changes the board.
- The 8 symmetries of the square act on cells, and on moves as directions.

Every function works on whole arrays (no per-row Python loop).
"""

from __future__ import annotations

import math

import numpy as np

from ._format import LEGACY_ROW_BYTES, PADDING, ROW_BYTES, STEP_ROW_DTYPE

MOVE_NAMES = ("up", "down", "left", "right")
#: Exponents run 0..=16 (65536); a line of four is a base-17 number, cell 0 most significant.
EXPONENTS = 17
_LINE_WEIGHTS = np.array([EXPONENTS ** 3, EXPONENTS ** 2, EXPONENTS, 1], dtype=np.intp)
_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_FOUR = np.uint64(4)
_BIT16 = np.arange(16, dtype=np.uint16)


# ---------------------------------------------------------------------------- lines

def _line_digits() -> np.ndarray:
    """All 17⁴ lines as a (83521, 4) array of exponents, in key order."""
    keys = np.arange(EXPONENTS ** 4, dtype=np.int64)
    return np.stack([(keys // w) % EXPONENTS for w in _LINE_WEIGHTS], axis=1)


def _line_eval_table(lines: np.ndarray) -> np.ndarray:
    """The Macroxue score of every line: `score(l0)`, then for each neighbouring pair (a, b) of
    tile scores `a + b` when a ≥ b else `12 (a − b)`, plus `a` again when a = b."""
    tile = lines << lines  # r << r, 0 for an empty cell
    score = tile[:, 0].copy()
    for x in range(3):
        a, b = tile[:, x], tile[:, x + 1]
        score += np.where(a >= b, a + b, (a - b) * 12) + np.where(a == b, a, 0)
    return score.astype(np.int64)


def _slides_toward_start(lines: np.ndarray) -> np.ndarray:
    """Does sliding each line toward its index-0 end change it? (An empty cell followed by a
    tile, or two equal adjacent tiles.)"""
    first, second = lines[:, :3], lines[:, 1:]
    return (((first == 0) & (second != 0)) | ((first != 0) & (first == second))).any(axis=1)


def _line_slide_table(lines: np.ndarray) -> np.ndarray:
    """bit0: sliding toward index 0 changes the line; bit1: sliding toward index 3 does."""
    toward_start = _slides_toward_start(lines)
    toward_end = _slides_toward_start(lines[:, ::-1])
    return (toward_start.astype(np.uint8) | (toward_end.astype(np.uint8) << 1))


_LINES = _line_digits()
LINE_EVAL = _line_eval_table(_LINES)
LINE_SLIDES = _line_slide_table(_LINES)
del _LINES


def _line_keys(exps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Base-17 keys of the 4 rows (left→right) and the 4 columns (top→bottom): (n, 4) each."""
    grid = exps.reshape(-1, 4, 4).astype(np.intp)
    rows = grid @ _LINE_WEIGHTS
    cols = np.swapaxes(grid, 1, 2) @ _LINE_WEIGHTS
    return rows, cols


def board_eval(exps: np.ndarray) -> np.ndarray:
    """`board_eval` of boards given as (n, 16) exponents (0..=16): int32 (n,)."""
    rows, cols = _line_keys(np.asarray(exps))
    return (LINE_EVAL[rows].sum(axis=1) + LINE_EVAL[cols].sum(axis=1)).astype(np.int32)


def legal_moves(exps: np.ndarray) -> np.ndarray:
    """`ev_legal` bits of boards given as (n, 16) exponents: uint8 (n,)."""
    rows, cols = _line_keys(np.asarray(exps))
    row_bits = np.bitwise_or.reduce(LINE_SLIDES[rows], axis=1)  # bit0 left, bit1 right
    col_bits = np.bitwise_or.reduce(LINE_SLIDES[cols], axis=1)  # bit0 up, bit1 down
    return (col_bits | (row_bits << 2)).astype(np.uint8)


#: Byte offset of `ev_legal` in a 48-byte row.
_EV_LEGAL = 24


def recompute_ev_legal(raw: np.ndarray) -> np.ndarray:
    """Sets the `ev_legal` byte of (n, 48) uint8 rows from their boards, in place, and returns
    them: bit k when move k changes the board, as `dataset-packer export --format pack` (and
    `merge`, `shuffle`) rewrite the rows of a legacy pack. The reference packer set a bit for
    every move that logged an EV, and its logger logged 0.0 for illegal tuple moves."""
    if raw.shape[0]:
        rec = as_records(raw)
        raw[:, _EV_LEGAL] = legal_moves(decode_exps(rec["board"], rec["tile_65536_mask"]))
    return raw


# ---------------------------------------------------------------------------- boards

def decode_exps(board: np.ndarray, mask: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray:
    """(n, 16) uint8 exponents from the packed `board` (u64) and `tile_65536_mask` (u16)."""
    n = board.shape[0]
    swapped = board.byteswap()  # a contiguous copy whose memory bytes are cells (0,1), (2,3), …
    exps = np.empty((n, 16), dtype=np.uint8) if out is None else out
    pairs = exps.reshape(n, 8, 2)
    pairs[:, :, 1] = (swapped & _NIBBLES).view(np.uint8).reshape(n, 8)
    swapped >>= _FOUR
    swapped &= _NIBBLES
    pairs[:, :, 0] = swapped.view(np.uint8).reshape(n, 8)
    _apply_65536_mask(exps, mask)
    return exps


def _apply_65536_mask(exps: np.ndarray, mask: np.ndarray) -> None:
    """Sets masked cells to 16 (only rows with a mask bit are touched)."""
    if not mask.any():
        return
    marked = np.flatnonzero(mask)
    if marked.size:
        bits = ((mask[marked, None] >> _BIT16) & 1).astype(bool)
        exps[marked] = np.where(bits, np.uint8(16), exps[marked])


def encode_board(exps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The packed `board` (u64) and `tile_65536_mask` (u16) of (n, 16) exponents 0..=16."""
    exps = np.asarray(exps, dtype=np.uint64).reshape(-1, 16)
    if (exps > 16).any():
        raise ValueError("an exponent above 16 (131072 and up) cannot be stored")
    big = exps == 16
    nibbles = np.where(big, np.uint64(15), exps)
    shifts = np.array([60 - 4 * i for i in range(16)], dtype=np.uint64)
    board = np.bitwise_or.reduce(nibbles << shifts, axis=1)
    mask = (big.astype(np.uint16) << _BIT16).sum(axis=1, dtype=np.uint16)
    return board, mask


# ---------------------------------------------------------------------------- legal bits

def _bits_lut(invert: bool) -> np.ndarray:
    """ev_legal byte → its 4 low bits (or their negation) as 4 bool bytes, one uint32 each."""
    bits = ((np.arange(256)[:, None] >> np.arange(4)) & 1).astype(np.uint8)
    return np.ascontiguousarray(bits ^ 1 if invert else bits).view(np.uint32).reshape(256)


_LEGAL_LUT = _bits_lut(invert=False)
_ILLEGAL_LUT = _bits_lut(invert=True)
_EV_BYTES = slice(32, 48)
_V16 = np.dtype((np.void, 16))


def _illegal_addend(value: float) -> np.ndarray:
    """ev_legal byte → 4 float32 to add to the EVs: -0.0 (adds nothing, keeps -0.0) for a
    legal move, `value` (NaN or ±inf, which absorb any finite EV) for an illegal one."""
    bits = (np.arange(256)[:, None] >> np.arange(4)) & 1
    return np.where(bits == 1, np.float32(-0.0), np.float32(value)).astype(np.float32)


_NAN_ADDEND = _illegal_addend(float("nan"))


def legal_mask(ev_legal: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """(n,) ev_legal bytes → (n, 4) bool [up, down, left, right]."""
    if out is None:
        return np.take(_LEGAL_LUT, ev_legal).view(np.bool_).reshape(-1, 4)
    np.take(_LEGAL_LUT, ev_legal, out=out.view(np.uint32).reshape(-1))
    return out


# ---------------------------------------------------------------------------- rows

#: Rows decoded at a time: every column pass then reads rows that are still in cache.
DECODE_CHUNK = 8192
_COLUMNS = {  # batch key: (dtype, trailing shape)
    "exps": (np.uint8, (16,)), "move": (np.int64, ()), "evs": (np.float32, (4,)),
    "legal": (np.bool_, (4,)), "valuation": (np.uint8, ()), "board_eval": (np.int32, ()),
    "run_id": (np.int64, ()), "step_index": (np.int64, ()), "max_rank": (np.uint8, ()),
    "seed": (np.int64, ()),
}
#: Columns copied as they are stored: batch key → record field.
_PLAIN = {"move": "move_dir", "valuation": "valuation_type", "board_eval": "board_eval",
          "run_id": "run_id", "step_index": "step_index", "max_rank": "max_rank",
          "seed": "seed"}


def as_records(raw: np.ndarray) -> np.ndarray:
    """(n, 48) uint8 rows viewed as STEP_ROW_DTYPE records (n,), no copy."""
    return raw.view(STEP_ROW_DTYPE).reshape(raw.shape[0])


def decode_rows(raw: np.ndarray, illegal_ev: float | None = float("nan")) -> dict:
    """Decodes (n, 48) uint8 rows into a batch dict of new arrays (see `Pack.batches`)."""
    if raw.ndim != 2 or raw.shape[1] != ROW_BYTES:
        raise ValueError(f"rows must be (n, {ROW_BYTES}) bytes (legacy {LEGACY_ROW_BYTES}-byte "
                         "rows are widened by the reader)")
    n = raw.shape[0]
    out = {key: np.empty((n,) + shape, dtype=dtype) for key, (dtype, shape) in _COLUMNS.items()}
    if n <= DECODE_CHUNK:
        _decode_into(raw, out, illegal_ev)
        return out
    for start in range(0, n, DECODE_CHUNK):
        part = slice(start, min(n, start + DECODE_CHUNK))
        _decode_into(raw[part], {k: v[part] for k, v in out.items()}, illegal_ev)
    return out


def _decode_into(raw: np.ndarray, out: dict, illegal_ev: float | None) -> None:
    rec = as_records(raw)
    decode_exps(rec["board"], rec["tile_65536_mask"], out=out["exps"])
    legal_mask(rec["ev_legal"], out=out["legal"])
    for key, field in _PLAIN.items():
        np.copyto(out[key], rec[field], casting="safe")
    _decode_evs(raw, rec["ev_legal"], out["evs"], illegal_ev)


def _decode_evs(raw: np.ndarray, ev_legal: np.ndarray, evs: np.ndarray,
                illegal_ev: float | None) -> None:
    """The EVs, bit for bit (one 16-byte copy per row), then the illegal moves' replaced."""
    n = raw.shape[0]
    np.copyto(evs.view(_V16).reshape(n), raw[:, _EV_BYTES].view(_V16).reshape(n))
    if illegal_ev is None:
        return
    if math.isnan(illegal_ev) or math.isinf(illegal_ev):
        table = _NAN_ADDEND if math.isnan(illegal_ev) else _illegal_addend(illegal_ev)
        np.add(evs, np.take(table, ev_legal, axis=0), out=evs)
    else:
        illegal = np.take(_ILLEGAL_LUT, ev_legal).view(np.bool_).reshape(-1, 4)
        np.copyto(evs, np.float32(illegal_ev), where=illegal)


def zero_padding(raw: np.ndarray) -> np.ndarray:
    """Zeroes the two padding bytes of (n, 48) rows in place and returns them."""
    raw[:, PADDING] = 0
    return raw


# ---------------------------------------------------------------------------- symmetries

# Each symmetry maps a cell (r, c) to where its tile goes. 0 is the identity.
_SYMMETRY_MAPS = (
    lambda r, c: (r, c),            # identity
    lambda r, c: (c, 3 - r),        # rotate 90° clockwise
    lambda r, c: (3 - r, 3 - c),    # rotate 180°
    lambda r, c: (3 - c, r),        # rotate 270° clockwise
    lambda r, c: (r, 3 - c),        # mirror left ↔ right
    lambda r, c: (3 - r, c),        # mirror top ↔ bottom
    lambda r, c: (c, r),            # transpose (main diagonal)
    lambda r, c: (3 - c, 3 - r),    # anti-transpose
)
_DIRECTIONS = ((-1, 0), (1, 0), (0, -1), (0, 1))  # up, down, left, right as (dr, dc)


def _symmetry_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CELL_SOURCE[s, j]: the old cell whose tile lands on cell j; MOVE_TARGET[s, k]: what
    move k becomes; MOVE_SOURCE[s, k']: the old move that becomes k'."""
    cell_source = np.zeros((8, 16), dtype=np.intp)
    move_target = np.zeros((8, 4), dtype=np.intp)
    for s, f in enumerate(_SYMMETRY_MAPS):
        for i in range(16):
            r, c = f(i // 4, i % 4)
            cell_source[s, 4 * r + c] = i
        origin = f(1, 1)
        for k, (dr, dc) in enumerate(_DIRECTIONS):
            moved = f(1 + dr, 1 + dc)
            move_target[s, k] = _DIRECTIONS.index((moved[0] - origin[0], moved[1] - origin[1]))
    move_source = np.argsort(move_target, axis=1)
    return cell_source, move_target, move_source


CELL_SOURCE, MOVE_TARGET, MOVE_SOURCE = _symmetry_tables()
NUM_SYMMETRIES = 8


def apply_symmetries(batch: dict, symmetry: np.ndarray) -> dict:
    """Applies symmetry[i] (0..7) to row i of a decoded batch, in place: `exps` moves its
    cells, `move` becomes the transformed direction, `evs` and `legal` are permuted to match,
    and `board_eval` is recomputed for the new board (the heuristic is not symmetric).
    Works on (B, …) rows and on (B, L, …) windows (one symmetry per window)."""
    symmetry = np.asarray(symmetry, dtype=np.intp)
    lead = batch["exps"].shape[:-1]
    per_row = np.broadcast_to(symmetry.reshape(symmetry.shape + (1,) * (len(lead) - 1)), lead)
    per_row = per_row.reshape(-1)
    exps = batch["exps"].reshape(-1, 16)
    exps = np.take_along_axis(exps, CELL_SOURCE[per_row], axis=1)
    batch["exps"] = exps.reshape(lead + (16,))
    batch["move"] = MOVE_TARGET[per_row, batch["move"].reshape(-1)].astype(np.int64).reshape(lead)
    for key in ("evs", "legal"):
        batch[key] = np.take_along_axis(batch[key].reshape(-1, 4), MOVE_SOURCE[per_row],
                                        axis=1).reshape(lead + (4,))
    batch["board_eval"] = board_eval(exps).reshape(lead)
    return batch
