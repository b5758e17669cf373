"""The trainer after its restructuring trains the same model as the code before it: a tiny
number-to-words run through `python -m stages.warmup_train` at one thread, once with the code of
`BEFORE` and once with the code here, gives exactly the same per-step losses, weights and final model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
import yaml

from pipeline.core.params_file import load_params
from pipeline.data.multi30k import save_dataset_dict
from pipeline.data.warmup import build_warmup_dataset, split_numbers
from pipeline.ops.overrides import merge_params

REPO = Path(__file__).resolve().parents[1]
BEFORE = "4db4ee6"  # the last commit before the trainer had one code path
# val_every 1: each log row's train_loss is that one step's loss; dropout, label smoothing, accumulation
# and the weight average on, so the step's RNG, loss and update paths are all compared.
TINY = {
    "warmup_data": {"out_dir": "data/warmup"},
    "warmup_train": {
        "threshold": 0.0,
        "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.1},
        "optim": {
            "max_steps": 24,
            "val_every": 1,
            "max_tokens": 300,
            "accum_steps": 2,
            "label_smoothing": 0.1,
            "ema_decay": 0.9,
            "average_last": 3,
            "patience": 100,
            "device": "cpu",
            "precision": "fp32",
            "threads": 1,
        },
    },
}


def code_before(tmp: Path) -> Path | None:
    """`pipeline/` and `stages/` of `BEFORE` extracted under `tmp` (with its params.yaml); None when
    the clone lacks that commit."""
    git = ["git", "-C", str(REPO)]
    if subprocess.run([*git, "cat-file", "-e", f"{BEFORE}^{{commit}}"], capture_output=True).returncode:
        return None
    tree = tmp / "before"
    tree.mkdir()
    archive = subprocess.run(
        [*git, "archive", BEFORE, "pipeline", "stages", "params.yaml"], capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def start_run(code: Path, work: Path, max_steps: int = 24) -> subprocess.Popen:
    """`python -m stages.warmup_train` of the code at `code`, in `work` (which holds the warm-up
    splits) with `code`'s params.yaml and `TINY` (and `max_steps`) merged over it."""
    shipped = yaml.safe_load((code / "params.yaml").read_text())
    changes = merge_params(TINY, {"warmup_train": {"optim": {"max_steps": max_steps}}})
    (work / "params.yaml").write_text(yaml.safe_dump(merge_params(shipped, changes)))
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "stages.warmup_train"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def outcome(work: Path, run: subprocess.Popen) -> tuple[list[list], dict, str, str]:
    """(each log row's step, epoch and losses, as `last.pt` keeps them: full precision; its weights;
    the facts file; its output) of a finished run."""
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out[-3000:]
    last = torch.load(work / "models/warmup/last.pt", weights_only=True)
    columns = ("step", "epoch", "train_loss", "val_loss", "val_exact_match")
    log = [[row[c] for c in columns] for row in last["progress"]["log"]]
    return log, last["model"], (work / "reports/warmup_facts.json").read_text(), out


def test_the_trainer_trains_the_same_model_as_the_code_before(tmp_path):
    """Also across the change: a `last.pt` the code before wrote at step 12, continued here to step
    24, ends where the code before ends."""
    before = code_before(tmp_path)
    if before is None:
        pytest.skip(f"commit {BEFORE} (the code before) is not in this clone")
    datasets.disable_progress_bars()
    cfg = load_params(REPO / "params.yaml").warmup_data
    splits = build_warmup_dataset(split_numbers(cfg.max_number, 400, 20, 20, cfg.seed))
    for name in ("old", "new", "both"):
        save_dataset_dict(splits, tmp_path / name / "data" / "warmup")
    old, new, half = [
        start_run(code, tmp_path / name, steps)
        for name, code, steps in (("old", before, 24), ("new", REPO, 24), ("both", before, 12))
    ]
    outcome(tmp_path / "both", half)
    runs = {"old": old, "new": new, "both": start_run(REPO, tmp_path / "both")}  # continues step 12
    (old_log, old_weights, old_facts, _), (new_log, new_weights, new_facts, _), continued = (
        outcome(tmp_path / name, run) for name, run in runs.items()
    )
    assert [row[0] for row in new_log] == list(range(1, 25))
    assert "at step 12" in continued[3]  # resumed, not started afresh
    for log, weights, facts in ((new_log, new_weights, new_facts), continued[:3]):
        assert log == old_log  # every step's train loss (val_every 1), val loss and exact match
        assert weights.keys() == old_weights.keys()
        assert all(torch.equal(weights[k], old_weights[k]) for k in old_weights)
        assert facts == old_facts  # the final-model choice and every candidate's score
