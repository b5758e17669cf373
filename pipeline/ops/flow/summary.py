"""What a retraining run found and did, in words: its incoming files checked, its case ("no new
data", "new data: retrained"), its tags and its Markdown summary. No Prefect, no DVC."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from pipeline.core.config import IncomingConfig
from pipeline.core.errors import ConfigError, DataError
from pipeline.core.tables import markdown_table
from pipeline.data.incoming import broken_links
from pipeline.ops.overrides import read_yaml

if TYPE_CHECKING:
    from pipeline.ops.promotion import Decision

INCOMING_STAGE, TRAIN_STAGE = "incoming", "train"
NO_PROMOTION = "mlflow disabled: nothing to promote"


def incoming_config(repo: str | Path) -> IncomingConfig:
    """Only the `incoming` section of the repository's `params.yaml`, validated: a bad value
    elsewhere is for the stage that reads it to report, in its own words.

    Raises:
        ConfigError: the section is missing or invalid (one line naming the field).
    """
    path = Path(repo) / "params.yaml"
    raw = read_yaml(path)
    try:
        return IncomingConfig.model_validate(raw.get("incoming"))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(
            f"{path}: {'.'.join(['incoming', *map(str, first['loc'])])}: {first['msg']}"
        ) from None


def check_incoming_links(repo: str | Path) -> None:
    """Stop before any stage when the incoming folder holds a broken symbolic link.

    DVC cannot hash such a folder: every `dvc status` and `dvc repro` of the stage would fail with
    "unexpected error".

    Raises:
        DataError: one line naming every broken link, relative to `repo`.
    """
    folder = Path(repo) / incoming_config(repo).in_dir
    if broken := broken_links(folder):
        names = ", ".join(os.path.relpath(path, repo) for path in broken)
        raise DataError(
            f"{names}: broken symbolic link(s), which DVC cannot hash (its `dvc status` and "
            "`dvc repro` stop with 'unexpected error'): remove them or restore their targets"
        )


def read_counts(repo: str | Path) -> dict | None:
    """The incoming stage's counts (`incoming.metrics_json`), None before it has run."""
    path = Path(repo) / incoming_config(repo).metrics_json
    return json.loads(path.read_text()) if path.is_file() else None


def describe_case(stages: dict[str, str], counts: dict | None) -> str:
    """One line saying which case this run was, from the stage outcomes ("ran"/"skipped") and the
    incoming stage's counts (None when absent)."""
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


def outcome_tags(stages: dict[str, str], decision: Decision | None) -> list[str]:
    """The run's tags once it is done.

    "retrained" (train ran) and "no-new-data" (the training set did not grow), "promoted" when
    `champion` moved, "kept" when a retrained candidate did not win.
    """
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
    """The run's summary: the decision, the case, then a table of both val BLEU scores and p (none
    for equal scores), the incoming counts and which stages ran."""
    rows: list[tuple[str, object]] = []
    if decision is not None and (cmp := decision.comparison) is not None:
        p_value = "none: equal scores" if cmp.equal() else f"{cmp.p_value:.4f}"
        rows += [
            ("candidate BLEU (val)", f"{cmp.candidate_bleu:.2f}"),
            ("champion BLEU (val)", f"{cmp.champion_bleu:.2f}"),
            ("paired bootstrap p", p_value),
        ]
    rows += [(f"incoming {key.replace('_', ' ')}", value) for key, value in (counts or {}).items()]
    for outcome in ("ran", "skipped"):
        names = [name for name, done in stages.items() if done == outcome]
        rows.append((f"stages {outcome}", ", ".join(names) or "none"))
    table = markdown_table([{"": name, "this run": value} for name, value in rows])
    return f"**{decision.message if decision else NO_PROMOTION}**\n\n{case}\n\n{table}\n"
