"""Experiment tracking: the `Tracker` interface the training loop calls, its MLflow
implementation, and the run id files that tie the stages of one run together.

Where MLflow records go: env `MLFLOW_TRACKING_URI` when set, else the embedded database
`sqlite:///<repository root>/mlflow.db` (no server). The root is found from this file's
location, not the working directory, and a `dvc exp run --temp` copy (which lives under
`<root>/.dvc/tmp/exps/`) maps back to the repository it was copied from, so every stage and
experiment writes to the same database. With a sqlite URI, artifacts go to `mlartifacts/` beside
the database file, and never into another checkout's: a database copied or moved with its checkout
still names the old `mlartifacts/` (MLflow stores absolute locations), so `experiment_id` sets
such an experiment aside and `run_of` logs nothing to such a run, each saying so.

One `train` stage run is one MLflow run; `decode` and `score` add to it through the run id the
train stage writes (`run_id_file`). A train run is named for what started it and its data, with a
description, the params that shape it and summary tags (`pipeline.tracking.describe`); it carries
MLflow's git and source tags (`git_tags`), lists its training pairs as a dataset input
(`dataset_input`), samples MLflow's system metrics (CPU, memory; every 10 s) and uploads the
checkpoint files that `mlflow.log_checkpoints` asks for (`uploads_checkpoint`).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pipeline.core.errors import PipelineError, Stopped
from pipeline.core.io import write_json, write_text
from pipeline.tracking import describe

if TYPE_CHECKING:
    from mlflow.entities import DatasetInput

    from pipeline.core.config import Params


class Tracker(Protocol):
    run_id: str  # "" when nothing is recorded

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path, artifact_path: str) -> None: ...

    def log_text(self, text: str, artifact_file: str) -> None: ...

    def log_checkpoint(self, path: Path) -> None: ...

    def log_training_set(self, digest: str, n_pairs: int) -> None: ...

    def log_summary(self, summary: Mapping[str, object]) -> None: ...

    def finish(self, status: str = "FINISHED") -> None: ...


class NullTracker:
    """A tracker that drops everything (tests, non-main ranks, runs with tracking disabled)."""

    run_id = ""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: Path, artifact_path: str) -> None:
        pass

    def log_text(self, text: str, artifact_file: str) -> None:
        pass

    def log_checkpoint(self, path: Path) -> None:
        pass

    def log_training_set(self, digest: str, n_pairs: int) -> None:
        pass

    def log_summary(self, summary: Mapping[str, object]) -> None:
        pass

    def finish(self, status: str = "FINISHED") -> None:
        pass


def repo_root() -> Path:
    """The repository holding this package; for a `dvc exp run --temp` copy, the original."""
    here = Path(__file__).resolve().parents[2]
    parts = here.parts
    return Path(*parts[: parts.index(".dvc")]) if ".dvc" in parts else here


def tracking_uri() -> str:
    """env MLFLOW_TRACKING_URI, else an absolute `sqlite:///<repo root>/mlflow.db`."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def artifact_location(uri: str) -> str | None:
    """`mlartifacts/` beside a sqlite database; None (the server's choice) otherwise."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()


def local_path(file_uri: str) -> Path:
    """The path of a `file:` URI."""
    return Path(urllib.request.url2pathname(urllib.parse.urlparse(file_uri).path))


def foreign_artifacts(location: str, uri: str) -> bool:
    """Whether the artifact location `location` (an experiment's or a run's) is in an `mlartifacts/`
    folder other than the one beside the sqlite database `uri`: the database was copied or moved
    from another checkout. False for any other tracking URI or location."""
    own = artifact_location(uri)
    if own is None or not location.startswith("file:"):
        return False
    path = local_path(location)
    return "mlartifacts" in path.parts and not path.is_relative_to(local_path(own))


def git_commit(cwd: str | Path = ".") -> str:
    """`git rev-parse HEAD` in `cwd`, or "unknown" outside a git checkout (or without git)."""
    return _git(["rev-parse", "HEAD"], cwd) or "unknown"


def git_branch(cwd: str | Path = ".") -> str | None:
    """The branch checked out in `cwd`; None on a detached HEAD, before the first commit, outside a
    git checkout or without git."""
    name = _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
    return name if name and name != "HEAD" else None


def _git(args: list[str], cwd: str | Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def git_tags(cwd: str | Path = ".") -> dict[str, str]:
    """MLflow's source tags of `cwd`'s checkout: `mlflow.source.git.commit` (the commit, "unknown"
    outside a checkout) and, when a branch is checked out, `mlflow.source.git.branch`."""
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_BRANCH, MLFLOW_GIT_COMMIT

    branch = git_branch(cwd)
    return {MLFLOW_GIT_COMMIT: git_commit(cwd)} | ({MLFLOW_GIT_BRANCH: branch} if branch else {})


def source_tags(source: str) -> dict[str, str]:
    """MLflow's tags naming the code and the user behind a run: `mlflow.source.name` = `source`
    (e.g. `stages/train.py`), `mlflow.source.type` LOCAL, `mlflow.user`."""
    from mlflow.utils.mlflow_tags import MLFLOW_SOURCE_NAME, MLFLOW_SOURCE_TYPE, MLFLOW_USER

    return {MLFLOW_SOURCE_NAME: source, MLFLOW_SOURCE_TYPE: "LOCAL", MLFLOW_USER: _user()}


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment
        return "unknown"


TRANSLATIONS_ARTIFACTS = "reports/translations"  # the run's artifact folder of `decode`'s translations


def translation_artifact(split: str, lang: str) -> str:
    """The run artifact of `decode`'s translations of `split` into `lang`:
    `reports/translations/<split>.hyp.<lang>.txt` (MLflow's artifact browser shows `.txt` files;
    it offers `.de` ones for download only)."""
    return f"{TRANSLATIONS_ARTIFACTS}/{split}.hyp.{lang}.txt"


def logged_translation(run_id: str, split: str, lang: str) -> str:
    """The artifact path of run `run_id`'s translations of `split`: `translation_artifact`, or the
    name without `.txt` when the run has only that (runs logged before the `.txt` names).

    Raises:
        MlflowException: the run's artifacts cannot be listed (no such run, no database).
    """
    new, old = translation_artifact(split, lang), f"{TRANSLATIONS_ARTIFACTS}/{split}.hyp.{lang}"
    logged = {f.path for f in client().list_artifacts(run_id, TRANSLATIONS_ARTIFACTS)}
    return old if old in logged and new not in logged else new


def flatten(tree: Mapping, prefix: str = "") -> dict[str, object]:
    """{"train": {"model": {"d_model": 256}}} -> {"train.model.d_model": 256}."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flatten(value, f"{name}.")
        else:
            out[name] = value
    return out


RUN_SECTIONS = ("download", "tokenizer", "train")  # the params sections that shape a train run
PATH_SUFFIXES = ("_dir", "_file", "_json", "_jsonl", "_csv")  # fields that say where, not what
NOT_SHAPING = ("download.mirror", "train.dist.master_addr", "train.dist.master_port")


def run_params(params: Params) -> dict[str, object]:
    """The params that shape a train run, flattened (e.g. `train.optim.peak_lr`): the sections
    `RUN_SECTIONS` without paths (fields ending in `PATH_SUFFIXES`) and without `NOT_SHAPING` (the
    download mirror, torchrun's address and port)."""
    tree = {section: getattr(params, section).model_dump() for section in RUN_SECTIONS}
    return {k: v for k, v in flatten(tree).items() if not k.endswith(PATH_SUFFIXES) and k not in NOT_SHAPING}


def client():
    """An `MlflowClient` on `tracking_uri()` (mlflow is imported only when tracking is used)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    check_server(uri)
    mlflow.set_tracking_uri(uri)
    return MlflowClient(uri)


def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds when an http(s) tracking `uri` has no server behind it (MLflow itself
    retries for minutes). Any HTTP answer counts as a server, an error status included.

    Raises:
        PipelineError: nothing answers at `uri` within `timeout_s` seconds.
    """
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise PipelineError(f"MLFLOW_TRACKING_URI={uri}: no tracking server answers ({reason}); start it, "
                            "or unset MLFLOW_TRACKING_URI to track into mlflow.db") from None  # fmt: skip


EXPERIMENT_KIND = "mlflow.experimentKind"  # the tag MLflow's UI writes when one picks an experiment's type
MODEL_TRAINING = "custom_model_development"  # its value for "Machine learning" (not GenAI)
EXPERIMENT_NOTE = (
    "Training runs of the English→German Transformer: one run per `train` stage run (`dvc repro`, "
    "`dvc exp run` or the Prefect flow), to which `decode` adds the translations and the model and "
    "`score` the BLEU and chrF scores. See docs/tracking-and-serving.md."
)


def experiment_id(name: str) -> str:
    """The id of experiment `name`. Created when missing, with `artifact_location`, a description
    and `EXPERIMENT_KIND` = `MODEL_TRAINING` (also set on an older experiment without it). An
    experiment whose artifacts are in another checkout (`foreign_artifacts`) is renamed
    `<name> (artifacts in <folder>)`, with a message, and a new `name` is created.

    Raises:
        MlflowException: the tracking server or database cannot be reached or written.
    """
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    c, uri = client(), tracking_uri()
    found = c.get_experiment_by_name(name)
    if found is not None and foreign_artifacts(found.artifact_location, uri):
        set_aside(found.experiment_id, name, found.artifact_location)
        found = None
    if found is None:
        tags = {EXPERIMENT_KIND: MODEL_TRAINING, MLFLOW_RUN_NOTE: EXPERIMENT_NOTE}
        return c.create_experiment(name, artifact_location=artifact_location(uri), tags=tags)
    if EXPERIMENT_KIND not in found.tags:
        c.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND, MODEL_TRAINING)
    return found.experiment_id


def set_aside(exp_id: str, name: str, location: str) -> None:
    """Rename experiment `name`, whose artifacts are at `location` in another checkout, so that this
    checkout's runs get an experiment `name` of their own; says so."""
    folder, uri = local_path(location), tracking_uri()
    new_name = f"{name} (artifacts in {folder})"
    client().rename_experiment(exp_id, new_name)
    print(f"mlflow: experiment {name!r} of {uri} keeps its artifacts in {folder}, outside this checkout "
          f"(the database was copied or moved from there): renamed it {new_name!r}; new runs go to a new "
          f"{name!r} with artifacts in {local_path(artifact_location(uri))}")  # fmt: skip


def ui_page(exp_id: str) -> str:
    """The path of the experiment's runs in MLflow 3's UI (`mlflow ui`), in its model-training view:
    the UI opens on GenAI traces unless told `workflowType=machine_learning`."""
    return f"#/experiments/{exp_id}/runs?workflowType=machine_learning"


CHECKPOINT_UPLOADS = ("all", "best_and_last", "none")  # values of `mlflow.log_checkpoints`


def uploads_checkpoint(policy: str, name: str) -> bool:
    """Whether the checkpoint file `name` is uploaded under `mlflow.log_checkpoints` = `policy`:
    every file with "all", `best.pt` and `last.pt` with "best_and_last", none with "none".

    Raises:
        ValueError: `policy` is not one of `CHECKPOINT_UPLOADS`.
    """
    if policy not in CHECKPOINT_UPLOADS:
        raise ValueError(f"mlflow.log_checkpoints: {policy!r} is not one of {', '.join(CHECKPOINT_UPLOADS)}")
    return policy == "all" or (policy == "best_and_last" and name in ("best.pt", "last.pt"))


@dataclass(frozen=True)
class TrainingSet:
    """Where a train run's pairs come from: the dataset `name`, the merged file `path` and the
    names of the incoming files merged into it."""

    name: str
    path: str
    incoming: tuple[str, ...] = ()


def training_set(params: Params) -> TrainingSet:
    """The training set of `params`: `incoming.out_jsonl`, Multi30k train plus the `*.tsv` files in
    `incoming.in_dir` (hidden ones ignored, as the `incoming` stage does, which runs before
    `train`), named `multi30k-en-<tgt>`, with `+incoming` when there are such files."""
    folder = Path(params.incoming.in_dir)
    files = sorted(p.name for p in folder.glob("*.tsv") if p.is_file() and not p.name.startswith("."))
    name = f"multi30k-en-{params.download.tgt_lang}" + ("+incoming" if files else "")
    return TrainingSet(name, params.incoming.out_jsonl, tuple(files))


def dataset_input(data: TrainingSet, digest: str, n_pairs: int) -> DatasetInput:
    """The MLflow `DatasetInput` (context "training") of the training pairs described by `data`:
    source the merged file, digest the first 12 hex digits of `digest` (MLflow allows 36), profile
    `{"num_rows": n_pairs, "data_id": digest, "incoming_files": [...]}`."""
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.data.sources import LocalArtifactDatasetSource
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    meta = MetaDataset(LocalArtifactDatasetSource(data.path), name=data.name, digest=digest[:12]).to_dict()
    profile = {"num_rows": n_pairs, "data_id": digest, "incoming_files": list(data.incoming)}
    dataset = Dataset(**meta, profile=json.dumps(profile))
    return DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, "training")])


METRIC_NAMES = {  # the loop's names (the log CSV's) -> MLflow's: step curves in sections train/ and val/
    "train_loss": "train/loss",
    "lr": "train/lr",
    "tokens_per_s": "train/tokens_per_s",
    "val_loss": "val/loss",
    "val_bleu": "val/greedy_bleu",
}


class MlflowTracker:
    """Logs to one MLflow run through the client API. `log_checkpoints` (`mlflow.log_checkpoints`,
    one of `CHECKPOINT_UPLOADS`) picks the checkpoint files uploaded; `training_set` describes a
    train run's pairs (None for the stages after it, which log none); `system_metrics` makes the run
    MLflow's active run with its system metrics (`system/cpu_utilization_percentage`, ...) sampled
    every 10 s (env MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL), until `finish`."""

    def __init__(
        self,
        run_id: str,
        log_checkpoints: str = "all",
        training_set: TrainingSet | None = None,
        system_metrics: bool = False,
    ) -> None:
        self.run_id, self.client = run_id, client()
        self.log_checkpoints, self.training_set = log_checkpoints, training_set
        self.system_metrics = system_metrics
        if system_metrics:
            import mlflow

            logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # no start/stop lines
            mlflow.start_run(run_id=run_id, log_system_metrics=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log `metrics` at `step`, renamed by `METRIC_NAMES` (other names as they are)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(METRIC_NAMES.get(k, k), float(v), now, step) for k, v in metrics.items()]
        self.client.log_batch(self.run_id, metrics=items)

    def log_artifact(self, path: Path, artifact_path: str) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def log_checkpoint(self, path: Path) -> None:
        """Upload a checkpoint file as it is written (`checkpoints/`) when `log_checkpoints` wants it."""
        if uploads_checkpoint(self.log_checkpoints, Path(path).name):
            self.log_artifact(path, "checkpoints")

    def log_training_set(self, digest: str, n_pairs: int) -> None:
        """Record the training pairs as the run's dataset input (`dataset_input`); logging the same
        set again (a continued run) adds nothing."""
        if self.training_set is not None:
            self.client.log_inputs(self.run_id, datasets=[dataset_input(self.training_set, digest, n_pairs)])

    def log_params(self, params: Mapping[str, object]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow caps params per batch at 100
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_summary(self, summary: Mapping[str, object]) -> None:
        """A finished training's figures (steps, epochs, minutes, final model, ...) as tags
        `summary.<name>`, and its result at the end of the run's description."""
        from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

        note = self.client.get_run(self.run_id).data.tags.get(MLFLOW_RUN_NOTE, "")
        self.set_tags(describe.summary_tags(summary) | {MLFLOW_RUN_NOTE: describe.with_result(note, summary)})

    def finish(self, status: str = "FINISHED") -> None:
        """End the run with `status` (and its system metrics)."""
        if self.system_metrics:
            import mlflow

            mlflow.end_run(status)
        else:
            self.client.set_terminated(self.run_id, status)


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
    """The MLflow run of a `train` stage run: the one named in `out_dir/mlflow_run.json` when it has
    the same `fingerprint` and the training continues (`last.pt` beside it), else a new one
    (`create_train_run`). The tracker samples system metrics, uploads checkpoints as
    `mlflow.log_checkpoints` says and knows the training set (`training_set`).

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
    print(f"mlflow: run {run.info.run_name!r} ({run.info.run_id}) in experiment {params.mlflow.experiment!r} "
          f"at {tracking_uri()}; in `mlflow ui`: {ui_page(exp_id)}")  # fmt: skip
    return MlflowTracker(run.info.run_id, **options, system_metrics=True)


def create_train_run(params: Params, exp_id: str, start: TrainStart):
    """A new train run in experiment `exp_id`, with the params that shape it (`run_params`), a
    unique name (`describe.run_name`, numbered when taken), a description (`start_note`) and tags
    (`git_tags`, `source_tags`, what started it, device, torch, the data, the warm start). Returns
    the `Run`.

    Raises:
        MlflowException: the tracking server or database cannot be reached or written.
    """
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    started_by = describe.trigger()
    tags = git_tags() | source_tags(TRAIN_SOURCE) | data_tags(params, start) | _init_tags(start.init_from)
    tags |= {"stage": "train", "trigger": started_by, "device": start.device, "torch": _torch_version()}
    note = start_note(params, exp_id, start, tags)
    name = _unique_name(exp_id, describe.run_name(started_by, start.n_pairs, start.digest))
    run = client().create_run(exp_id, tags=tags | {MLFLOW_RUN_NOTE: note}, run_name=name)
    MlflowTracker(run.info.run_id).log_params(run_params(params))
    return run


def start_note(params: Params, exp_id: str, start: TrainStart, tags: Mapping[str, str]) -> str:
    """The description a new train run with `tags` starts with (`describe.start_note`): what
    started it, where, its data, and what changed (params, `data.*` tags) since the previous train
    run of experiment `exp_id`."""
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_BRANCH, MLFLOW_GIT_COMMIT

    data = training_set(params)
    incoming = f" ({', '.join(data.incoming)})" if data.incoming else ""
    facts = {"started_by": tags["trigger"], "commit": tags[MLFLOW_GIT_COMMIT],
             "branch": tags.get(MLFLOW_GIT_BRANCH, ""), "data": f"{start.n_pairs:,} pairs of {data.name}{incoming}",
             "digest": start.digest, "start": _start_words(start.init_from)}  # fmt: skip
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


@contextmanager
def finishing(tracker: Tracker) -> Iterator[Tracker]:
    """Mark the tracker's run FINISHED when the block completes, KILLED when a signal stopped it
    (`Stopped`: a later run continues it), FAILED when it raises anything else."""
    try:
        yield tracker
    except Stopped:
        tracker.finish("KILLED")
        raise
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish("FINISHED")


def write_run_id(path: Path, run_id: str) -> None:
    """Persist the run id for the stages after `train` (empty when not tracked)."""
    write_text(path, run_id + "\n" if run_id else "")


def run_of(run_id_file: Path, enabled: bool) -> Tracker:
    """The tracker of the train stage's MLflow run named in `run_id_file` (for the stages after
    it); NullTracker when tracking is off, the file is empty, or the run keeps its artifacts in
    another checkout (`foreign_artifacts`: then it says so).

    Raises:
        MlflowException: the run is not in the tracking database, or it cannot be reached.
    """
    run_id = read_run_id(run_id_file) if enabled else None
    if not run_id:
        return NullTracker()
    location = client().get_run(run_id).info.artifact_uri
    if foreign_artifacts(location, tracking_uri()):
        print(f"mlflow: run {run_id} keeps its artifacts in {local_path(location)}, outside this checkout "
              "(mlflow.db was copied or moved from there): nothing is logged to it; rerun the train stage "
              "here (`dvc repro -f train`) for a run of this checkout's own")  # fmt: skip
        return NullTracker()
    return MlflowTracker(run_id)


def read_run_id(path: Path) -> str | None:
    """The run id stored in `path` (first line), or None when the file is absent or empty."""
    path = Path(path)
    text = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    return text.splitlines()[0].strip() if text else None
