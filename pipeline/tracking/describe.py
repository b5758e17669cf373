"""What a train run says about itself in MLflow: its name, its description (`mlflow.note.content`,
Markdown in the UI) and its summary tags. Plain text, no MLflow.

A run is named for what started it (`trigger`) and the data it trained on (`run_name`), e.g.
`dvc repro · 29,000 pairs 3f2a1c`; a taken name gets ` (2)`, ` (3)`, ... (`numbered`). The trigger is env
`MT_RUN_TRIGGER`, else `dvc exp <name>` (env `DVC_EXP_NAME`), `dvc repro` (env `DVC_STAGE`), else `script`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

TRIGGER_ENV = "MT_RUN_TRIGGER"  # what started the stages, in a few words (set by the Prefect flow)
DVC_EXP_NAME = "DVC_EXP_NAME"  # set by `dvc exp run` for its stages: the experiment's name
DVC_STAGE = "DVC_STAGE"  # set by DVC for every stage command it runs

SUMMARY_PREFIX = "summary."  # the tags of a finished run's figures (`summary_tags`)


def trigger() -> str:
    """What started this process, per the module docstring (quotes removed: MLflow's search filter
    could not quote them)."""
    text = os.environ.get(TRIGGER_ENV, "").strip()
    if not text and os.environ.get(DVC_EXP_NAME):
        text = f"dvc exp {os.environ[DVC_EXP_NAME]}"
    if not text:
        text = "dvc repro" if os.environ.get(DVC_STAGE) else "script"
    return re.sub(r"[\"'\\]", "", text)


def run_name(started_by: str, n_pairs: int, digest: str) -> str:
    """`<started_by> · <n_pairs> pairs <first 6 hex digits of digest>`."""
    return f"{started_by} · {n_pairs:,} pairs {digest[:6]}"


def numbered(name: str, taken: set[str]) -> str:
    """`name`, or the first of `name (2)`, `name (3)`, ... not in `taken`."""
    n, candidate = 1, name
    while candidate in taken:
        n += 1
        candidate = f"{name} ({n})"
    return candidate


def changes(before: Mapping[str, str], after: Mapping[str, str], limit: int = 8) -> list[str]:
    """`key old → new` for each key of `after` whose value differs in `before` ("–": absent), at
    most `limit` of them and then `and N more`."""
    lines = [f"{k} {before.get(k, '–')} → {v}" for k, v in sorted(after.items()) if before.get(k) != v]
    return lines[:limit] + ([f"and {len(lines) - limit} more"] if len(lines) > limit else [])


def start_note(facts: Mapping[str, str], previous: str | None, changed: list[str]) -> str:
    """The description a train run starts with.

    `facts`: `started_by`, `commit`, `branch` (may be empty), `data` (e.g. "500 pairs of multi30k-en-de"),
    `digest`, `start` ("from scratch", ...), optionally `recipe` (e.g. "distilled from seed2.pt");
    `previous`: the name of the experiment's previous train run (None: none), `changed`: what differs
    from it (`changes`)."""
    where = f"commit `{facts['commit'][:7]}`" + (f" on branch `{facts['branch']}`" if facts["branch"] else "")
    lines = [
        f"Training run started by `{facts['started_by']}` at {where}.",
        f"Data: {facts['data']}, digest `{facts['digest'][:12]}`; {facts['start']}.",
    ]
    if facts.get("recipe"):
        lines.append(f"Recipe: {facts['recipe']}.")
    if previous is None:
        lines.append("The first training run of this experiment.")
    else:
        lines.append(f"Changed since `{previous}`: " + ("; ".join(changed) if changed else "nothing") + ".")
    return "\n\n".join(lines)


def result_note(summary: Mapping[str, object]) -> str:
    """The result paragraph of a finished run's description, from its summary (`steps`, `epochs`,
    `minutes`, `final_val_bleu`, `final_model`, `stopped_by`)."""
    s = summary
    epochs = f"{s['epochs']} epoch" + ("" if s["epochs"] == 1 else "s")
    return (
        f"Result: final model {s['final_model']}, greedy val BLEU {s['final_val_bleu']:.2f}; "
        f"{s['steps']:,} steps ({epochs}) in {s['minutes']} minutes, ended by {s['stopped_by']}."
    )


def with_result(note: str, summary: Mapping[str, object]) -> str:
    """`note` with its result paragraph (`result_note`) set, replacing an earlier one (a run that
    continued)."""
    return note.split("\n\nResult: ")[0] + "\n\n" + result_note(summary)


def summary_tags(summary: Mapping[str, object]) -> dict[str, str]:
    """A finished run's figures as tags `summary.<name>`: single values, not metric curves."""
    return {f"{SUMMARY_PREFIX}{k}": str(v) for k, v in summary.items()}
