"""docs/migration.md runs as written: every ```python block of the page, on packs made by the
real binary. Section 3's block and the selection rows of its table; section 4's hard-move loop
(the NumPy block always, the PyTorch one when torch is importable, on the CPU with a stand-in
for the trainer's model and `HardMove.train_step`), and the loader options it relies on:
`keys=`, `dtypes=`, `device=`, `auto_epoch=`, and PackLoader's pointer for `drop_last`;
section 6's save, resume and read-again blocks around a `pack --update` (with torch as
written; without it, their statements that need no torch, with the loader's resume through
the `EpochStream` that PackLoader reads). Also what the page says the trainer's own readers
need of a converted pack, and the `depth` and skipped-run messages.

Names the page takes as given (`dataset_dir`, `run_sql`, `sql_params`, …: the trainer's
config; `model`, `objective`, `device`, …: the trainer's objects; `checkpoint`) are set up
here, in `the_trainers_settings` and in each test."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import sqlite3
import sys

import numpy as np
import pytest

from conftest import FIXTURES, REPO, cli
from dataset_packer import EmptySelectionError, Pack
from dataset_packer._loader import EpochStream, Part, check_keys, rename_columns

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


PAGE = REPO / "docs" / "migration.md"


def section(number: int) -> str:
    """The text of the page's section `## {number}. …`."""
    text = PAGE.read_text(encoding="utf-8")
    return text.split(f"\n## {number}. ", 1)[1].split("\n## ", 1)[0]


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of `text`, as written."""
    blocks, current = [], None
    for line in text.splitlines():
        if current is None and line.strip() == "```python":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def loop_blocks() -> list[str]:
    """The ```python blocks of section 4, "The trainer's hard-move loop on this loader"."""
    return python_blocks(section(4))


def test_every_python_block_of_the_page_is_run_here():
    """The blocks the tests below run, by section: a block added elsewhere fails this until a
    test runs it. (Sections 1 and 5 show shell commands, in plain ``` blocks and inline.)"""
    text = PAGE.read_text(encoding="utf-8")
    counts = {int(n): len(python_blocks(section(int(n))))
              for n in re.findall(r"^## (\d+)\. ", text, re.MULTILINE)}
    assert {n: c for n, c in counts.items() if c} == {3: 1, 4: 2, 6: 3}
    assert sum(counts.values()) == len(python_blocks(text))
    fences = {line.strip() for line in text.splitlines() if line.strip().startswith("```")}
    assert fences == {"```", "```python"}, "a block in another language is run by no test"


def the_trainers_settings(pack_dir) -> dict:
    """What the trainer's config gives the loop (dataset.run_sql, val_run_pct, …)."""
    return {"dataset_dir": str(pack_dir),
            "run_sql": "SELECT id FROM runs WHERE max_score > ?", "sql_params": [1000],
            "val_run_pct": 0.2, "val_split_seed": 42}


# ---------------------------------------------------------------------------------------------
# section 3: the trainer's settings


def table_code(setting: str) -> list[str]:
    """The code of the right-hand cell of section 3's table row for `setting` (the row's
    left cell as written): its code spans that are statements or calls, in order."""
    for line in section(3).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == setting:
            return [c for c in re.findall(r"`([^`]+)`", cells[1]) if "(" in c]
    raise AssertionError(f"section 3's table has no row {setting}")


def test_section_3_defines_universe_before_the_table_uses_it():
    text = section(3)
    assert text.index("universe = pack.select(") < text.index("| the trainer |")


def test_section_3_block_and_the_tables_selections_run(packs):
    scope = the_trainers_settings(packs["sharded"])
    scope["val_run_sql"] = "SELECT id FROM runs WHERE id % 4 = 0"   # the trainer's val_run_sql
    [block] = python_blocks(section(3))
    exec(block, scope)
    pack, universe = scope["pack"], scope["universe"]
    assert np.array_equal(universe.run_ids, pack.select("max_score > 1000").run_ids)

    code = table_code("`run_sql` + `sql_params`")
    assert code == ["universe = pack.select(run_sql, params=sql_params)"]
    exec(code[0], scope)
    assert np.array_equal(scope["universe"].run_ids, universe.run_ids)

    code = table_code("`val_run_sql`")
    assert len(code) == 2
    for statement in code:
        exec(statement, scope)
    train, val = scope["train"], scope["val"]
    assert np.array_equal(val.run_ids, pack.select("id % 4 = 0").run_ids)
    assert np.array_equal(train.run_ids, np.setdiff1d(universe.run_ids, val.run_ids))

    code = table_code("`val_run_pct` + `val_split_seed`")
    assert code == ["train, val = universe.split(val_run_pct, seed=val_split_seed)"]
    exec(code[0], scope)
    train, val = scope["train"], scope["val"]
    assert np.array_equal(np.union1d(train.run_ids, val.run_ids), universe.run_ids)
    assert np.intersect1d(train.run_ids, val.run_ids).size == 0 and val.num_runs > 0


# ---------------------------------------------------------------------------------------------
# section 4: the hard-move loop


def test_the_page_has_the_two_blocks_of_the_loop():
    blocks = loop_blocks()
    assert len(blocks) == 2 and "import torch" not in blocks[0] and "import torch" in blocks[1]
    assert len(blocks[1].splitlines()) <= 16


def test_the_numpy_block_runs(packs):
    scope = the_trainers_settings(packs["sharded"])
    exec(loop_blocks()[0], scope)
    pack, train, val = scope["pack"], scope["train"], scope["val"]
    universe = pack.select("max_score > 1000")
    assert np.array_equal(np.union1d(train.run_ids, val.run_ids), universe.run_ids)
    assert np.intersect1d(train.run_ids, val.run_ids).size == 0


def test_keys_rename_the_batch_columns(sharded):
    batch = next(sharded.batches(8, seed=0))
    keys = check_keys({"tokens": "exps", "move_targets": "move"}, None)
    got = rename_columns(batch, keys)
    assert sorted(got) == ["move_targets", "tokens"]
    assert got["tokens"] is batch["exps"] and got["tokens"].dtype == np.uint8
    with pytest.raises(KeyError, match="no column 'moves'"):
        rename_columns(batch, {"move_targets": "moves"})
    with pytest.raises(ValueError, match="not both"):
        check_keys({"tokens": "exps"}, ["exps"])
    with pytest.raises(TypeError, match="new key → batch key"):
        check_keys(["exps"], None)


class StandIn:
    """The trainer's HardMove.train_step as far as the data goes: the batch moved to the
    device (non_blocking), cross-entropy of the model's logits against `move_targets`."""

    def __init__(self):
        self.seen = []

    def train_step(self, model, batch, optimizer, device, *, cfg=None):
        import torch
        tokens = batch["tokens"].to(device, non_blocking=True)
        move_targets = batch["move_targets"].to(device, non_blocking=True)
        assert sorted(batch) == ["move_targets", "tokens"]
        assert tokens.dtype == torch.int64 and tokens.shape[1] == 16
        assert move_targets.dtype == torch.int64
        self.seen.append(tokens.clone())
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(tokens), move_targets)
        loss.backward()
        optimizer.step()
        return {"loss": float(loss.detach())}


@needs_torch
def test_the_torch_block_runs_the_trainers_loop(packs):
    import torch
    scope = the_trainers_settings(packs["sharded"])
    exec(loop_blocks()[0], scope)
    batch_size = 64
    per_epoch = len(scope["train"]) // batch_size
    model = torch.nn.Sequential(torch.nn.Embedding(17, 8), torch.nn.Flatten(),
                                torch.nn.Linear(128, 4))
    scope.update(batch_size=batch_size, seed=0, device=torch.device("cpu"),
                 num_steps=2 * per_epoch + 3, model=model, cfg=None, objective=StandIn(),
                 optimizer=torch.optim.SGD(model.parameters(), lr=0.01))
    exec(loop_blocks()[1], scope)
    seen = scope["objective"].seen
    assert len(seen) == 2 * per_epoch + 3
    # Each new iter() was the next epoch: three epochs, each its own order of the same rows.
    assert scope["data"].stream.epoch == 2
    epochs = [torch.cat(seen[i * per_epoch:(i + 1) * per_epoch]) for i in range(2)]
    assert not torch.equal(epochs[0], epochs[1])
    pack, train = scope["pack"], scope["train"]
    for epoch, got in enumerate(epochs):
        want = np.concatenate([b["exps"] for b in pack.batches(
            batch_size, select=train, shuffle=True, seed=0, epoch=epoch, drop_last=True)])
        assert np.array_equal(got.numpy(), want.astype(np.int64))


@needs_torch
def test_dtypes_apply_after_the_move_and_only_in_the_main_process(sharded):
    import torch
    from dataset_packer.torch import PackDataset, PackLoader
    data = PackDataset(sharded, 32, seed=1, keys={"tokens": "exps", "move_targets": "move"})
    assert next(iter(data))["tokens"].dtype == torch.uint8, "the workers send uint8"
    for device in (None, "meta"):
        loader = PackLoader(data, num_workers=0, device=device,
                            dtypes={"tokens": "int64"})
        batch = next(iter(loader))
        assert batch["tokens"].dtype == torch.int64
        assert batch["tokens"].device.type == (device or "cpu")
        assert batch["move_targets"].device.type == (device or "cpu")
    with pytest.raises(KeyError, match="dtypes names 'exps'"):
        next(iter(PackLoader(data, dtypes={"exps": torch.int64})))
    with pytest.raises(TypeError, match="not a torch dtype"):
        PackLoader(data, dtypes={"tokens": "int65"})


@needs_torch
def test_auto_epoch_moves_on_unless_the_epoch_was_chosen(sharded):
    from dataset_packer.torch import PackDataset, PackLoader
    data = PackDataset(sharded, 512, seed=3, drop_last=True)
    loader = PackLoader(data, auto_epoch=True)
    epochs = []
    for _ in range(3):
        list(loader)
        epochs.append(data.stream.epoch)
    assert epochs == [0, 1, 2]
    data.set_epoch(7)
    list(loader)
    assert data.stream.epoch == 7
    list(loader)
    assert data.stream.epoch == 8
    # A state saved at the end of an epoch resumes at the start of the next.
    state = loader.state_dict()
    fresh = PackLoader(PackDataset(sharded, 512, seed=3, drop_last=True), auto_epoch=True)
    fresh.load_state_dict(state)
    first = next(iter(fresh))
    assert fresh.dataset.stream.epoch == 9
    want = next(sharded.batches(512, seed=3, epoch=9, drop_last=True))
    assert np.array_equal(first["exps"].numpy(), want["exps"])
    # Without auto_epoch a new iteration replays the epoch (as DistributedSampler does).
    plain = PackLoader(PackDataset(sharded, 512, seed=3))
    list(plain)
    list(plain)
    assert plain.dataset.stream.epoch == 0


@needs_torch
def test_packloader_points_drop_last_to_packdataset(sharded):
    from dataset_packer.torch import PackDataset, PackLoader
    with pytest.raises(ValueError, match=r"PackDataset\(\.\.\., drop_last=True\)"):
        PackLoader(PackDataset(sharded, 64), drop_last=True)


# ---------------------------------------------------------------------------------------------
# section 6: pack_id@version in checkpoints, and a resume after the pack grew

BATCH = 64
TAKEN = 3   # batches of its second epoch (epoch 1) the job took before it stopped


def d6_pack(tmp_path) -> tuple:
    """A pack of the d6 runs (version 1: 5 runs, 1,220 rows) and the raw folder it was packed
    from."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in (FIXTURES / "raw" / "d6_10g_v1").iterdir():
        shutil.copy(f, raw)
    cli("pack", "--input", raw, "--output", tmp_path / "pack", "--shard-rows", 700, "--quiet")
    return tmp_path / "pack", raw


def grow(pack_dir, raw) -> None:
    """The nightly job while the trainer is down: the d7 runs logged meanwhile, added by
    `pack --update` (version 2: 10 runs, 2,240 rows)."""
    for f in (FIXTURES / "raw" / "d7_10g_v1").iterdir():
        shutil.copy(f, raw)
    cli("pack", "--input", raw, "--output", pack_dir, "--update", "--shard-rows", 700,
        "--quiet")


def epoch_boards(pack, train, epoch: int) -> list:
    """The boards (`exps`) of each batch of an epoch of section 4's loader, by Pack.batches."""
    return [b["exps"] for b in pack.batches(BATCH, select=train, shuffle=True, seed=0,
                                            epoch=epoch, drop_last=True)]


def same_batches(got: list, want: list) -> bool:
    return len(got) == len(want) > 0 and all(
        np.array_equal(np.asarray(g), np.asarray(w).astype(np.asarray(g).dtype))
        for g, w in zip(got, want))


def assignments(code: str) -> dict:
    """The statements of a block that assign one name, by that name (as ast dumps)."""
    return {node.targets[0].id: ast.dump(node) for node in ast.parse(code).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}


TORCH_NAMES = {"torch", "PackDataset", "PackLoader", "data", "dl_train"}


def without_torch(code: str) -> tuple[str, list[str]]:
    """The statements of a block that need no torch, in order, and those left out: imports of
    torch or `dataset_packer.torch`, and statements naming torch, its classes or the loader
    (`data`, `dl_train`)."""
    kept, left = [], []
    for node in ast.parse(code).body:
        modules = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                   [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        needs = (any(m == "torch" or m.endswith(".torch") for m in modules)
                 or bool(names & TORCH_NAMES))
        (left if needs else kept).append(ast.get_source_segment(code, node))
    return "\n".join(kept), left


def test_section_6_resumes_on_the_latest_version_with_section_4s_loader():
    save, resume, again = python_blocks(section(6))
    assert "dl_train.state_dict()" in save and "pack.pack_id" in save
    assert resume.index("saved = checkpoint[") < resume.index("saved[")
    assert "version=" not in resume and "pack = Pack(dataset_dir)" in resume
    assert resume.rstrip().endswith('dl_train.load_state_dict(saved["loader"])')
    # The loader rebuilt as section 4 builds it, on the reopened pack.
    built, rebuilt = assignments("\n".join(loop_blocks())), assignments(resume)
    for name in ("pack", "universe", "data", "dl_train"):
        assert rebuilt[name] == built[name], name
    assert "it = iter(dl_train)" in loop_blocks()[1] and "`it = iter(dl_train)`" in section(6)
    assert "version=int(version)" in again


class StoppedLoader:
    """`dl_train` of section 4 without torch, as far as the save block uses it: its
    `state_dict()` after the loop took `taken` batches of the stream's epoch, which is what
    PackLoader.state_dict() computes (its dataset's EpochStream state moved on by the
    batches taken)."""

    def __init__(self, stream: EpochStream, taken: int):
        self.stream, self.taken = stream, taken

    def state_dict(self) -> dict:
        return self.stream.state_dict(self.taken)


def test_section_6_without_torch_saves_resumes_and_reads_again(tmp_path):
    """Section 6 around a `pack --update`, as far as it goes without torch: the save block
    (with `StoppedLoader` for the loader), the resume block's statements that need no torch,
    the saved state loaded into the EpochStream that the block's PackDataset reads through
    (its options less `keys=`, which renames columns), and the read-again block."""
    save, resume, again = python_blocks(section(6))
    pack_dir, raw = d6_pack(tmp_path)
    scope = the_trainers_settings(pack_dir)
    exec(loop_blocks()[0], scope)                      # section 4: pack, universe, train, val
    old_pack, old_train = scope["pack"], scope["train"]
    stream = EpochStream(old_pack, BATCH, select=old_train, shuffle=True, seed=0,
                         drop_last=True)
    stream.set_epoch(1)
    scope.update(checkpoint={}, dl_train=StoppedLoader(stream, TAKEN))
    exec(save, scope)
    data = scope["checkpoint"]["data"]
    assert data["pack"] == f"{old_pack.pack_id}@1"
    assert {key: data["loader"][key] for key in ("epoch", "start_sample", "seed", "pack_id",
                                                 "version", "rows")} == {
        "epoch": 1, "start_sample": TAKEN * BATCH, "seed": 0, "pack_id": old_pack.pack_id,
        "version": 1, "rows": 1220}
    rest_of_epoch_1 = epoch_boards(old_pack, old_train, 1)[TAKEN:]

    grow(pack_dir, raw)

    code, left_out = without_torch(resume)
    assert len(left_out) == 5, left_out       # the two torch imports, data, dl_train, load
    checkpoint = json.loads(json.dumps(scope["checkpoint"]))     # stored, and read back
    scope = dict(the_trainers_settings(pack_dir), checkpoint=checkpoint)
    exec(code, scope)
    pack, train = scope["pack"], scope["train"]
    assert (pack.pack_id, pack.version, len(pack)) == (old_pack.pack_id, 2, 2240)
    assert train.num_runs > old_train.num_runs
    resumed = EpochStream(pack, BATCH, select=train, shuffle=True, seed=0, drop_last=True)
    resumed.load_state_dict(scope["saved"]["loader"])
    assert same_batches([b["exps"] for b in resumed.batches(Part())], rest_of_epoch_1)
    resumed.set_epoch(2)                      # auto_epoch's next epoch: the latest version
    epoch_2 = [b["exps"] for b in resumed.batches(Part())]
    assert same_batches(epoch_2, epoch_boards(pack, train, 2))
    assert sum(map(len, epoch_2)) > len(old_train)

    exec(again, scope)
    trained_on = scope["trained_on"]
    assert (trained_on.version, len(trained_on), trained_on.num_runs) == (1, 1220, 5)


def the_trainers_objects(torch, num_steps: int) -> dict:
    """What the trainer has made when it reaches the loop: model, optimizer, objective."""
    model = torch.nn.Sequential(torch.nn.Embedding(17, 8), torch.nn.Flatten(),
                                torch.nn.Linear(128, 4))
    return dict(batch_size=BATCH, seed=0, device=torch.device("cpu"), num_steps=num_steps,
                model=model, cfg=None, objective=StandIn(),
                optimizer=torch.optim.SGD(model.parameters(), lr=0.01))


@needs_torch
def test_section_6_with_torch_resumes_after_the_pack_grew(tmp_path):
    """Section 4's loop stopped three batches into its second epoch, section 6's save, a
    `pack --update`, section 6's resume, and section 4's loop from `it = iter(dl_train)`: the
    rest of epoch 1 as version 1 had it, then epoch 2 over version 2."""
    import torch
    from dataset_packer import VersionError
    from dataset_packer.torch import PackDataset, PackLoader
    save, resume, again = python_blocks(section(6))
    pack_dir, raw = d6_pack(tmp_path)
    first = the_trainers_settings(pack_dir)
    exec(loop_blocks()[0], first)
    per_epoch = len(first["train"]) // BATCH
    first.update(the_trainers_objects(torch, num_steps=per_epoch + TAKEN))
    exec(loop_blocks()[1], first)
    old_pack, old_train = first["pack"], first["train"]
    rest_of_epoch_1 = epoch_boards(old_pack, old_train, 1)[TAKEN:]
    first["checkpoint"] = {}
    exec(save, first)
    state = first["checkpoint"]["data"]["loader"]
    assert (state["epoch"], state["start_sample"], state["version"], state["rows"]) == (
        1, TAKEN * BATCH, 1, 1220)
    torch.save(first["checkpoint"], tmp_path / "ckpt.pt")

    grow(pack_dir, raw)

    scope = dict(the_trainers_settings(pack_dir), checkpoint=torch.load(tmp_path / "ckpt.pt"))
    scope.update(the_trainers_objects(torch, num_steps=0))
    exec(resume, scope)
    pack, train = scope["pack"], scope["train"]
    assert pack.version == 2
    epoch_2 = epoch_boards(pack, train, 2)
    scope["num_steps"] = len(rest_of_epoch_1) + len(epoch_2)
    loop = loop_blocks()[1]
    exec(loop[loop.index("it = iter(dl_train)"):], scope)
    assert same_batches(scope["objective"].seen, rest_of_epoch_1 + epoch_2)
    assert scope["data"].stream.epoch == 2
    assert sum(map(len, epoch_2)) > len(old_train), "epoch 2 reads the new rows"

    # Another pack (the same rows, packed again: another pack_id) refuses the state.
    cli("pack", "--input", FIXTURES / "raw" / "d6_10g_v1", "--output", tmp_path / "other",
        "--shard-rows", 700, "--quiet")
    other = PackLoader(PackDataset(Pack(tmp_path / "other"), BATCH, shuffle=True, seed=0))
    with pytest.raises(VersionError):
        other.load_state_dict(scope["saved"]["loader"])

    exec(again, scope)
    assert (scope["trained_on"].version, len(scope["trained_on"])) == (1, 1220)


def test_a_converted_pack_has_what_the_trainers_readers_need(packs):
    """ShardLoader, the collate functions, BoardCodec and MetadataDB (docs/migration.md,
    section 2): sorted steps-*.npy that np.load opens, the fields they read by name, a list
    valuation_types.json, runs(id, steps)."""
    path = packs["sharded"]
    shards = sorted(path.glob("steps-*.npy"))
    assert [p.name for p in shards] == [f"steps-{i:05d}.npy" for i in range(len(shards))]
    rows = np.concatenate([np.load(p, mmap_mode="r") for p in shards])
    for field in ("board", "tile_65536_mask", "move_dir", "valuation_type", "ev_legal",
                  "branch_evs", "board_eval", "run_id"):
        assert field in rows.dtype.names
    assert isinstance(json.loads((path / "valuation_types.json").read_text()), list)
    with sqlite3.connect(path / "metadata.db") as db:
        ids = [r[0] for r in db.execute("SELECT id FROM runs")]
        steps = sum(r[0] for r in db.execute("SELECT steps FROM runs"))
    db.close()
    assert steps == len(rows) and sorted(set(rows["run_id"].tolist())) == sorted(ids)
    # BoardCodec's decoding (MSB-first nibbles, the 65536 mask; legal bits 1 up … 8 right)
    # gives what this package decodes.
    exps = ((rows["board"][:, None] >> (4 * np.arange(15, -1, -1)).astype(np.uint64))
            & np.uint64(15)).astype(np.uint8)
    exps[((rows["tile_65536_mask"][:, None] >> np.arange(16)) & 1) == 1] = 16
    batch = Pack(path).gather(np.arange(len(rows)))
    assert np.array_equal(exps, batch["exps"])
    legal = np.stack([(rows["ev_legal"] & b) != 0 for b in (1, 2, 4, 8)], axis=1)
    assert np.array_equal(legal, batch["legal"])


# ---------------------------------------------------------------------------------------------
# depth after conversion, and skipped runs

@pytest.fixture(scope="module")
def converted(packs, tmp_path_factory):
    """The sharded pack as the reference packer wrote it, converted by the CLI: no depth."""
    from test_reference_pack import make_reference_pack
    root = tmp_path_factory.mktemp("migration")
    make_reference_pack(packs["sharded"], root / "old", 1000)
    cli("export", root / "old", "--format", "pack", "--output", root / "new", "--quiet")
    return root / "new"


def test_select_by_depth_says_the_pack_records_none(converted, tmp_path):
    pack = Pack(converted)
    with pytest.raises(EmptySelectionError, match="records no depth") as e:
        pack.select("depth = 6")
    assert "UPDATE run_details SET depth = 6" in str(e.value)
    with pytest.raises(EmptySelectionError) as e:
        pack.select("max_score < 0")
    assert "depth" not in str(e.value)
    # The page's way back: set it, and the same selection finds the runs.
    import shutil
    fixed = tmp_path / "fixed"
    shutil.copytree(converted, fixed)
    with sqlite3.connect(fixed / "metadata.db") as db:
        db.execute("UPDATE run_details SET depth = 6")
    db.close()
    assert Pack(fixed).select("depth = 6").num_runs == pack.num_runs
    assert "VALID" in cli("validate", fixed, "--quiet")


def test_the_summary_marks_missing_depth_and_skipped_runs(converted, tmp_path):
    import subprocess
    out = subprocess.run([sys.executable, "-m", "dataset_packer", str(converted)],
                         capture_output=True, text=True, check=True).stdout
    assert "depth ?" in out and "no depth recorded" in out
    raw = tmp_path / "raw"
    import shutil
    shutil.copytree(FIXTURES / "raw" / "d6_10g_v1", raw)
    broken = sorted(raw.glob("*.meta.json"))[0]
    broken.write_text("{not json")
    cli("pack", "--input", raw, "--output", tmp_path / "pack", "--skip-invalid", "--quiet")
    out = subprocess.run([sys.executable, "-m", "dataset_packer", str(tmp_path / "pack")],
                         capture_output=True, text=True, check=True).stdout
    assert "skipped     1 run left out at pack time" in out and broken.name in out
    doc = json.loads(subprocess.run(
        [sys.executable, "-m", "dataset_packer", str(tmp_path / "pack"), "--json"],
        capture_output=True, text=True, check=True).stdout)
    assert [r["source_path"] for r in doc["skipped_runs"]] == [broken.name]
