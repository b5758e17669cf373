"""The scheduled flow: which case a run was, no overlapping runs, and real DVC + Prefect runs over a
tiny repository (the real `incoming` stage and a stand-in `train`) under Prefect's test harness."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

import pytest
import yaml
from datasets import Dataset, DatasetDict
from from_params import BILLION_LAUGHS, write_changed_params
from markdown_tables import table_rows

from pipeline.core.errors import ConfigError
from pipeline.data.multi30k import save_dataset_dict
from pipeline.ops.flow.cli import main
from pipeline.ops.flow.dvc_calls import StatusFailed
from pipeline.ops.flow.summary import describe_case, incoming_config, outcome_tags, summary_markdown
from pipeline.ops.flow.tasks import deployment
from pipeline.ops.promotion import Comparison, decide

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


KEPT = decide(Comparison(champion_bleu=40.0, candidate_bleu=39.0, p_value=0.01), "2", "1", 0.05)
PROMOTED = decide(Comparison(champion_bleu=40.0, candidate_bleu=42.0, p_value=0.01), "2", "1", 0.05)


@pytest.mark.parametrize(
    ("stages", "decision", "tags"),
    [
        ({"incoming": "ran", "train": "ran"}, PROMOTED, ["retrained", "promoted"]),
        ({"incoming": "ran", "train": "ran"}, KEPT, ["retrained", "kept"]),
        ({"incoming": "ran", "train": "ran"}, None, ["retrained"]),  # MLflow disabled
        ({"incoming": "skipped", "train": "ran"}, KEPT, ["retrained", "no-new-data", "kept"]),
        ({"incoming": "ran", "train": "skipped"}, KEPT, ["no-new-data"]),  # the champion was not challenged
        ({"incoming": "skipped", "train": "skipped"}, PROMOTED, ["no-new-data", "promoted"]),
    ],
)
def test_tags_say_what_the_run_did(stages: dict, decision, tags: list[str]) -> None:
    assert outcome_tags(stages, decision) == tags


def test_summary_has_the_decision_scores_and_counts() -> None:
    stages = {"download": "skipped", "incoming": "ran", "train": "ran"}
    summary = summary_markdown("new data (2 new pairs ...): retrained", KEPT, COUNTS, stages)
    assert summary.startswith(f"**{KEPT.message}**\n")
    assert set(table_rows(summary)) >= {
        ("candidate BLEU (val)", "39.00"),
        ("champion BLEU (val)", "40.00"),
        ("paired bootstrap p", "0.0100"),
        ("incoming added", "2"),
        ("incoming dropped leak", "1"),
        ("stages ran", "incoming, train"),
        ("stages skipped", "download"),
    }


def test_summary_of_equal_scores_gives_no_p() -> None:
    equal = decide(Comparison(champion_bleu=0.0, candidate_bleu=0.0, p_value=0.001), "2", "1", 0.05)
    assert equal.message == "kept champion v1 (equal scores: v2 BLEU 0.00, champion v1 0.00)"
    summary = summary_markdown("new data: retrained", equal, None, {"train": "ran"})
    assert ("paired bootstrap p", "none: equal scores") in table_rows(summary) and "0.001" not in summary


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
            "cmd": "python -m stages.incoming",
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
    corpus = {
        "train": {"en": ["A man.", "A dog."], "de": ["Ein Mann.", "Ein Hund."]},
        "val": {"en": ["A cat."], "de": ["Eine Katze."]},
    }
    save_dataset_dict(
        DatasetDict({k: Dataset.from_dict(v) for k, v in corpus.items()}), repo / "data/multi30k"
    )
    (repo / "data/incoming").mkdir()
    (repo / "data/incoming/README.md").write_text("drop *.tsv files here\n")
    write_changed_params(repo / "params.yaml", {"mlflow": {"enabled": False}})
    (repo / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False))
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=repo, check=True)
    return repo


@pytest.mark.slow
def test_flow_retrains_only_on_new_data(tiny_repo: Path, harness, monkeypatch) -> None:
    from pipeline.ops.flow.tasks import pipeline_flow

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
    from pipeline.ops.flow.tasks import pipeline_flow

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


def flow_run_record(state) -> tuple:
    """(flow run, {task run name: its state name}, its artifacts) from the Prefect API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
    )

    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
        found = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        artifacts = client.read_artifacts(artifact_filter=found)
    return run, {task.name: task.state.name for task in tasks}, artifacts


@pytest.mark.slow
def test_flow_run_says_what_happened(tiny_repo: Path, harness, monkeypatch) -> None:
    """What the Prefect UI shows of a run: its name and tags, its summary artifact (equal scores:
    no p), and skipped stages under their own state name."""
    from pipeline.ops import promotion
    from pipeline.ops.flow.tasks import SUMMARY_KEY, pipeline_flow

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    equal = decide(Comparison(champion_bleu=0.0, candidate_bleu=0.0, p_value=0.001), "2", "1", 0.05)
    monkeypatch.setattr(promotion, "promote", lambda *args: equal)
    params, new = tiny_repo / "params.yaml", tiny_repo / "data/incoming/horse.tsv"
    before = params.read_text()
    write_changed_params(params, {"mlflow": {"enabled": True}})
    new.write_text("A horse.\tEin Pferd.\n")  # new to the training set, whichever test ran before
    try:
        retrained = pipeline_flow(repo=str(tiny_repo), return_state=True)
        unchanged = pipeline_flow(repo=str(tiny_repo), return_state=True)
    finally:
        params.write_text(before)
        new.unlink()

    run, tasks, artifacts = flow_run_record(retrained)
    started = f"manual {run.expected_start_time.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    assert run.name == f"{started}: retrained, kept" and sorted(run.tags) == ["kept", "retrained"]
    assert tasks["incoming"] == tasks["train"] == "Completed"
    [summary] = artifacts
    assert summary.key == SUMMARY_KEY and summary.type == "markdown" and summary.description == run.name
    assert summary.data.startswith(f"**{equal.message}**") and "equal scores" in equal.message
    added = json.loads((tiny_repo / "reports/incoming.json").read_text())["added"]  # the horse, maybe a bird
    assert ("incoming added", str(added)) in table_rows(summary.data) and "0.001" not in summary.data

    run, tasks, artifacts = flow_run_record(unchanged)
    assert run.name.endswith(" UTC: no new data") and run.tags == ["no-new-data"]
    assert tasks["incoming"] == tasks["train"] == "Skipped"
    assert ("stages skipped", "incoming, train") in table_rows(artifacts[0].data)


@pytest.mark.slow
def test_a_broken_incoming_link_stops_the_flow_before_dvc(tiny_repo: Path, harness, monkeypatch) -> None:
    """DVC cannot hash a folder holding a broken link (its own message: "unexpected error"); the
    flow names every such link, hidden ones (Emacs' lock files) too, before any stage runs."""
    from pipeline.core.errors import DataError
    from pipeline.ops.flow.tasks import pipeline_flow

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    links = [tiny_repo / "data/incoming/gone.tsv", tiny_repo / "data/incoming/.#new.tsv"]
    for link in links:
        link.symlink_to(tiny_repo / "nowhere.tsv")
    try:
        status = subprocess.run(["dvc", "status", "incoming"], cwd=tiny_repo, capture_output=True, text=True)
        state = pipeline_flow(repo=str(tiny_repo), return_state=True)
    finally:
        for link in links:
            link.unlink()
    assert status.returncode != 0 and "unexpected error" in status.stdout + status.stderr
    assert state.is_failed()
    with pytest.raises(
        DataError, match=r"^data/incoming/\.#new\.tsv, data/incoming/gone\.tsv: broken symbolic link"
    ):
        state.result()
    _, tasks, _ = flow_run_record(state)
    assert "incoming" not in tasks  # no stage task started


def refused_run(repo: Path, monkeypatch, capsys) -> str:
    """`main(["run"])` in `repo` with the flow itself blocked: its one-line error (exit 1)."""
    from pipeline.ops.flow import cli, tasks

    monkeypatch.setattr(cli, "REPO", repo)
    monkeypatch.setattr(tasks, "pipeline_flow", lambda **_: pytest.fail("the flow started"))
    with pytest.raises(SystemExit) as info:
        main(["run"])
    err = capsys.readouterr().err
    assert info.value.code == 1 and err.count("\n") == 1, err
    return err


def test_run_with_a_broken_incoming_link_is_one_line_before_prefect_starts(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    write_changed_params(tmp_path / "params.yaml", {"incoming": {"in_dir": "data/incoming"}})
    (tmp_path / "data/incoming").mkdir(parents=True)
    (tmp_path / "data/incoming/.#pairs.tsv").symlink_to(tmp_path / "nowhere")
    err = refused_run(tmp_path, monkeypatch, capsys)
    assert err.startswith("error: data/incoming/.#pairs.tsv: broken symbolic link")


# ---------------------------------------------------------------- streamed output, DVC's status

CHILD = """
import pathlib, sys, time
gate = pathlib.Path(sys.argv[1])
print("waiting", flush=True)
for _ in range(300):  # cannot end before the parent has seen the first line and opened the gate
    if gate.exists():
        break
    time.sleep(0.1)
else:
    print("timed out: the first line was not delivered while this process ran", flush=True)
print("a frame\\rthe next frame")
sys.exit(3)
"""


def test_stream_lines_delivers_each_line_while_the_process_runs(tmp_path: Path) -> None:
    from pipeline.ops.flow.dvc_calls import stream_lines

    gate, seen = tmp_path / "gate", []

    def log(line: str) -> None:
        seen.append((line, gate.exists()))
        gate.touch()  # lets the child go on: it was still running when its first line came

    code, last = stream_lines([sys.executable, "-c", CHILD, str(gate)], str(tmp_path), log, keep=2)
    assert seen == [("waiting", False), ("a frame", True), ("the next frame", True)]
    assert code == 3 and last == "a frame\nthe next frame"


HOLDER = """
import sys
from pathlib import Path
from pipeline.ops.flow.cli import run_lock

with run_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin (or kills this process)
"""


def test_one_flow_run_per_checkout(tmp_path: Path) -> None:
    """The second `run` in a checkout gets one line naming the holder; the lock ends with its holder."""
    from pipeline.core.errors import PipelineError
    from pipeline.ops.flow.cli import LOCK_FILE, run_lock

    with run_lock(tmp_path):  # two descriptors of one process exclude each other too
        with pytest.raises(PipelineError, match="a flow run is already running") as info:
            with run_lock(tmp_path):
                pytest.fail("entered a held lock")
    assert "\n" not in str(info.value) and f"pid {os.getpid()}" in str(info.value)
    for end in ("exit", "kill"):
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(
            PipelineError, match=rf"^{tmp_path}: .* \(pid {holder.pid}, lock {tmp_path / LOCK_FILE}\); "
        ):
            with run_lock(tmp_path):
                pytest.fail("entered a lock another process holds")
        if end == "kill":
            holder.kill()
        else:
            holder.stdin.close()
        holder.wait(timeout=60)
        with run_lock(tmp_path):  # released when its holder ended, however
            pass


def test_a_second_run_command_is_one_line_and_exit_1(tmp_path: Path, monkeypatch, capsys) -> None:
    from pipeline.ops.flow.cli import run_lock

    with run_lock(tmp_path):
        err = refused_run(tmp_path, monkeypatch, capsys)
    assert err.startswith(f"error: {tmp_path}: a flow run is already running (pid {os.getpid()}")


@pytest.fixture
def scratch_dvc(tmp_path: Path, monkeypatch) -> Path:
    """A git + DVC project with one trivial stage `copy` (in.txt -> out.txt), never run."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "in.txt").write_text("a\n")
    copy = "python -c \"import shutil; shutil.copy('in.txt', 'out.txt')\""
    stage = {"cmd": copy, "deps": ["in.txt"], "outs": ["out.txt"]}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"copy": stage}}))
    return tmp_path


@pytest.mark.slow
def test_is_stale_reads_dvc_status_json(scratch_dvc: Path) -> None:
    from pipeline.ops.flow.dvc_calls import is_stale

    assert is_stale("copy", str(scratch_dvc))  # never run
    subprocess.run([sys.executable, "-m", "dvc", "repro", "-q", "copy"], cwd=scratch_dvc, check=True)
    assert not is_stale("copy", str(scratch_dvc))
    (scratch_dvc / "in.txt").write_text("b\n")
    assert is_stale("copy", str(scratch_dvc))
    with pytest.raises(RuntimeError, match=r"(?s)stage nosuch: dvc status failed .*nosuch"):
        is_stale("nosuch", str(scratch_dvc))


def task_state_name(state, timeout_s: float = 60.0) -> str:
    """The name of a task run's final state as the Prefect API (and so the UI) holds it. Prefect
    sends task states in the background, so the API may still say `Running` for a moment after the
    task returned (on a busy machine, seconds): read until the state is final or `timeout_s` passed."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            api_state = client.read_task_run(state.state_details.task_run_id).state
            if api_state.is_final() or time.monotonic() > deadline:
                return api_state.name
            time.sleep(0.5)


@pytest.mark.slow
def test_run_stage_ran_then_skipped_then_forced(scratch_dvc: Path, harness) -> None:
    """A skipped stage's task has its own state name; DVC's hints stay out of the task's log."""
    from pipeline.ops.flow.tasks import run_stage

    ran = run_stage("copy", str(scratch_dvc), return_state=True)
    assert ran.result() == "ran" and task_state_name(ran) == "Completed"
    assert (scratch_dvc / "out.txt").read_text() == "a\n"
    logs = [log.message for log in task_run_logs(ran.state_details.task_run_id)]
    assert "Running stage 'copy':" in logs and logs[-1] == "stage copy: ran"
    assert not [line for line in logs if "git add" in line or "autostage" in line or "dvc push" in line]
    skipped = run_stage("copy", str(scratch_dvc), return_state=True)
    assert skipped.result() == "skipped" and task_state_name(skipped) == "Skipped"
    assert skipped.is_completed() and skipped.message == "stage copy: unchanged, skipped"
    assert run_stage("copy", str(scratch_dvc), force=True).result() == "ran"


def task_run_logs(task_run_id) -> list:
    """The log records of one task run in the Prefect API, oldest first (after a flush)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterTaskRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    with get_client(sync_client=True) as client:
        logs = LogFilter(task_run_id=LogFilterTaskRunId(any_=[task_run_id]))
        return client.read_logs(logs, sort=LogSort.TIMESTAMP_ASC)


@pytest.fixture(scope="module")
def smoke_before_train(tmp_path_factory) -> tuple[Path, dict]:
    """(work dir, env): a scratch copy of the repository with tests/smoke_params.yaml (MLflow off),
    every stage before `train` reproduced."""
    from test_smoke_dag import MIRROR, dag_env, repo_copy, write_params

    if not MIRROR.is_dir():
        pytest.skip(f"Multi30k mirror {MIRROR} absent")
    root = tmp_path_factory.mktemp("smoke_flow")
    work = repo_copy(root / "repo")
    write_params(work, mlflow={"enabled": False})
    env = dag_env(root / "mlflow.db")
    cmd = [sys.executable, "-m", "dvc", "repro", "incoming", "tokenizer", "prepare", "warmup_train"]
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work, env


@pytest.mark.slow
def test_train_progress_streams_into_the_task_log(smoke_before_train, harness, monkeypatch) -> None:
    from pipeline.ops.flow.tasks import run_stage

    work, env = smoke_before_train
    for name in ("PATH", "MULTI30K_MIRROR", "MLFLOW_TRACKING_URI"):
        monkeypatch.setenv(name, env[name])
    state = run_stage("train", str(work), return_state=True)
    assert state.result() == "ran"
    logs = task_run_logs(state.state_details.task_run_id)
    progress = [log for log in logs if log.message.startswith("train: step 50/60")]
    assert len(progress) == 1, [log.message for log in logs]
    ended = (work / "reports/train_summary.json").stat().st_mtime  # written as the stage ends
    assert progress[0].timestamp.timestamp() < ended  # logged while training went on
    assert logs[-1].message == "stage train: ran"


def test_an_incoming_section_missing_a_key_is_one_line(tmp_path: Path) -> None:
    from pipeline.core.errors import ConfigError

    path = write_changed_params(tmp_path / "params.yaml")
    assert incoming_config(tmp_path).in_dir == "data/incoming"
    raw = yaml.safe_load(path.read_text())
    del raw["incoming"]["in_dir"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=rf"^{path}: incoming.in_dir: Field required$"):
        incoming_config(tmp_path)
    del raw["incoming"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=rf"^{path}: incoming: Input should be a valid dictionary"):
        incoming_config(tmp_path)


def test_run_with_a_corrupt_tracking_database_is_one_line_before_prefect_starts(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    write_changed_params(tmp_path / "params.yaml", {"incoming": {"in_dir": "data/incoming"}})
    (tmp_path / "data/incoming").mkdir(parents=True)
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"garbage, not SQLite" * 100)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    err = refused_run(tmp_path, monkeypatch, capsys)
    assert err.startswith(f"error: {db}: not a readable SQLite database (file is not a database); move it")


# ---------------------------------------------------------------- deterministic failures, bad params


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (ConfigError("params.yaml: download.out_dir: /tmp/x lies outside the checkout"), False),
        (StatusFailed("stage download: dvc status failed (exit 255):\nERROR: unexpected error"), False),
        (RuntimeError("stage download failed (exit 1):\nerror: tiny.de.gz: no valid copy found"), True),
    ],
)
def test_only_a_failure_that_may_pass_is_retried(error: Exception, retried: bool) -> None:
    from prefect.states import Failed

    from pipeline.ops.flow.tasks import DATA_STAGE, run_stage, stage_task, transient

    assert stage_task("train") is run_stage
    data_task = stage_task(DATA_STAGE)
    assert data_task.retries == 2 and data_task.retry_condition_fn is transient
    assert transient(data_task, None, Failed(data=error)) is retried


@pytest.mark.slow
def test_the_data_stage_is_not_retried_on_a_deterministic_error(tmp_path: Path, harness, monkeypatch) -> None:
    """Prefect itself asks `transient`: a ConfigError fails at the first try, a stage failure is tried 3 times."""
    from prefect import flow

    from pipeline.ops.flow import tasks

    tries = []

    def failing(stage: str, repo: str) -> bool:
        tries.append(stage)
        raise error

    monkeypatch.setattr(tasks, "is_stale", failing)
    quick = tasks.stage_task(tasks.DATA_STAGE).with_options(retry_delay_seconds=0)

    @flow
    def data_only() -> None:
        quick(tasks.DATA_STAGE, str(tmp_path))

    for error, expected in [(ConfigError("params.yaml: download.out_dir: bad"), 1), (RuntimeError("net"), 3)]:
        tries.clear()
        with pytest.raises(type(error)):
            data_only()
        assert len(tries) == expected


@pytest.mark.slow
def test_run_with_an_alias_bomb_params_is_one_line_in_seconds(tmp_path: Path) -> None:
    """DVC expands YAML aliases: the flow's first `dvc status` grew to gigabytes on a billion laughs."""
    for package in ("pipeline", "stages"):
        shutil.copytree(
            REPO / package, tmp_path / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / "params.yaml").write_text(BILLION_LAUGHS + (REPO / "params.yaml").read_text(encoding="utf-8"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.ops.flow", "run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (
        1,
        f"error: {tmp_path}/params.yaml: lol: Extra inputs are not permitted\n",
    )
    assert (
        time.monotonic() - started < 30
    )  # the interpreter and imports on a busy machine; no Prefect, no DVC


# ---------------------------------------------------------------- SIGTERM to the flow

SLEEPING_STAGE = {  # says it started, then sleeps: a long stage the test stops the flow during
    "cmd": "python -c \"import pathlib, time; pathlib.Path('started').touch(); time.sleep(600)\"",
    "outs": ["never.txt"],
}


@pytest.fixture
def sleeping_repo(tmp_path: Path) -> Path:
    """A DVC project of one sleeping stage beside a copy of the package, so `python -m
    pipeline.ops.flow run` there runs this project (MLflow disabled)."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "pipeline", repo / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    write_changed_params(repo / "params.yaml", {"mlflow": {"enabled": False}})
    (repo / "data/incoming").mkdir(parents=True)
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"sleep": SLEEPING_STAGE}}))
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=repo, check=True)
    return repo


@pytest.mark.slow
def test_sigterm_to_the_flow_ends_everything_it_started(sleeping_repo: Path, tmp_path: Path) -> None:
    """Prefect's temporary server, DVC and the stage all end with the flow: none is left with ppid 1."""
    import signal

    import psutil

    from pipeline.ops.flow.cli import STOPPED

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}  # its own server
    env |= {"PREFECT_HOME": str(tmp_path / "prefect"), "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}
    log = tmp_path / "flow.log"
    with log.open("wb") as out:
        cmd = [sys.executable, "-m", "pipeline.ops.flow", "run"]
        flow = subprocess.Popen(cmd, cwd=sleeping_repo, env=env, stdout=out, stderr=out)
    family: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 300
        while not (sleeping_repo / "started").exists():
            assert flow.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        family = psutil.Process(flow.pid).children(recursive=True)
        assert any("uvicorn" in " ".join(p.cmdline()) for p in family)  # the temporary server is there
        flow.terminate()
        assert flow.wait(timeout=120) == 128 + signal.SIGTERM
        _, alive = psutil.wait_procs(family, timeout=30)
        assert alive == [] and STOPPED in log.read_text()
    finally:
        flow.kill()  # what a failed test leaves behind
        for proc in family:
            if proc.is_running():
                proc.kill()


# ---------------------------------------------------------------- DVC's locks held by another process

DVC_LOCK_HOLDER = """
import sys, zc.lockfile
lock = zc.lockfile.LockFile(sys.argv[1])  # as DVC takes its repository lock
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin
"""


@pytest.fixture
def dvc_lock_holder(scratch_dvc: Path):
    """A process holding DVC's repository lock of `scratch_dvc`, as a `dvc exp run` does."""
    holder = subprocess.Popen(
        [sys.executable, "-c", DVC_LOCK_HOLDER, str(scratch_dvc / ".dvc/tmp/lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    yield holder
    holder.stdin.close()
    holder.wait(timeout=60)


def test_a_held_dvc_lock_is_one_line_naming_its_holder_before_prefect_starts(
    scratch_dvc: Path, dvc_lock_holder, monkeypatch, capsys
) -> None:
    write_changed_params(scratch_dvc / "params.yaml", {"mlflow": {"enabled": False}})
    (scratch_dvc / "data/incoming").mkdir(parents=True)
    err = refused_run(scratch_dvc, monkeypatch, capsys)
    assert err.startswith(f"error: {scratch_dvc}: DVC is busy: pid {dvc_lock_holder.pid} (")
    assert "holds .dvc/tmp/lock; wait for it to end" in err


def test_dvc_status_failing_on_a_held_lock_is_one_line(scratch_dvc: Path, dvc_lock_holder) -> None:
    """What DVC itself says (`Unable to acquire lock`) becomes one line naming the holder."""
    from pipeline.ops.flow.dvc_calls import DvcBusy, is_stale

    with pytest.raises(DvcBusy) as info:
        is_stale("copy", str(scratch_dvc))
    assert "\n" not in str(info.value) and f"pid {dvc_lock_holder.pid} (" in str(info.value)


def test_a_stage_path_locked_by_a_live_process_is_one_line(tmp_path: Path) -> None:
    from pipeline.ops.flow.dvc_calls import DvcBusy, check_busy, check_idle

    (tmp_path / ".dvc/tmp").mkdir(parents=True)
    rwlock = tmp_path / ".dvc/tmp/rwlock"
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    ) as live:
        entry = {"pid": live.pid, "cmd": "dvc exp run"}
        rwlock.write_text(json.dumps({"read": {}, "write": {"data/train_ids": entry}}))
        with pytest.raises(DvcBusy, match=rf"pid {live.pid} \(dvc exp run\) holds data/train_ids \("):
            check_idle(tmp_path)
        live.stdin.close()
    check_idle(tmp_path)  # its holder is gone: DVC clears such entries itself
    dvc_says = (  # DVC's message (dvc/rwlock.py) when a stage's path is in use
        "ERROR: 'data/train_ids' is busy, it is being blocked by:\n  (PID 4242): dvc exp run\n\n"
        "If there are no processes with such PIDs, you can manually remove '.dvc/tmp/rwlock' and try again."
    )
    with pytest.raises(DvcBusy) as info:
        check_busy(dvc_says, tmp_path)
    assert str(info.value).startswith(f"{tmp_path}: DVC is busy: pid 4242 (dvc exp run) holds data/train_ids")
    assert "\n" not in str(info.value)
    check_busy("ERROR: failed to reproduce 'copy'", tmp_path)  # any other failure: not a lock
