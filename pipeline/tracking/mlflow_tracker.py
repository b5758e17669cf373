"""The `Tracker` that logs to one MLflow run: metrics, artifacts, the checkpoints
`mlflow.log_checkpoints` asks for, the training set as a dataset input; and the run of the stages
after `train` (`run_of`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.run_id import read_run_id
from pipeline.tracking import describe
from pipeline.tracking.store import client, foreign_artifacts, local_path, tracking_uri
from pipeline.tracking.tracker import NullTracker, Tracker

if TYPE_CHECKING:
    from mlflow.entities import DatasetInput

    from pipeline.core.config import Params


TRANSLATIONS_ARTIFACTS = "reports/translations"  # the run's artifact folder of `decode`'s translations


def translation_artifact(split: str, lang: str) -> str:
    """The run artifact of `decode`'s translations of `split` into `lang`.

    That is `reports/translations/<split>.hyp.<lang>.txt` (MLflow's artifact browser shows `.txt` files;
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
    """The training set of `params`: `incoming.out_jsonl`, Multi30k train plus the incoming files.

    The incoming files are the `*.tsv` files in `incoming.in_dir` (hidden ones ignored, as the `incoming`
    stage does, which runs before `train`). Named `multi30k-en-<tgt>`, with `+incoming` when there are
    such files."""
    folder = Path(params.incoming.in_dir)
    files = sorted(p.name for p in folder.glob("*.tsv") if p.is_file() and not p.name.startswith("."))
    name = f"multi30k-en-{params.download.tgt_lang}" + ("+incoming" if files else "")
    return TrainingSet(name, params.incoming.out_jsonl, tuple(files))


def dataset_input(data: TrainingSet, digest: str, n_pairs: int) -> DatasetInput:
    """The MLflow `DatasetInput` (context "training") of the training pairs described by `data`.

    Source: the merged file; digest: the first 12 hex digits of `digest` (MLflow allows 36); profile:
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


def run_of(run_id_file: Path, enabled: bool) -> Tracker:
    """The tracker of the train stage's MLflow run named in `run_id_file` (for the stages after it).

    NullTracker when tracking is off, the file is empty, or the run keeps its artifacts in another
    checkout (`foreign_artifacts`: then it says so).

    Raises:
        MlflowException: the run is not in the tracking database, or it cannot be reached.
    """
    run_id = read_run_id(run_id_file) if enabled else None
    if not run_id:
        return NullTracker()
    location = client().get_run(run_id).info.artifact_uri
    if foreign_artifacts(location, tracking_uri()):
        print(
            f"mlflow: run {run_id} keeps its artifacts in {local_path(location)}, outside this checkout "
            "(mlflow.db was copied or moved from there): nothing is logged to it; rerun the train stage "
            "here (`dvc repro -f train`) for a run of this checkout's own"
        )
        return NullTracker()
    return MlflowTracker(run_id)
