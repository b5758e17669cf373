"""The `Tracker` interface the training loop calls, the one that records nothing, and `finishing`,
which ends a run with the status its block ended with."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from pipeline.core.errors import Stopped


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
