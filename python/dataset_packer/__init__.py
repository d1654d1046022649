"""Read dataset-packer packs for training: NumPy and the standard library only.

    from dataset_packer import Pack
    pack = Pack("packs/d6")
    for batch in pack.batches(4096, shuffle=True, seed=0, epoch=3):
        batch["exps"], batch["move"], batch["evs"], batch["legal"], ...

`Pack` opens a pack read-only (shards memory-mapped, metadata.db read-only), reads rows by
global index (`rows`), whole runs through the run index (`run`), selects runs with SQL
(`select`), and yields decoded batches (`batches`, `windows`, `sample`) that are a pure
function of (pack, selection, seed, epoch), split exactly between ranks and workers, with
optional symmetry augmentation. `dataset_packer.torch` wraps it as a PyTorch IterableDataset
(imported only when used).
"""

from ._codec import (CELL_SOURCE, MOVE_NAMES, MOVE_SOURCE, MOVE_TARGET, apply_symmetries,
                     board_eval, decode_exps, encode_board, legal_moves)
from ._errors import (EmptySelectionError, NotAPackError, PackError, RunIndexError,
                      SelectionError)
from ._format import LEGACY_ROW_DTYPE, STEP_ROW_DTYPE
from ._order import EpochPlan, Permutation
from ._pack import Pack, Selection

__all__ = [
    "Pack", "Selection", "STEP_ROW_DTYPE", "LEGACY_ROW_DTYPE", "MOVE_NAMES",
    "PackError", "NotAPackError", "RunIndexError", "SelectionError", "EmptySelectionError",
    "decode_exps", "encode_board", "board_eval", "legal_moves", "apply_symmetries",
    "CELL_SOURCE", "MOVE_TARGET", "MOVE_SOURCE", "EpochPlan", "Permutation",
]
__version__ = "0.1.0"
