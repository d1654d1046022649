"""The errors this package raises. All derive from `PackError`."""

from __future__ import annotations


class PackError(Exception):
    """A pack that cannot be read as asked (the message says which file and why)."""


class NotAPackError(PackError, FileNotFoundError):
    """The folder is not a pack (no shards, no metadata.db or no valuation_types.json)."""


class PackBusyError(PackError):
    """The pack kept changing while it was opened: another process published into it again
    and again. Nothing is wrong with it; opening it again later will do."""


class PackChangedError(PackError):
    """A pack in object storage in the layout before commit records changed while this
    reader had it open (a writer published a new version, rewriting files in place): the
    file it needed now holds other bytes than the version it opened records. Opening the
    pack again reads the new version. (A pack with commit records never changes under a
    reader: the objects of the commit it reads are never written again.)"""


class RunIndexError(PackError):
    """A feature needs runs as contiguous row ranges (`run_index`), which this pack lacks:
    a shuffled pack, or a legacy pack written before the run index existed."""


class SelectionError(PackError, ValueError):
    """A `select` expression that SQLite refuses (unknown column, bad syntax)."""


class EmptySelectionError(PackError, ValueError):
    """A selection that matches no runs, or whose runs hold no rows."""


class CompanionError(PackError):
    """A companion family (`NAME-NNNNN.npy` beside the shards) that does not line up with the
    pack or with what metadata.db records of it; the message names the file."""


class VersionError(PackError, ValueError):
    """A pack version that cannot be read as asked (an unknown version or tag, a companion
    family detached since), or a resume state saved on another pack, or on a version this
    pack's history does not hold; the message names both."""
