"""MLflow plumbing: where records go, params flattening, run names, git tags, the training set as
a dataset input, which checkpoints are uploaded, and the champion promotion rule."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from toy_train import PAD, TOY_MODEL, TOY_OPTIM, ToyValidation, pairs

from pipeline.core.config import IncomingConfig, MlflowConfig, OptimConfig, Params
from pipeline.model.transformer import Transformer
from pipeline.tracking import runs as tracking
from pipeline.training.loop import RunContext, train
from pipeline.training.progress import ConsoleProgress

REPO = Path(__file__).resolve().parents[1]
COMMIT = "mlflow.source.git.commit"  # mlflow.utils.mlflow_tags.MLFLOW_GIT_COMMIT
BRANCH = "mlflow.source.git.branch"  # MLFLOW_GIT_BRANCH


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


# ---------------------------------------------------------------- run names, git tags


def test_mlflow_tag_names_are_mlflows_own():
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_BRANCH, MLFLOW_GIT_COMMIT

    assert (COMMIT, BRANCH) == (MLFLOW_GIT_COMMIT, MLFLOW_GIT_BRANCH)


def test_run_name_is_the_dvc_experiment_else_stage_and_short_commit(monkeypatch):
    commit = "c1c3f4f0123456789abcdef0123456789abcdef0"
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    assert tracking.run_name("train", commit) == "train-c1c3f4f"
    assert tracking.run_name("train", "unknown") == "train-unknown"
    monkeypatch.setenv("DVC_EXP_NAME", "lr-sweep-3")
    assert tracking.run_name("train", commit) == "lr-sweep-3"


def git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git checkout on branch `study` with one commit."""
    root = tmp_path / "checkout"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "checkout", "-q", "-b", "study")
    git(root, "commit", "-q", "--allow-empty", "-m", "one")
    return root


def test_git_tags_name_the_commit_and_the_branch_when_there_is_one(checkout, tmp_path):
    commit = git(checkout, "rev-parse", "HEAD")
    assert tracking.git_tags(checkout) == {COMMIT: commit, BRANCH: "study"}
    git(checkout, "checkout", "-q", "--detach")
    assert tracking.git_tags(checkout) == {COMMIT: commit}
    assert tracking.git_tags(tmp_path) == {COMMIT: "unknown"}  # pytest's tmp_path is outside any checkout


# ---------------------------------------------------------------- train runs in MLflow


@pytest.fixture(scope="module")
def mlflow_db(tmp_path_factory) -> str:
    """A temporary sqlite tracking URI shared by this module's tests (creating one costs seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def tracked_params(mlflow_db, checkout, tmp_path, monkeypatch) -> Params:
    """Params of a train run tracked into `mlflow_db` from `checkout`, two incoming files (and a
    hidden one, ignored as the incoming stage does)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    monkeypatch.chdir(checkout)
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    for name in ("b.tsv", "a.tsv", ".draft.tsv", "notes.txt"):
        (incoming / name).write_text("A dog.\tEin Hund.\n", encoding="utf-8")
    return Params(
        incoming=IncomingConfig(in_dir=str(incoming)), mlflow=MlflowConfig(experiment="tracking-test")
    )


@pytest.mark.parametrize("exp_name", [None, "lr-sweep-3"])
def test_a_train_run_is_named_and_has_mlflows_git_tags(
    tracked_params, checkout, tmp_path, monkeypatch, exp_name
):
    if exp_name:
        monkeypatch.setenv("DVC_EXP_NAME", exp_name)
    else:
        monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    tracker = tracking.start_train_run(tracked_params, tmp_path / "out", "fingerprint", "cpu")
    run = tracker.client.get_run(tracker.run_id)
    commit = git(checkout, "rev-parse", "HEAD")
    assert run.info.run_name == (exp_name or f"train-{commit[:7]}")
    assert run.data.tags[COMMIT] == commit and run.data.tags[BRANCH] == "study"
    assert "git_commit" not in run.data.tags and run.data.tags["stage"] == "train"


def test_the_training_set_is_the_runs_dataset_input(tracked_params, tmp_path):
    tracker = tracking.start_train_run(tracked_params, tmp_path / "out", "fingerprint", "cpu")
    data_id = "0123456789abcdef" * 4
    tracker.log_training_set(data_id, 1234)
    tracker.log_training_set(data_id, 1234)  # a continued run logs it again: still one input
    inputs = tracker.client.get_run(tracker.run_id).inputs.dataset_inputs
    assert len(inputs) == 1
    dataset = inputs[0].dataset
    assert (dataset.name, dataset.digest) == ("multi30k-en-de+incoming", data_id[:12])
    assert json.loads(dataset.source) == {"uri": "data/train_merged.jsonl"} and dataset.source_type == "local"
    profile = json.loads(dataset.profile)
    assert profile == {"num_rows": 1234, "data_id": data_id, "incoming_files": ["a.tsv", "b.tsv"]}
    assert {(t.key, t.value) for t in inputs[0].tags} == {("mlflow.data.context", "training")}


def test_without_incoming_files_the_training_set_is_multi30k(tmp_path):
    params = Params(incoming=IncomingConfig(in_dir=str(tmp_path / "absent")))
    assert tracking.training_set(params) == tracking.TrainingSet("multi30k-en-de", "data/train_merged.jsonl")


# ---------------------------------------------------------------- checkpoint uploads


def test_checkpoint_upload_values_are_the_config_choices():
    choices = typing.get_args(MlflowConfig.model_fields["log_checkpoints"].annotation)
    assert choices == tracking.CHECKPOINT_UPLOADS and MlflowConfig().log_checkpoints == "all"
    with pytest.raises(ValueError, match="mlflow.log_checkpoints: 'best'"):
        tracking.uploads_checkpoint("best", "best.pt")


@pytest.mark.parametrize(
    "policy, uploaded",
    [
        ("all", {"best.pt", "last.pt", "step0000004.pt", "step0000008.pt"}),
        ("best_and_last", {"best.pt", "last.pt"}),
        ("none", set()),
    ],
)
def test_a_tiny_run_uploads_the_checkpoints_log_checkpoints_names(
    mlflow_db, tmp_path, monkeypatch, policy, uploaded
):
    """Two validations (steps 4 and 8) of a toy run; the loop also logs its training set."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    client = tracking.client()
    run_id = client.create_run(tracking.experiment_id("tracking-test")).info.run_id
    data = tracking.TrainingSet("toy", "toy.jsonl")
    tracker = tracking.MlflowTracker(run_id, log_checkpoints=policy, training_set=data)
    run = RunContext(tmp_path, tmp_path / "log.csv", data_id="toy", tracker=tracker)
    toy = pairs()
    train(
        Transformer(TOY_MODEL, 20, PAD),
        toy,
        ToyValidation(toy[:16]),
        OptimConfig(**TOY_OPTIM | {"max_steps": 8}),
        run,
    )
    assert {Path(f.path).name for f in client.list_artifacts(run_id, "checkpoints")} == uploaded
    (dataset_input,) = client.get_run(run_id).inputs.dataset_inputs
    assert json.loads(dataset_input.dataset.profile)["num_rows"] == len(toy)


# ---------------------------------------------------------------- the flow's stage order


def test_flow_stage_order_is_a_topological_order_of_the_dag():
    from pipeline.ops.dag import producers, read_dag
    from pipeline.ops.flow import stage_names

    stages = read_dag(REPO)
    order = stage_names(REPO)
    assert sorted(order) == sorted(stages)
    for position, name in enumerate(order):
        for producer in producers(stages[name], list(stages.values())):
            assert order.index(producer) < position, f"{name} needs {producer}'s output"
    assert {"incoming", "tokenizer"} <= producers(stages["prepare"], list(stages.values()))


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
