"""docs/migration.md runs as written: its hard-move loop (the NumPy block always, the PyTorch
one when torch is importable, on the CPU with a stand-in for the trainer's model and
`HardMove.train_step`), and the loader options it relies on: `keys=`, `dtypes=`, `device=`,
`auto_epoch=`, and PackLoader's pointer for `drop_last`. Also what the page says the trainer's
own readers need of a converted pack, and the `depth` and skipped-run messages."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import sys

import numpy as np
import pytest

from conftest import FIXTURES, REPO, cli
from dataset_packer import EmptySelectionError, Pack
from dataset_packer._loader import check_keys, rename_columns

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


def loop_blocks() -> list[str]:
    """The ```python blocks of section 4, "The trainer's hard-move loop on this loader"."""
    text = (REPO / "docs" / "migration.md").read_text(encoding="utf-8")
    section = text.split("\n## 4. ", 1)[1].split("\n## ", 1)[0]
    blocks, current = [], None
    for line in section.splitlines():
        if current is None and line.strip() == "```python":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def the_trainers_settings(pack_dir) -> dict:
    """What the trainer's config gives the loop (dataset.run_sql, val_run_pct, …)."""
    return {"dataset_dir": str(pack_dir),
            "run_sql": "SELECT id FROM runs WHERE max_score > ?", "sql_params": [1000],
            "val_run_pct": 0.2, "val_split_seed": 42}


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
