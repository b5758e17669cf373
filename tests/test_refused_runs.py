"""A run that DVC starts and the stage refuses leaves the stage's last good outputs: DVC removes a
stage's outputs before it runs it unless dvc.yaml marks them `persist`, and the stages marked so
replace their outputs only once the new ones are complete."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from from_params import write_changed_params

from pipeline.core.params_file import default_params, flatten

REPO = Path(__file__).resolve().parents[1]
REFUSED = {  # stage: a params change it refuses in one line (the first thing each stage does)
    "download": {"download": {"max_train_pairs": 0}},
    "tokenizer": {"tokenizer": {"vocab_size": 3}},
    "distill": {"decode": {"beam_size": 0}},
    "prepare": {"prepare": {"sampling_alpha": 0}},
}


def expanded(path: str) -> str:
    """`path` of dvc.yaml with its `${section.key}` replaced by params.yaml's values."""
    values = flatten(default_params().model_dump(mode="json"))
    return re.sub(r"\$\{([\w.]+)\}", lambda m: str(values[m[1]]), path)


def make(path: Path, text: str) -> None:
    """A file holding `text`, or for a name without a suffix a folder with such a file."""
    if not path.suffix:
        path.mkdir(parents=True, exist_ok=True)
        path = path / "kept.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def content(path: Path) -> str:
    return (path / "kept.txt" if path.is_dir() else path).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("stage", REFUSED)
def test_a_refused_run_leaves_the_last_good_outputs(stage: str, tmp_path: Path) -> None:
    """`sampling_alpha: 0` was refused in one line, but DVC had removed data/train_ids already."""
    for package in ("pipeline", "stages"):
        shutil.copytree(
            REPO / package, tmp_path / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"][stage]
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {stage: spec}}))
    for dep in spec["deps"]:
        if not (tmp_path / expanded(dep)).exists():
            make(tmp_path / expanded(dep), "an input\n")
    outs = [tmp_path / expanded(next(iter(out)) if isinstance(out, dict) else out) for out in spec["outs"]]
    for out in outs:
        make(out, f"the last good {out.name}\n")
    write_changed_params(tmp_path / "params.yaml", REFUSED[stage])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, env=env, check=True)
    done = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "--single-item", stage],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "error: params.yaml: " in done.stdout + done.stderr, done.stderr
    assert {out.name: content(out) for out in outs} == {
        out.name: f"the last good {out.name}\n" for out in outs
    }
