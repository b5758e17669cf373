"""MLflow plumbing: where records go, params flattening, and the champion promotion rule."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline import tracking
from pipeline.errors import PipelineError

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
    code = "from pipeline.tracking import tracking_uri; print(tracking_uri())"
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


# ---------------------------------------------------------------- promotion


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A fresh sqlite MLflow store for this module."""
    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
        yield tracking.client()


def register(client, name: str, bleu_val: float | None, alias: str, run_id: str | None = None) -> str:
    """A new version of `name` (of run `run_id`, else a new run) with `alias`, scored `bleu_val`
    the way the score stage does it."""
    from pipeline.registry import tag_candidate

    run_id = run_id or client.create_run(tracking.experiment_id("promotion-test")).info.run_id
    if not client.search_registered_models(f"name = '{name}'"):
        client.create_registered_model(name)
    version = client.create_model_version(name, f"runs:/{run_id}/translator", run_id)
    client.set_registered_model_alias(name, "candidate", version.version)
    if bleu_val is not None:
        assert tag_candidate(name, run_id, {"bleu_val": bleu_val}) == version.version
    client.set_registered_model_alias(name, alias, version.version)
    return version.version


@pytest.mark.parametrize(
    "champion, candidate, promoted",
    [(None, 30.0, True), (30.0, 31.5, True), (30.0, 30.0, False), (30.0, 29.0, False)],
)
def test_champion_moves_only_to_a_strictly_better_candidate(registry, champion, candidate, promoted):
    from pipeline.registry import promote

    name = f"m-{champion}-{candidate}".replace(".", "_")
    old = register(registry, name, champion, "champion") if champion is not None else None
    new = register(registry, name, candidate, "candidate")
    result = promote(name)
    assert result.promoted is promoted
    want = new if promoted else old
    assert registry.get_model_version_by_alias(name, "champion").version == want


def test_promotion_needs_a_candidate_with_val_bleu(registry):
    from pipeline.registry import promote

    with pytest.raises(PipelineError, match="no 'candidate' version"):
        promote("never-registered")
    register(registry, "unscored", None, "candidate")
    with pytest.raises(PipelineError, match="no 'bleu_val'"):
        promote("unscored")


def test_a_better_decode_of_the_same_training_run_is_promoted(registry):
    """Scores live on versions: a new version of the same run (say, a wider beam) competes."""
    from pipeline.registry import promote

    first = register(registry, "same-run", 30.0, "champion")
    run_id = registry.get_model_version("same-run", first).run_id
    second = register(registry, "same-run", 30.5, "candidate", run_id=run_id)
    assert promote("same-run").promoted
    assert registry.get_model_version_by_alias("same-run", "champion").version == second
    assert registry.get_model_version_by_alias("same-run", "champion").tags["bleu_val"] == "30.5000"


# ---------------------------------------------------------------- the flow's stage order


def resolve(text: str, params: dict) -> str:
    """Substitute `${a.b}` from params (as dvc.yaml's templating does)."""

    def value(match: re.Match) -> str:
        node = params
        for key in match.group(1).split("."):
            node = node[key]
        return str(node)

    return re.sub(r"\$\{(\w+(?:\.\w+)*)\}", value, text)


def test_flow_stage_order_is_a_topological_order_of_the_dag():
    from pipeline.flow import stage_names

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
