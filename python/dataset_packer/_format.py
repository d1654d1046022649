"""The pack as files: the row dtypes, finding and checking the shards, valuation_types.json.

A pack folder holds `steps.npy` or `steps-00000.npy`, `steps-00001.npy`, … (shards of 48-byte
aligned rows, or 46-byte rows in a legacy pack), `metadata.db` and `valuation_types.json`.
This module checks each shard's `.npy` header (dtype, shape, file size) and memory-maps its
rows as a `(rows, row_bytes)` uint8 array, so nothing is read until it is used.
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._errors import NotAPackError, PackError
from ._maps import map_readonly

#: The row dtype of the pack format, exactly (48 bytes, two zero padding bytes at 26..28).
STEP_ROW_DTYPE = np.dtype([
    ("run_id", np.uint32), ("step_index", np.uint32), ("board", np.uint64),
    ("board_eval", np.int32), ("tile_65536_mask", np.uint16), ("move_dir", np.uint8),
    ("valuation_type", np.uint8), ("ev_legal", np.uint8), ("max_rank", np.uint8),
    ("seed", np.uint32), ("branch_evs", np.float32, (4,)),
], align=True)

#: The packed 46-byte layout an older tool wrote (same fields, no padding).
LEGACY_ROW_DTYPE = np.dtype([
    ("run_id", "<u4"), ("step_index", "<u4"), ("board", "<u8"), ("board_eval", "<i4"),
    ("tile_65536_mask", "<u2"), ("move_dir", "u1"), ("valuation_type", "u1"),
    ("ev_legal", "u1"), ("max_rank", "u1"), ("seed", "<u4"), ("branch_evs", "<f4", (4,)),
])

ROW_BYTES = 48
LEGACY_ROW_BYTES = 46
#: Where the padding sits in a 48-byte row (a legacy row lacks these two bytes).
PADDING = slice(26, 28)

SHARD_NAME = re.compile(r"steps-(\d{5,})\.npy")
SINGLE_NAME = "steps.npy"
METADATA_NAME = "metadata.db"
VALUATION_NAME = "valuation_types.json"
MAX_VALUATION_NAMES = 256


@dataclass(frozen=True)
class Shard:
    """One shard file: where its rows start, how many and how wide (48, or 46 when legacy)."""

    path: Path
    rows: int
    row_bytes: int
    data_offset: int
    #: Where the rows are read from when not `path`: the file as the pack was opened
    #: (`_snapshot.Held.source`).
    source: Path | None = None

    @property
    def legacy(self) -> bool:
        return self.row_bytes == LEGACY_ROW_BYTES


def find_shard_paths(folder: Path, names=None) -> list[Path]:
    """The pack's shard files in shard order (of the file `names` in `folder`, by default
    those there now); refuses stray, missing or doubled shards."""
    single = folder / SINGLE_NAME
    numbered: dict[int, Path] = {}
    if names is None:
        names = [p.name for p in folder.glob("steps*.npy")]
    has_single = SINGLE_NAME in names
    for path in (folder / n for n in names if n.startswith("steps") and n.endswith(".npy")):
        if path.name == SINGLE_NAME:
            continue
        match = SHARD_NAME.fullmatch(path.name)
        if match is None:
            raise PackError(f"{path} is named like a shard but is not one of the pack's "
                            "(shards are steps.npy or steps-00000.npy, steps-00001.npy, …)")
        numbered[int(match.group(1))] = path
    if numbered and has_single:
        raise PackError(f"{folder} holds both {SINGLE_NAME} and steps-NNNNN.npy shards")
    if not numbered:
        if not has_single:
            raise NotAPackError(f"{folder} is not a pack: it has no {SINGLE_NAME} "
                                "and no steps-NNNNN.npy shards")
        return [single]
    expected = list(range(len(numbered)))
    if sorted(numbered) != expected:
        missing = sorted(set(expected) - set(numbered))
        raise PackError(f"{folder}: shard numbers are not contiguous from 0 "
                        f"(missing steps-{missing[0]:05d}.npy)" if missing else
                        f"{folder}: shard numbers are not contiguous from 0")
    return [numbered[i] for i in expected]


def read_shard_header(path: Path, source: Path | None = None) -> Shard:
    """Checks a shard's `.npy` header (read as `read_npy_header` reads it: dtype, 1-d shape,
    C order) and its file size; read from `source` when given (`path` names it)."""
    try:
        header, size = read_npy_header(source or path)
    except HeaderError as e:
        raise PackError(f"{path}: bad .npy header: {e}") from None
    dtype = header.dtype
    if dtype == STEP_ROW_DTYPE and dtype.itemsize == ROW_BYTES:
        row_bytes = ROW_BYTES
    elif dtype == LEGACY_ROW_DTYPE and dtype.itemsize == LEGACY_ROW_BYTES:
        row_bytes = LEGACY_ROW_BYTES
    else:
        raise PackError(f"{path}: dtype {header.descr} is not the pack's row dtype "
                        f"(48-byte STEP_ROW_DTYPE, or the legacy 46-byte layout)")
    if header.fortran_order:
        raise PackError(f"{path}: bad .npy header: 'fortran_order': True, but a shard is in "
                        "C order")
    if len(header.shape) != 1:
        raise PackError(f"{path}: bad .npy header: 'shape': {list(header.shape)} is not "
                        "1-dimensional (a shard is one row per step)")
    rows = int(header.shape[0])
    want = header.data_offset + rows * row_bytes
    if size != want:
        raise PackError(f"{path}: {size} bytes, but its header says {rows} rows "
                        f"({want} bytes): the file is truncated or has extra bytes")
    return Shard(path=path, rows=rows, row_bytes=row_bytes, data_offset=header.data_offset,
                 source=source)


def map_shard(shard: Shard, random: bool = False) -> np.ndarray:
    """The shard's rows as a read-only memory-mapped `(rows, row_bytes)` uint8 array
    (`random`: advised MADV_RANDOM, `_maps`)."""
    if shard.rows == 0:
        return np.zeros((0, shard.row_bytes), dtype=np.uint8)
    # A plain ndarray over the map (it keeps the map alive): np.memmap's subclass hooks
    # would run on every slice and field access.
    return map_readonly(shard.source or shard.path, np.uint8, shard.data_offset,
                        (shard.rows, shard.row_bytes), random)


def widen_legacy(raw: np.ndarray) -> np.ndarray:
    """46-byte legacy rows `(n, 46)` as 48-byte rows `(n, 48)` with zero padding."""
    out = np.zeros((raw.shape[0], ROW_BYTES), dtype=np.uint8)
    out[:, :PADDING.start] = raw[:, :PADDING.start]
    out[:, PADDING.stop:] = raw[:, PADDING.start:]
    return out


def read_valuation_names(path: Path) -> list[str]:
    """The id → name table, from any of the three forms packs use: `["search", …]`,
    `{"0": "search", …}` (id → name) or `{"search": 0, …}` (name → id)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotAPackError(f"{path.parent} is not a pack: it has no {VALUATION_NAME}") from None
    except ValueError as e:
        raise PackError(f"{path}: not valid JSON ({e})") from None
    pairs = _valuation_pairs(value, path)
    names: list[str | None] = [None] * len(pairs)
    for vid, name in pairs:
        if not 0 <= vid < len(pairs):
            raise PackError(f"{path}: ids are not contiguous from 0 (found id {vid})")
        if names[vid] is not None:
            raise PackError(f"{path}: id {vid} appears twice")
        names[vid] = name
    if len(names) > MAX_VALUATION_NAMES:
        raise PackError(f"{path}: {len(names)} names; at most 256 fit the one-byte id")
    if len(set(names)) != len(names):
        raise PackError(f"{path}: a name appears twice")
    return [str(n) for n in names]


def _valuation_pairs(value, path: Path) -> list[tuple[int, str]]:
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise PackError(f"{path}: every entry of the array must be a name")
        return list(enumerate(value))
    if isinstance(value, dict):
        if all(isinstance(v, str) for v in value.values()):
            try:
                return [(int(k), v) for k, v in value.items()]
            except ValueError:
                raise PackError(f"{path}: an id → name object needs numeric keys") from None
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value.values()):
            return [(v, k) for k, v in value.items()]
        raise PackError(f"{path}: an object must map ids to names or names to ids")
    raise PackError(f"{path}: expected an array of names or an object")


# --- .npy headers -------------------------------------------------------------------------
# One reading of a header, the same as the Rust crate's (src/format/npy.rs, dtype.rs), rule
# for rule and message for message: what np.load reads, read as it reads it (format 1.0 and
# 2.0 in Latin-1, 3.0 in UTF-8, up to NumPy's 10,000 characters, the dict as ast.literal_eval
# reads it); refused, naming the key, where NumPy would read something else than the format
# allows (a key given twice: NumPy takes the last; another key) or where the reading is not
# certain (the literal and dtype spellings outside what NumPy's writers use).

#: The most characters of header text np.load reads without allow_pickle=True.
MAX_HEADER_CHARS = 10_000
_MAGIC = b"\x93NUMPY"
_KEYS = ("descr", "fortran_order", "shape")
_MAX_DEPTH = 32
_MAX_ITEM_BYTES = 2**31 - 1
_UNITS = ("[Y]", "[M]", "[W]", "[D]", "[h]", "[m]", "[s]", "[ms]", "[us]", "[ns]", "[ps]",
          "[fs]", "[as]", "")
_WS = " \t\n\r\x0c"


class HeaderError(ValueError):
    """A `.npy` header this package does not read (the message says which key and why)."""


@dataclass(frozen=True)
class NpyHeader:
    """A `.npy` header as NumPy reads it: the dtype, its descr text, shape, order, data offset."""

    descr: str
    dtype: np.dtype
    shape: tuple
    fortran_order: bool
    data_offset: int


class _Dict(list):
    """A dict literal's items in order, repeated keys kept."""


def _show(value) -> str:
    """A literal as the Rust reader prints it in messages."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):
        if "'" in value and '"' not in value:
            return f'"{value}"'
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, _Dict):
        return "{" + ", ".join(f"{_show(k)}: {_show(v)}" for k, v, _ in value) + "}"
    if isinstance(value, tuple):
        inner = ", ".join(_show(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return "[" + ", ".join(_show(v) for v in value) + "]"


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.at = 0

    def char(self):
        return self.s[self.at] if self.at < len(self.s) else None

    def skip_ws(self):
        while self.at < len(self.s) and self.s[self.at] in _WS:
            self.at += 1

    def peek(self):
        self.skip_ws()
        return self.char()

    def unexpected(self) -> HeaderError:
        return HeaderError(f"unexpected {_rust_debug(self.s[self.at:self.at + 12])} "
                           f"at character {self.at}")

    def value(self, depth: int):
        if depth > _MAX_DEPTH:
            raise HeaderError("nested too deeply")
        c = self.peek()
        if c in ("'", '"'):
            return self.string()
        if c == "(":
            return self.parenthesized(depth)
        if c == "[":
            self.at += 1
            return list(self.items("]", depth)[0])
        if c == "{":
            return self.dict_items(depth)
        if c is not None and (c == "-" or "0" <= c <= "9"):
            return self.int()
        if c is not None and c.isascii() and c.isalpha():
            return self.word()
        if c is None:
            raise HeaderError("unexpected end")
        raise self.unexpected()

    def string(self) -> str:
        quote = self.s[self.at]
        i = self.at + 1
        out = []
        while i < len(self.s):
            c = self.s[i]
            if c == quote:
                self.at = i + 1
                return "".join(out)
            if c in "\n\r":
                raise HeaderError("a line end inside a string")
            if c < " " and c != "\t":
                raise HeaderError(f"control character {_rust_debug(c, quote=chr(39))} inside a string")
            if c == "\\":
                e = self.s[i + 1] if i + 1 < len(self.s) else ""
                i += 2
                simple = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
                if e in simple:
                    out.append(simple[e])
                    continue
                if e in ("x", "u", "U"):
                    digits = {"x": 2, "u": 4, "U": 8}[e]
                    hex_ = self.s[i:i + digits]
                    i += len(hex_)
                    try:
                        code = int(hex_, 16) if (len(hex_) == digits and hex_.isascii()
                                                 and all(h in "0123456789abcdefABCDEF"
                                                         for h in hex_)) else -1
                    except ValueError:
                        code = -1
                    if code < 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                        raise HeaderError(f"bad escape \\{e}{hex_}")
                    out.append(chr(code))
                    continue
                raise HeaderError(f"escape \\{e} in a string (only the escapes repr writes "
                                  "are read)")
            out.append(c)
            i += 1
        raise HeaderError("unterminated string")

    def int(self) -> int:
        start = self.at
        if self.char() == "-":
            self.at += 1
        digits_at = self.at
        while self.at < len(self.s) and "0" <= self.s[self.at] <= "9":
            self.at += 1
        digits = self.s[digits_at:self.at]
        text = self.s[start:self.at]
        nxt = self.char()
        if (not digits or (len(digits) > 1 and digits[0] == "0" and digits.strip("0"))
                or (nxt is not None and nxt.isascii() and (nxt.isalnum() or nxt in "_."))):
            raise HeaderError(f"{_rust_debug(self.s[start:start + 12])} is not a decimal integer")
        value = int(text)
        if not -(2**127) <= value < 2**127:
            raise HeaderError(f"integer {text} is too large")
        return value

    def word(self):
        start = self.at
        while self.at < len(self.s) and self.s[self.at].isascii() and (
                self.s[self.at].isalnum() or self.s[self.at] == "_"):
            self.at += 1
        word = self.s[start:self.at]
        if word in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[word]
        raise HeaderError(f"{_rust_debug(word)} is not a literal")

    def parenthesized(self, depth: int):
        self.at += 1
        items, comma = self.items(")", depth)
        if len(items) == 1 and not comma:
            return items[0]
        return tuple(items)

    def items(self, close: str, depth: int):
        items, comma = [], False
        while True:
            if self.peek() == close:
                self.at += 1
                return items, comma
            items.append(self.value(depth + 1))
            c = self.peek()
            if c == ",":
                comma = True
                self.at += 1
            elif c != close:
                raise self.unexpected()

    def dict_items(self, depth: int) -> _Dict:
        self.at += 1
        items = _Dict()
        while True:
            if self.peek() == "}":
                self.at += 1
                return items
            key = self.value(depth + 1)
            if self.peek() != ":":
                raise self.unexpected()
            self.at += 1
            self.skip_ws()
            start = self.at
            value = self.value(depth + 1)
            items.append((key, value, self.s[start:self.at]))
            c = self.peek()
            if c == ",":
                self.at += 1
            elif c != "}":
                raise self.unexpected()


def _rust_debug(text: str, quote: str = '"') -> str:
    """A string quoted as Rust's `{:?}` quotes it (for messages identical to the CLI's)."""
    out = []
    for c in text:
        if c == "\\" or c == quote:
            out.append("\\" + c)
        elif c in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c])
        elif c == "\0":
            out.append("\\0")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{{{ord(c):x}}}")
        else:
            out.append(c)
    return quote + "".join(out) + quote


def _parse_header_dict(text: str) -> _Dict:
    if "\0" in text:
        raise HeaderError("it holds a NUL character, which Python refuses in a literal")
    p = _Parser(text)
    while p.char() in (" ", "\t"):
        p.at += 1
    if p.char() != "{":
        raise HeaderError("it is not a dict literal starting the header (`{` after spaces at most)")
    items = p.dict_items(0)
    while p.char() in (" ", "\t", "\x0c"):
        p.at += 1
    if text[p.at:] not in ("", "\n", "\r\n", "\r"):
        raise HeaderError(f"unexpected text after the dict at character {p.at}")
    return items


def _is_shape(value) -> bool:
    return isinstance(value, tuple) and all(type(v) is int and 0 <= v < 2**64 for v in value)


def _sub_array_size(inner: int, shape, what: str) -> int:
    if not _is_shape(shape) or not shape:
        raise HeaderError(f"{what}: shape {_show(shape)} is not a tuple of sizes such as (4,)")
    size = inner
    for n in shape:
        size *= n
    if size > _MAX_ITEM_BYTES:
        raise HeaderError(f"{what} is too large")
    return size


def _scalar_size(text: str) -> tuple[str, int]:
    """The kind and size of a type string the Rust reader accepts, or HeaderError."""
    def bad(why: str):
        return HeaderError(f"'descr': type {_rust_debug(text)} {why}")
    rest = text[1:] if text[:1] in ("<", ">", "|", "=") else text
    if not rest:
        raise bad("is empty")
    kind, tail = rest[0], rest[1:]
    n_digits = 0
    while n_digits < len(tail) and tail[n_digits] in "0123456789":
        n_digits += 1
    digits, unit = tail[:n_digits], tail[n_digits:]
    if not (unit == "" or (kind in "mM" and unit in _UNITS)):
        raise bad("is not one this tool reads")
    if kind == "O" and digits == "":
        n = 8
    elif digits.startswith("0") or not digits:
        raise bad("has no size")
    else:
        n = int(digits)
    fits = {"b": n == 1, "i": n in (1, 2, 4, 8), "u": n in (1, 2, 4, 8), "f": n in (2, 4, 8),
            "c": n in (8, 16), "m": n == 8, "M": n == 8, "O": n == 8,
            "V": n <= _MAX_ITEM_BYTES // 4, "S": n <= _MAX_ITEM_BYTES // 4,
            "U": n <= _MAX_ITEM_BYTES // 4}
    if kind not in fits:
        raise bad("is not one this tool reads")
    if not fits[kind]:
        raise bad("has a size NumPy does not read the same on every machine")
    return kind, n * 4 if kind == "U" else n


def _descr_size(descr, depth: int = 0) -> int:
    """The item size of a descr the Rust reader accepts (checking it as that reader does)."""
    if depth > _MAX_DEPTH:
        raise HeaderError("'descr': dtype nested too deeply")
    if isinstance(descr, str):
        return _scalar_size(descr)[1]
    if isinstance(descr, list):
        names, offset = [], 0
        for item in descr:
            offset += _field_size(item, names, depth)
            if offset > _MAX_ITEM_BYTES:
                raise HeaderError("'descr': the dtype is too large")
        return offset
    if isinstance(descr, _Dict):
        raise HeaderError(f"'descr': {_show(descr)} is a dict-form descr, which NumPy's np.load "
                          "refuses (np.save writes a list of fields)")
    if isinstance(descr, tuple) and len(descr) == 2:
        return _sub_array_size(_descr_size(descr[0], depth + 1), descr[1],
                               "'descr': " + _show(descr))
    raise HeaderError(f"'descr': {_show(descr)} is not a dtype")


def _field_size(item, names: list, depth: int) -> int:
    if not isinstance(item, (tuple, list)):
        raise HeaderError(f"'descr': field {_show(item)} is not a (name, type) tuple")
    if len(item) not in (2, 3):
        raise HeaderError(f"'descr': field {_show(item)} is not a (name, type) or "
                          "(name, type, shape) tuple")
    name = item[0]
    if isinstance(name, tuple):
        raise HeaderError(f"'descr': field {_show(item)} has a title, which this tool does not read")
    if not isinstance(name, str):
        raise HeaderError(f"'descr': field name {_show(name)} is not a string")
    size = _descr_size(item[1], depth + 1)
    plain_void = isinstance(item[1], str) and _scalar_size(item[1])[0] == "V"
    if len(item) == 3:
        size = _sub_array_size(size, item[2], f"'descr': field {_rust_debug(name)}")
        plain_void = False
    if name == "" and not plain_void:
        raise HeaderError(f"'descr': field {_show(item)} has no name and is not '|V' padding "
                          "(NumPy would keep it as a field named '')")
    if name and name in names:
        raise HeaderError(f"'descr': field {_rust_debug(name)} is named twice "
                          "(NumPy refuses the dtype)")
    names.append(name)
    return size


def header_size(prefix: bytes) -> int:
    """How many bytes the header of a `.npy` file starting with `prefix` (12 bytes) takes."""
    start, length, latin1 = _prelude(prefix)
    if length > (MAX_HEADER_CHARS if latin1 else 4 * MAX_HEADER_CHARS):
        raise _too_long(length, "bytes")
    return start + length


def _prelude(data: bytes) -> tuple[int, int, bool]:
    if len(data) < 8 or data[:6] != _MAGIC:
        if len(data) < 8 and _MAGIC.startswith(data[:6]):
            raise HeaderError("truncated: too short for a .npy file")
        raise HeaderError("not a .npy file (no \\x93NUMPY magic)")
    version = (data[6], data[7])
    known = {(1, 0): (10, True), (2, 0): (12, True), (3, 0): (12, False)}
    if version not in known:
        raise HeaderError(f"format version {version[0]}.{version[1]}: NumPy reads versions "
                          "1.0, 2.0 and 3.0 only")
    start, latin1 = known[version]
    if len(data) < start:
        raise HeaderError("truncated: the file ends inside the header length")
    return start, int.from_bytes(data[8:start], "little"), latin1


def _too_long(length: int, unit: str) -> HeaderError:
    return HeaderError(f"the header is {length} {unit} long, over NumPy's limit of "
                       f"{MAX_HEADER_CHARS} characters (np.load refuses it)")


def parse_npy_header(data: bytes) -> NpyHeader:
    """Reads a `.npy` header from the file's first bytes (the whole header: `header_size`)."""
    start, length, latin1 = _prelude(data)
    end = header_size(data)
    if len(data) < end:
        raise HeaderError(f"truncated: the header says it is {length} bytes, the file ends "
                          f"after {len(data) - start}")
    raw = data[start:end]
    if latin1:
        text = raw.decode("latin-1")
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise HeaderError("the header is not UTF-8, which format 3.0 requires") from None
    if len(text) > MAX_HEADER_CHARS:
        raise _too_long(len(text), "characters")
    try:
        items = _parse_header_dict(text)
    except HeaderError as e:
        raise HeaderError(f"the header is not a dict: {e}") from None
    found: dict[str, tuple] = {}
    for key, value, value_text in items:
        if not (isinstance(key, str) and key in _KEYS):
            raise HeaderError(f"key {_show(key)} is not one of 'descr', 'fortran_order' and "
                              "'shape' (NumPy refuses a header with any other key)")
        if key in found:
            raise HeaderError(f"key '{key}' is given twice, as {found[key][1].strip()} and as "
                              f"{value_text.strip()}: NumPy reads the last, a reader of the "
                              "first would read the other")
        found[key] = (value, value_text)
    for key in _KEYS:
        if key not in found:
            raise HeaderError(f"no key '{key}'")
    descr, descr_text = found["descr"]
    if isinstance(descr, tuple):
        raise HeaderError(f"'descr': {_show(descr)} is a sub-array type, which np.save never "
                          "writes (it writes the array's full shape)")
    _descr_size(descr)
    fortran = found["fortran_order"][0]
    if not isinstance(fortran, bool):
        raise HeaderError(f"'fortran_order': {_show(fortran)} is not True or False")
    shape = found["shape"][0]
    if not _is_shape(shape):
        raise HeaderError(f"'shape': {_show(shape)} is not a tuple of lengths such as (500,) "
                          "(NumPy reads a shape only as a tuple of integers)")
    # The dtype exactly as np.load builds it; and the dict as np.load reads it must be the one
    # read here (a guard: the rules above are meant to make that always so).
    dtype = np.lib.format.descr_to_dtype(descr)
    try:
        numpy_reads = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        numpy_reads = None
    if numpy_reads != {"descr": descr, "fortran_order": fortran, "shape": shape}:
        raise HeaderError("NumPy reads this header differently")
    return NpyHeader(descr_text.strip(), dtype, shape, fortran, end)


def read_npy_header(path: Path) -> tuple[NpyHeader, int]:
    """The header of the `.npy` file at `path` (read whole, however long, never more than
    NumPy reads) and the file's size; HeaderError when it is not one this package reads."""
    with open(path, "rb") as f:
        prefix = f.read(12)
        data = prefix + f.read(max(header_size(prefix) - len(prefix), 0))
        return parse_npy_header(data), os.fstat(f.fileno()).st_size
