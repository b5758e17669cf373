"""Markdown tables from rows of values (pandas' `DataFrame.to_markdown`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd


def markdown_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None) -> str:
    """A Markdown (pipe) table of `rows`, one dict per row.

    `columns` picks and orders the columns (default: every key, first-seen order). Values are written as
    `str` gives them (a newline as a space), never re-parsed as numbers; a missing value is "–". Ends
    without a newline."""
    cols = list(columns) if columns is not None else list(dict.fromkeys(k for row in rows for k in row))
    cells = [
        ["–" if row.get(c) is None else str(row[c]).replace("|", "\\|").replace("\n", " ") for c in cols]
        for row in rows
    ]
    return pd.DataFrame(cells, columns=cols).to_markdown(index=False, disable_numparse=True)
