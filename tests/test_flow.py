"""The scheduled flow: which case a run was, no overlapping runs, and real DVC + Prefect runs over a
tiny repository (the real `incoming` stage and a stand-in `train`) under Prefect's test harness."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from datasets import Dataset, DatasetDict

from pipeline.data.multi30k import save_dataset_dict
from pipeline.ops.flow import deployment, describe_case, main

REPO = Path(__file__).resolve().parents[1]
COUNTS = {"files": 1, "pairs_read": 3, "dropped_leak": 1, "dropped_dup": 0, "added": 2, "train_pairs": 5}


def test_case_no_new_data_nothing_retrained() -> None:
    stages = {"download": "skipped", "incoming": "skipped", "train": "skipped", "decode": "skipped"}
    assert describe_case(stages, COUNTS) == "no new data: nothing retrained"


def test_case_new_data_retrained_with_counts() -> None:
    case = describe_case({"incoming": "ran", "train": "ran"}, COUNTS)
    assert (
        case
        == "new data (2 new pairs in the training set; 1 dropped as in val/test, 0 as duplicates): retrained"
    )


def test_case_files_changed_but_not_the_training_set() -> None:
    case = describe_case({"incoming": "ran", "train": "skipped"}, COUNTS)
    assert (
        case.startswith("incoming files changed but the training set did not") and "nothing retrained" in case
    )


def test_case_retrained_for_another_reason() -> None:
    assert describe_case({"incoming": "skipped", "train": "ran"}, None).startswith("no new data, but")


@pytest.mark.parametrize(("on_overlap", "strategy"), [("skip", "CANCEL_NEW"), ("wait", "ENQUEUE")])
def test_scheduled_runs_never_overlap(on_overlap: str, strategy: str) -> None:
    dep = deployment("nightly", "0 3 * * *", on_overlap)
    assert dep.concurrency_limit == 1
    assert dep.concurrency_options.collision_strategy.value == strategy
    assert dep.parameters == {"recheck_data": True}
    assert dep.schedules[0].schedule.cron == "0 3 * * *"


def test_rollback_without_champion_is_a_one_line_error(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(SystemExit) as info:
        main(["rollback"])
    assert info.value.code == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after MLflow's database set-up lines
    assert last.startswith("error: MLflow model") and last.endswith("no 'champion' version to roll back")


DVC_YAML = {
    "stages": {
        "incoming": {
            "cmd": "python -m stages.incoming data/incoming data/train_merged.jsonl reports/incoming.json",
            "deps": ["data/incoming", "data/multi30k"],
            "outs": ["data/train_merged.jsonl"],
            "metrics": [{"reports/incoming.json": {"cache": False}}],
        },
        "train": {  # a stand-in: "trains" by copying the merged set
            "cmd": "python -c \"import shutil; shutil.copy('data/train_merged.jsonl', 'model.txt')\"",
            "deps": ["data/train_merged.jsonl"],
            "outs": ["model.txt"],
        },
    }
}


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory) -> Path:
    """A DVC project with the real incoming stage over a 2-pair corpus; MLflow disabled."""
    repo = tmp_path_factory.mktemp("flow") / "repo"
    for package in ("pipeline", "stages"):
        shutil.copytree(REPO / package, repo / package, ignore=shutil.ignore_patterns("__pycache__"))
    corpus = {"train": {"en": ["A man.", "A dog."], "de": ["Ein Mann.", "Ein Hund."]},
              "val": {"en": ["A cat."], "de": ["Eine Katze."]}}  # fmt: skip
    save_dataset_dict(
        DatasetDict({k: Dataset.from_dict(v) for k, v in corpus.items()}), repo / "data/multi30k"
    )
    (repo / "data/incoming").mkdir()
    (repo / "data/incoming/README.md").write_text("drop *.tsv files here\n")
    (repo / "params.yaml").write_text(yaml.safe_dump({"mlflow": {"enabled": False}}))
    (repo / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False))
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=repo, check=True)
    return repo


@pytest.mark.slow
def test_flow_retrains_only_on_new_data(tiny_repo: Path, harness, monkeypatch) -> None:
    from pipeline.ops.flow import pipeline_flow

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    first = pipeline_flow(repo=str(tiny_repo))
    assert first["train"] == "ran" and first["promotion"] == "mlflow disabled: nothing to promote"

    again = pipeline_flow(repo=str(tiny_repo))
    assert again["case"] == "no new data: nothing retrained"
    assert again["incoming"] == again["train"] == "skipped"

    (tiny_repo / "data/incoming/new.tsv").write_text("A bird.\tEin Vogel.\nA cat.\tEine Katze.\n")
    grown = pipeline_flow(repo=str(tiny_repo))
    assert grown["incoming"] == grown["train"] == "ran"
    assert grown["case"].startswith("new data (1 new pairs in the training set; 1 dropped as in val/test")
    assert (tiny_repo / "model.txt").read_text().count("\n") == 3  # 2 train pairs + the bird

    (tiny_repo / "data/incoming/README.md").write_text("a changed note, no new pairs\n")
    noted = pipeline_flow(repo=str(tiny_repo))
    assert noted["incoming"] == "ran" and noted["train"] == "skipped"
    assert noted["case"].startswith("incoming files changed but the training set did not")


@pytest.mark.slow
def test_flow_fails_on_a_bad_incoming_file(tiny_repo: Path, harness, monkeypatch) -> None:
    from pipeline.ops.flow import pipeline_flow

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    bad = tiny_repo / "data/incoming/zz_bad.tsv"
    bad.write_text("only English here\n")
    try:
        state = pipeline_flow(repo=str(tiny_repo), return_state=True)
    finally:
        bad.unlink()
    assert state.is_failed()
    with pytest.raises(RuntimeError, match=r"(?s)stage incoming failed .*zz_bad\.tsv: line 1: expected 2"):
        state.result()
