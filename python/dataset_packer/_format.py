"""The pack as files: the row dtypes, finding and checking the shards, valuation_types.json.

A pack folder holds `steps.npy` or `steps-00000.npy`, `steps-00001.npy`, … (shards of 48-byte
aligned rows, or 46-byte rows in a legacy pack), `metadata.db` and `valuation_types.json`.
This module checks each shard's `.npy` header (dtype, shape, file size) and memory-maps its
rows as a `(rows, row_bytes)` uint8 array, so nothing is read until it is used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._errors import NotAPackError, PackError

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

    @property
    def legacy(self) -> bool:
        return self.row_bytes == LEGACY_ROW_BYTES


def find_shard_paths(folder: Path) -> list[Path]:
    """The pack's shard files in shard order; refuses stray, missing or doubled shards."""
    single = folder / SINGLE_NAME
    numbered: dict[int, Path] = {}
    for path in folder.glob("steps*.npy"):
        if path.name == SINGLE_NAME:
            continue
        match = SHARD_NAME.fullmatch(path.name)
        if match is None:
            raise PackError(f"{path} is named like a shard but is not one of the pack's "
                            "(shards are steps.npy or steps-00000.npy, steps-00001.npy, …)")
        numbered[int(match.group(1))] = path
    if numbered and single.exists():
        raise PackError(f"{folder} holds both {SINGLE_NAME} and steps-NNNNN.npy shards")
    if not numbered:
        if not single.exists():
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


def read_shard_header(path: Path) -> Shard:
    """Checks a shard's `.npy` header (dtype, 1-d shape, C order) and its file size."""
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except ValueError as e:
            raise PackError(f"{path}: not a readable .npy file ({e})") from None
        data_offset = f.tell()
    if dtype == STEP_ROW_DTYPE and dtype.itemsize == ROW_BYTES:
        row_bytes = ROW_BYTES
    elif dtype == LEGACY_ROW_DTYPE and dtype.itemsize == LEGACY_ROW_BYTES:
        row_bytes = LEGACY_ROW_BYTES
    else:
        raise PackError(f"{path}: dtype {dtype} is not the pack's row dtype "
                        f"(48-byte STEP_ROW_DTYPE, or the legacy 46-byte layout)")
    if len(shape) != 1 or fortran:
        raise PackError(f"{path}: shape {shape} (fortran_order={fortran}); "
                        "a shard is a 1-d array in C order")
    rows = int(shape[0])
    size = path.stat().st_size
    want = data_offset + rows * row_bytes
    if size != want:
        raise PackError(f"{path}: {size} bytes, but its header says {rows} rows "
                        f"({want} bytes): the file is truncated or has extra bytes")
    return Shard(path=path, rows=rows, row_bytes=row_bytes, data_offset=data_offset)


def map_shard(shard: Shard) -> np.ndarray:
    """The shard's rows as a read-only memory-mapped `(rows, row_bytes)` uint8 array."""
    if shard.rows == 0:
        return np.zeros((0, shard.row_bytes), dtype=np.uint8)
    flat = np.memmap(shard.path, dtype=np.uint8, mode="r", offset=shard.data_offset,
                     shape=(shard.rows * shard.row_bytes,))
    # A plain ndarray over the map (it keeps the map alive): np.memmap's subclass hooks
    # would run on every slice and field access.
    return flat.view(np.ndarray).reshape(shard.rows, shard.row_bytes)


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
