"""The files around translation: the evaluation splits' `<split>.hyp.<tgt_lang>` and their scores
`<split>.json`."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.core.errors import DataError
from pipeline.core.io import write_json, write_text
from pipeline.data.multi30k import SPLITS, TRAIN_SPLIT

EVAL_SPLITS = tuple(s for s in SPLITS if s != TRAIN_SPLIT)


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
