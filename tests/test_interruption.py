"""SIGKILL during training at several points; the resumed run must end with the weights of an
uninterrupted run, and `last.pt` must always be a readable checkpoint."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline.core.io import TEMP_NAME
from pipeline.training import checkpoint

SCRIPT = Path(__file__).with_name("toy_train.py")


def run(out_dir: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, str(SCRIPT), str(out_dir)] + ([kill_at] if kill_at else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def temp_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if TEMP_NAME.fullmatch(p.name))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("uninterrupted")
    assert run(out).returncode == 0
    return torch.load(out / "final.pt", weights_only=True)["model"]


@pytest.mark.parametrize("kill_at", ["step:6", "validation:8", "checkpoint:12"])
def test_killed_run_resumes_to_identical_weights(kill_at, reference, tmp_path):
    killed = run(tmp_path, kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    last = checkpoint.load(tmp_path / "last.pt")  # readable, never half-written
    assert last["progress"]["step"] < 16
    left = temp_files(tmp_path)
    assert bool(left) == kill_at.startswith("checkpoint:")  # a write killed midway leaves its temp file
    resumed = run(tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stdout
    assert temp_files(tmp_path) == [] and all(f"removed {path}: " in resumed.stdout for path in left)
    final = torch.load(tmp_path / "final.pt", weights_only=True)["model"]
    for name, weight in reference.items():
        assert torch.equal(weight, final[name]), name
