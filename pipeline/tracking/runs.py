"""Experiment tracking: the `Tracker` interface the training loop calls, its MLflow
implementation, and the run id files that tie the stages of one run together.

Where MLflow records go: env `MLFLOW_TRACKING_URI` when set, else the embedded database
`sqlite:///<repository root>/mlflow.db` (no server). The root is found from this file's
location, not the working directory, and a `dvc exp run --temp` copy (which lives under
`<root>/.dvc/tmp/exps/`) maps back to the repository it was copied from, so every stage and
experiment writes to the same database. With a sqlite URI, artifacts go to `mlartifacts/` beside
the database file.

One `train` stage run is one MLflow run; `decode` and `score` add to it through the run id the
train stage writes (`run_id_file`). A train run is named for what it is (`run_name`: the DVC
experiment, else `train-<short commit>`), carries MLflow's git source tags (`git_tags`), lists its
training pairs as a dataset input (`dataset_input`) and uploads the checkpoint files that
`mlflow.log_checkpoints` asks for (`uploads_checkpoint`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pipeline.core.io import write_json, write_text

if TYPE_CHECKING:
    from mlflow.entities import DatasetInput

    from pipeline.core.config import Params


class Tracker(Protocol):
    run_id: str  # "" when nothing is recorded

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path, artifact_path: str) -> None: ...

    def log_checkpoint(self, path: Path) -> None: ...

    def log_training_set(self, digest: str, n_pairs: int) -> None: ...

    def finish(self, status: str = "FINISHED") -> None: ...


class NullTracker:
    """A tracker that drops everything (tests, non-main ranks, runs with tracking disabled)."""

    run_id = ""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: Path, artifact_path: str) -> None:
        pass

    def log_checkpoint(self, path: Path) -> None:
        pass

    def log_training_set(self, digest: str, n_pairs: int) -> None:
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


TRANSLATIONS_ARTIFACTS = "reports/translations"  # the run's artifact folder of `decode`'s translations
DVC_EXP_NAME = "DVC_EXP_NAME"  # set by `dvc exp run` for its stages: the experiment's name


def run_name(stage: str, commit: str) -> str:
    """The MLflow run name of a `stage` run: env DVC_EXP_NAME under `dvc exp run`, else
    `<stage>-<first 7 characters of commit>` (e.g. `train-c1c3f4f`)."""
    return os.environ.get(DVC_EXP_NAME) or f"{stage}-{commit[:7]}"


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


def client():
    """An `MlflowClient` on `tracking_uri()` (mlflow is imported only when tracking is used)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    return MlflowClient(uri)


def experiment_id(name: str) -> str:
    """The id of experiment `name`, created (with `artifact_location`) when missing."""
    c = client()
    found = c.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    return c.create_experiment(name, artifact_location=artifact_location(tracking_uri()))


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


class MlflowTracker:
    """Logs to one MLflow run through the client API (no global active run). `log_checkpoints`
    (`mlflow.log_checkpoints`, one of `CHECKPOINT_UPLOADS`) picks the checkpoint files uploaded;
    `training_set` describes a train run's pairs (None for the stages after it, which log none)."""

    def __init__(
        self, run_id: str, log_checkpoints: str = "all", training_set: TrainingSet | None = None
    ) -> None:
        self.run_id, self.client = run_id, client()
        self.log_checkpoints, self.training_set = log_checkpoints, training_set

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()]
        )

    def log_artifact(self, path: Path, artifact_path: str) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

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

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status)


RUN_INFO = "mlflow_run.json"  # in the checkpoint folder: the MLflow run a continued training adds to


def start_train_run(params: Params, out_dir: Path, fingerprint: str, device: object) -> MlflowTracker:
    """The MLflow run of a `train` stage run: the one named in `out_dir/mlflow_run.json` when it has
    the same `fingerprint` and the training continues (`last.pt` beside it), else a new one named
    by `run_name`, with every param (flattened) and tags (`git_tags`, device, torch, the corpus
    checksums). The tracker uploads checkpoints as `mlflow.log_checkpoints` says and knows the
    training set (`training_set`).

    Raises:
        MlflowException: the tracking server or database cannot be reached or written.
    """
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

    from pipeline.data.multi30k import corpus_files

    exp_id, info = experiment_id(params.mlflow.experiment), Path(out_dir) / RUN_INFO
    options = dict(log_checkpoints=params.mlflow.log_checkpoints, training_set=training_set(params))
    run_id = _continued_run(exp_id, info, fingerprint)
    if run_id:
        print(f"mlflow: continuing run {run_id}")
        return MlflowTracker(run_id, **options)
    tags = git_tags() | {"stage": "train", "device": str(device), "torch": _torch_version()}
    tags |= {f"data.sha256.{n}": sha for n, sha in sorted(corpus_files(params.download.tgt_lang).items())}
    name = run_name("train", tags[MLFLOW_GIT_COMMIT])
    run = client().create_run(exp_id, tags=tags, run_name=name)
    tracker = MlflowTracker(run.info.run_id, **options)
    tracker.log_params(flatten(params.model_dump()))
    write_json(info, {"run_id": run.info.run_id, "fingerprint": fingerprint})
    print(
        f"mlflow: run {name!r} ({run.info.run_id}) in experiment {params.mlflow.experiment!r} at {tracking_uri()}"
    )
    return tracker


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
    """Mark the tracker's run FINISHED when the block completes, FAILED when it raises."""
    try:
        yield tracker
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish("FINISHED")


def write_run_id(path: Path, run_id: str) -> None:
    """Persist the run id for the stages after `train` (empty when not tracked)."""
    write_text(path, run_id + "\n" if run_id else "")


def run_of(run_id_file: Path, enabled: bool) -> Tracker:
    """The tracker of the train stage's MLflow run named in `run_id_file` (for the stages after
    it); NullTracker when tracking is off or the file is empty."""
    run_id = read_run_id(run_id_file) if enabled else None
    return MlflowTracker(run_id) if run_id else NullTracker()


def read_run_id(path: Path) -> str | None:
    """The run id stored in `path` (first line), or None when the file is absent or empty."""
    path = Path(path)
    text = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    return text.splitlines()[0].strip() if text else None
