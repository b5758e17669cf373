"""The DVC pipeline as a Prefect 3 flow, run once or served on a schedule for retraining.

A run looks for new parallel data in `data/incoming/`, then runs each DVC stage
(`dvc repro --single-item <stage>`) in DAG order, so DVC stays the judge of what is stale: the
`incoming` stage reruns when a file there changed, and `train` (and everything after it) when the
merged training set did; an unchanged stage is skipped and its task says so. Whether a stage ran is
read from DVC's machine-readable status (`dvc status --json <stage>` just before it; `--force` always
runs). Each stage's output (stdout and stderr) streams into its task's log line by line as it is
written, so a long `train` shows its `train: step N/M ...` lines while it runs. Then the `champion`
alias moves to the new `candidate` only when a paired significance test says it is better
(`pipeline.ops.promotion`). The log ends with the run's case: no new data (nothing retrained), or new
data (retrained; promoted or kept, with both BLEU scores and p). A failing stage fails its task and
the flow, with the stage's error in the log; the download task retries.

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
from pathlib import Path

# Prefect's ephemeral server can take longer than its default to start on a cold, busy machine.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
# Its telemetry service (Prefect's documented switch) only logs "database is locked" tracebacks from
# the temporary server's SQLite here, and no machine of this project reaches Prefect's servers.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow, get_run_logger, task  # noqa: E402

from pipeline.core.errors import run_main  # noqa: E402
from pipeline.core.lock import exclusive  # noqa: E402
from pipeline.ops.dag import read_dag  # noqa: E402

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
        env={**os.environ, **STAGE_ENV},
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


@task(task_run_name="{stage}")
def run_stage(stage: str, repo: str, force: bool = False) -> str:
    """`dvc repro --single-item [--force] <stage>` in `repo`, its output streamed line by line into the
    task's log. Returns "ran" when the stage was stale just before (`is_stale`) or forced, else
    "skipped".

    Raises:
        RuntimeError: `dvc status` or the stage failed; the message carries the end of its output.
    """
    logger = get_run_logger()
    ran = force or is_stale(stage, repo)
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", *(["--force"] if force else []), stage]
    code, last = stream_lines(cmd, repo, logger.info)
    if code:
        raise RuntimeError(f"stage {stage} failed (exit {code}):\n{last}")
    logger.info("stage %s: %s", stage, "ran" if ran else "unchanged, skipped")
    return "ran" if ran else "skipped"


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
    """The incoming files (`incoming.in_dir`/*.tsv) present now; DVC decides whether they are new."""
    from pipeline.data.incoming import incoming_files

    names = [p.name for p in incoming_files(Path(repo) / incoming_config(repo).in_dir)]
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


@task
def promote_champion(repo: str) -> str:
    """Move `champion` to the candidate when it is significantly better on val
    (`pipeline.ops.promotion.promote`). Returns the decision's message."""
    params = repo_params(repo)
    if not params.mlflow.enabled:
        return "mlflow disabled: nothing to promote"
    from pipeline.data.multi30k import load_corpus
    from pipeline.ops.promotion import promote

    tgt = params.download.tgt_lang
    refs = list(load_corpus(Path(repo) / params.download.out_dir)["val"][tgt])
    decision = promote(params.mlflow.model_name, refs, params.promotion, tgt)
    get_run_logger().info(decision.message)
    return decision.message


@flow(name="multi30k-en-de")
def pipeline_flow(repo: str = str(REPO), force: bool = False, recheck_data: bool = False) -> dict[str, str]:
    """Look for incoming data, every DVC stage in order, then the champion promotion.

    Returns {stage: "ran"/"skipped", "case": what this run was, "promotion": the decision}.
    """
    look_for_incoming(repo)
    results: dict[str, str] = {}
    for stage in stage_names(Path(repo)):
        task_ = (
            run_stage.with_options(retries=2, retry_delay_seconds=30) if stage == DATA_STAGE else run_stage
        )
        results[stage] = task_(stage, repo, force or (recheck_data and stage == DATA_STAGE))
    case = describe_case(results, read_counts(repo))
    promotion = promote_champion(repo)
    get_run_logger().info("this run: %s; %s", case, promotion)
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
