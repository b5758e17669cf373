"""The files around translation: the evaluation splits' `<split>.hyp.<tgt_lang>`, their scores
`<split>.json`, and the seed's 20 "time-machine" sentences (`data/time_machine.tsv`) with their
Markdown table."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pipeline.core.config import DecodeConfig
from pipeline.core.errors import DataError
from pipeline.core.io import write_json, write_text
from pipeline.data.multi30k import SPLITS, TRAIN_SPLIT

EVAL_SPLITS = tuple(s for s in SPLITS if s != TRAIN_SPLIT)
TIME_MACHINE = "time_machine"  # `<translations>/time_machine.hyp.<lang>`: our outputs of the seed's sentences
TIME_MACHINE_HEADER = ["en", "seed_de"]


def translation_path(out_dir: Path, split: str, lang: str = "de") -> Path:
    """Where a split's translations into `lang` live: `<out_dir>/<split>.hyp.<lang>` (`<split>.de`
    is the corpus's own file name, which must never be committed)."""
    return Path(out_dir) / f"{split}.hyp.{lang}"


def scores_path(scores_dir: Path, split: str) -> Path:
    """A split's scores (DVC metrics): `<scores_dir>/<split>.json`. One file per split keeps
    `dvc metrics show` narrow: the splits are rows sharing the columns bleu, bleu_lc_tok, chrf."""
    return Path(scores_dir) / f"{split}.json"


def write_scores(scores_dir: Path, scores: dict[str, dict[str, float]]) -> None:
    """Write `{split: {name: value}}` as one JSON file per split, values rounded to 1 decimal, as
    published tables give them."""
    for split, values in scores.items():
        write_json(scores_path(scores_dir, split), {k: round(v, 1) for k, v in values.items()})


def write_absent(scores_dir: Path, split: str) -> None:
    """The score file of a split the target language lacks: `{}`. DVC needs every declared metrics
    file to exist; an empty one shows as nothing in `dvc metrics show`."""
    write_json(scores_path(scores_dir, split), {})


def read_scores(scores_dir: Path) -> dict[str, dict[str, float]]:
    """`{split: {name: value}}` of the evaluation splits whose score file exists and is not empty."""
    paths = {split: scores_path(scores_dir, split) for split in EVAL_SPLITS}
    scores = {split: json.loads(p.read_text(encoding="utf-8")) for split, p in paths.items() if p.is_file()}
    return {split: values for split, values in scores.items() if values}


def write_lines(path: Path, lines: list[str]) -> None:
    """Atomically write one line per item (newlines inside an item become spaces)."""
    write_text(path, "".join(line.replace("\n", " ") + "\n" for line in lines))


def read_lines(path: Path) -> list[str]:
    """One item per line, as `write_lines` wrote them (empty lines kept).

    Raises:
        DataError: the file is missing (run the decode stage).
    """
    if not Path(path).is_file():
        raise DataError(f"{path}: translations not found (run the decode stage)")
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def detokenize_en(text: str) -> str:
    """Undo the seed's space tokenisation as Multi30k's raw text has it: "park ." -> "park."."""
    return re.sub(r" +([.,!?;:])", r"\1", text)


def read_time_machine(path: Path) -> tuple[list[str], list[str]]:
    """The seed's English sentences (detokenised, see `detokenize_en`) and its German outputs from
    a `en<TAB>seed_de` TSV.

    Raises:
        DataError: the file is missing, lacks the header, or a row has not two fields.
    """
    if not Path(path).is_file():
        raise DataError(f"{path}: time-machine sentences not found")
    header, *rows = [line.split("\t") for line in Path(path).read_text(encoding="utf-8").splitlines()]
    if header != TIME_MACHINE_HEADER:
        raise DataError(f"{path}: header must be {'<TAB>'.join(TIME_MACHINE_HEADER)}, got {header}")
    for number, row in enumerate(rows, start=2):
        if len(row) != 2:
            raise DataError(f"{path}: line {number}: expected 2 tab-separated fields, got {len(row)}")
    return [detokenize_en(en) for en, _ in rows], [de for _, de in rows]


def time_machine_not_german(lang: str) -> str:
    """What `reports/time_machine.md` says in a run that does not translate into German: the
    seed's reference outputs are German, so there is nothing to compare with."""
    return (
        "# Time machine: the seed's 20 sentences\n\n"
        f"Not written: this run translates into {lang!r}, and the seed's reference outputs are German "
        "(`download.tgt_lang: de` only).\n"
    )


def time_machine_markdown(en: list[str], ours: list[str], seed_de: list[str], cfg: DecodeConfig) -> str:
    """A Markdown table: #, English (as translated), our German, the seed's German."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "# Time machine: the seed's 20 sentences",
        "",
        f"Our model: beam {cfg.beam_size}, length penalty α = {cfg.length_penalty}. The seed's English is",
        'space-tokenised ("in the park ."); Multi30k\'s raw text is not ("in the park."), so the space',
        "before punctuation was removed before translating; the English column shows the text we",
        "translated. The seed's German (its own pre-computed outputs) is shown verbatim: space-tokenised,",
        "with umlauts written ae/oe/ue.",
        "",
        "| # | English | ours | seed's German |",
        "|---|---|---|---|",
    ]
    for i, row in enumerate(zip(en, ours, seed_de, strict=True), start=1):
        lines.append(f"| {i} | " + " | ".join(cell(text) for text in row) + " |")
    return "\n".join(lines) + "\n"
