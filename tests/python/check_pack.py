#!/usr/bin/env python3
"""Independent oracle for `dataset-packer` packs.

Usage:
    python check_pack.py --raw RAW_DIR --pack PACK_DIR [--skip-invalid-expected N]

Re-derives, from the raw self-play drop alone and in plain Python (nothing is
shared with the Rust tool), every value the contract in
shared/spec/pack-format.md and shared/spec/raw-format.md defines, then checks the
pack written by the tool against it with real NumPy (np.load) and sqlite3:

  * the raw side: recursive walk following symlinks (without looping), sidecar /
    rows pairing, run order by path components, multi-member gzip, blank lines,
    CRLF, row parsing and validation, step_index derivation, board packing with
    the 65536 mask, board_eval (Macroxue line heuristic), ev_legal (2048 rules),
    move_dir, valuation ids, max_rank, seed, branch_evs as float32;
  * every shard: dtype == STEP_ROW_DTYPE, .npy header byte-identical to np.save
    (384 bytes), exact file size, zero padding bytes 26..27, every column of every row;
  * valuation_types.json;
  * metadata.db: runs / session schema and contents, plus the tool's extra
    tables run_details, run_index, shards (with CRC-32C of every shard file)
    and skipped_runs (with --skip-invalid-expected);
  * every run's fingerprint (XXH3-128 of the canonical bytes docs/format.md
    defines, hashed here with the `xxhash` package) and the duplicate_run count.

Prints "OK: R runs, N rows, S shards" and exits 0 when everything matches;
otherwise prints every problem found (field mismatches capped at 20) and exits 1.
Exit 2 means the oracle itself could not run (bad arguments, missing directory).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sqlite3
import stat
import sys
import warnings
from pathlib import Path, PurePosixPath

import numpy as np

# ---------------------------------------------------------------------------
# The contract's dtype, verbatim from pack-format.md.
# ---------------------------------------------------------------------------

STEP_ROW_DTYPE = np.dtype([
    ("run_id", np.uint32),            # offset 0
    ("step_index", np.uint32),        # 4
    ("board", np.uint64),             # 8   16 packed 4-bit exponents, MSB nibble = cell 0
    ("board_eval", np.int32),         # 16  Macroxue heuristic of the board
    ("tile_65536_mask", np.uint16),   # 20  bit i set when cell i's exponent is 16
    ("move_dir", np.uint8),           # 22  0=up 1=down 2=left 3=right
    ("valuation_type", np.uint8),     # 23  id into valuation_types.json
    ("ev_legal", np.uint8),           # 24  bit0=up bit1=down bit2=left bit3=right
    ("max_rank", np.uint8),           # 25  largest exponent on the board
                                      # 26..27 padding, written as zero bytes
    ("seed", np.uint32),              # 28
    ("branch_evs", np.float32, (4,)), # 32  [up, down, left, right]
], align=True)
assert STEP_ROW_DTYPE.itemsize == 48
ROW_BYTES = 48
HEADER_BYTES = 384
PAD_START, PAD_END = 26, 28

U32_MAX = 2**32 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MAX = 2**63 - 1

MOVES = {"up": 0, "down": 1, "left": 2, "right": 3}
EV_ORDER = ("up", "down", "left", "right")  # pack order; JSON order is up, left, right, down
BASE_VALUATIONS = ["search", "tuple11", "tuple10"]
MAX_VALUATIONS = 256

SHARD_RE = re.compile(r"^steps-(\d{5})\.npy$")

MAX_MISMATCH_PRINTS = 20


class InvalidRun(Exception):
    """The raw input of one run is invalid under the contract."""


# ---------------------------------------------------------------------------
# Board math: packing, board_eval, legality.
# ---------------------------------------------------------------------------

def pack_board(exps):
    """Return (board u64, tile_65536_mask u16) for 16 exponents 0..16."""
    board = 0
    mask = 0
    for i, e in enumerate(exps):
        nib = e
        if e == 16:
            nib = 15
            mask |= 1 << i
        board |= nib << (60 - 4 * i)
    return board, mask


def unpack_board(board, mask):
    out = []
    for i in range(16):
        if (mask >> i) & 1:
            out.append(16)
        else:
            out.append((board >> (60 - 4 * i)) & 0xF)
    return out


def tile_score(r):
    return r << r


def line_score(l0, l1, l2, l3):
    line = (l0, l1, l2, l3)
    score = tile_score(line[0])
    for x in range(3):
        a = tile_score(line[x])
        b = tile_score(line[x + 1])
        if a >= b:
            score += a + b
        else:
            score += (a - b) * 12
        if a == b:
            score += a
    return score


def board_eval(exps):
    total = 0
    for y in range(4):
        total += line_score(*(exps[4 * y + k] for k in range(4)))
    for x in range(4):
        total += line_score(*(exps[x + 4 * k] for k in range(4)))
    return total


# Test vectors from the spec: asserted every time the oracle runs.
assert board_eval([0] * 16) == 0
assert board_eval([1] + [0] * 15) == 8
assert board_eval([1, 1] + [0] * 14) == 18
assert board_eval([15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]) == 3618726


def slide_line(line):
    """Slide a line of exponents toward index 0, merging equal neighbours once."""
    tiles = [v for v in line if v]
    out = []
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] + 1)
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(line) - len(out))


# For each move, the 4 lines as cell indices ordered from the edge the tiles slide toward.
MOVE_LINES = {
    0: [[c, c + 4, c + 8, c + 12] for c in range(4)],                 # up
    1: [[c + 12, c + 8, c + 4, c] for c in range(4)],                 # down
    2: [[4 * r, 4 * r + 1, 4 * r + 2, 4 * r + 3] for r in range(4)],  # left
    3: [[4 * r + 3, 4 * r + 2, 4 * r + 1, 4 * r] for r in range(4)],  # right
}


def move_is_legal(exps, move):
    for cells in MOVE_LINES[move]:
        line = [exps[c] for c in cells]
        if slide_line(line) != line:
            return True
    return False


def ev_legal_bits(exps):
    bits = 0
    for m in range(4):
        if move_is_legal(exps, m):
            bits |= 1 << m
    return bits


# Sanity checks on the legality model.
assert ev_legal_bits([0] * 16) == 0
assert ev_legal_bits([1] + [0] * 15) == 0b1010          # down, right
assert ev_legal_bits([1, 1] + [0] * 14) == 0b1110       # down, left (merge), right
assert ev_legal_bits([1, 2, 1, 2, 2, 1, 2, 1, 1, 2, 1, 2, 2, 1, 2, 1]) == 0  # checkerboard
assert pack_board([15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]) == (0xFEDCBA9876543210, 0)
assert pack_board([16] + [0] * 14 + [16]) == (0xF00000000000000F, 0x8001)


# ---------------------------------------------------------------------------
# CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, init/xorout 0xFFFFFFFF.
# ---------------------------------------------------------------------------

def _make_crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C_TABLE = _make_crc32c_table()


def _crc32c_update(reg, data):
    """Raw register update, no pre/post conditioning."""
    t = CRC32C_TABLE
    for b in data:
        reg = t[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg


def crc32c_pure(data):
    """Plain table-driven CRC-32C: the reference implementation."""
    return _crc32c_update(0xFFFFFFFF, data) ^ 0xFFFFFFFF


def crc32c_fast(data, lanes=8192):
    """Same CRC, computed on `lanes` equal chunks at once with NumPy, then combined.

    The raw register update is linear over GF(2): update(r, chunk) =
    shift_L(r) XOR update(0, chunk), where shift_L is feeding L zero bytes.
    Checked against crc32c_pure at start-up.
    """
    n = len(data)
    L = n // lanes
    if L < 64:
        return crc32c_pure(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    cols = np.ascontiguousarray(buf[: lanes * L].reshape(lanes, L).T)  # (L, lanes)
    table = np.array(CRC32C_TABLE, dtype=np.uint32)
    regs = np.zeros(lanes, dtype=np.uint32)
    # The 32 basis vectors ride along to build the shift_L operator.
    basis = np.array([1 << i for i in range(32)], dtype=np.uint32)
    for i in range(L):
        regs = table[(regs ^ cols[i]) & 0xFF] ^ (regs >> 8)
        basis = table[basis & 0xFF] ^ (basis >> 8)
    images = [int(v) for v in basis]
    reg = 0xFFFFFFFF
    for r in regs.tolist():
        shifted = 0
        bit = 0
        x = reg
        while x:
            if x & 1:
                shifted ^= images[bit]
            x >>= 1
            bit += 1
        reg = shifted ^ r
    reg = _crc32c_update(reg, data[lanes * L:])
    return reg ^ 0xFFFFFFFF


def crc32c(data):
    if len(data) <= (1 << 20):
        return crc32c_pure(data)
    return crc32c_fast(data)


def _self_test_crc():
    assert crc32c_pure(b"123456789") == 0xE3069283, "CRC-32C check value"
    assert crc32c_pure(b"") == 0
    rnd = np.random.default_rng(12345).integers(0, 256, size=(1 << 17) + 77, dtype=np.uint8).tobytes()
    assert crc32c_fast(rnd, lanes=512) == crc32c_pure(rnd), "fast CRC-32C disagrees with reference"


_self_test_crc()


# ---------------------------------------------------------------------------
# Raw side: discovery.
# ---------------------------------------------------------------------------

class RawRun:
    def __init__(self, rel_dir_parts, base, sidecar_names):
        self.rel_dir_parts = rel_dir_parts  # tuple of str components (relative to root)
        self.base = base
        self.sidecar_names = sidecar_names  # list: one normally, two when both forms exist
        self.abs_dir = None
        self.rows_exists = False
        # filled by parsing
        self.invalid_reason = None
        self.sidecar = None
        self.rows = None            # list of dicts of column values
        self.valuation_names = None  # names in row order (per row)
        self.run_id = None

    def sidecar_rel(self, name=None):
        name = name or self.sidecar_names[0]
        return PurePosixPath(*self.rel_dir_parts, name)

    @property
    def source_path(self):
        return self.sidecar_rel().as_posix()

    @property
    def all_source_paths(self):
        return [self.sidecar_rel(n).as_posix() for n in self.sidecar_names]

    @property
    def rows_name(self):
        """BASE.jsonl.gz, or the plain BASE.jsonl when only that one exists."""
        plain = getattr(self, "rows_plain_exists", False) and not self.rows_exists
        return self.base + (".jsonl" if plain else ".jsonl.gz")

    @property
    def rows_rel(self):
        return PurePosixPath(*self.rel_dir_parts, self.rows_name).as_posix()

    def sort_key(self):
        return tuple(os.fsencode(p) for p in self.sidecar_rel().parts)


def discover(root):
    """Walk root recursively, following symlinks without looping.

    Returns (runs sorted by sidecar path, orphan row files, notes).
    """
    runs = []
    orphans = []
    notes = []

    def walk(abs_dir, rel_parts, ancestors):
        try:
            entries = list(os.scandir(abs_dir))
        except OSError as e:
            notes.append(f"cannot list {abs_dir}: {e}")
            return
        files = set()
        subdirs = []
        for ent in entries:
            path = os.path.join(abs_dir, ent.name)
            try:
                st = os.stat(path)  # follows symlinks
            except OSError:
                notes.append(f"broken symlink or unreadable entry ignored: {path}")
                continue
            if stat.S_ISDIR(st.st_mode):
                ident = (st.st_dev, st.st_ino)
                if ident in ancestors:
                    notes.append(f"symlink loop not followed: {path}")
                    continue
                subdirs.append((ent.name, ident))
            elif stat.S_ISREG(st.st_mode):
                files.add(ent.name)
        bases = {}
        for name in files:
            if name.endswith(".meta.json.gz"):
                bases.setdefault(name[: -len(".meta.json.gz")], []).append(name)
            elif name.endswith(".meta.json"):
                bases.setdefault(name[: -len(".meta.json")], []).append(name)
        for base, names in bases.items():
            names.sort(key=lambda n: n.endswith(".gz"))  # .meta.json first
            run = RawRun(tuple(rel_parts), base, names)
            run.abs_dir = abs_dir
            run.rows_exists = (base + ".jsonl.gz") in files
            run.rows_plain_exists = (base + ".jsonl") in files
            runs.append(run)
        for name in files:
            for suffix in (".jsonl.gz", ".jsonl"):
                if name.endswith(suffix):
                    base = name[: -len(suffix)]
                    if base not in bases:
                        orphans.append(PurePosixPath(*rel_parts, name).as_posix())
        for name, ident in subdirs:
            walk(os.path.join(abs_dir, name), rel_parts + [name], ancestors | {ident})

    st = os.stat(root)
    walk(root, [], frozenset({(st.st_dev, st.st_ino)}))
    runs.sort(key=RawRun.sort_key)
    orphans.sort(key=lambda p: tuple(os.fsencode(c) for c in PurePosixPath(p).parts))
    return runs, orphans, notes


# ---------------------------------------------------------------------------
# Raw side: parsing and validation.
# ---------------------------------------------------------------------------

def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def json_loads_strict(text):
    return json.loads(text, parse_constant=_reject_constant)


def is_int(v):
    return type(v) is int  # bool is not an integer here


def is_number(v):
    return type(v) in (int, float)


def read_gzip_all_members(path):
    # gzip.open reads every member of a multi-member file, checks every member's
    # CRC/length and rejects trailing bytes that are not a gzip member.
    if os.path.getsize(path) == 0:
        # Python reads a 0-byte file as empty content; it holds no gzip member at all.
        raise ValueError("empty file: not gzip (no gzip member)")
    with gzip.open(path, "rb") as f:
        return f.read()


def parse_sidecar(path):
    try:
        if path.endswith(".gz"):
            raw = read_gzip_all_members(path)
        else:
            with open(path, "rb") as f:
                raw = f.read()
        obj = json_loads_strict(raw.decode("utf-8"))
    except Exception as e:  # noqa: BLE001 - any failure makes the run invalid
        raise InvalidRun(f"sidecar {path}: cannot read/parse: {e}")
    if not isinstance(obj, dict):
        raise InvalidRun(f"sidecar {path}: not a JSON object")
    for key in ("seed", "num_moves", "score", "max_tile"):
        v = obj.get(key)
        if not is_int(v) or v < 0 or v > I64_MAX:
            raise InvalidRun(f"sidecar {path}: '{key}' must be a non-negative integer, got {v!r}")
    if obj["seed"] > U32_MAX:
        raise InvalidRun(f"sidecar {path}: seed {obj['seed']} does not fit u32")
    out = {k: obj[k] for k in ("seed", "num_moves", "score", "max_tile")}
    for key in ("depth", "game_index", "max_rank", "sum_tile"):
        v = obj.get(key)
        out[key] = v if is_int(v) else None
        out[key + "_present_nonint"] = v is not None and not is_int(v)
    v = obj.get("seconds")
    out["seconds"] = float(v) if is_number(v) else None
    out["seconds_present_nonnum"] = v is not None and not is_number(v)
    return out


def f32_of(v):
    """float32 of a JSON number, np.float32(float(text)); None if not finite as float32."""
    try:
        d = float(v)
    except OverflowError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = np.float32(d)
    if not np.isfinite(f):
        return None
    return f


def parse_rows(path, sidecar_seed):
    """Parse a run's rows. Returns (list of per-row tuples, list of valuation names)."""
    try:
        if path.endswith(".gz"):
            data = read_gzip_all_members(path)
        else:
            with open(path, "rb") as f:
                data = f.read()
            if data.startswith(b"\x1f\x8b"):
                raise ValueError("gzip data in a plain .jsonl file")
    except Exception as e:  # noqa: BLE001
        raise InvalidRun(f"rows {path}: cannot decompress: {e}")
    rows = []
    names = []
    prev_step = None
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip(b" \t\r"):
            continue  # blank line (empty or only JSON whitespace)
        where = f"{path}:{lineno}"
        try:
            obj = json_loads_strict(line.decode("utf-8"))
        except Exception as e:  # noqa: BLE001
            raise InvalidRun(f"{where}: bad JSON: {e}")
        if not isinstance(obj, dict):
            raise InvalidRun(f"{where}: row is not a JSON object")

        board = obj.get("board")
        if not isinstance(board, list) or len(board) != 16:
            raise InvalidRun(f"{where}: 'board' must be a list of 16 exponents")
        for i, e in enumerate(board):
            if not is_int(e) or e < 0:
                raise InvalidRun(f"{where}: board cell {i} is not a non-negative integer: {e!r}")
            if e > 16:
                raise InvalidRun(f"{where}: board cell {i} has exponent {e} (>= 131072), not representable")

        mv = obj.get("move")
        if not isinstance(mv, str) or mv not in MOVES:
            raise InvalidRun(f"{where}: bad move {mv!r}")

        si = obj.get("step_index")
        if si is None:
            si = 0 if prev_step is None else prev_step + 1
            if si > U32_MAX:
                raise InvalidRun(f"{where}: derived step_index {si} beyond u32")
        elif not is_int(si) or si < 0 or si > U32_MAX:
            raise InvalidRun(f"{where}: bad step_index {si!r}")
        prev_step = si

        vt = obj.get("valuation_type")
        if vt is None:
            vt = "search"
        elif not isinstance(vt, str):
            raise InvalidRun(f"{where}: valuation_type is not a string: {vt!r}")

        mr = obj.get("max_rank")
        if mr is None:
            mr = max(board)
        elif not is_int(mr) or mr < 0 or mr > 255:
            raise InvalidRun(f"{where}: bad max_rank {mr!r}")

        sd = obj.get("seed")
        if sd is None:
            sd = sidecar_seed
        elif not is_int(sd) or sd < 0 or sd > U32_MAX:
            raise InvalidRun(f"{where}: bad seed {sd!r}")

        evs_obj = obj.get("branch_evs")
        evs = []
        if evs_obj is None:
            evs = [np.float32(0.0)] * 4
        elif not isinstance(evs_obj, dict):
            raise InvalidRun(f"{where}: branch_evs is not an object")
        else:
            for k in EV_ORDER:
                v = evs_obj.get(k)
                if v is None:
                    evs.append(np.float32(0.0))
                    continue
                if not is_number(v):
                    raise InvalidRun(f"{where}: EV {k} is not a number: {v!r}")
                f = f32_of(v)
                if f is None:
                    raise InvalidRun(f"{where}: EV {k} = {v!r} is not finite as float32")
                evs.append(f)

        packed, mask = pack_board(board)
        be = board_eval(board)
        assert I32_MIN <= be <= I32_MAX
        rows.append((si, packed, be, mask, MOVES[mv], ev_legal_bits(board), mr, sd, evs))
        names.append(vt)
    return rows, names


def build_oracle(root):
    runs, orphans, notes = discover(root)
    valuations = list(BASE_VALUATIONS)
    val_ids = {n: i for i, n in enumerate(valuations)}
    packed = []
    invalid = []
    for run in runs:
        d = run.abs_dir
        try:
            if len(run.sidecar_names) > 1:
                raise InvalidRun(f"{run.base}: both .meta.json and .meta.json.gz in {d}")
            if run.rows_exists and run.rows_plain_exists:
                raise InvalidRun(f"{run.source_path}: both {run.base}.jsonl.gz and {run.base}.jsonl")
            if not run.rows_exists and not run.rows_plain_exists:
                raise InvalidRun(f"{run.source_path}: rows file {run.base}.jsonl(.gz) is missing")
            run.sidecar = parse_sidecar(os.path.join(d, run.sidecar_names[0]))
            rows, names = parse_rows(os.path.join(d, run.rows_name), run.sidecar["seed"])
            new = []
            for n in names:
                if n not in val_ids and n not in new:
                    new.append(n)
            if len(valuations) + len(new) > MAX_VALUATIONS:
                raise InvalidRun(f"{run.source_path}: would introduce valuation name #{MAX_VALUATIONS + 1}")
        except InvalidRun as e:
            run.invalid_reason = str(e)
            invalid.append(run)
            continue
        for n in new:
            val_ids[n] = len(valuations)
            valuations.append(n)
        run.rows = rows
        run.valuation_ids = [val_ids[n] for n in names]
        run.run_id = len(packed)
        packed.append(run)
    return packed, invalid, valuations, orphans, notes


def expected_array(runs):
    total = sum(len(r.rows) for r in runs)
    exp = np.zeros(total, STEP_ROW_DTYPE)
    cols = {name: [] for name in ("run_id", "step_index", "board", "board_eval", "tile_65536_mask",
                                  "move_dir", "valuation_type", "ev_legal", "max_rank", "seed")}
    evs = []
    for run in runs:
        for (si, packed, be, mask, mv, legal, mr, sd, ev), vid in zip(run.rows, run.valuation_ids):
            cols["run_id"].append(run.run_id)
            cols["step_index"].append(si)
            cols["board"].append(packed)
            cols["board_eval"].append(be)
            cols["tile_65536_mask"].append(mask)
            cols["move_dir"].append(mv)
            cols["valuation_type"].append(vid)
            cols["ev_legal"].append(legal)
            cols["max_rank"].append(mr)
            cols["seed"].append(sd)
            evs.append(ev)
    for name, values in cols.items():
        exp[name] = np.array(values, dtype=STEP_ROW_DTYPE.fields[name][0])
    if total:
        exp["branch_evs"] = np.array(evs, dtype=np.float32).reshape(total, 4)
    return exp


# ---------------------------------------------------------------------------
# Pack side.
# ---------------------------------------------------------------------------

class Report:
    def __init__(self):
        self.errors = []

    def error(self, msg):
        self.errors.append(msg)
        print(f"ERROR: {msg}", file=sys.stderr)

    def check(self, cond, msg):
        if not cond:
            self.error(msg)
        return cond


class _HeaderSink:
    """File-like object that keeps only the first bytes np.save writes."""

    def __init__(self, keep):
        self.keep = keep
        self.buf = bytearray()

    def write(self, b):
        b = memoryview(b).cast("B")
        room = self.keep - len(self.buf)
        if room > 0:
            self.buf += b[:room]
        return len(b)

    def flush(self):
        pass


def np_save_header(n):
    """The header bytes np.save writes for n rows of STEP_ROW_DTYPE."""
    sink = _HeaderSink(4096)
    np.save(sink, np.zeros(n, STEP_ROW_DTYPE))
    buf = bytes(sink.buf)
    # header = everything up to and including the '\n' that ends the header dict
    # (the dict has no newline; the zero data that may follow has none either)
    end = buf.index(b"\n") + 1
    return buf[:end]


def find_shards(pack, rep):
    names = sorted(os.listdir(pack))
    numbered = [n for n in names if SHARD_RE.match(n)]
    has_single = "steps.npy" in names
    strays = [n for n in names if n.startswith("steps") and n.endswith(".npy")
              and n != "steps.npy" and not SHARD_RE.match(n)]
    rep.check(not strays, f"stray steps*.npy files in the pack: {strays}")
    if has_single and numbered:
        rep.error("pack has both steps.npy and steps-*.npy")
    if numbered:
        for i, n in enumerate(numbered):
            rep.check(n == f"steps-{i:05d}.npy",
                      f"shard files are not contiguous from steps-00000.npy: expected steps-{i:05d}.npy, found {n}")
        return numbered
    if has_single:
        return ["steps.npy"]
    rep.error("pack has no shard file (steps.npy or steps-00000.npy)")
    return []


def load_shards(pack, shard_names, rep):
    """Load every shard, checking dtype, header, size and padding. Returns list of (name, arr, size)."""
    out = []
    for name in shard_names:
        path = os.path.join(pack, name)
        size = os.path.getsize(path)
        try:
            arr = np.load(path, mmap_mode="r")
        except Exception as e:  # noqa: BLE001
            rep.error(f"{name}: np.load(mmap_mode='r') failed: {e}")
            continue
        if arr.dtype.itemsize == 46:
            rep.error(f"{name}: legacy packed 46-byte rows (dtype {arr.dtype}); writers must write the aligned 48-byte dtype")
            continue
        if not rep.check(arr.dtype == STEP_ROW_DTYPE, f"{name}: dtype {arr.dtype} != STEP_ROW_DTYPE"):
            continue
        if not rep.check(arr.ndim == 1, f"{name}: shape {arr.shape} is not 1-D"):
            continue
        n = arr.shape[0]
        header_len = size - n * ROW_BYTES
        rep.check(header_len == HEADER_BYTES,
                  f"{name}: header is {header_len} bytes (file {size} bytes, {n} rows), expected {HEADER_BYTES}")
        with open(path, "rb") as f:
            head = f.read(max(header_len, 0))
        want = np_save_header(n)
        if head != want:
            rep.error(f"{name}: .npy header differs from np.save's:\n  expected {want!r}\n  found    {head!r}")
        if header_len >= 0 and n:
            raw = np.memmap(path, dtype=np.uint8, mode="r", offset=header_len, shape=(n, ROW_BYTES))
            pad = raw[:, PAD_START:PAD_END]
            bad = np.nonzero(pad.any(axis=1))[0]
            if len(bad):
                rep.error(f"{name}: {len(bad)} rows have non-zero padding bytes 26..27 "
                          f"(first rows {bad[:10].tolist()}, bytes {pad[bad[0]].tolist()})")
        out.append((name, arr, size))
    return out


def concat_safe(shards):
    """Concatenate shards keeping the aligned dtype (np.concatenate would pack it to 46 bytes).

    np.zeros, not np.empty: slice assignment copies field by field and leaves the
    padding bytes 26..27 as they were (see numpy_traps.py).
    """
    total = sum(arr.shape[0] for _, arr, _ in shards)
    allrows = np.zeros(total, STEP_ROW_DTYPE)
    pos = 0
    for _, arr, _ in shards:
        allrows[pos: pos + len(arr)] = arr
        pos += len(arr)
    assert allrows.dtype == STEP_ROW_DTYPE and allrows.dtype.itemsize == 48
    return allrows


def fmt_value(field, v):
    if field == "board":
        return f"0x{int(v):016x}"
    if field == "tile_65536_mask":
        return f"0x{int(v):04x}"
    if field == "ev_legal":
        return f"0b{int(v):04b}"
    if field == "branch_evs":
        return "[" + ", ".join(repr(float(x)) for x in v) + "]"
    return repr(v.item() if hasattr(v, "item") else v)


def run_counts(run_ids, nruns):
    """Rows per run id 0..nruns-1, and how many rows carry an id outside that range."""
    ids = np.asarray(run_ids, dtype=np.int64)
    inside = ids[ids < nruns]
    return np.bincount(inside, minlength=nruns)[:nruns], int(len(ids) - len(inside))


def compare_rows(exp, got, shards, runs, rep):
    if len(exp) != len(got):
        rep.error(f"row count: oracle expects {len(exp)} rows, pack has {len(got)}")
        nruns = len(runs)
        want, _ = run_counts(exp["run_id"], nruns)
        have, outside = run_counts(got["run_id"], nruns)
        if outside:
            rep.error(f"  {outside} pack rows carry a run_id >= {nruns} (the oracle has {nruns} runs)")
        diff = np.nonzero(want != have)[0]
        for rid in diff[:MAX_MISMATCH_PRINTS]:
            src = runs[rid].source_path if rid < len(runs) else "(no such run)"
            rep.error(f"  run_id {rid} ({src}): expected {want[rid]} rows, pack has {have[rid]}")
        return
    # shard/row lookup for messages
    bounds = []
    pos = 0
    for name, arr, _ in shards:
        bounds.append((pos, pos + len(arr), name))
        pos += len(arr)

    def where(g):
        for lo, hi, name in bounds:
            if lo <= g < hi:
                return name, g - lo
        return "?", g

    mismatches = []
    for field in STEP_ROW_DTYPE.names:
        e = exp[field]
        f = got[field]
        if field == "branch_evs":
            neq = np.nonzero((e.view(np.uint32) != f.view(np.uint32)).any(axis=1))[0]  # bitwise
        else:
            neq = np.nonzero(e != f)[0]
        for g in neq[:MAX_MISMATCH_PRINTS]:
            mismatches.append((int(g), field))
        if len(neq):
            rep.errors.append(f"field {field}: {len(neq)} rows differ")
    mismatches.sort()
    for g, field in mismatches[:MAX_MISMATCH_PRINTS]:
        shard, row = where(g)
        rid = int(exp["run_id"][g])
        detail = ""
        if field in ("board", "tile_65536_mask"):
            detail = (f" (expected cells {unpack_board(int(exp['board'][g]), int(exp['tile_65536_mask'][g]))},"
                      f" found cells {unpack_board(int(got['board'][g]), int(got['tile_65536_mask'][g]))})")
        print(f"MISMATCH shard={shard} row={row} global_row={g} run_id={rid} ({runs[rid].source_path}) "
              f"field={field} expected={fmt_value(field, exp[field][g])} found={fmt_value(field, got[field][g])}"
              f"{detail}", file=sys.stderr)
    total = sum(1 for m in rep.errors if m.startswith("field "))
    if total:
        print(f"ERROR: row contents differ ({', '.join(m for m in rep.errors if m.startswith('field '))})",
              file=sys.stderr)


# ---------------------------------------------------------------------------
# metadata.db
# ---------------------------------------------------------------------------

RUNS_SCHEMA = [  # (name, declared type, notnull, pk)
    ("id", "INTEGER", 0, 1),
    ("seed", "BIGINT", 1, 0),
    ("steps", "INT", 1, 0),
    ("max_score", "INT", 1, 0),
    ("highest_tile", "INT", 1, 0),
]
SESSION_SCHEMA = [
    ("meta_key", "TEXT", 0, 1),
    ("meta_value", "TEXT", 1, 0),
]
EXTRA_TABLES = {
    "run_details": ["run_id", "source_path", "rows_path", "depth", "game_index", "num_moves",
                    "max_rank", "sum_tile", "seconds"],
    "run_index": ["run_id", "shard", "row_offset", "global_row"],
    "shards": ["shard", "file_name", "rows", "bytes", "crc32c"],
    "skipped_runs": ["source_path", "reason"],
}


def table_info(con, table):
    return [(r[1], r[2].upper(), r[3], r[5]) for r in con.execute(f"PRAGMA table_info({table})")]


def check_columns(con, table, wanted, rep, required=True):
    info = table_info(con, table)
    if not info:
        if required:
            rep.error(f"metadata.db: table {table} is missing")
        return False
    names = [c[0] for c in info]
    missing = [c for c in wanted if c not in names]
    return rep.check(not missing, f"metadata.db: table {table} lacks columns {missing} (has {names})")


def check_db(pack, runs, invalid, orphans, shards, got, skip_expected, rep):
    path = os.path.join(pack, "metadata.db")
    if not rep.check(os.path.isfile(path), "metadata.db is missing"):
        return
    for suffix in ("-wal", "-shm", "-journal"):
        rep.check(not os.path.exists(path + suffix), f"metadata.db{suffix} left beside the published db")
    with open(path, "rb") as f:
        head = f.read(100)
    rep.check(head[:16] == b"SQLite format 3\x00", "metadata.db is not an SQLite 3 file")
    rep.check(head[18:20] == b"\x01\x01",
              f"metadata.db is not in rollback-journal mode (header bytes 18..19 = {list(head[18:20])}; "
              "2 means WAL): switch to journal_mode=DELETE before publishing")
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    con = sqlite3.connect(uri, uri=True)
    try:
        ok = con.execute("PRAGMA integrity_check").fetchone()[0]
        rep.check(ok == "ok", f"metadata.db integrity_check: {ok}")

        # runs: exact schema
        info = table_info(con, "runs")
        rep.check(info == RUNS_SCHEMA, f"metadata.db: runs schema {info} != {RUNS_SCHEMA}")
        info = table_info(con, "session")
        rep.check(info == SESSION_SCHEMA, f"metadata.db: session schema {info} != {SESSION_SCHEMA}")
        if info:
            nontext = con.execute("SELECT meta_key, typeof(meta_value) FROM session "
                                  "WHERE typeof(meta_value) != 'text' OR typeof(meta_key) != 'text'").fetchall()
            rep.check(not nontext, f"metadata.db: session values are not text: {nontext[:5]}")

        # per-run counts actually in the shards
        nruns = len(runs)
        have, outside = run_counts(got["run_id"], nruns)
        rep.check(not outside, f"shards contain {outside} rows with run_id >= {nruns}")

        db_runs = con.execute("SELECT id, seed, steps, max_score, highest_tile FROM runs ORDER BY id").fetchall()
        rep.check([r[0] for r in db_runs] == list(range(nruns)),
                  f"runs.id is not 0..{nruns - 1}: {len(db_runs)} rows, ids {[r[0] for r in db_runs][:10]}...")
        bad = 0
        for rid, seed, steps, score, tile in db_runs:
            if not (0 <= rid < nruns):
                continue
            run = runs[rid]
            want = (run.sidecar["seed"], len(run.rows), run.sidecar["score"], run.sidecar["max_tile"])
            gotv = (seed, steps, score, tile)
            if gotv != want and bad < MAX_MISMATCH_PRINTS:
                bad += 1
                rep.error(f"runs row id={rid} ({run.source_path}): (seed, steps, max_score, highest_tile) "
                          f"expected {want}, found {gotv}")
            if rid < len(have) and steps != int(have[rid]):
                rep.error(f"runs.steps for id={rid} is {steps} but the shards hold {int(have[rid])} rows of it")

        # run_details
        if check_columns(con, "run_details", EXTRA_TABLES["run_details"], rep):
            rows = con.execute("SELECT run_id, source_path, rows_path, depth, game_index, num_moves, max_rank, "
                               "sum_tile, seconds FROM run_details ORDER BY run_id").fetchall()
            rep.check([r[0] for r in rows] == list(range(nruns)),
                      f"run_details.run_id is not 0..{nruns - 1} ({len(rows)} rows)")
            bad = 0
            for r in rows:
                rid = r[0]
                if not (0 <= rid < nruns):
                    continue
                run = runs[rid]
                sc = run.sidecar
                probs = []
                if r[1] != run.source_path:
                    probs.append(f"source_path {r[1]!r} != {run.source_path!r}")
                rows_abs = os.path.join(run.abs_dir, run.rows_name)
                ok_rows = {run.rows_rel, os.path.abspath(rows_abs), os.path.realpath(rows_abs)}
                if r[2] not in ok_rows:
                    probs.append(f"rows_path {r[2]!r} not in {sorted(ok_rows)}")
                for i, key in ((3, "depth"), (4, "game_index"), (6, "max_rank"), (7, "sum_tile")):
                    if sc[key + "_present_nonint"]:
                        continue  # the sidecar has a non-integer there: spec says nothing; don't judge
                    if r[i] != sc[key]:
                        probs.append(f"{key} {r[i]!r} != sidecar {sc[key]!r}")
                if r[5] != sc["num_moves"]:
                    probs.append(f"num_moves {r[5]!r} != sidecar {sc['num_moves']!r}")
                if not sc["seconds_present_nonnum"]:
                    if (r[8] is None) != (sc["seconds"] is None) or (
                            r[8] is not None and float(r[8]) != sc["seconds"]):
                        probs.append(f"seconds {r[8]!r} != sidecar {sc['seconds']!r}")
                if probs and bad < MAX_MISMATCH_PRINTS:
                    bad += 1
                    rep.error(f"run_details run_id={rid}: " + "; ".join(probs))

        # shards table and run_index
        shard_starts = []
        pos = 0
        for _, arr, _ in shards:
            shard_starts.append(pos)
            pos += len(arr)
        if check_columns(con, "shards", EXTRA_TABLES["shards"], rep):
            rows = con.execute("SELECT shard, file_name, rows, bytes, crc32c FROM shards ORDER BY shard").fetchall()
            rep.check([r[0] for r in rows] == list(range(len(shards))),
                      f"shards table lists shards {[r[0] for r in rows]}, pack has {len(shards)}")
            for r in rows:
                i = r[0]
                if not (0 <= i < len(shards)):
                    continue
                name, arr, size = shards[i]
                with open(os.path.join(pack, name), "rb") as f:
                    crc = f"{crc32c(f.read()):08x}"
                want = (name, len(arr), size, crc)
                rep.check(tuple(r[1:]) == want,
                          f"shards row {i}: (file_name, rows, bytes, crc32c) expected {want}, found {tuple(r[1:])}")
        if check_columns(con, "run_index", EXTRA_TABLES["run_index"], rep):
            rows = con.execute("SELECT run_id, shard, row_offset, global_row FROM run_index ORDER BY run_id").fetchall()
            rep.check([r[0] for r in rows] == list(range(nruns)),
                      f"run_index.run_id is not 0..{nruns - 1} ({len(rows)} rows)")
            # where each run starts: oracle's cumulative row counts
            start = 0
            starts = []
            for run in runs:
                starts.append(start)
                start += len(run.rows)
            bad = 0
            for rid, shard, off, grow in rows:
                if not (0 <= rid < nruns):
                    continue
                probs = []
                if grow != starts[rid]:
                    probs.append(f"global_row {grow} != {starts[rid]}")
                if not runs[rid].rows:
                    # A 0-row run has no first row: accept any position that names its global row
                    # (end of the shard before, start of the next, or one past the last shard).
                    ok_pos = {(k, starts[rid] - shard_starts[k]) for k in range(len(shards))
                              if shard_starts[k] <= starts[rid] <= shard_starts[k] + len(shards[k][1])}
                    if starts[rid] == len(got):
                        ok_pos.add((len(shards), 0))
                    if (shard, off) not in ok_pos:
                        probs.append(f"(shard {shard}, row_offset {off}) of an empty run is not at global row "
                                     f"{starts[rid]} (accepted: {sorted(ok_pos)})")
                elif not (isinstance(shard, int) and 0 <= shard < len(shards)):
                    probs.append(f"shard {shard} out of range")
                else:
                    n_in = len(shards[shard][1])
                    if not (isinstance(off, int) and 0 <= off < n_in):
                        probs.append(f"row_offset {off} outside shard {shard} ({n_in} rows)")
                    elif shard_starts[shard] + off != starts[rid]:
                        probs.append(f"(shard {shard}, row_offset {off}) is global row "
                                     f"{shard_starts[shard] + off}, expected {starts[rid]}")
                    elif runs[rid].rows and int(got["run_id"][starts[rid]]) != rid:
                        probs.append(f"the row there has run_id {int(got['run_id'][starts[rid]])}")
                if probs and bad < MAX_MISMATCH_PRINTS:
                    bad += 1
                    rep.error(f"run_index run_id={rid}: " + "; ".join(probs))

        # orphan rows files (optional table): exactly the rows files without a sidecar
        if table_info(con, "orphan_rows_files"):
            listed_orphans = sorted(r[0] for r in con.execute("SELECT path FROM orphan_rows_files"))
            rep.check(listed_orphans == sorted(orphans),
                      f"orphan_rows_files lists {listed_orphans[:10]}, expected {sorted(orphans)[:10]}")

        # skipped runs
        has_skipped = bool(table_info(con, "skipped_runs"))
        listed = []
        if has_skipped:
            check_columns(con, "skipped_runs", EXTRA_TABLES["skipped_runs"], rep)
            listed = con.execute("SELECT source_path, reason FROM skipped_runs").fetchall()
            empty_reasons = [p for p, r in listed if not isinstance(r, str) or not r.strip()]
            rep.check(not empty_reasons, f"skipped_runs without a reason: {empty_reasons[:5]}")
        if skip_expected:
            rep.check(has_skipped, "metadata.db has no skipped_runs table")
        listed_paths = sorted(p for p, _ in listed)
        # A base with both sidecar forms is one invalid run; accept either or both paths for it.
        ok = len(listed_paths) == len(set(listed_paths))
        remaining = set(listed_paths)
        for run in invalid:
            hit = [p for p in run.all_source_paths if p in remaining]
            if not hit:
                ok = False
            remaining -= set(hit)
        if remaining:
            ok = False
        rep.check(ok, "skipped_runs does not list exactly the invalid runs:\n  expected "
                  f"{[r.all_source_paths if len(r.all_source_paths) > 1 else r.source_path for r in invalid]}"
                  f"\n  found    {listed_paths}")
    finally:
        con.close()


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# Run fingerprints, as docs/format.md defines them, from the oracle's own rows.
# ---------------------------------------------------------------------------

FINGERPRINT_TAG = b"dataset-packer run fingerprint v1\n"
STANDARD_VALUATIONS = ("search", "tuple11", "tuple10")


def expected_fingerprint(run, run_rows, valuations):
    """XXH3-128 of the tag, the runs facts, the canonical rows and the extra names."""
    import struct

    import xxhash

    canonical = {}
    extra = []
    # Work on the raw 48-byte records: a structured copy would leave the padding undefined.
    rows = np.frombuffer(run_rows.tobytes(), np.uint8).reshape(-1, 48).copy()
    for i, vid in enumerate(run_rows["valuation_type"]):
        name = valuations[int(vid)]
        if name not in canonical:
            if name in STANDARD_VALUATIONS:
                canonical[name] = STANDARD_VALUATIONS.index(name)
            else:
                extra.append(name)
                canonical[name] = len(STANDARD_VALUATIONS) + len(extra) - 1
        rows[i, 23] = canonical[name]
    rows[:, 0:4] = 0
    sc = run.sidecar
    h = xxhash.xxh3_128()
    h.update(FINGERPRINT_TAG)
    h.update(struct.pack("<qQqq", sc["seed"], len(run_rows), sc["score"], sc["max_tile"]))
    h.update(rows.tobytes())
    for name in extra:
        b = name.encode("utf-8")
        h.update(struct.pack("<I", len(b)) + b)
    h.update(struct.pack("<I", len(extra)))
    return h.hexdigest()


def check_fingerprints(pack, runs, exp, valuations, rep):
    con = sqlite3.connect(f"file:{os.path.join(pack, 'metadata.db')}?mode=ro", uri=True)
    try:
        got = dict(con.execute("SELECT run_id, fingerprint FROM run_details").fetchall())
        dup_count = con.execute(
            "SELECT count FROM finding_counts WHERE kind = 'duplicate_run'").fetchone()
    finally:
        con.close()
    start = 0
    seen = set()
    duplicates = 0
    bad = 0
    for run in runs:
        n = len(run.rows)
        want = expected_fingerprint(run, exp[start:start + n], valuations)
        start += n
        duplicates += want in seen
        seen.add(want)
        have = got.get(run.run_id)
        if have != want and bad < MAX_MISMATCH_PRINTS:
            bad += 1
            rep.error(f"run_details.fingerprint of run {run.run_id} is {have!r}, expected {want}")
    recorded = dup_count[0] if dup_count else 0
    rep.check(recorded == duplicates,
              f"finding_counts duplicate_run is {recorded}, the oracle finds {duplicates} duplicate runs")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Check a dataset-packer pack against its raw drop.")
    ap.add_argument("--raw", required=True, help="raw drop directory the pack was made from")
    ap.add_argument("--pack", required=True, help="pack directory written by dataset-packer")
    ap.add_argument("--skip-invalid-expected", type=int, default=None, metavar="N",
                    help="the raw dir holds N invalid runs the pack left out (packed with --skip-invalid)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.raw):
        print(f"error: --raw {args.raw} is not a directory", file=sys.stderr)
        return 2
    if not os.path.isdir(args.pack):
        print(f"error: --pack {args.pack} is not a directory", file=sys.stderr)
        return 2

    rep = Report()
    runs, invalid, valuations, orphans, notes = build_oracle(args.raw)
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    if orphans:
        print(f"note: {len(orphans)} rows file(s) without a sidecar ignored, e.g. {orphans[:3]}", file=sys.stderr)
    expected_skips = args.skip_invalid_expected or 0
    if len(invalid) != expected_skips:
        rep.error(f"the oracle finds {len(invalid)} invalid run(s) in the raw dir, expected {expected_skips} "
                  f"(--skip-invalid-expected):")
        for r in invalid[:MAX_MISMATCH_PRINTS]:
            print(f"  {r.source_path}: {r.invalid_reason}", file=sys.stderr)

    shard_names = find_shards(args.pack, rep)
    shards = load_shards(args.pack, shard_names, rep)
    if len(shards) == len(shard_names):
        empties = [name for name, arr, _ in shards if len(arr) == 0]
        if empties and not (len(shards) == 1):
            rep.error(f"empty shard(s) in a multi-shard pack: {empties}")
    got = concat_safe(shards)
    exp = expected_array(runs)
    compare_rows(exp, got, shards, runs, rep)

    vpath = os.path.join(args.pack, "valuation_types.json")
    try:
        with open(vpath, "rb") as f:
            vt = json.loads(f.read().decode("utf-8"))
        rep.check(vt == valuations, f"valuation_types.json is {vt!r}, expected {valuations!r}")
    except Exception as e:  # noqa: BLE001
        rep.error(f"valuation_types.json unreadable: {e}")

    try:
        check_db(args.pack, runs, invalid, orphans, shards, got, args.skip_invalid_expected, rep)
        check_fingerprints(args.pack, runs, exp, valuations, rep)
    except sqlite3.Error as e:
        rep.error(f"metadata.db: {e}")

    if rep.errors:
        print(f"FAILED: {len(rep.errors)} problem(s) found (pack {args.pack}, raw {args.raw})", file=sys.stderr)
        return 1
    print(f"OK: {len(runs)} runs, {len(got)} rows, {len(shards)} shards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
