"""Queries of the MLflow model registry: the version an alias points at, and the scores of the
`candidate` version.

Aliases: every `decode` stage run registers a new version of `mlflow.model_name`
(`pipeline.serving.pyfunc.log_translator`) and points `candidate` at it; `score` tags that version
with its scores (`val.bleu`: beam search on val; names as `dvc metrics show` prints them).
`pipeline.ops.promotion` moves `champion` to the candidate only when a paired significance test on
val says it is better.
"""

from __future__ import annotations

from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException

from pipeline.tracking import runs as tracking


def version_by_alias(model_name: str, alias: str) -> ModelVersion | None:
    """The version of `model_name` that `alias` points at; None when there is none."""
    try:
        return tracking.client().get_model_version_by_alias(model_name, alias)
    except MlflowException:
        return None


def tag_candidate(model_name: str, run_id: str, scores: dict[str, float]) -> str | None:
    """Tag the `candidate` version of `model_name` with `scores` when it belongs to `run_id`
    (the version this pipeline's decode registered). Returns the version, or None."""
    version = version_by_alias(model_name, "candidate")
    if version is None or version.run_id != run_id:
        return None
    for key, value in scores.items():
        tracking.client().set_model_version_tag(model_name, version.version, key, f"{value:.4f}")
    return version.version
