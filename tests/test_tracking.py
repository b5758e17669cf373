"""MLflow plumbing: where records go, params flattening, and the champion promotion rule."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.gpu_check import resolve  # dvc.yaml `${a.b}` templating, shared with the GPU check
from pipeline.tracking import runs as tracking
from pipeline.training.progress import ConsoleProgress

REPO = Path(__file__).resolve().parents[1]


def test_default_uri_is_the_absolute_repo_database_from_any_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert tracking.tracking_uri() == f"sqlite:///{REPO / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    assert tracking.tracking_uri() == "http://tracking:5000"


def test_a_dvc_exp_temp_copy_maps_back_to_the_original_repo(tmp_path):
    """`dvc exp run --temp` runs the stages in <repo>/.dvc/tmp/exps/<name>/."""
    copy = tmp_path / ".dvc" / "tmp" / "exps" / "tmpabc123"
    shutil.copytree(REPO / "pipeline", copy / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    code = "from pipeline.tracking.runs import tracking_uri; print(tracking_uri())"
    out = subprocess.run([sys.executable, "-c", code], cwd=copy, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_artifacts_sit_beside_a_sqlite_database():
    assert tracking.artifact_location("sqlite:////data/runs/mlflow.db") == "file:///data/runs/mlartifacts"
    assert tracking.artifact_location("http://tracking:5000") is None


def test_flatten_nested_params():
    tree = {"train": {"model": {"d_model": 256}, "max_len": 128}, "decode": {"beam_size": 5}}
    assert tracking.flatten(tree) == {"train.model.d_model": 256, "train.max_len": 128, "decode.beam_size": 5}


def test_run_id_file_round_trip(tmp_path):
    path = tmp_path / "run.txt"
    assert tracking.read_run_id(path) is None
    tracking.write_run_id(path, "")
    assert tracking.read_run_id(path) is None
    tracking.write_run_id(path, "0123abcd")
    assert tracking.read_run_id(path) == "0123abcd"


# ---------------------------------------------------------------- the flow's stage order


def test_flow_stage_order_is_a_topological_order_of_the_dag():
    from pipeline.ops.flow import stage_names

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    stages = yaml.safe_load(resolve((REPO / "dvc.yaml").read_text(), params))["stages"]
    producer = {}
    for name, stage in stages.items():
        for out in stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", []):
            producer[next(iter(out)) if isinstance(out, dict) else out] = name
    order = stage_names(REPO)
    assert order == list(stages)
    for position, name in enumerate(order):
        for dep in stages[name].get("deps", []):
            if dep in producer:
                assert order.index(producer[dep]) < position, f"{name} needs {dep} from {producer[dep]}"


# ---------------------------------------------------------------- console progress


def test_progress_off_a_terminal_is_plain_lines_every_n_steps(capsys):
    progress = ConsoleProgress(max_steps=1000, max_minutes=10, every=50)
    for step in range(1, 121):
        progress.update(step, step * 1.5, {"train_loss": 2.5, "lr": 1e-3})
    progress.line("step=120 val_loss=2.4")
    progress.close()
    out, err = capsys.readouterr()
    assert "\r" not in out + err and err == ""
    lines = out.splitlines()
    assert lines[:2] == [
        "train: step 50/1000, 1.2/10 min, train_loss=2.5 lr=0.001",
        "train: step 100/1000, 2.5/10 min, train_loss=2.5 lr=0.001",
    ]
    assert lines[2:] == ["step=120 val_loss=2.4"]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("max_steps, max_minutes, want", [(100, 1000, 500), (100_000, 10, 250)])
def test_progress_bar_follows_the_budget_that_ends_first(monkeypatch, max_steps, max_minutes, want):
    """50 steps in 150 s: half of 100 steps, or a quarter of 10 minutes (steps would say 0.05%)."""
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    progress = ConsoleProgress(max_steps, max_minutes)
    progress.update(50, 150.0, {"train_loss": 2.5})
    assert progress.bar.n == want and progress.bar.total == 1000  # per mille
    progress.close()
    assert "\r" in sys.stderr.getvalue()  # a live bar on a terminal


def test_progress_of_other_ranks_is_silent(capsys):
    progress = ConsoleProgress(max_steps=10, max_minutes=1, enabled=False, every=1)
    progress.update(1, 1.0, {"train_loss": 1.0})
    progress.line("hidden")
    assert capsys.readouterr() == ("", "")
