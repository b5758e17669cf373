"""The run id file that ties the stages of one run together: `train` writes the MLflow run id,
`decode` and `score` read it."""

from __future__ import annotations

from pathlib import Path

from pipeline.core.io import write_text


def write_run_id(path: Path, run_id: str) -> None:
    """Persist the run id for the stages after `train` (empty when not tracked)."""
    write_text(path, run_id + "\n" if run_id else "")


def read_run_id(path: Path) -> str | None:
    """The run id stored in `path` (first line), or None when the file is absent or empty."""
    path = Path(path)
    text = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    return text.splitlines()[0].strip() if text else None
