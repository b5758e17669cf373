"""MLflow plumbing: where records go (and that a copied checkout keeps its own), params flattening,
what a train run says about itself (name, description, params, summary tags, system metrics), git
tags, the training set as a dataset input, which checkpoints are uploaded, the translations as
previewable artifacts and the registered version's description."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest
from from_params import from_params
from toy_train import PAD, TOY_MAX_LEN, TOY_MODEL, TOY_OPTIM, ToyValidation, pairs

from pipeline.core.config import (
    DistillConfig,
    IncomingConfig,
    MlflowConfig,
    OptimConfig,
    Params,
    PrepareConfig,
    TrainConfig,
)
from pipeline.core.errors import PipelineError
from pipeline.core.params_file import flatten
from pipeline.core.run_id import read_run_id, write_run_id
from pipeline.model.transformer import Transformer
from pipeline.tracking import describe, mlflow_tracker, registry, store, train_run
from pipeline.tracking.tracker import finishing
from pipeline.training import loop
from pipeline.training.final_model import save_final_model
from pipeline.training.loop import RunContext, train
from pipeline.training.progress import ConsoleProgress

REPO = Path(__file__).resolve().parents[1]
COMMIT = "mlflow.source.git.commit"  # mlflow.utils.mlflow_tags.MLFLOW_GIT_COMMIT
BRANCH = "mlflow.source.git.branch"  # MLFLOW_GIT_BRANCH
NOTE = "mlflow.note.content"  # MLFLOW_RUN_NOTE: the run's description in the UI
SOURCE = "mlflow.source.name"  # MLFLOW_SOURCE_NAME: the UI's Source column
TRIGGER_VARS = ("MT_RUN_TRIGGER", "DVC_EXP_NAME", "DVC_STAGE")


def test_a_tracking_server_that_is_down_fails_in_seconds_with_one_line(monkeypatch):
    import mlflow  # noqa: F401  (imported first: on a busy machine the import alone can take seconds)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # port 9: nothing listens
    started = time.monotonic()
    with pytest.raises(PipelineError) as info:
        store.client()
    assert time.monotonic() - started < 10  # MLflow's own retries take minutes
    message = str(info.value)
    assert "\n" not in message and message.startswith(
        "MLFLOW_TRACKING_URI=http://127.0.0.1:9: no tracking server"
    )


def test_any_http_answer_counts_as_a_server():
    """A server that answers with an error status (a proxy, a login wall) is there: MLflow reports it."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the http.server name)
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store.check_server(f"http://127.0.0.1:{server.server_port}")
        store.check_server("sqlite:///nowhere/mlflow.db")  # not a server: nothing to check
    finally:
        server.shutdown()


def test_default_uri_is_the_absolute_repo_database_from_any_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert store.tracking_uri() == f"sqlite:///{REPO / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    assert store.tracking_uri() == "http://tracking:5000"


def test_a_dvc_exp_temp_copy_maps_back_to_the_original_repo(tmp_path):
    """`dvc exp run --temp` runs the stages in <repo>/.dvc/tmp/exps/<name>/."""
    copy = tmp_path / ".dvc" / "tmp" / "exps" / "tmpabc123"
    shutil.copytree(REPO / "pipeline", copy / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    code = "from pipeline.tracking.store import tracking_uri; print(tracking_uri())"
    out = subprocess.run([sys.executable, "-c", code], cwd=copy, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_artifacts_sit_beside_a_sqlite_database():
    assert store.artifact_location("sqlite:////data/runs/mlflow.db") == "file:///data/runs/mlartifacts"
    assert store.artifact_location("http://tracking:5000") is None


LOG_INTO_CHECKOUT = """
import sys
from pathlib import Path
from pipeline.core.run_id import write_run_id
from pipeline.tracking.mlflow_tracker import run_of
from pipeline.tracking.store import client, experiment_id

if sys.argv[1] == "train":  # a train run in the checkout's default database, its id in run_id.txt
    run_id = client().create_run(experiment_id("copied")).info.run_id
    write_run_id(Path("run_id.txt"), run_id)
else:  # a later stage adds to that run
    tracker = run_of(Path("run_id.txt"), enabled=True)
    tracker.log_text("scores", "reports/val.json")
    if tracker.run_id:
        print("LOGGED", tracker.run_id)
"""


def checkout_copy(tmp_path: Path, name: str) -> Path:
    """A checkout of the `pipeline` package alone (its default database is `<it>/mlflow.db`)."""
    root = tmp_path / name
    shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "log.py").write_text(LOG_INTO_CHECKOUT)
    return root


def run_in(checkout: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    out = subprocess.run(
        [sys.executable, "log.py", *args], cwd=checkout, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_a_copied_checkout_never_writes_into_the_originals_artifacts(tmp_path):
    """`cp -a` copies mlflow.db, whose experiment and runs name the original's `mlartifacts/`."""
    original = checkout_copy(tmp_path, "original")
    run_in(original, "train")
    assert run_in(original, "score").startswith("LOGGED")
    before = files_under(original / "mlartifacts")
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, symlinks=True)

    out = run_in(copy, "score")  # the original's run: nothing logged, and it says why
    assert "outside this checkout" in out and "LOGGED" not in out
    out = run_in(copy, "train") + run_in(copy, "score")  # a run of the copy's own
    assert out.count("renamed it 'copied (artifacts in ") == 1 and out.count("LOGGED") == 1
    assert files_under(original / "mlartifacts") == before
    assert [p for p in files_under(copy / "mlartifacts") if p.endswith("reports/val.json")] != []
    run_in(copy, "train")  # the experiment is the copy's own now: no message
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{copy / 'mlflow.db'}"
    assert (
        MlflowClient(uri).get_experiment_by_name("copied").artifact_location
        == (copy / "mlartifacts").as_uri()
    )
    assert store.foreign_artifacts((original / "mlartifacts" / "1").as_uri(), uri)


def test_flatten_nested_params():
    tree = {"train": {"model": {"d_model": 256}, "max_len": 128}, "decode": {"beam_size": 5}}
    assert flatten(tree) == {"train.model.d_model": 256, "train.max_len": 128, "decode.beam_size": 5}


def test_run_id_file_round_trip(tmp_path):
    path = tmp_path / "run.txt"
    assert read_run_id(path) is None
    write_run_id(path, "")
    assert read_run_id(path) is None
    write_run_id(path, "0123abcd")
    assert read_run_id(path) == "0123abcd"


# ---------------------------------------------------------------- run names, git tags


def test_mlflow_tag_names_are_mlflows_own():
    from mlflow.utils import mlflow_tags as tags

    assert (COMMIT, BRANCH) == (tags.MLFLOW_GIT_COMMIT, tags.MLFLOW_GIT_BRANCH)
    assert (NOTE, SOURCE) == (tags.MLFLOW_RUN_NOTE, tags.MLFLOW_SOURCE_NAME)


@pytest.mark.parametrize(
    "env, want",
    [
        ({}, "script"),
        ({"DVC_STAGE": "train"}, "dvc repro"),
        ({"DVC_STAGE": "train", "DVC_EXP_NAME": "lr-sweep-3"}, "dvc exp lr-sweep-3"),
        ({"DVC_STAGE": "train", "MT_RUN_TRIGGER": "flow manual 13:05"}, "flow manual 13:05"),
        ({"MT_RUN_TRIGGER": "flow 'quoted'"}, "flow quoted"),  # a quote would break MLflow's search filter
    ],
)
def test_the_trigger_is_the_flows_variable_else_what_dvc_says(monkeypatch, env, want):
    for name in TRIGGER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert describe.trigger() == want


def test_run_names_say_trigger_and_data_and_taken_names_are_numbered():
    name = describe.run_name("dvc repro", 29000, "3f2a1c9d" * 8)
    assert name == "dvc repro · 29,000 pairs 3f2a1c"
    assert describe.numbered(name, set()) == name
    assert describe.numbered(name, {name, f"{name} (2)"}) == f"{name} (3)"


def test_changes_list_what_differs_and_cut_after_the_limit():
    before = {"train.optim.max_steps": "3200", "data.pairs": "480", "train.model.d_model": "256"}
    after = before | {"train.optim.max_steps": "60", "data.pairs": "500", "train.seed": "1"}
    assert describe.changes(before, after) == [
        "data.pairs 480 → 500",
        "train.optim.max_steps 3200 → 60",
        "train.seed – → 1",
    ]
    assert describe.changes(before, after, limit=1) == ["data.pairs 480 → 500", "and 2 more"]
    assert describe.changes(after, after) == []


def test_run_params_are_the_train_data_and_tokenizer_settings_without_paths():
    params = from_params(Params)
    logged = train_run.run_params(params)
    assert {k.split(".")[0] for k in logged} == {"download", "tokenizer", "distill", "prepare", "train"}
    assert not [k for k in logged if k.endswith(train_run.PATH_SUFFIXES) or k in train_run.NOT_SHAPING]
    every = flatten(params.model_dump())
    paths = {str(v) for k, v in every.items() if k.endswith(train_run.PATH_SUFFIXES)}
    assert not paths & {str(v) for v in logged.values()}
    assert logged["train.optim.peak_lr"] == 0.002 and logged["tokenizer.vocab_size"] == 8000
    assert logged["distill.teacher"] == () and logged["prepare.sampling_alpha"] is None
    assert len(logged) == 3 + 3 + 3 + 3 + 3 + 9 + 18 + 2  # download ... train (+ model, optim, dist)


def test_the_recipe_names_the_teachers_their_runs_and_subword_sampling():
    params = from_params(Params)
    assert train_run.recipe_words(params).startswith("the training pairs as given")
    recipe = params.model_copy(
        update={
            "distill": from_params(DistillConfig, teacher=("m/a.pt", "m/b.pt")),
            "prepare": from_params(PrepareConfig, sampling_alpha=0.3),
        }
    )
    assert train_run.recipe_words(recipe, {"m/b.pt": "run-b"}) == (
        "distilled from m/a.pt + m/b.pt (run run-b), an ensemble translation, with the original pairs; "
        "subword sampling alpha 0.3 (16 copies, seed 0)"
    )
    each = recipe.model_copy(update={"distill": from_params(DistillConfig, teacher=("a",), combine="each")})
    assert "from a, one translation each, with" in train_run.recipe_words(each)


def test_a_teacher_is_found_by_its_models_sha256(mlflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    monkeypatch.chdir(tmp_path)
    Path("a.pt").write_bytes(b"teacher a")
    Path("b.pt").write_bytes(b"teacher b, trained elsewhere")
    exp_id = store.experiment_id("teacher-lookup")
    digest = hashlib.sha256(b"teacher a").hexdigest()
    run = store.client().create_run(exp_id, tags={"summary.model_sha256": digest})
    store.client().create_run(exp_id, tags={"summary.model_sha256": "0" * 64})
    params = from_params(Params, distill=from_params(DistillConfig, teacher=("a.pt", "b.pt", "gone.pt")))
    assert train_run.teacher_runs(params, exp_id) == {"a.pt": run.info.run_id}


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
    assert store.git_tags(checkout) == {COMMIT: commit, BRANCH: "study"}
    git(checkout, "checkout", "-q", "--detach")
    assert store.git_tags(checkout) == {COMMIT: commit}
    assert store.git_tags(tmp_path) == {COMMIT: "unknown"}  # pytest's tmp_path is outside any checkout


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
    return from_params(
        Params,
        incoming=from_params(IncomingConfig, in_dir=str(incoming)),
        mlflow=from_params(MlflowConfig, experiment="tracking-test"),
    )


@pytest.fixture(autouse=True)
def no_active_run():
    """A train run's tracker is MLflow's active run (system metrics) until it finishes: end it after
    a failed test, so that the next one can start its own."""
    yield
    import mlflow

    mlflow.end_run()


def start(data_id: str = "0123456789abcdef" * 4, n_pairs: int = 1234) -> train_run.TrainStart:
    return train_run.TrainStart(data_id, n_pairs)


def clear_triggers(monkeypatch) -> None:
    for name in TRIGGER_VARS:
        monkeypatch.delenv(name, raising=False)


def test_a_train_run_has_git_source_and_data_tags_in_a_training_experiment(
    tracked_params, checkout, tmp_path
):
    tracker = train_run.start_train_run(tracked_params, tmp_path / "out", "fingerprint", start())
    tracker.finish()
    run = tracker.client.get_run(tracker.run_id)
    assert run.data.tags[COMMIT] == git(checkout, "rev-parse", "HEAD") and run.data.tags[BRANCH] == "study"
    assert run.data.tags[SOURCE] == "stages/train.py" and run.data.tags["stage"] == "train"
    assert run.data.tags["data.pairs"] == "1234" and run.data.tags["data.digest"] == "0123456789ab"
    assert len(run.data.tags["data.multi30k"]) == 12 and not [k for k in run.data.tags if "sha256" in k]
    experiment = tracker.client.get_experiment(run.info.experiment_id)
    assert experiment.tags[store.EXPERIMENT_KIND] == "custom_model_development"  # "Machine learning"
    assert experiment.tags[NOTE].startswith("Training runs of the English→German Transformer")


def test_a_repro_run_and_a_flow_retrain_of_one_commit_differ_in_name_and_description(
    tracked_params, checkout, tmp_path, monkeypatch
):
    """What the runs list and the run page show: the trigger and the data in the name, what changed
    in the description; a repeated name gets a number."""
    clear_triggers(monkeypatch)
    monkeypatch.setenv("DVC_STAGE", "train")
    client = store.client()
    exp_id = store.experiment_id("same-commit")
    params = tracked_params.model_copy(update={"mlflow": from_params(MlflowConfig, experiment="same-commit")})

    def run_of(data_id: str, n_pairs: int):
        out = tmp_path / data_id[:4]
        tracker = train_run.start_train_run(params, out, "fingerprint", start(data_id, n_pairs))
        tracker.finish()
        return client.get_run(tracker.run_id)

    repro = run_of("aaaa" * 16, 500)
    monkeypatch.setenv("MT_RUN_TRIGGER", "flow manual 13:05")
    retrain = run_of("bbbb" * 16, 520)
    monkeypatch.delenv("MT_RUN_TRIGGER")
    again = run_of("aaaa" * 16, 500)
    names = [run.info.run_name for run in (repro, retrain, again)]
    assert names == [
        "dvc repro · 500 pairs aaaaaa",
        "flow manual 13:05 · 520 pairs bbbbbb",
        "dvc repro · 500 pairs aaaaaa (2)",
    ]
    assert {r.info.run_name for r in client.search_runs([exp_id])} == set(names)
    assert repro.data.tags[COMMIT] == retrain.data.tags[COMMIT]
    assert (repro.data.tags["trigger"], retrain.data.tags["trigger"]) == ("dvc repro", "flow manual 13:05")
    first, second = repro.data.tags[NOTE], retrain.data.tags[NOTE]
    assert first.startswith("Training run started by `dvc repro` at commit")
    assert "500 pairs of multi30k-en-de+incoming (a.tsv, b.tsv), digest `aaaaaaaaaaaa`" in first
    assert "The first training run of this experiment." in first
    assert "Recipe: the training pairs as given (no distillation, no subword sampling)." in first
    assert second.startswith("Training run started by `flow manual 13:05`")
    changed = "data.digest aaaaaaaaaaaa → bbbbbbbbbbbb; data.pairs 500 → 520"
    assert f"Changed since `{names[0]}`: {changed}." in second


def test_a_run_logs_each_shaping_param_once_and_no_warmup_or_paths(tracked_params, tmp_path):
    tracker = train_run.start_train_run(tracked_params, tmp_path / "out", "fingerprint", start())
    tracker.finish()
    params = tracker.client.get_run(tracker.run_id).data.params
    assert params == {k: str(v) for k, v in train_run.run_params(tracked_params).items()}
    assert len(params) == 44 and not [k for k in params if k.startswith(("warmup", "decode", "incoming"))]
    assert not [v for v in params.values() if "/" in v]  # no paths (the default incoming folder, ...)


def test_the_training_set_is_the_runs_dataset_input(tracked_params, tmp_path):
    tracker = train_run.start_train_run(tracked_params, tmp_path / "out", "fingerprint", start())
    data_id = "0123456789abcdef" * 4
    tracker.log_training_set(data_id, 1234)
    tracker.log_training_set(data_id, 1234)  # a continued run logs it again: still one input
    tracker.finish()
    inputs = tracker.client.get_run(tracker.run_id).inputs.dataset_inputs
    assert len(inputs) == 1
    dataset = inputs[0].dataset
    assert (dataset.name, dataset.digest) == ("multi30k-en-de+incoming", data_id[:12])
    assert json.loads(dataset.source) == {"uri": "data/train_merged.jsonl"} and dataset.source_type == "local"
    profile = json.loads(dataset.profile)
    assert profile == {"num_rows": 1234, "data_id": data_id, "incoming_files": ["a.tsv", "b.tsv"]}
    assert {(t.key, t.value) for t in inputs[0].tags} == {("mlflow.data.context", "training")}


def test_a_trained_run_has_curves_system_metrics_and_summary_tags(tracked_params, tmp_path, monkeypatch):
    """A toy training under a train run: step metrics have several points (line charts), the
    summary is tags and a result paragraph (no one-point curves), system metrics are sampled."""
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
    tracker = train_run.start_train_run(tracked_params, tmp_path, "fingerprint", start())
    toy, out = pairs(), tmp_path / "out"
    cfg = from_params(
        TrainConfig,
        out_dir=str(out),
        model_file=str(out / "model.pt"),
        max_len=TOY_MAX_LEN,
        optim=from_params(OptimConfig, **TOY_OPTIM | {"max_steps": 8}),
    )
    model, validation = Transformer(TOY_MODEL, 20, PAD), ToyValidation(toy[:16])
    run = RunContext(out, tmp_path / "log.csv", data_id="toy", tracker=tracker)
    with finishing(tracker):
        state = loop.start(model, cfg.optim, run)
        train(model, toy, validation, state)
        save_final_model(model, state, validation, cfg)
        client, run_id = tracker.client, tracker.run_id
        deadline = time.time() + 20  # the monitor samples every second: a fast toy run may end first
        while "system/cpu_utilization_percentage" not in client.get_run(run_id).data.metrics:
            assert time.time() < deadline, "no system metrics sampled in 20 s"
            time.sleep(0.2)
    logged = client.get_run(run_id).data
    assert sorted(k for k in logged.metrics if not k.startswith("system/")) == ["score", "val/loss"]
    for key in logged.metrics:
        steps = [m.step for m in client.get_metric_history(run_id, key)]
        assert len(steps) > 1 or steps == [0], f"{key}: a one-point curve at step {steps}"
    assert logged.tags["summary.steps"] == "8" and logged.tags["summary.stopped_by"] == "max_steps"
    model_sha256 = hashlib.sha256(Path(cfg.model_file).read_bytes()).hexdigest()
    assert logged.tags["summary.model_sha256"] == model_sha256
    summary = {"summary.minutes", "summary.parameters", "summary.final_val_bleu", "summary.final_model"}
    assert summary <= set(logged.tags)
    assert logged.tags[NOTE].split("\n\n")[-1].startswith("Result: final model ")
    assert logged.tags[NOTE].count("Result: ") == 1


def test_loop_names_become_mlflow_sections_of_step_curves(mlflow_db, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    run_id = store.client().create_run(store.experiment_id("tracking-test")).info.run_id
    tracker = mlflow_tracker.MlflowTracker(run_id)
    tracker.log_metrics({"train_loss": 2.0, "lr": 1e-3, "tokens_per_s": 900.0}, step=50)
    tracker.log_metrics({"val_loss": 1.5, "val_bleu": 12.5}, step=400)
    tracker.log_metrics({"val.bleu": 30.1}, step=0)  # the score stage's final scores keep their names
    assert set(tracker.client.get_run(run_id).data.metrics) == {
        "train/loss",
        "train/lr",
        "train/tokens_per_s",
        "val/loss",
        "val/greedy_bleu",
        "val.bleu",
    }


def test_translations_are_logged_with_a_previewable_name(mlflow_db, monkeypatch):
    """MLflow's artifact browser previews `.txt` (not `.de`); runs logged before keep their names."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    client = store.client()
    new, old = (client.create_run(store.experiment_id("tracking-test")).info.run_id for _ in range(2))
    mlflow_tracker.MlflowTracker(new).log_text(
        "Ein Hund.\n", mlflow_tracker.translation_artifact("val", "de")
    )
    client.log_text(old, "Ein Hund.\n", "reports/translations/val.hyp.de")
    listed = [f.path for f in client.list_artifacts(new, mlflow_tracker.TRANSLATIONS_ARTIFACTS)]
    assert listed == ["reports/translations/val.hyp.de.txt"]
    assert mlflow_tracker.logged_translation(new, "val", "de") == "reports/translations/val.hyp.de.txt"
    assert mlflow_tracker.logged_translation(old, "val", "de") == "reports/translations/val.hyp.de"


def test_a_registered_version_says_which_run_and_data_it_comes_from(tracked_params, tmp_path, monkeypatch):
    clear_triggers(monkeypatch)
    monkeypatch.setenv("DVC_STAGE", "train")
    tracker = train_run.start_train_run(tracked_params, tmp_path / "out", "fingerprint", start())
    tracker.log_summary(
        {
            "steps": 8,
            "epochs": 1,
            "minutes": 0.1,
            "final_val_bleu": 12.34,
            "final_model": "average_last_4",
            "stopped_by": "max_steps",
        }
    )
    tracker.finish()
    client = tracker.client
    client.create_registered_model("describe-test")
    exp_id = client.get_run(tracker.run_id).info.experiment_id
    model_id = client.create_logged_model(exp_id, "translator", tracker.run_id).model_id
    source = f"models:/{model_id}"  # as `log_model(registered_model_name=...)` registers it
    version = client.create_model_version("describe-test", source, run_id=tracker.run_id).version
    registry.describe_version("describe-test", version, tracker.run_id, "beam 5, length penalty 2.2")
    got = client.get_model_version("describe-test", version)
    name = client.get_run(tracker.run_id).info.run_name
    assert name.startswith("dvc repro · 1,234 pairs 012345")
    assert got.tags == {"run": name, "trigger": "dvc repro"} | {
        "data.pairs": "1234",
        "data.digest": "0123456789ab",
        "recipe": "the training pairs as given (no distillation, no subword sampling)",
    }
    logged_model = client.get_logged_model(model_id).tags  # the experiment's Models tab
    assert logged_model["run"] == name and logged_model["registered_as"] == f"describe-test v{version}"
    assert got.description.startswith(f"Trained by run `{name}` at commit `")
    assert got.description.endswith(
        "on 1,234 pairs (digest `0123456789ab`); recipe: the training pairs as given (no distillation, "
        "no subword sampling); final model average_last_4, "
        "greedy val BLEU 12.34. Decoding: beam 5, length penalty 2.2."
    )


def test_without_incoming_files_the_training_set_is_multi30k(tmp_path):
    params = from_params(Params, incoming=from_params(IncomingConfig, in_dir=str(tmp_path / "absent")))
    assert mlflow_tracker.training_set(params) == mlflow_tracker.TrainingSet(
        "multi30k-en-de", "data/train_merged.jsonl"
    )


# ---------------------------------------------------------------- checkpoint uploads


def test_checkpoint_upload_values_are_the_config_choices():
    choices = typing.get_args(MlflowConfig.model_fields["log_checkpoints"].annotation)
    assert choices == mlflow_tracker.CHECKPOINT_UPLOADS and from_params(MlflowConfig).log_checkpoints == "all"
    with pytest.raises(ValueError, match="mlflow.log_checkpoints: 'best'"):
        mlflow_tracker.uploads_checkpoint("best", "best.pt")


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
    client = store.client()
    run_id = client.create_run(store.experiment_id("tracking-test")).info.run_id
    data = mlflow_tracker.TrainingSet("toy", "toy.jsonl")
    tracker = mlflow_tracker.MlflowTracker(run_id, log_checkpoints=policy, training_set=data)
    run = RunContext(tmp_path, tmp_path / "log.csv", data_id="toy", tracker=tracker)
    toy = pairs()
    model = Transformer(TOY_MODEL, 20, PAD)
    train(
        model,
        toy,
        ToyValidation(toy[:16]),
        loop.start(model, from_params(OptimConfig, **TOY_OPTIM | {"max_steps": 8}), run),
    )
    assert {Path(f.path).name for f in client.list_artifacts(run_id, "checkpoints")} == uploaded
    (dataset_input,) = client.get_run(run_id).inputs.dataset_inputs
    assert json.loads(dataset_input.dataset.profile)["num_rows"] == len(toy)


# ---------------------------------------------------------------- the flow's stage order


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


# ---------------------------------------------------------------- a corrupt tracking database


def sqlite_file(path: Path) -> Path:
    """A small healthy SQLite database of several pages at `path`."""
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, payload TEXT)")
        db.executemany("INSERT INTO runs (payload) VALUES (?)", [("x" * 200,)] * 200)
    db.close()
    return path


def corrupt(path: Path, how: str) -> Path:
    """`path` truncated to half its size, or with a garbage header."""
    if how == "truncated":
        os.truncate(path, path.stat().st_size // 2)
    else:
        with path.open("r+b") as f:
            f.write(b"not a database at all, garbage!!" * 4)
    return path


@pytest.mark.parametrize("how", ["truncated", "garbage header"])
def test_a_corrupt_tracking_database_is_one_line_naming_the_file(tmp_path, how):
    db = corrupt(sqlite_file(tmp_path / "mlflow.db"), how)
    with pytest.raises(PipelineError) as info:
        store.check_store(f"sqlite:///{db}")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{db}: not a readable SQLite database (")
    assert "move it aside" in message


def test_a_healthy_or_absent_database_passes_the_check(tmp_path):
    store.check_store(f"sqlite:///{sqlite_file(tmp_path / 'ok.db')}")
    store.check_store(f"sqlite:///{tmp_path / 'not-yet.db'}")  # MLflow creates it
    assert not (tmp_path / "not-yet.db").exists()


def test_decode_refuses_a_corrupt_database_before_translating(tmp_path, monkeypatch):
    """The check comes before minutes of translating, not after them."""
    from from_params import write_changed_params

    from stages import decode

    monkeypatch.chdir(tmp_path)
    write_changed_params(tmp_path / "params.yaml")
    db = corrupt(sqlite_file(tmp_path / "mlflow.db"), "truncated")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")

    def translator(*args, **kwargs):
        raise AssertionError("the model was loaded before the tracking database was checked")

    monkeypatch.setattr(decode, "load_translator", translator)
    monkeypatch.setattr(decode, "die_with_parent", lambda: True, raising=False)  # not for pytest itself
    with pytest.raises(PipelineError, match="not a readable SQLite database"):
        decode.main()


def test_the_server_refuses_a_corrupt_database_in_one_line(tmp_path):
    db = corrupt(sqlite_file(tmp_path / "mlflow.db"), "garbage header")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{db}"}
    cmd = [sys.executable, "-m", "pipeline.serving.server", "-m", "models:/m@candidate", "-p", "0"]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"error: {db}: not a readable SQLite database (file is not a database); {store.MOVE_ASIDE}"
    ]
