"""The DVC pipeline as a Prefect 3 flow, run once or served on a schedule for retraining.

A run looks for new parallel data in `data/incoming/`, then runs each DVC stage
(`dvc repro --single-item <stage>`) in DAG order, so DVC stays the judge of what is stale: the
`incoming` stage reruns when a file there changed, and `train` (and everything after it) when the
merged training set did; an unchanged stage is skipped and its task ends in a state named "Skipped".
Whether a stage ran is read from DVC's machine-readable status (`dvc status --json <stage>` just
before it; `--force` always runs). Each stage's output (stdout and stderr) streams into its task's
log line by line as it is written, less DVC's hints, so a long `train` shows its
`train: step N/M ...` lines while it runs. Then the `champion` alias moves to the new `candidate`
only when a paired significance test says it is better (`pipeline.ops.promotion`). The log ends with
the run's case: no new data (nothing retrained), or new data (retrained; promoted or kept, with both
BLEU scores and p). The run is named by its trigger and start time (`run_name`); at the end its
outcome is appended to the name, added as tags and written as a Markdown artifact (`label_run`).
A failing stage fails its task and the flow, with the stage's error in the log; the download task
retries. A broken link in the incoming folder, which DVC cannot hash, fails the flow before any
stage (`look_for_incoming`).

    python -m pipeline.ops.flow run [--force] [--recheck-data]   # once, on an ephemeral local Prefect
    python -m pipeline.ops.flow serve --cron "0 3 * * 1"         # a schedule, against PREFECT_API_URL
    python -m pipeline.ops.flow rollback                         # champion back to the version it replaced

Two `run`s in one checkout never overlap either: a run holds the checkout's flow lock
(`run_lock`, `.dvc/tmp/flow.lock`) and a second one stops at once with one line saying so.
Served runs never overlap (deployment concurrency limit 1; two `dvc repro` would collide on DVC's
lock): a scheduled run that comes due while another is still running is cancelled ("Deployment
concurrency limit reached.", `--on-overlap skip`, the default) or waits for the slot
(`--on-overlap wait`). A scheduled run also re-checks the data source (forces `download`; the data
are SHA-256-pinned, so the stages after it rerun only when what it wrote changed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING

# Prefect's ephemeral server can take longer than its default to start on a cold, busy machine.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
# Its telemetry service (Prefect's documented switch) only logs "database is locked" tracebacks from
# the temporary server's SQLite here, and no machine of this project reaches Prefect's servers.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.context import FlowRunContext  # noqa: E402
from prefect.states import Completed, State  # noqa: E402

from pipeline.core.errors import run_main  # noqa: E402
from pipeline.core.lock import exclusive  # noqa: E402
from pipeline.ops.dag import read_dag  # noqa: E402

if TYPE_CHECKING:
    from pipeline.ops.promotion import Decision

REPO = Path(__file__).resolve().parents[2]
DATA_STAGE = "download"
LOCK_FILE = ".dvc/tmp/flow.lock"  # in the repository (Git-ignored): held by the `run` in progress


def stage_names(repo: Path) -> list[str]:
    """The stages of `repo/dvc.yaml` in DAG order (`pipeline.ops.dag`).

    Raises:
        ConfigError: dvc.yaml is missing or malformed, or names a param that params.yaml lacks.
    """
    return list(read_dag(repo))


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# Stage processes write plain, unbuffered lines: no tqdm frames, nothing held back in a pipe buffer.
STAGE_ENV = {"PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}


def trigger_env() -> dict[str, str]:
    """`MT_RUN_TRIGGER` for the stages inside a flow run: the MLflow run `train` opens is then
    named after this flow run (`pipeline.tracking.describe`); empty outside a flow run."""
    from prefect.runtime import flow_run

    return {"MT_RUN_TRIGGER": f"flow {flow_run.name}"} if flow_run.get_id() else {}


def stream_lines(cmd: list[str], cwd: str, log: Callable[[str], object], keep: int = 15) -> tuple[int, str]:
    """Run `cmd` in `cwd`, handing each non-empty line of its output (stdout and stderr merged) to
    `log` as soon as it is written; a carriage return ends a line too (text mode's universal
    newlines), so progress-bar frames come as lines. Returns (exit status, its last `keep` lines).

    Raises:
        OSError: `cmd` could not be started.
    """
    last: deque[str] = deque(maxlen=keep)
    with subprocess.Popen(
        cmd,
        cwd=cwd,
        env={**os.environ, **STAGE_ENV, **trigger_env()},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
    ) as proc:
        for line in proc.stdout:
            if line := line.rstrip():
                log(line)
                last.append(line)
    return proc.returncode, "\n".join(last)


def is_stale(stage: str, repo: str) -> bool:
    """Whether DVC would reproduce `stage` of `repo` now: `dvc status --json <stage>` names the stage,
    with what changed (deps, outs, command, "always changed"), only when it is stale; `{}` otherwise.

    Raises:
        RuntimeError: `dvc status` failed (e.g. an unknown stage or a broken dvc.yaml); the message
            carries the end of its output.
    """
    cmd = [sys.executable, "-m", "dvc", "status", "--json", stage]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    if done.returncode:
        output = tail(done.stdout + done.stderr)
        raise RuntimeError(f"stage {stage}: dvc status failed (exit {done.returncode}):\n{output}")
    return bool(json.loads(done.stdout.strip().splitlines()[-1]).get(stage))  # JSON is the last line


# The hints DVC prints after every stage that wrote dvc.lock in a Git checkout; `dvc repro` has no
# switch for them short of `--quiet` (which hides its errors too) or `core.autostage` (which runs
# `git add`).
DVC_HINTS = (
    "To track the changes with git, run:",
    "git add ",
    "To enable auto staging, run:",
    "dvc config core.autostage true",
    "Use `dvc push` to send your updates to remote storage.",
)


def is_dvc_hint(line: str) -> bool:
    """Whether `line` of `dvc repro` output is one of DVC's hints (`DVC_HINTS`)."""
    return line.strip().startswith(DVC_HINTS)


@task(task_run_name="{stage}")
def run_stage(stage: str, repo: str, force: bool = False) -> State:
    """`dvc repro --single-item [--force] <stage>` in `repo`, its output streamed line by line into the
    task's log, less DVC's hints (`is_dvc_hint`). Returns the task's final state, Completed with the
    result "ran" when the stage was stale just before (`is_stale`) or forced, else named "Skipped"
    (so the UI tells the two apart) with the result "skipped".

    Raises:
        RuntimeError: `dvc status` or the stage failed; the message carries the end of its output.
    """
    logger = get_run_logger()
    ran = force or is_stale(stage, repo)
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", *(["--force"] if force else []), stage]

    def log(line: str) -> None:
        if not is_dvc_hint(line):
            logger.info(line)

    code, last = stream_lines(cmd, repo, log)
    if code:
        raise RuntimeError(f"stage {stage} failed (exit {code}):\n{last}")
    if not ran:
        logger.info("stage %s: unchanged, skipped", stage)
        return Completed(name="Skipped", message=f"stage {stage}: unchanged, skipped", data="skipped")
    logger.info("stage %s: ran", stage)
    return Completed(message=f"stage {stage}: ran", data="ran")


INCOMING_STAGE, TRAIN_STAGE = "incoming", "train"


def repo_params(repo: str):
    """The repository's validated `params.yaml` (paths in it are relative to `repo`)."""
    from pipeline.core.config import load_params

    return load_params(Path(repo) / "params.yaml")


def incoming_config(repo: str):
    """Only the `incoming` section of the repository's `params.yaml`, validated: a bad value
    elsewhere is for the stage that reads it to report, in its own words."""
    import yaml

    from pipeline.core.config import IncomingConfig

    raw = yaml.safe_load((Path(repo) / "params.yaml").read_text(encoding="utf-8")) or {}
    return IncomingConfig.model_validate(raw.get("incoming") or {})


@task
def look_for_incoming(repo: str) -> list[str]:
    """The incoming files (`incoming.in_dir`/*.tsv) present now; DVC decides whether they are new.

    Raises:
        DataError: the folder holds a broken symbolic link (`pipeline.data.incoming.broken_links`),
            which DVC cannot hash: every `dvc status` and `dvc repro` of the stage would fail.
    """
    from pipeline.core.errors import DataError
    from pipeline.data.incoming import broken_links, incoming_files

    folder = Path(repo) / incoming_config(repo).in_dir
    if broken := broken_links(folder):
        names = ", ".join(os.path.relpath(path, repo) for path in broken)
        raise DataError(f"{names}: broken symbolic link(s), which DVC cannot hash (its `dvc status` and "
                        "`dvc repro` stop with 'unexpected error'): remove them or restore their targets")  # fmt: skip
    names = [p.name for p in incoming_files(folder)]
    get_run_logger().info("incoming data: %s", ", ".join(names) if names else "no files")
    return names


def describe_case(stages: dict[str, str], counts: dict | None) -> str:
    """One line saying which case this run was, from the stage outcomes ("ran"/"skipped") and the
    incoming stage's counts (`reports/incoming.json`; None when absent)."""
    new_files = stages.get(INCOMING_STAGE) == "ran"
    detail = (
        f" ({counts['added']} new pairs in the training set; {counts['dropped_leak']} dropped as in "
        f"val/test, {counts['dropped_dup']} as duplicates)"
        if counts
        else ""
    )
    if stages.get(TRAIN_STAGE) != "ran":
        if new_files:
            return f"incoming files changed but the training set did not{detail}: nothing retrained"
        return "no new data: nothing retrained"
    if new_files:
        return f"new data{detail}: retrained"
    return "no new data, but the train stage's params, code or inputs changed: retrained"


def read_counts(repo: str) -> dict | None:
    path = Path(repo) / incoming_config(repo).metrics_json
    return json.loads(path.read_text()) if path.is_file() else None


NO_PROMOTION = "mlflow disabled: nothing to promote"


@task
def promote_champion(repo: str) -> Decision | None:
    """Move `champion` to the candidate when it is significantly better on val
    (`pipeline.ops.promotion.promote`). Returns the decision, None when MLflow is disabled.

    Raises:
        PipelineError: no candidate, or a version's run lacks its val translations.
    """
    params = repo_params(repo)
    if not params.mlflow.enabled:
        get_run_logger().info(NO_PROMOTION)
        return None
    from pipeline.data.multi30k import load_corpus
    from pipeline.ops.promotion import promote

    tgt = params.download.tgt_lang
    refs = list(load_corpus(Path(repo) / params.download.out_dir)["val"][tgt])
    decision = promote(params.mlflow.model_name, refs, params.promotion, tgt)
    get_run_logger().info(decision.message)
    return decision


def run_name() -> str:
    """A flow run's name as it starts: what started it and when (UTC), e.g. "manual 2025-06-02 14:05
    UTC". "manual" is `run`, "scheduled" a run of the schedule, "deployment" one of the deployment
    started by hand (the UI, `prefect deployment run`)."""
    run = FlowRunContext.get().flow_run
    trigger = "manual" if run.deployment_id is None else "scheduled" if run.auto_scheduled else "deployment"
    return f"{trigger} {run.expected_start_time.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def outcome_tags(stages: dict[str, str], decision: Decision | None) -> list[str]:
    """The flow run's tags once it is done: "retrained" (train ran) and "no-new-data" (the training set
    did not grow: `describe_case`'s cases), "promoted" when `champion` moved, "kept" when a retrained
    candidate did not win."""
    retrained = stages.get(TRAIN_STAGE) == "ran"
    new_data = retrained and stages.get(INCOMING_STAGE) == "ran"
    tags = ["retrained"] if retrained else []
    tags += [] if new_data else ["no-new-data"]
    if decision is not None and decision.promoted:
        tags.append("promoted")
    elif decision is not None and retrained:
        tags.append("kept")
    return tags


def summary_markdown(
    case: str, decision: Decision | None, counts: dict | None, stages: dict[str, str]
) -> str:
    """The run's summary artifact: the decision, the case, then a table of both BLEU scores and p
    (none for equal scores), the incoming counts (`reports/incoming.json`) and which stages ran."""
    rows: list[tuple[str, object]] = []
    if decision is not None and (cmp := decision.comparison) is not None:
        rows += [("candidate BLEU (val)", f"{cmp.candidate_bleu:.2f}"),
                 ("champion BLEU (val)", f"{cmp.champion_bleu:.2f}"),
                 ("paired bootstrap p", "none: equal scores" if cmp.equal() else f"{cmp.p_value:.4f}")]  # fmt: skip
    rows += [(f"incoming {key.replace('_', ' ')}", value) for key, value in (counts or {}).items()]
    for outcome in ("ran", "skipped"):
        names = [name for name, done in stages.items() if done == outcome]
        rows.append((f"stages {outcome}", ", ".join(names) or "none"))
    table = "".join(f"| {name} | {value} |\n" for name, value in rows)
    return f"**{decision.message if decision else NO_PROMOTION}**\n\n{case}\n\n| | this run |\n|---|---|\n{table}"


SUMMARY_KEY = "retraining-summary"  # the artifact's key: the Artifacts page lists every run's under it


def label_run(tags: list[str], summary: str) -> str:
    """Add `tags` to this flow run, append them to its name ("manual 2025-06-02 14:05 UTC: retrained,
    kept") and attach `summary` as its Markdown artifact `SUMMARY_KEY`. Returns the new name."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.client.orchestration import get_client

    run = FlowRunContext.get().flow_run
    name = f"{run.name}: {', '.join(tag.replace('-', ' ') for tag in tags)}"
    with get_client(sync_client=True) as client:
        client.update_flow_run(run.id, name=name, tags=sorted({*run.tags, *tags}))
    create_markdown_artifact(summary, key=SUMMARY_KEY, description=name)
    return name


@flow(name="multi30k-en-de", flow_run_name=run_name)
def pipeline_flow(repo: str = str(REPO), force: bool = False, recheck_data: bool = False) -> dict[str, str]:
    """Look for incoming data, every DVC stage in order, then the champion promotion; at the end the
    run gets its tags, a name that says its outcome (`label_run`) and its summary artifact.

    Returns {stage: "ran"/"skipped", "case": what this run was, "promotion": the decision}.

    Raises:
        DataError: a broken link in the incoming folder (`look_for_incoming`).
        RuntimeError: a stage or its `dvc status` failed (`run_stage`).
        PipelineError: the promotion could not compare the versions (`promote_champion`).
    """
    look_for_incoming(repo)
    results: dict[str, str] = {}
    for stage in stage_names(Path(repo)):
        task_ = (
            run_stage.with_options(retries=2, retry_delay_seconds=30) if stage == DATA_STAGE else run_stage
        )
        results[stage] = task_(stage, repo, force or (recheck_data and stage == DATA_STAGE)).result()
    counts = read_counts(repo)
    case = describe_case(results, counts)
    decision = promote_champion(repo)
    promotion = decision.message if decision else NO_PROMOTION
    get_run_logger().info("this run: %s; %s", case, promotion)
    label_run(outcome_tags(results, decision), summary_markdown(case, decision, counts, results))
    return {**results, "case": case, "promotion": promotion}


def deployment(name: str, cron: str, on_overlap: str = "skip"):
    """The scheduled deployment: `cron`, the data source re-checked, at most one run at a time
    (`on_overlap`: "skip" cancels a run that comes due while one runs, "wait" queues it)."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

    strategy = {"skip": ConcurrencyLimitStrategy.CANCEL_NEW, "wait": ConcurrencyLimitStrategy.ENQUEUE}
    return pipeline_flow.to_deployment(
        name=name,
        cron=cron,
        parameters={"recheck_data": True},
        concurrency_limit=ConcurrencyLimitConfig(limit=1, collision_strategy=strategy[on_overlap]),
    )


def run_lock(repo: Path = REPO):
    """The flow lock of the checkout `repo` (`pipeline.core.lock.exclusive` on `LOCK_FILE`).

    Raises:
        PipelineError: another process holds it: a run is in progress in this checkout.
    """
    return exclusive(Path(repo) / LOCK_FILE, f"{repo}: a flow run")


def run_once(force: bool, recheck_data: bool) -> None:
    """`run`: the flow once under this checkout's flow lock; prints its result.

    Raises:
        PipelineError: a run is already in progress in this checkout (`run_lock`).
    """
    with run_lock(REPO):
        print(pipeline_flow(force=force, recheck_data=recheck_data))


def rollback_champion(repo: Path = REPO) -> str:
    """`pipeline.ops.promotion.rollback` on this repository's `mlflow.model_name`."""
    from pipeline.core.config import load_params
    from pipeline.ops.promotion import rollback

    return rollback(load_params(repo / "params.yaml").mlflow.model_name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline.ops.flow", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    once = sub.add_parser("run", help="run the flow once (ephemeral local Prefect)")
    once.add_argument("--force", action="store_true", help="rerun every stage")
    once.add_argument("--recheck-data", action="store_true", help="force the download stage")
    serve = sub.add_parser("serve", help="serve the flow on a cron schedule (needs PREFECT_API_URL)")
    serve.add_argument("--cron", default="0 3 * * 1", help='cron schedule (default "0 3 * * 1")')
    serve.add_argument("--name", default="scheduled-retraining", help="deployment name")
    serve.add_argument("--on-overlap", choices=("skip", "wait"), default="skip",
                       help="a run due while one runs: cancel it (skip, default) or queue it (wait)")  # fmt: skip
    sub.add_parser("rollback", help="move champion back to the version it replaced")
    args = parser.parse_args(argv)
    if args.command == "run":
        run_main(lambda: run_once(args.force, args.recheck_data))
    elif args.command == "rollback":
        run_main(lambda: print(rollback_champion()))
    else:
        from prefect import serve as serve_deployments

        serve_deployments(deployment(args.name, args.cron, args.on_overlap))


if __name__ == "__main__":
    main()
