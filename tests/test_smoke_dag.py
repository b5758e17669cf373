"""The whole DAG end to end with tests/smoke_params.yaml in a temporary copy of the repo, tracked
into a temporary MLflow database; then the Prefect flow over the same copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.core.params_file import flatten, load_params
from pipeline.data.tokenizer import model_file
from pipeline.ops.overrides import read_params

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("MULTI30K_MIRROR", REPO.parent / "shared" / "multi30k"))
MODEL_NAME = "smoke-translator"
SPLITS = ("val", "test_2016_flickr", "test_2017_flickr")
P = load_params(REPO / "params.yaml")  # the stages' paths (smoke_params.yaml moves none of them)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not MIRROR.is_dir(), reason=f"Multi30k mirror {MIRROR} absent"),
]


def dag_env(mlflow_db: Path | None = None) -> dict:
    """The environment a scratch DAG runs in: the Multi30k mirror, this venv first on PATH, and a
    tracking URI of its own (`mlflow_db`) when given."""
    env = {
        **os.environ,
        "MULTI30K_MIRROR": str(MIRROR),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    return env | ({"MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"} if mlflow_db else {})


def repo_copy(dest: Path) -> Path:
    """Copy the tracked and untracked-but-not-ignored files (no data, models or reports outputs)."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        if name.startswith("reports/") or not (REPO / name).is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


def write_params(work: Path, **overrides: dict) -> None:
    """The repo's params.yaml with tests/smoke_params.yaml, then `overrides`, merged over it."""
    smoke = yaml.safe_load((REPO / "tests/smoke_params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(read_params(REPO, smoke, overrides)))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, french_repro):
    """(work dir, env, first `dvc repro`): the smoke DAG, tracked into a temporary sqlite URI.
    The French DAG (`french_repro`) runs in the background meanwhile: both are mostly
    single-threaded process start-ups, so together they take little longer than one."""
    root = tmp_path_factory.mktemp("smoke")
    work = repo_copy(root / "repo")
    write_params(work, mlflow={"model_name": MODEL_NAME})
    env = dag_env(root / "mlflow.db")
    run = subprocess.run(["dvc", "repro"], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    french_repro[2].wait(timeout=900)  # so that it does not slow the Prefect server tests below
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return work, env, run


def test_smoke_dag_runs_end_to_end(smoke):
    work, env, run = smoke
    assert "Downloading artifacts" not in run.stdout + run.stderr  # MLflow's bars stay out of DVC's log
    metrics = {s: json.loads((work / P.score.scores_dir / f"{s}.json").read_text()) for s in SPLITS}
    facts = json.loads((work / P.score.facts_json).read_text())
    assert set(metrics) == set(facts) == {"val", "test_2016_flickr", "test_2017_flickr"}
    for split, m in metrics.items():
        assert set(m) == {"bleu", "chrf", "bleu_lc_tok"} and all(0.0 <= v <= 100.0 for v in m.values())
        assert facts[split]["bleu"].startswith("nrefs:1") and "tok:none" in facts[split]["bleu_lc_tok"]
        lines = (work / P.decode.translations_dir / f"{split}.hyp.de").read_text().split("\n")
        assert len(lines) - 1 == 40  # one line per source line (max_eval_pairs), trailing newline
    assert (work / P.decode.time_machine_md).read_text().count("\n|") >= 21
    figures = json.loads((work / P.decode.robustness_json).read_text())  # computed by decode
    assert figures["total"] == len((REPO / "data/robustness.tsv").read_text().splitlines()) - 1
    assert 0 <= figures["passed"] <= figures["total"] and figures["uppercase_bleu"] >= 0
    assert json.loads((work / P.warmup_train.facts_json).read_text())["threshold"] == 0.0
    assert (work / P.train.model_file).is_file()
    assert not (work / "mlflow.db").exists()  # MLFLOW_TRACKING_URI wins over the repo default

    again = subprocess.run(["dvc", "repro"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Data and pipelines are up to date" in again.stdout


def stale_stages(work: Path, env: dict, pipeline: str = "dvc.yaml") -> set[str]:
    out = subprocess.run(
        ["dvc", "status", "--json", pipeline], cwd=work, env=env, capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout))


@pytest.mark.parametrize(
    ("edited", "stale"),
    [
        # distill decodes with the teacher: stale too, but with no teacher it writes the same set
        # again, so prepare and train stay up to date
        ("pipeline/model/beam.py", {"distill", "decode", "report"}),
        ("pipeline/serving/spans.py", {"distill", "decode", "report"}),
        ("pipeline/serving/pyfunc.py", {"decode"}),
        ("pipeline/ops/report/page.md.j2", {"report"}),  # the template: a dep that is not code
        ("pipeline/ops/cli.py", set()),
    ],
)
def test_an_inference_side_edit_leaves_training_up_to_date(smoke, edited: str, stale: set[str]) -> None:
    work, env, _ = smoke
    path = work / edited
    original = path.read_bytes()
    try:
        path.write_bytes(original + b"# an edit\n")
        assert stale_stages(work, env) == stale
    finally:
        path.write_bytes(original)
    assert stale_stages(work, env) == set()


def test_dvc_metrics_are_numbers_that_fit_a_terminal(smoke):
    """`dvc metrics show` compares numbers only (configuration lives in params.yaml, signatures and
    device facts in the *_facts.json files)."""
    work, env, _ = smoke
    shown = subprocess.run(
        ["dvc", "metrics", "show", "--json"], cwd=work, env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    files = next(iter(json.loads(shown.stdout).values()))["data"]  # keyed by revision ("" = workspace)
    scores = {str(Path(P.score.scores_dir) / f"{s}.json") for s in SPLITS}
    assert scores | {P.train.metrics_json, P.warmup_train.metrics_json} <= set(files)
    built = {name: f for name, f in files.items() if not name.startswith("reports/distill/")}  # the recipe's
    leaves = [(name, key, value) for name, f in built.items() for key, value in flatten(f["data"]).items()]
    assert len(leaves) >= 15
    for name, key, value in leaves:
        assert isinstance(value, int | float) and not isinstance(value, bool), f"{name}: {key} = {value!r}"


@pytest.fixture(scope="module")
def tracked(smoke, monkeypatch_module):
    """(MlflowClient, the train stage's run) of the smoke DAG."""
    work, env, _ = smoke
    monkeypatch_module.setenv("MLFLOW_TRACKING_URI", env["MLFLOW_TRACKING_URI"])
    from pipeline.tracking import store

    client = store.client()
    run_id = (work / P.train.run_id_file).read_text().strip()
    return client, client.get_run(run_id)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_mlflow_run_has_params_tags_step_metrics_and_test_metrics(tracked):
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

    client, run = tracked
    assert run.data.params["train.model.d_model"] == "32"
    assert run.data.params["beam_size"] == "2"  # the model's config, logged by decode; once
    assert not [k for k in run.data.params if k.startswith(("decode.", "warmup_train."))]
    commit = run.data.tags[MLFLOW_GIT_COMMIT]  # MLflow's own tag; the scratch copy has no commit
    assert (len(commit) == 40 or commit == "unknown") and "git_commit" not in run.data.tags
    pairs, digest = int(run.data.tags["data.pairs"]), run.data.tags["data.digest"]
    assert run.info.run_name == f"dvc repro · {pairs:,} pairs {digest[:6]}" and 0 < pairs <= 500
    assert run.data.tags["summary.steps"] == "60" and "steps" not in run.data.metrics
    history = {
        k: [m.step for m in client.get_metric_history(run.info.run_id, k)]
        for k in ("train/loss", "train/lr", "train/tokens_per_s", "val/loss", "val/greedy_bleu")
    }
    assert history["train/loss"] == history["train/lr"] == history["train/tokens_per_s"] == [50]
    assert history["val/loss"] == history["val/greedy_bleu"] == [30, 60]
    for split in ("val", "test_2016_flickr", "test_2017_flickr"):
        for name in ("bleu", "chrf", "bleu_lc_tok"):
            assert 0.0 <= run.data.metrics[f"{split}.{name}"] <= 100.0


def test_mlflow_run_has_every_checkpoint_and_the_final_model(tracked):
    client, run = tracked
    checkpoints = {Path(f.path).name for f in client.list_artifacts(run.info.run_id, "checkpoints")}
    assert {"last.pt", "best.pt", "step0000030.pt", "step0000060.pt"} <= checkpoints
    assert [f.path for f in client.list_artifacts(run.info.run_id, "model")] == ["model/model.pt"]
    reports = {Path(f.path).name for f in client.list_artifacts(run.info.run_id, "reports")}
    assert {"time_machine.md", "val.json", "train_summary.json"} <= reports
    translations = {Path(f.path).name for f in client.list_artifacts(run.info.run_id, "reports/translations")}
    assert translations == {f"{split}.hyp.de.txt" for split in SPLITS}  # .txt: the artifact browser shows it


def test_logged_pyfunc_translates_and_is_the_candidate(smoke, tracked):
    import mlflow

    from pipeline.core.params_file import load_params
    from pipeline.serving.translator import load_translator, translate_lines

    work, client, run = smoke[0], *tracked
    version = client.get_model_version_by_alias(MODEL_NAME, "candidate")
    assert version.run_id == run.info.run_id
    assert version.tags["run"] == run.info.run_name and version.description.startswith("Trained by run `")
    assert float(version.tags["val.bleu"]) == pytest.approx(run.data.metrics["val.bleu"], abs=1e-3)
    sentences = ["A dog runs in the park.", "", "Two men are playing football on a field."]
    got = mlflow.pyfunc.load_model(f"models:/{MODEL_NAME}@candidate").predict(sentences)
    loaded = load_translator(work / P.train.model_file, work / model_file(P.tokenizer.out_dir))
    params = load_params(work / "params.yaml")
    want = translate_lines(loaded, sentences, params.decode, max_pieces=params.train.max_len)
    assert got == want and len(got) == 3 and got[1] == ""


def test_flow_skips_unchanged_stages_and_promotes(smoke, tracked, harness, monkeypatch):
    from pipeline.ops.flow.dvc_calls import stage_names
    from pipeline.ops.flow.tasks import pipeline_flow

    work, env, _ = smoke
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("MULTI30K_MIRROR", env["MULTI30K_MIRROR"])
    first = pipeline_flow(repo=str(work))
    second = pipeline_flow(repo=str(work))
    stages = stage_names(work)
    assert {first[s] for s in stages} == {"skipped"}  # the DAG was built by the fixture
    assert first["promotion"].startswith("promoted:")  # no champion yet
    assert second["promotion"].startswith("kept champion")  # the same model is not better
    client, run = tracked
    assert client.get_model_version_by_alias(MODEL_NAME, "champion").run_id == run.info.run_id


def test_a_train_that_refuses_to_start_leaves_the_last_runs_reports(smoke, tmp_path):
    """DVC removes a stage's outputs before running it unless they persist: a trainer that stops
    at once (here: another holds the folder) must not take the last run's log and facts with it."""
    from pipeline.training.checkpoint import trainer_lock

    work, env, _ = smoke
    copy = tmp_path / "repo"
    shutil.copytree(work, copy, symlinks=True)
    kept = [P.train.log_csv, P.train.metrics_json, P.train.facts_json, P.train.run_id_file]
    before = {name: (copy / name).read_bytes() for name in kept}
    with trainer_lock(copy / P.train.out_dir):
        done = subprocess.run(
            ["dvc", "repro", "-f", "train"], cwd=copy, env=env, capture_output=True, text=True, timeout=600
        )
    assert done.returncode != 0 and "a training is already running" in done.stdout + done.stderr
    assert {name: (copy / name).read_bytes() for name in kept} == before


def test_flow_fails_with_the_stage_error(smoke, harness, monkeypatch, tmp_path):
    from pipeline.ops.flow.tasks import pipeline_flow

    work, env, _ = smoke
    broken = tmp_path / "repo"
    shutil.copytree(work, broken, symlinks=True)
    params = yaml.safe_load((broken / "params.yaml").read_text())
    params["decode"]["beam_size"] = (
        0  # `distill` (the teacher's beam) and `decode` read it: distill runs first
    )
    (broken / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("PATH", env["PATH"])
    state = pipeline_flow(repo=str(broken), return_state=True)
    assert state.is_failed()
    with pytest.raises(
        RuntimeError, match=r"(?s)stage distill failed .*error: params.yaml: decode\.beam_size"
    ):
        state.result()


# ---------------------------------------------------------------- another target language

FR_OVERRIDES = {  # smaller still than the smoke params: this checks the plumbing, not the model
    "download": {"tgt_lang": "fr", "max_train_pairs": 200, "max_eval_pairs": 10},
    "tokenizer": {"vocab_size": 300},
    "warmup_data": {"n_train": 300, "n_val": 20, "n_test": 20},
    "warmup_train": {"optim": {"max_steps": 4, "val_every": 4}},
    "train": {"optim": {"max_steps": 10, "val_every": 10, "average_last": 1}},
    "decode": {"beam_size": 1},
    "mlflow": {"enabled": False},
}


@pytest.fixture(scope="module")
def french_repro(tmp_path_factory):
    """(work dir, log file, running `dvc repro`) of the whole DAG with download.tgt_lang: fr
    (MLflow off), started in the background."""
    root = tmp_path_factory.mktemp("smoke_fr")
    work = repo_copy(root / "repo")
    write_params(work, **FR_OVERRIDES)
    env = dag_env()
    log = root / "repro.log"
    with log.open("w") as out:
        proc = subprocess.Popen(["dvc", "repro"], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
    yield work, log, proc
    proc.kill()


@pytest.fixture(scope="module")
def smoke_fr(french_repro):
    """The work dir of the French DAG, once its `dvc repro` has succeeded."""
    work, log, proc = french_repro
    returncode = proc.wait(timeout=900)
    assert returncode == 0, log.read_text()[-6000:]
    return work


def test_english_to_french_dag_scores_every_split(smoke_fr):
    work = smoke_fr
    for split in SPLITS:
        scores = json.loads((work / P.score.scores_dir / f"{split}.json").read_text())
        assert set(scores) == {"bleu", "chrf", "bleu_lc_tok"}
        assert all(isinstance(v, float) and 0.0 <= v <= 100.0 for v in scores.values())
        assert len((work / P.decode.translations_dir / f"{split}.hyp.fr").read_text().splitlines()) == 10
    assert json.loads((work / P.score.facts_json).read_text())["val"]["bleu_lc_tok"].endswith(":fr")
    assert "fr" in json.loads((work / "data/train_merged.jsonl").read_text().splitlines()[0])
    assert "the tutorial's outputs are German" in (work / P.decode.time_machine_md).read_text()
    assert "English→French" in (work / P.report.page_md).read_text()


RECIPE = "recipes/distill/dvc.yaml"


def repro_recipe(work: Path, env: dict) -> str:
    done = subprocess.run(
        ["dvc", "repro", RECIPE], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def set_recipe_knobs(work: Path, **knobs) -> None:
    path = work / "recipes/distill/params.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(path.read_text()) | knobs))


def without_shadows_up_to_date(copy: Path, env: dict) -> list[Path]:
    """Remove the trainer's shadow copies (a fresh clone has none) and check nothing is stale;
    returns the folders removed."""
    shadows = sorted(copy.glob("models/**/.*.resume"))
    for folder in shadows:
        shutil.rmtree(folder)
    assert stale_stages(copy, env, RECIPE) == set()
    return shadows


def more_students(copy: Path, env: dict) -> None:
    """A student seed trains one more student, beside the first, and decode ensembles the two."""
    set_recipe_knobs(copy, student_seeds=[3], decode_ensemble="models/students/seed3/model.pt")
    ran = repro_recipe(copy, env)
    assert f"Running stage '{RECIPE}:student_seed@3'" in ran and f"Running stage '{RECIPE}:decode'" in ran
    assert f"Running stage '{RECIPE}:student'" not in ran and f"Running stage '{RECIPE}:teacher@3'" not in ran
    facts = json.loads((copy / "models/students/seed3/train_facts.json").read_text())
    assert facts["optim"]["seed"] == 3
    import mlflow

    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    name = yaml.safe_load((copy / "params.yaml").read_text())["mlflow"]["model_name"]
    version = mlflow.MlflowClient().get_model_version_by_alias(name, "candidate")
    assert "an ensemble with models/students/seed3/model.pt" in version.description
    assert "Running stage" not in repro_recipe(copy, env)
    assert copy / "models/students/.seed3.resume" in without_shadows_up_to_date(copy, env)


def test_the_distillation_recipe_is_cached_stages_that_name_their_teachers(smoke, tmp_path):
    """`dvc repro recipes/distill/dvc.yaml` over the built default pipeline: the teacher stage, the
    teachers' translations, the student, its scores; a second run runs nothing, nor does a checkout
    without the trainer's shadow copies (a fresh clone); a larger student budget makes only the
    student stale, an ensemble at decode only the decode; a student seed trains one more student
    for that ensemble; a decoding change makes the translations and what follows stale, never a
    teacher or the default model."""
    work, env, _ = smoke
    copy = tmp_path / "repo"
    shutil.copytree(work, copy, symlinks=True)
    steps = yaml.safe_load((copy / "params.yaml").read_text())["train"]["optim"]["max_steps"]
    # the smoke budget, not the recipe's, and one student (more_students adds the second)
    set_recipe_knobs(copy, student_max_steps=steps, student_seeds=[], decode_ensemble="")
    ran = repro_recipe(copy, env)
    assert "Running stage 'recipes/distill/dvc.yaml:teacher@3'" in ran and "Running stage 'train'" not in ran
    facts = json.loads((copy / "reports/distill/distill.json").read_text())
    assert list(facts["teacher"]) == ["models/transformer/model.pt", "models/teachers/seed3/model.pt"]
    assert facts["pairs_out"] > facts["pairs_in"] and (copy / "reports/distill/val.json").is_file()
    assert "Running stage" not in repro_recipe(copy, env)
    assert copy / "models/teachers/.seed3.resume" in without_shadows_up_to_date(copy, env)
    set_recipe_knobs(copy, student_max_steps=steps + 20)
    assert stale_stages(copy, env, RECIPE) == {f"{RECIPE}:student"}
    set_recipe_knobs(copy, student_max_steps=steps, decode_ensemble="models/transformer/model.pt")
    assert stale_stages(copy, env, RECIPE) == {f"{RECIPE}:decode"}
    set_recipe_knobs(copy, decode_ensemble="")

    shipped = (copy / "params.yaml").read_text()
    params = yaml.safe_load(shipped)
    params["decode"]["length_penalty"] = 1.0
    (copy / "params.yaml").write_text(yaml.safe_dump(params))
    stale = stale_stages(copy, env, RECIPE)  # what `dvc repro` would run first: never a teacher
    assert stale == {f"{RECIPE}:distill", f"{RECIPE}:decode"}
    (copy / "params.yaml").write_text(shipped)

    import mlflow

    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    student_run = (copy / "reports/distill/mlflow_run_id.txt").read_text().strip()
    teacher_run = (copy / "models/teachers/seed3/mlflow_run_id.txt").read_text().strip()
    recipe = mlflow.MlflowClient().get_run(student_run).data.tags["recipe"]
    assert f"models/teachers/seed3/model.pt (run {teacher_run})" in recipe
    more_students(copy, env)
