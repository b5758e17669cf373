"""`python -m pipeline.ops.flow run | serve | rollback`: the flow once, on a schedule, or the
champion rolled back. Prefect's settings for this machine are made here, before Prefect loads."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipeline.core.errors import run_main
from pipeline.core.lock import exclusive
from pipeline.core.params_file import load_params
from pipeline.core.signals import sigterm_raises
from pipeline.ops.flow.dvc_calls import check_idle
from pipeline.ops.flow.summary import check_incoming_links
from pipeline.tracking.store import check_store

REPO = Path(__file__).resolve().parents[3]
LOCK_FILE = ".dvc/tmp/flow.lock"  # in the repository (Git-ignored): held by the `run` in progress
# SIGTERM raises, so that Prefect's temporary server (stopped at exit) and the stage end with the flow
STOPPED = "flow: stopped by SIGTERM, with its DVC stage and Prefect's temporary server"
PREFECT_DEFAULTS = {
    # its ephemeral server can take longer than Prefect's default to start on a cold, busy machine
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    # its telemetry only logs "database is locked" tracebacks from the temporary server's SQLite,
    # and no machine of this project reaches Prefect's servers (Prefect's documented switch)
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


def set_prefect_defaults() -> None:
    """`PREFECT_DEFAULTS` in the environment where the user set nothing; Prefect reads its
    settings when it is first imported, so this comes before."""
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)


def run_lock(repo: Path = REPO):
    """The flow lock of the checkout `repo` (`pipeline.core.lock.exclusive` on `LOCK_FILE`).

    Raises:
        PipelineError: another process holds it: a run is in progress in this checkout.
    """
    return exclusive(Path(repo) / LOCK_FILE, f"{repo}: a flow run")


def run_once(*, force: bool, recheck_data: bool) -> None:
    """`run`: the flow once under this checkout's flow lock; prints its result.

    Raises:
        PipelineError: a run is already in progress in this checkout (`run_lock`).
        ConfigError: params.yaml is invalid (`load_params`), found before Prefect or DVC reads it.
        DataError: a broken link in the incoming folder, found before Prefect starts.
        PipelineError: the tracking database is corrupt (`check_store`), found before Prefect starts.
        DvcBusy: another DVC process holds a lock of this checkout (`check_idle`).
        Stopped: SIGTERM; the stage and Prefect's temporary server end with the flow.
    """
    with sigterm_raises(STOPPED), run_lock(REPO):
        params = load_params(REPO / "params.yaml")  # DVC would expand a YAML alias bomb for minutes
        check_incoming_links(REPO)
        if params.mlflow.enabled:  # a corrupt database stops the flow here, not at the promotion
            check_store()
        check_idle(REPO)  # a `dvc exp run` beside the flow: one line, before Prefect starts
        from pipeline.ops.flow import tasks

        print(tasks.pipeline_flow(repo=str(REPO), force=force, recheck_data=recheck_data))


def rollback_champion(repo: Path = REPO) -> str:
    """`pipeline.ops.promotion.rollback` on this repository's `mlflow.model_name`."""
    from pipeline.ops.promotion import rollback

    return rollback(load_params(repo / "params.yaml").mlflow.model_name)


def parser() -> argparse.ArgumentParser:
    """The command line: `run`, `serve` and `rollback`."""
    p = argparse.ArgumentParser(
        prog="python -m pipeline.ops.flow", description="The DVC pipeline as a Prefect flow, for retraining."
    )
    sub = p.add_subparsers(dest="command", required=True)
    once = sub.add_parser("run", help="run the flow once (ephemeral local Prefect)")
    once.add_argument("--force", action="store_true", help="rerun every stage")
    once.add_argument("--recheck-data", action="store_true", help="force the download stage")
    serve = sub.add_parser("serve", help="serve the flow on a cron schedule (needs PREFECT_API_URL)")
    serve.add_argument("--cron", default="0 3 * * 1", help='cron schedule (default "0 3 * * 1")')
    serve.add_argument("--name", default="scheduled-retraining", help="deployment name")
    serve.add_argument(
        "--on-overlap",
        choices=("skip", "wait"),
        default="skip",
        help="a run due while one runs: cancel it (skip, default) or queue it (wait)",
    )
    sub.add_parser("rollback", help="move champion back to the version it replaced")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    set_prefect_defaults()
    if args.command == "run":
        run_main(lambda: run_once(force=args.force, recheck_data=args.recheck_data))
    elif args.command == "rollback":
        run_main(lambda: print(rollback_champion()))
    else:
        from prefect import serve as serve_deployments

        from pipeline.ops.flow.tasks import deployment

        serve_deployments(deployment(args.name, args.cron, args.on_overlap))
