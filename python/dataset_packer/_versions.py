"""A pack's identity, as resume states record it, and the check of a saved state against it.

An epoch's order is a function of the rows it permutes, so a resume point (epoch,
start_sample) means something only on the rows it was saved on. Every resume state therefore
records the identity of the pack it was saved on: `pack_id` (None for a pack made before
packs had one), `version` and `rows`. A state is loaded only into a reader over the same
rows; anything else is refused with both identities named, instead of resuming silently
with another permutation.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from ._errors import VersionError

#: The keys of a pack's identity in a resume state.
IDENTITY_KEYS = ("pack_id", "version", "rows")


def identity(pack_id: str | None, version: int, rows: int) -> dict:
    return {"pack_id": pack_id, "version": int(version), "rows": int(rows)}


def describe(found: Mapping) -> str:
    """`pack_id@version, N rows`, as messages name a pack's state."""
    pack_id = found.get("pack_id")
    return f"{pack_id if pack_id is not None else '(no pack_id)'}@{found.get('version')}, " \
           f"{found.get('rows')} rows"


def saved_identity(state: Mapping) -> dict | None:
    """The pack identity a state records, or None for a state saved before states recorded
    one (warned about: it cannot be checked)."""
    if all(key in state for key in IDENTITY_KEYS):
        return {key: state[key] for key in IDENTITY_KEYS}
    warnings.warn("this resume state records no pack identity (pack_id, version, rows): it was "
                  "saved by an older dataset_packer, so whether the pack changed since cannot "
                  "be checked; it is resumed as if it had not", stacklevel=3)
    return None


def refuse(path, saved: Mapping, current: Mapping, why: str) -> VersionError:
    return VersionError(
        f"this resume state was saved on pack {describe(saved)}, but {path} is "
        f"{describe(current)}: {why}; resuming would not continue the saved epoch's order")


def check_same_rows(path, saved: Mapping, current: Mapping) -> None:
    """Refuses a state saved on other rows than `current`'s (another pack, or this one
    before it changed)."""
    if saved["pack_id"] is not None and saved["pack_id"] != current["pack_id"]:
        raise refuse(path, saved, current, "it is another pack")
    if int(saved["rows"]) != int(current["rows"]):
        raise refuse(path, saved, current, "the pack has changed since")
