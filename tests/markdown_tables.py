"""Reading Markdown tables back in tests: cells, not padding."""

from __future__ import annotations


def table_rows(markdown: str) -> list[tuple[str, ...]]:
    """The stripped cells of every Markdown table line in `markdown` (header and rule included)."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    return [tuple(cell.strip() for cell in line.strip("|").split("|")) for line in lines]
