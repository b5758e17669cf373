"""Experiment tracking interface used by the trainer. `NullTracker` records nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Tracker(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path, artifact_path: str) -> None: ...


class NullTracker:
    """A tracker that drops everything (tests, and runs without tracking)."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: Path, artifact_path: str) -> None:
        pass
