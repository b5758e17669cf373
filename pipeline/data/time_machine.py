"""The "time machine": the tutorial's 20 English sentences with its own German outputs
(`data/time_machine.tsv`, `en<TAB>tutorial_de`), and the decode stage's Markdown table of ours
beside them with sentence chrF, as is and in the tutorial's style. Other target languages get
`not_german` instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.config import DecodeConfig
from pipeline.core.errors import DataError
from pipeline.core.metrics import sentence_chrf
from pipeline.core.tables import markdown_table
from pipeline.data.tsv import read_tsv

TIME_MACHINE = "time_machine"  # `<translations_dir>/time_machine.hyp.<lang>`: our outputs
HEADER = ["en", "tutorial_de"]
TITLE = "# Time machine: the tutorial's 20 sentences"
UMLAUTS = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "Ä": "Ae", "Ö": "Oe", "Ü": "Ue", "ß": "ss"})


def detokenize_en(text: str) -> str:
    """Undo the tutorial's space tokenisation as Multi30k's raw text has it: "park ." -> "park."."""
    return re.sub(r" +([.,!?;:])", r"\1", text)


def read(path: Path) -> tuple[list[str], list[str]]:
    """The tutorial's English sentences (detokenised, see `detokenize_en`) and its German outputs
    from an `en<TAB>tutorial_de` TSV.

    Raises:
        DataError: the file is missing, lacks the header, or a row has not two fields.
    """
    rows = read_tsv(path, HEADER, "time-machine sentences")
    for number, row in rows:
        if len(row) != 2:
            raise DataError(f"{path}: line {number}: expected 2 tab-separated fields, got {len(row)}")
    return [detokenize_en(en) for _, (en, _) in rows], [de for _, (_, de) in rows]


def tutorial_style(text: str) -> str:
    """Our German written as the tutorial writes it, for a fairer chrF: umlauts/ß as ae/oe/ue/ss and
    a space before final punctuation ("im Park." -> "im Park .")."""
    return re.sub(r"(?<! )([.,!?;:])", r" \1", text.translate(UMLAUTS))


@dataclass(frozen=True)
class Row:
    """One sentence: chrF of ours against the tutorial's, as is and in the tutorial's style."""

    en: str
    ours: str
    tutorial: str
    chrf: float
    chrf_tutorial_style: float


def rows(en: Sequence[str], ours: Sequence[str], tutorial: Sequence[str]) -> list[Row]:
    """Sentence chrF of our German against the tutorial's (as is, and ours in `tutorial_style`).

    Raises:
        ValueError: the three lists differ in length.
    """
    return [
        Row(e, o, t, sentence_chrf(o, t), sentence_chrf(tutorial_style(o), t))
        for e, o, t in zip(en, ours, tutorial, strict=True)
    ]


def mean_chrf(table: Sequence[Row]) -> tuple[float, float]:
    """The mean sentence chrF (as is, in the tutorial's style); NaN for an empty table."""
    n = len(table) or float("nan")
    return sum(r.chrf for r in table) / n, sum(r.chrf_tutorial_style for r in table) / n


COLUMNS = ["#", "English", "ours", "tutorial's German", "chrF", "chrF (tutorial style)"]


def markdown(table: Sequence[Row], cfg: DecodeConfig) -> str:
    """The time-machine page: #, English (as translated), ours, the tutorial's German, both chrF."""
    lines = [
        TITLE,
        "",
        f"Our model: beam {cfg.beam_size}, length penalty α = {cfg.length_penalty}. The tutorial's English",
        'is space-tokenised ("in the park ."); Multi30k\'s raw text is not ("in the park."), so the space',
        "before punctuation was removed before translating; the English column shows the text we",
        "translated. The tutorial's German (its own pre-computed outputs) is shown verbatim:",
        "space-tokenised, with umlauts written ae/oe/ue. chrF: sentence chrF of ours against it, as is",
        "and with ours in the tutorial's style (ä→ae, ß→ss, a space before punctuation).",
        "",
    ]
    rows = [
        {
            "#": i,
            "English": r.en,
            "ours": r.ours,
            "tutorial's German": r.tutorial,
            "chrF": f"{r.chrf:.1f}",
            "chrF (tutorial style)": f"{r.chrf_tutorial_style:.1f}",
        }
        for i, r in enumerate(table, start=1)
    ]
    if table:
        mean, mean_style = mean_chrf(table)
        rows.append(
            {
                "#": "",
                "English": "mean",
                "ours": "",
                "tutorial's German": "",
                "chrF": f"{mean:.1f}",
                "chrF (tutorial style)": f"{mean_style:.1f}",
            }
        )
    lines.append(markdown_table(rows, COLUMNS))
    return "\n".join(lines) + "\n"


def not_german(lang: str) -> str:
    """The time-machine page of a run that does not translate into German: the tutorial's outputs
    are German, so there is nothing to compare with."""
    return (
        f"{TITLE}\n\n"
        f"Not written: this run translates into {lang!r}, and the tutorial's outputs are German "
        "(`download.tgt_lang: de` only).\n"
    )
