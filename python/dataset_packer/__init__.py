"""Read dataset-packer packs for training: NumPy and the standard library only.

    from dataset_packer import Pack
    pack = Pack("packs/d6")
    for batch in pack.batches(4096, shuffle=True, seed=0, epoch=3):
        batch["exps"], batch["move"], batch["evs"], batch["legal"], ...

`Pack` opens a pack read-only (shards memory-mapped, metadata.db read-only), reads rows by
global index (`rows`), whole runs through the run index (`run`), selects runs with SQL
(`select`), and yields decoded batches (`batches`, `windows`, `sample`) that are a pure
function of (pack, selection, seed, epoch), split exactly between ranks and workers, with
optional symmetry augmentation. `Pack(path, version=N)` reads a version of the pack's history
(`pack.versions()`) exactly, and resume states record the pack's `pack_id@version`.
Companion arrays (`embeddings-00000.npy`, … beside the shards) are memory-mapped and aligned
with the rows: `pack.companion("embeddings")[rows]`, `pack.batches(...,
companions=["embeddings"])`. `EpochStream` is the stateful
epoch reader without PyTorch: `order="auto"` (shard windows for a pack larger than half the
memory, or than half its cache) and a `state_dict()` that records the order for an exact
resume. `dataset_packer.torch` wraps it as a PyTorch IterableDataset (imported only when
used). `executable()` finds the
`dataset-packer` command (the one installed with this package first), for running it.
`Pack("s3://bucket/prefix")` reads a pack in object storage through a bounded cache shared
with the command line (the `[s3]` extra).
"""

from ._cli import ExecutableNotFoundError, executable
from ._codec import (CELL_SOURCE, MOVE_NAMES, MOVE_SOURCE, MOVE_TARGET, apply_symmetries,
                     board_eval, decode_exps, encode_board, legal_moves)
from ._companions import Companion
from ._errors import (CompanionError, EmptySelectionError, NotAPackError, PackBusyError,
                      PackChangedError, PackError, RunIndexError, SelectionError,
                      VersionError)
from ._format import LEGACY_ROW_DTYPE, STEP_ROW_DTYPE
from ._order import EpochPlan, Permutation
from ._mixture import Mixture
from ._pack import Pack, Selection
from ._loader import EpochStream
from ._cache import CacheLimitError, CacheWarning, CorruptError
from ._remote import RemoteError, UrlError

__all__ = [
    "Pack", "Selection", "Mixture", "Companion", "EpochStream", "STEP_ROW_DTYPE", "LEGACY_ROW_DTYPE", "MOVE_NAMES",
    "PackError", "NotAPackError", "PackBusyError", "PackChangedError", "RunIndexError", "SelectionError", "EmptySelectionError",
    "CompanionError", "VersionError", "executable", "ExecutableNotFoundError",
    "UrlError", "RemoteError", "CorruptError", "CacheLimitError", "CacheWarning",
    "decode_exps", "encode_board", "board_eval", "legal_moves", "apply_symmetries",
    "CELL_SOURCE", "MOVE_TARGET", "MOVE_SOURCE", "EpochPlan", "Permutation",
]
__version__ = "0.1.0"
