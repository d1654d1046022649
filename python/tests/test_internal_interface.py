"""The package's modules reach a pack's data through `_data` (`of(pack)` and `PackData`),
never through `Pack`'s private members: only `_pack.py` (Pack itself) and `_data.py` (the
data module) may touch them.

Every module of the package is parsed with `ast`. An attribute access `E._name` (not a
dunder) is a reach into a pack when `E` is not plain `self`/`cls` and either `_name` is one
of Pack's private members (its `_` methods and the `self._x` attributes it assigns, read
from `_pack.py`), or `E` names a pack (`pack`, `self.pack`, `self._pack`, `packs[i]`,
`source_pack`, …). `getattr`/`setattr`/`hasattr` with such a name as a string count too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dataset_packer"
#: The modules that may touch Pack's private members.
EXEMPT = {"_pack.py", "_data.py"}
#: An expression that names a pack: its last identifier is `pack`, `packs`, `_pack`, or
#: ends in `_pack(s)`.
PACK_NAME = re.compile(r"(^|_)packs?$")


def pack_private_names(source: str) -> set[str]:
    """The private members of class `Pack` in this source: its `_` methods (and
    properties), and the `self._x` attributes its methods assign."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "Pack":
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store) \
                        and isinstance(item.value, ast.Name) and item.value.id == "self":
                    names.add(item.attr)
    return {n for n in names if _private(n)}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _last_identifier(node: ast.expr) -> str | None:
    """`pack` for `pack`, `self.pack`, `self._packs[0]`, `packs[i]`; None for a call or
    anything else."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _names_a_pack(node: ast.expr) -> bool:
    name = _last_identifier(node)
    return name is not None and PACK_NAME.search(name) is not None


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def reaches_into_pack(source: str, privates: set[str]) -> list[tuple[int, str]]:
    """(line, expression) of each access to a Pack private member in this source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr) \
                and not _is_self(node.value) \
                and (node.attr in privates or _names_a_pack(node.value)):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and _private(node.args[1].value) \
                and (node.args[1].value in privates or _names_a_pack(node.args[0])):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_detector_flags_reaches_into_a_pack():
    privates = pack_private_names(
        "class Pack:\n"
        "    def __init__(self):\n"
        "        self._data = None\n"
        "        self.path = 'p'\n"
        "    def _decoded(self):\n"
        "        return self._data\n"
        "    def __len__(self):\n"
        "        return 0\n"
        "class Other:\n"
        "    def _own(self):\n"
        "        self._mine = 1\n")
    assert privates == {"_data", "_decoded"}
    flagged = reaches_into_pack(
        "def f(pack, packs, reader, self):\n"
        "    pack._offsets[0]\n"                 # 2: a pack's private attribute
        "    self._pack._gather(rows)\n"         # 3: through a companion's pack
        "    packs[1]._groups(rows)\n"           # 4: one of several packs
        "    reader._data.gather(rows)\n"        # 5: a Pack private, whatever the name
        "    getattr(pack, '_selection')\n"      # 6: by name
        "    self.source_pack._boundaries\n"     # 7
        "    self._own = 1\n"                    # not flagged: the module's own object
        "    pack.rows(0)\n"                     # public
        "    stream._batches(part)\n"            # another object's private, not a Pack's
        "    _data.of(pack).groups(rows)\n"      # the door
        "    pack.__class__\n", privates)        # a dunder
    assert [line for line, _ in flagged] == [2, 3, 4, 5, 6, 7], flagged
    assert flagged[1][1] == "self._pack._gather"


def test_only_pack_and_the_data_module_touch_packs_private_members():
    modules = sorted(PACKAGE.glob("*.py"))
    assert {p.name for p in modules} >= EXEMPT | {"_companions.py", "_mixture.py",
                                                   "_loader.py", "torch.py"}
    privates = pack_private_names((PACKAGE / "_pack.py").read_text())
    # What Pack delegates to is private to it: the collection found its members.
    assert "_data" in privates, privates
    offences = [f"{path.name}:{line}: {expression}"
                for path in modules if path.name not in EXEMPT
                for line, expression in reaches_into_pack(path.read_text(), privates)]
    assert offences == [], ("reach a pack's data through _data.of(pack), not Pack's private "
                            "members:\n" + "\n".join(offences))


def test_the_door_reads_what_pack_reads(sharded):
    """`_data.of(pack)` is what the Pack delegates to: its rows (read plainly with np.load
    here), across a shard boundary too, and its runs."""
    import numpy as np

    from conftest import all_rows
    from dataset_packer._data import PackData, of

    data = of(sharded)
    plain = all_rows(sharded.path)
    assert isinstance(data, PackData) and len(data) == len(sharded) == len(plain)
    edge = data.shard_rows(0)
    assert len(data.shards) > 1 and 0 < edge < len(plain)
    rows = np.array([len(plain) - 1, 0, edge, edge - 1, edge + 1], dtype=np.int64)
    np.testing.assert_array_equal(data.gather(rows), plain[rows])
    np.testing.assert_array_equal(data.read_span(edge - 2, edge + 2), plain[edge - 2:edge + 2])
    ids, steps = data.runs()
    assert ids.size == sharded.num_runs and int(steps.sum()) == len(plain)
