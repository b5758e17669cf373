"""The MLflow run of one `train` stage run: created with the params that shape it, a name, a
description and tags, or continued when its training continues from `last.pt`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.io import write_json
from pipeline.core.params_file import flatten
from pipeline.tracking import describe
from pipeline.tracking.describe import SUMMARY_PREFIX
from pipeline.tracking.mlflow_tracker import MlflowTracker, training_set
from pipeline.tracking.store import client, experiment_id, git_tags, source_tags, tracking_uri, ui_page

if TYPE_CHECKING:
    from pipeline.core.config import Params


RUN_SECTIONS = ("download", "tokenizer", "distill", "prepare", "train")  # the sections that shape a train run

PATH_SUFFIXES = ("_dir", "_file", "_json", "_jsonl", "_csv")  # fields that say where, not what

NOT_SHAPING = ("download.mirror", "train.dist.master_addr", "train.dist.master_port")


def run_params(params: Params) -> dict[str, object]:
    """The params that shape a train run, flattened (e.g. `train.optim.peak_lr`).

    The sections `RUN_SECTIONS`, without paths (fields ending in `PATH_SUFFIXES`) and without
    `NOT_SHAPING` (the download mirror, torchrun's address and port).
    """
    tree = {section: getattr(params, section).model_dump() for section in RUN_SECTIONS}
    return {k: v for k, v in flatten(tree).items() if not k.endswith(PATH_SUFFIXES) and k not in NOT_SHAPING}


RUN_INFO = "mlflow_run.json"  # in the checkpoint folder: the MLflow run a continued training adds to

TRAIN_SOURCE = "stages/train.py"  # `mlflow.source.name` of a train run


@dataclass(frozen=True)
class TrainStart:
    """What a train run starts from: the training pairs (`digest`: `TokenizedCorpus.digest`,
    `n_pairs`), the device, and the champion a warm start begins with (`init_from`: {"alias",
    "version", "run_id"}; None: from scratch)."""

    digest: str
    n_pairs: int
    device: str = "cpu"
    init_from: dict | None = None


def start_train_run(params: Params, out_dir: Path, fingerprint: str, start: TrainStart) -> MlflowTracker:
    """The MLflow run of a `train` stage run: the earlier one when the training continues, else a new one.

    The earlier one is the run named in `out_dir/mlflow_run.json`, kept when it has the same
    `fingerprint` and the training continues (`last.pt` beside it); else a new one (`create_train_run`).
    The tracker samples system metrics, uploads checkpoints as `mlflow.log_checkpoints` says and knows
    the training set (`training_set`).

    Raises:
        MlflowException: the tracking server or database cannot be reached or written.
    """
    exp_id, info = experiment_id(params.mlflow.experiment), Path(out_dir) / RUN_INFO
    options = dict(log_checkpoints=params.mlflow.log_checkpoints, training_set=training_set(params))
    run_id = _continued_run(exp_id, info, fingerprint)
    if run_id:
        print(f"mlflow: continuing run {run_id}")
        return MlflowTracker(run_id, **options, system_metrics=True)
    run = create_train_run(params, exp_id, start)
    write_json(info, {"run_id": run.info.run_id, "fingerprint": fingerprint})
    print(
        f"mlflow: run {run.info.run_name!r} ({run.info.run_id}) in experiment {params.mlflow.experiment!r} "
        f"at {tracking_uri()}; in `mlflow ui`: {ui_page(exp_id)}"
    )
    return MlflowTracker(run.info.run_id, **options, system_metrics=True)


def create_train_run(params: Params, exp_id: str, start: TrainStart):
    """A new train run in experiment `exp_id`, with its params, name, description and tags.

    The params are those that shape it (`run_params`); the name is unique (`describe.run_name`, numbered
    when taken); the description is `start_note`; the tags are `git_tags`, `source_tags`, what started
    it, device, torch, the data, its recipe (`recipe_words`), the warm start.

    Returns:
        The `Run`.

    Raises:
        MlflowException: the tracking server or database cannot be reached or written.
    """
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    started_by = describe.trigger()
    tags = git_tags() | source_tags(TRAIN_SOURCE) | data_tags(params, start) | _init_tags(start.init_from)
    tags |= {"stage": "train", "trigger": started_by, "device": start.device, "torch": _torch_version()}
    tags["recipe"] = recipe_words(params, teacher_runs(params, exp_id))
    note = start_note(params, exp_id, start, tags)
    name = _unique_name(exp_id, describe.run_name(started_by, start.n_pairs, start.digest))
    run = client().create_run(exp_id, tags=tags | {MLFLOW_RUN_NOTE: note}, run_name=name)
    MlflowTracker(run.info.run_id).log_params(run_params(params))
    return run


def start_note(params: Params, exp_id: str, start: TrainStart, tags: Mapping[str, str]) -> str:
    """The description a new train run with `tags` starts with (`describe.start_note`).

    It says what started the run, where, its data, and what changed (params, `data.*` tags) since the
    previous train run of experiment `exp_id`.
    """
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_BRANCH, MLFLOW_GIT_COMMIT

    data = training_set(params)
    incoming = f" ({', '.join(data.incoming)})" if data.incoming else ""
    facts = {
        "started_by": tags["trigger"],
        "commit": tags[MLFLOW_GIT_COMMIT],
        "branch": tags.get(MLFLOW_GIT_BRANCH, ""),
        "data": f"{start.n_pairs:,} pairs of {data.name}{incoming}",
        "digest": start.digest,
        "start": _start_words(start.init_from),
        "recipe": tags["recipe"],
    }
    previous = _previous_train_run(exp_id)
    if previous is None:
        return describe.start_note(facts, None, [])
    values = {k: str(v) for k, v in run_params(params).items()}
    values |= {k: v for k, v in tags.items() if k.startswith("data.")}
    return describe.start_note(facts, previous.info.run_name, describe.changes(_values_of(previous), values))


def data_tags(params: Params, start: TrainStart) -> dict[str, str]:
    """`data.pairs`, `data.digest` (the pairs' first 12 hex digits) and `data.multi30k`: the first
    12 hex digits of the SHA-256 of the pinned Multi30k checksums (`corpus_files`)."""
    from pipeline.data.multi30k import corpus_files

    pinned = "".join(f"{n} {sha}\n" for n, sha in sorted(corpus_files(params.download.tgt_lang).items()))
    multi30k = hashlib.sha256(pinned.encode()).hexdigest()[:12]
    return {"data.pairs": str(start.n_pairs), "data.digest": start.digest[:12], "data.multi30k": multi30k}


def recipe_words(params: Params, teacher_runs: Mapping[str, str] | None = None) -> str:
    """The training data's recipe in a few words: the distillation teachers and subword sampling, when on.

    `teacher_runs` maps a teacher's path to its MLflow run, named beside it (e.g. "distilled from a.pt
    (run 1f2e...) + b.pt, an ensemble translation, with the original pairs")."""
    words = []
    if params.distill.teacher:
        runs = teacher_runs or {}
        named = [f"{path} (run {runs[path]})" if runs.get(path) else path for path in params.distill.teacher]
        how = "an ensemble translation" if params.distill.combine == "ensemble" else "one translation each"
        kept = "with the original pairs" if params.distill.keep_original else "their translations alone"
        words.append(f"distilled from {' + '.join(named)}, {how}, {kept}")
    if params.prepare.sampling_alpha is not None:
        p = params.prepare
        words.append(
            f"subword sampling alpha {p.sampling_alpha} ({p.sampling_copies} copies, seed {p.sampling_seed})"
        )
    return "; ".join(words) or "the training pairs as given (no distillation, no subword sampling)"


def teacher_runs(params: Params, exp_id: str) -> dict[str, str]:
    """The train run of each teacher in `params.distill.teacher` (path -> run id), if any.

    That is the run in experiment `exp_id` whose final model has the teacher file's SHA-256 (tag
    `summary.model_sha256`); a teacher with no such run (trained elsewhere) is left out.

    Raises:
        MlflowException: the tracking server or database cannot be reached.
    """
    found = {}
    for path in params.distill.teacher:
        if not Path(path).is_file():
            continue
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        runs = client().search_runs(
            [exp_id], f"tags.`{SUMMARY_PREFIX}model_sha256` = '{digest}'", max_results=1
        )
        if runs:
            found[path] = runs[0].info.run_id
    return found


def _start_words(init_from: dict | None) -> str:
    return f"fine-tuned from {init_from['alias']} v{init_from['version']}" if init_from else "from scratch"


def _init_tags(init_from: dict | None) -> dict[str, str]:
    return {f"init_from.{k}": str(v) for k, v in (init_from or {}).items()}


def _previous_train_run(exp_id: str):
    """The latest train run of experiment `exp_id`, or None."""
    found = client().search_runs(
        [exp_id], "tags.stage = 'train'", order_by=["attributes.start_time DESC"], max_results=1
    )
    return found[0] if found else None


def _values_of(run) -> dict[str, str]:
    """A run's params and data tags, to compare with a new run's."""
    return run.data.params | {k: v for k, v in run.data.tags.items() if k.startswith("data.")}


def _unique_name(exp_id: str, name: str) -> str:
    """`name`, numbered (`describe.numbered`) when a run of experiment `exp_id` has it."""
    found = client().search_runs([exp_id], f"attributes.run_name LIKE '{name}%'", max_results=50_000)
    return describe.numbered(name, {run.info.run_name for run in found})


def _continued_run(exp_id: str, info: Path, fingerprint: str) -> str | None:
    """The run id in `info` when training continues (`last.pt` beside it) with the same
    `fingerprint` and that run is active in `exp_id` (then marked RUNNING again); else None."""
    from mlflow.exceptions import MlflowException

    try:
        previous = json.loads(info.read_text())
    except (OSError, ValueError):
        return None  # absent or unreadable: a new run
    resuming = (info.parent / "last.pt").is_file()
    if not (resuming and isinstance(previous, dict) and previous.get("fingerprint") == fingerprint):
        return None
    c = client()
    try:
        run = c.get_run(previous["run_id"])
    except (MlflowException, KeyError):
        return None  # deleted, or another database: start afresh
    if run.info.lifecycle_stage != "active" or run.info.experiment_id != exp_id:
        return None
    c.update_run(run.info.run_id, status="RUNNING")
    return run.info.run_id


def _torch_version() -> str:
    import torch

    return torch.__version__
