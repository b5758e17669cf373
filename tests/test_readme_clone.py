"""The README's two commands in their offline form, run from a fresh clone with the relative mirror
path the README exports (`../shared/multi30k`, beside the checkout): `dvc repro download`, then
tests that change directory while reading the mirror."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_readme_commands_run_from_a_fresh_clone_with_a_relative_mirror(tmp_path: Path) -> None:
    mirror = os.environ.get("MULTI30K_MIRROR", "")
    if "://" in mirror or not Path(mirror, "SHA256SUMS").is_file():
        pytest.skip("needs MULTI30K_MIRROR: a local folder with the Multi30k files")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "multi30k").symlink_to(Path(mirror).resolve())
    clone = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = {**os.environ, "MULTI30K_MIRROR": "../shared/multi30k", "DVC_NO_ANALYTICS": "1"}

    repro = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "download"], cwd=clone, env=env, capture_output=True, text=True
    )
    assert repro.returncode == 0, repro.stdout + repro.stderr
    assert (clone / "data" / "multi30k" / "dataset_dict.json").is_file()

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_data.py"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
