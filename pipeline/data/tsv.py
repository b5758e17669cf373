"""Small hand-written TSV tables with a fixed header (the time-machine and robustness sets)."""

from __future__ import annotations

from pathlib import Path

from pipeline.core.errors import DataError


def read_tsv(path: Path, header: list[str], what: str) -> list[tuple[int, list[str]]]:
    """The rows of the TSV file `path` under `header`, each as (its line number, its fields); the
    header is line 1.

    Raises:
        DataError: `path` is missing ("`what` not found") or its first line is not `header`.
    """
    if not Path(path).is_file():
        raise DataError(f"{path}: {what} not found")
    first, *rows = [line.split("\t") for line in Path(path).read_text(encoding="utf-8").splitlines()]
    if first != header:
        raise DataError(f"{path}: header must be {'<TAB>'.join(header)}, got {first}")
    return list(enumerate(rows, start=2))
