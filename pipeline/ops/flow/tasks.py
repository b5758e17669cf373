"""The Prefect flow: incoming data looked for, each DVC stage a task in DAG order, then the
champion promotion; the run named, tagged and summarised by what it did (docs/retraining.md)."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING

from prefect import flow, get_run_logger, task
from prefect.context import FlowRunContext
from prefect.states import Completed, State

from pipeline.core.errors import PipelineError
from pipeline.ops.flow.dvc_calls import (
    StatusFailed,
    check_busy,
    is_dvc_hint,
    is_stale,
    repro_command,
    stage_names,
    stream_lines,
)
from pipeline.ops.flow.summary import (
    NO_PROMOTION,
    check_incoming_links,
    describe_case,
    incoming_config,
    outcome_tags,
    read_counts,
    summary_markdown,
)

if TYPE_CHECKING:
    from pipeline.ops.promotion import Decision

REPO = Path(__file__).resolve().parents[3]
DATA_STAGE = "download"
SUMMARY_KEY = "retraining-summary"  # the artifact's key: the Artifacts page lists every run's under it
DETERMINISTIC = (PipelineError, StatusFailed)  # failures the same params and DAG meet again: never retried


def trigger_env() -> dict[str, str]:
    """`MT_RUN_TRIGGER` for the stages inside a flow run, so that the MLflow run `train` opens is
    named after this flow run (`pipeline.tracking.describe`); empty outside a flow run."""
    from prefect.runtime import flow_run

    return {"MT_RUN_TRIGGER": f"flow {flow_run.name}"} if flow_run.get_id() else {}


@task(task_run_name="{stage}")
def run_stage(stage: str, repo: str, force: bool = False) -> State:
    """One DVC stage (`repro_command`) in `repo`, its output streamed into the task's log, less DVC's hints.

    Returns the task's final state: Completed with the result "ran" when the stage was stale just
    before (`is_stale`) or forced, else a Completed state named "Skipped" with the result "skipped"
    (so the UI tells the two apart).

    Raises:
        StatusFailed: `dvc status` failed; the message carries the end of its output.
        DvcBusy: another DVC process holds a lock of `repo` (one line naming it).
        RuntimeError: the stage failed; the message carries the end of its output.
    """
    logger = get_run_logger()
    ran = force or is_stale(stage, repo)

    def log(line: str) -> None:
        if not is_dvc_hint(line):
            logger.info(line)

    code, last = stream_lines(repro_command(stage, force=force), repo, log, env=trigger_env())
    if code:
        check_busy(last, repo)  # another DVC process holds a lock: one line naming it
        raise RuntimeError(f"stage {stage} failed (exit {code}):\n{last}")
    if not ran:
        logger.info("stage %s: unchanged, skipped", stage)
        return Completed(name="Skipped", message=f"stage {stage}: unchanged, skipped", data="skipped")
    logger.info("stage %s: ran", stage)
    return Completed(message=f"stage {stage}: ran", data="ran")


def transient(task, task_run, state: State) -> bool:
    """Prefect's `retry_condition_fn` for `stage_task`: whether a failed run may pass when retried
    (a source unreachable for a moment), i.e. its error is not one of `DETERMINISTIC`."""
    try:
        state.result()
    except DETERMINISTIC:
        return False
    except Exception:  # noqa: BLE001 - anything else may pass on a second try
        return True
    return True


def stage_task(stage: str):
    """`run_stage` as the flow runs `stage`: the data stage is retried twice, 30 s apart, unless its
    failure is deterministic (`transient`)."""
    if stage != DATA_STAGE:
        return run_stage
    return run_stage.with_options(retries=2, retry_delay_seconds=30, retry_condition_fn=transient)


@task
def look_for_incoming(repo: str) -> list[str]:
    """The incoming files (`incoming.in_dir`/*.tsv) present now; DVC decides whether they are new.

    Raises:
        DataError: the folder holds a broken symbolic link (`check_incoming_links`).
    """
    from pipeline.data.incoming import incoming_files

    check_incoming_links(repo)
    names = [p.name for p in incoming_files(Path(repo) / incoming_config(repo).in_dir)]
    get_run_logger().info("incoming data: %s", ", ".join(names) if names else "no files")
    return names


@task
def promote_champion(repo: str) -> Decision | None:
    """Move `champion` to the candidate when it is significantly better on val.

    Returns the decision (`pipeline.ops.promotion.promote`), None when MLflow is disabled.

    Raises:
        PipelineError: no candidate, or a version's run lacks its val translations.
    """
    from pipeline.core.params_file import load_params

    params = load_params(Path(repo) / "params.yaml")
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
    """A flow run's name as it starts: what started it and when (UTC), e.g. "manual 2025-06-02 14:05 UTC".

    "manual" is `run`, "scheduled" a run of the schedule, "deployment" one of the deployment
    started by hand (the UI, `prefect deployment run`).
    """
    run = FlowRunContext.get().flow_run
    trigger = "manual" if run.deployment_id is None else "scheduled" if run.auto_scheduled else "deployment"
    return f"{trigger} {run.expected_start_time.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def label_run(tags: list[str], summary: str) -> str:
    """Tag this flow run, append its outcome to its name and attach `summary` as its Markdown artifact.

    The name becomes e.g. "manual 2025-06-02 14:05 UTC: retrained, kept"; the artifact's key is
    `SUMMARY_KEY`. Returns the new name.
    """
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
    """Look for incoming data, run every DVC stage in order, then the champion promotion.

    At the end the run gets its tags, a name that says its outcome and its summary artifact
    (`label_run`). Returns {stage: "ran"/"skipped", "case": what this run was, "promotion": the
    decision}.

    Raises:
        DataError: a broken link in the incoming folder (`look_for_incoming`).
        RuntimeError: a stage or its `dvc status` failed (`run_stage`; retried as `stage_task` says).
        PipelineError: the promotion could not compare the versions (`promote_champion`).
    """
    look_for_incoming(repo)
    results: dict[str, str] = {}
    for stage in stage_names(Path(repo)):
        forced = force or (recheck_data and stage == DATA_STAGE)
        results[stage] = stage_task(stage)(stage, repo, forced).result()
    counts = read_counts(repo)
    case = describe_case(results, counts)
    decision = promote_champion(repo)
    promotion = decision.message if decision else NO_PROMOTION
    get_run_logger().info("this run: %s; %s", case, promotion)
    label_run(outcome_tags(results, decision), summary_markdown(case, decision, counts, results))
    return {**results, "case": case, "promotion": promotion}


def deployment(name: str, cron: str, on_overlap: str = "skip"):
    """The scheduled deployment: `cron`, the data source re-checked, at most one run at a time.

    `on_overlap`: "skip" cancels a run that comes due while one runs, "wait" queues it.
    """
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

    strategy = {"skip": ConcurrencyLimitStrategy.CANCEL_NEW, "wait": ConcurrencyLimitStrategy.ENQUEUE}
    return pipeline_flow.to_deployment(
        name=name,
        cron=cron,
        parameters={"recheck_data": True},
        concurrency_limit=ConcurrencyLimitConfig(limit=1, collision_strategy=strategy[on_overlap]),
    )
