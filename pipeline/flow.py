"""The DVC pipeline as a Prefect 3 flow, run once or served on a schedule for retraining.

Each task runs one DVC stage (`dvc repro --single-item <stage>`) in DAG order, so DVC stays the
judge of what is stale: an unchanged stage is skipped and its task says so. The download task
retries; a failing stage fails its task and the flow, with the stage's error in the log. The
last task moves the MLflow `champion` alias to the new `candidate` model only when its val BLEU
is higher (`pipeline.registry.promote`).

    python -m pipeline.flow run [--force] [--recheck-data]   # once, on an ephemeral local Prefect
    python -m pipeline.flow serve --cron "0 3 * * 1"         # a schedule, against PREFECT_API_URL

A scheduled run re-checks the data source (forces `download`; the data are SHA-256-pinned, so
the stages after it rerun only when what it wrote changed); `--force` reruns every stage.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

# Prefect's ephemeral server can take longer than its default to start on a cold, busy machine.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

from prefect import flow, get_run_logger, task  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DATA_STAGE = "download"


def stage_names(repo: Path) -> list[str]:
    """The stages of `repo/dvc.yaml` in file order (which is DAG order; a test checks it)."""
    return list(yaml.safe_load((repo / "dvc.yaml").read_text())["stages"])


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@task(task_run_name="{stage}")
def run_stage(stage: str, repo: str, force: bool = False) -> str:
    """`dvc repro --single-item [--force] <stage>` in `repo`. Returns "ran" or "skipped".

    Raises:
        RuntimeError: the stage failed; the message carries the end of its output.
    """
    logger = get_run_logger()
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", *(["--force"] if force else []), stage]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    output = done.stdout + done.stderr
    if done.returncode:
        raise RuntimeError(f"stage {stage} failed (exit {done.returncode}):\n{tail(output)}")
    ran = f"Running stage '{stage}'" in output
    logger.info("stage %s: %s", stage, "ran" if ran else "unchanged, skipped")
    if ran:
        logger.info(tail(output))
    return "ran" if ran else "skipped"


@task
def promote_champion(repo: str) -> str:
    """Move `champion` to the candidate when it is better on val (see `pipeline.registry`)."""
    from pipeline.config import load_params

    params = load_params(Path(repo) / "params.yaml")
    if not params.mlflow.enabled:
        return "mlflow disabled: nothing to promote"
    from pipeline.registry import promote

    result = promote(params.mlflow.model_name).message
    get_run_logger().info(result)
    return result


@flow(name="multi30k-en-de")
def pipeline_flow(repo: str = str(REPO), force: bool = False, recheck_data: bool = False) -> dict[str, str]:
    """Every DVC stage in order, then the champion promotion. Returns {stage: "ran"/"skipped",
    "promotion": message}."""
    results: dict[str, str] = {}
    for stage in stage_names(Path(repo)):
        task_ = (
            run_stage.with_options(retries=2, retry_delay_seconds=30) if stage == DATA_STAGE else run_stage
        )
        results[stage] = task_(stage, repo, force or (recheck_data and stage == DATA_STAGE))
    results["promotion"] = promote_champion(repo)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline.flow", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    once = sub.add_parser("run", help="run the flow once (ephemeral local Prefect)")
    once.add_argument("--force", action="store_true", help="rerun every stage")
    once.add_argument("--recheck-data", action="store_true", help="force the download stage")
    serve = sub.add_parser("serve", help="serve the flow on a cron schedule (needs PREFECT_API_URL)")
    serve.add_argument("--cron", default="0 3 * * 1", help='cron schedule (default "0 3 * * 1")')
    serve.add_argument("--name", default="scheduled-retraining", help="deployment name")
    args = parser.parse_args(argv)
    if args.command == "run":
        print(pipeline_flow(force=args.force, recheck_data=args.recheck_data))
    else:
        pipeline_flow.serve(name=args.name, cron=args.cron, parameters={"recheck_data": True})


if __name__ == "__main__":
    main()
