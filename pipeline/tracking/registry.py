"""Queries of the MLflow model registry: the version an alias points at, the scores of the
`candidate` version, what a version says about its training, and a run's versions for the results page.

Each `decode` run registers a version of `mlflow.model_name`, points `candidate` at it and describes it
(`describe_version`); `score` tags it with its scores (`val.bleu`: beam search on val);
`pipeline.ops.promotion` moves `champion` to it only when a paired significance test on val says it is better.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.tracking import store

if TYPE_CHECKING:
    from mlflow.entities.model_registry import ModelVersion


def version_by_alias(model_name: str, alias: str) -> ModelVersion | None:
    """The version of `model_name` that `alias` points at; None when there is none."""
    from mlflow.exceptions import MlflowException

    try:
        return store.client().get_model_version_by_alias(model_name, alias)
    except MlflowException:
        return None


def tag_candidate(model_name: str, run_id: str, scores: dict[str, float]) -> str | None:
    """Tag the `candidate` version of `model_name` with `scores` when it belongs to `run_id`
    (the version this pipeline's decode registered). Returns the version, or None."""
    version = version_by_alias(model_name, "candidate")
    if version is None or version.run_id != run_id:
        return None
    for key, value in scores.items():
        store.client().set_model_version_tag(model_name, version.version, key, f"{value:.4f}")
    return version.version


RUN_TAGS = ("trigger", "data.pairs", "data.digest", "recipe")  # the train run's tags a version repeats


def describe_version(model_name: str, version: str, run_id: str, decoding: str = "") -> None:
    """Say on version `version` of `model_name` which training it is.

    A description naming the train run `run_id` (its name, commit, data and final model) and the
    `decoding` settings it was logged with, and the run's `RUN_TAGS` plus `run` (its name) as tags; the
    same tags on the version's logged model (the experiment's Models tab).

    Raises:
        MlflowException: the run or the version is not in the tracking database.
    """
    c = store.client()
    run = c.get_run(run_id)
    tags = {"run": run.info.run_name} | {k: run.data.tags[k] for k in RUN_TAGS if k in run.data.tags}
    description = version_description(run.info.run_name, run.data.tags)
    description += f" Decoding: {decoding}." if decoding else ""
    c.update_model_version(model_name, version, description=description)
    for key, value in tags.items():
        c.set_model_version_tag(model_name, version, key, value)
    model_id = logged_model_id(c.get_model_version(model_name, version))
    if model_id:
        c.set_logged_model_tags(model_id, tags | {"registered_as": f"{model_name} v{version}"})


def logged_model_id(version: ModelVersion) -> str | None:
    """The id of the logged model `version` was registered from: its `model_id`, else the id in
    its source `models:/<id>` (the registry may leave `model_id` empty); None for other sources."""
    source = version.source or ""
    return version.model_id or (source.removeprefix("models:/") if source.startswith("models:/m-") else None)


def version_description(run_name: str, tags: dict[str, str]) -> str:
    """A version's description from its train run's name and tags (`data.*`, `recipe`, `summary.*`, git)."""
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

    text = f"Trained by run `{run_name}` at commit `{tags.get(MLFLOW_GIT_COMMIT, 'unknown')[:7]}`"
    if "data.pairs" in tags:
        text += f" on {int(tags['data.pairs']):,} pairs (digest `{tags.get('data.digest', '?')}`)"
    if "recipe" in tags:
        text += f"; recipe: {tags['recipe']}"
    if "summary.final_model" in tags:
        text += f"; final model {tags['summary.final_model']}, greedy val BLEU {tags.get('summary.final_val_bleu', '?')}"
    return text + "."


@dataclass(frozen=True)
class VersionInfo:
    """A registered version as the results page shows it."""

    version: str
    aliases: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict)


def info(version: ModelVersion) -> VersionInfo:
    return VersionInfo(str(version.version), tuple(sorted(version.aliases)), dict(version.tags))


def run_versions(model_name: str, run_id: str) -> list[VersionInfo]:
    """The versions of `model_name` registered from run `run_id`, oldest first, with their aliases.

    Raises:
        MlflowException: the registry cannot be read.
    """
    c = store.client()
    found = c.search_model_versions(f"name = '{model_name}' and run_id = '{run_id}'")
    versions = [info(c.get_model_version(model_name, v.version)) for v in found]
    return sorted(versions, key=lambda v: int(v.version))


def champion(model_name: str) -> VersionInfo | None:
    """The version `champion` points at, or None."""
    version = version_by_alias(model_name, "champion")
    return info(version) if version is not None else None
