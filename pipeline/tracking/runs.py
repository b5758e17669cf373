"""Experiment tracking: the `Tracker` interface the training loop calls, its MLflow
implementation, and the run id files that tie the stages of one run together.

Where MLflow records go: env `MLFLOW_TRACKING_URI` when set, else the embedded database
`sqlite:///<repository root>/mlflow.db` (no server). The root is found from this file's
location, not the working directory, and a `dvc exp run --temp` copy (which lives under
`<root>/.dvc/tmp/exps/`) maps back to the repository it was copied from, so every stage and
experiment writes to the same database. With a sqlite URI, artifacts go to `mlartifacts/` beside
the database file.

One `train` stage run is one MLflow run; `decode` and `score` add to it through the run id the
train stage writes (`run_id_file`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pipeline.core.io import write_json, write_text

if TYPE_CHECKING:
    from pipeline.core.config import Params


class Tracker(Protocol):
    run_id: str  # "" when nothing is recorded

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path, artifact_path: str) -> None: ...

    def finish(self, status: str = "FINISHED") -> None: ...


class NullTracker:
    """A tracker that drops everything (tests, non-main ranks, runs with tracking disabled)."""

    run_id = ""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: Path, artifact_path: str) -> None:
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
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


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


class MlflowTracker:
    """Logs to one MLflow run through the client API (no global active run)."""

    def __init__(self, run_id: str) -> None:
        self.run_id, self.client = run_id, client()

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()]
        )

    def log_artifact(self, path: Path, artifact_path: str) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

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
    the same `fingerprint` and the training continues (`last.pt` beside it), else a new one with
    every param (flattened) and tags (git commit, device, torch, the corpus checksums)."""
    from mlflow.exceptions import MlflowException

    from pipeline.data.multi30k import corpus_files

    c, exp_id, info = client(), experiment_id(params.mlflow.experiment), Path(out_dir) / RUN_INFO
    try:
        previous = json.loads(info.read_text())
    except (OSError, ValueError):
        previous = {}  # absent or unreadable: a new run
    resuming = (Path(out_dir) / "last.pt").is_file()
    if resuming and isinstance(previous, dict) and previous.get("fingerprint") == fingerprint:
        try:
            run = c.get_run(previous["run_id"])
            if run.info.lifecycle_stage == "active" and run.info.experiment_id == exp_id:
                c.update_run(run.info.run_id, status="RUNNING")
                print(f"mlflow: continuing run {run.info.run_id}")
                return MlflowTracker(run.info.run_id)
        except MlflowException:
            pass  # deleted, or another database: start afresh
    tags = {"git_commit": git_commit(), "stage": "train", "device": str(device), "torch": _torch_version()}
    tags |= {f"data.sha256.{n}": sha for n, sha in sorted(corpus_files(params.download.tgt_lang).items())}
    run = c.create_run(exp_id, tags=tags)
    tracker = MlflowTracker(run.info.run_id)
    tracker.log_params(flatten(params.model_dump()))
    write_json(info, {"run_id": run.info.run_id, "fingerprint": fingerprint})
    print(f"mlflow: run {run.info.run_id} in experiment {params.mlflow.experiment!r} at {tracking_uri()}")
    return tracker


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
