"""Where the `dataset-packer` command is, for code that runs it (packing, `validate`, `stats`).

The wheel built from the repository root (`pip install .`) puts the binary in the scripts
folder of the environment it installs into, next to this package; `pip install ./python`
installs the package alone. The lookup order, first match wins:

1. `$DATASET_PACKER_BIN`, when set (an explicit choice; a path that is not an executable file
   is an error, never silently replaced by another binary);
2. `dataset-packer` in the scripts folder of the environment this package is installed in
   (`bin/` of a venv, `~/.local/bin` after `pip install --user`), so the binary that came in
   the same wheel wins over an older one elsewhere on `PATH`;
3. `dataset-packer` on `PATH` (`cargo install --path .` puts it in `~/.cargo/bin`).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

NAME = "dataset-packer"
ENV = "DATASET_PACKER_BIN"


class ExecutableNotFoundError(FileNotFoundError):
    """No `dataset-packer` command was found (the message says where it looked)."""


def executable() -> str:
    """The path of the `dataset-packer` command, found in the order the module doc gives."""
    given = os.environ.get(ENV)
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise ExecutableNotFoundError(
                f"${ENV} is {given!r}, which is not an executable file")
        return given
    for folder in _scripts_folders():
        found = shutil.which(NAME, path=str(folder))
        if found:
            return found
    found = shutil.which(NAME)
    if found:
        return found
    looked = ", ".join(str(f) for f in _scripts_folders()) or "the package is not installed in it"
    raise ExecutableNotFoundError(
        f"no {NAME} command: ${ENV} is not set, and there is none in this environment's "
        f"scripts folder ({looked}) or on PATH. Install the package with the command (`pip install .` from the "
        f"repository root, or a dataset-packer wheel), or run `cargo install --path .`, or "
        f"set ${ENV} to the binary")


def _scripts_folders() -> list[Path]:
    """The scripts folders of the install schemes whose library folder holds this package:
    usually one (the venv's, the system's, or the user's after `pip install --user`)."""
    here = Path(__file__).resolve().parent.parent
    folders = []
    for scheme in _schemes():
        paths = sysconfig.get_paths(scheme)
        libs = {Path(paths[k]).resolve() for k in ("purelib", "platlib") if k in paths}
        if here in libs and "scripts" in paths and Path(paths["scripts"]) not in folders:
            folders.append(Path(paths["scripts"]))
    return folders


def _schemes() -> list[str]:
    """The default install scheme of this interpreter, then the per-user one."""
    if sys.version_info >= (3, 10):
        names = [sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user")]
    else:
        names = ["posix_prefix" if os.name == "posix" else "nt", f"{os.name}_user"]
    return [n for n in names if n in sysconfig.get_scheme_names()]
