"""The README's "Python" section runs as written (its ```py blocks; the PyTorch one only when
torch is importable), against `packs/fixtures` packed from a copy of the fixture drop in
`raw`."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, REPO, cli


def python_section_blocks() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    blocks, current = [], None
    for line in section.splitlines():
        if current is None and line.strip() == "```py":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    # Packed from `raw` in the working folder, where the PyTorch example's update looks.
    shutil.copytree(FIXTURES / "raw", root / "raw")
    cli("pack", "--input", root / "raw", "--output", root / "packs" / "fixtures",
        "--shard-rows", 700, "--quiet")
    return root


def test_the_section_has_a_numpy_and_a_torch_example():
    blocks = python_section_blocks()
    assert len(blocks) == 2 and "import torch" in blocks[1]
    assert "pip install ./python" in (REPO / "README.md").read_text(encoding="utf-8")


def run(code: str, cwd) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_numpy_example_runs(workdir):
    out = run(python_section_blocks()[0], workdir)
    assert "2240 rows, 10 runs," in out and "240 rows in run 3" in out


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_torch_example_runs(workdir):
    run(python_section_blocks()[1], workdir)
