"""The robustness set (`data/robustness.tsv`: input, sentence count, verbatim spans, case) and the
checks each translation must pass, plus the upper-cased-source BLEU of the results page; the
`decode` stage computes both, the report reads them (docs/input-processing.md,
"How it is checked").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.config import SearchConfig
from pipeline.core.errors import DataError
from pipeline.core.io import write_json
from pipeline.core.metrics import score
from pipeline.data.tsv import read_tsv
from pipeline.serving.engine import Engine
from pipeline.serving.repeats import MAX_RUN
from pipeline.serving.translator import translate_lines, translate_sentences

HEADER = ["input", "sentences", "verbatim", "case"]
PUNCTUATION_RUN = re.compile(rf"([^\w\s])\1{{{MAX_RUN},}}")
CONTROL_OR_BARE_MARK = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|(?:^|\s)[\u0300-\u036f]")


@dataclass(frozen=True)
class Case:
    """One row of the robustness table."""

    text: str
    sentences: int
    verbatim: tuple[str, ...]
    upper: bool
    ordered: bool = False  # the verbatim spans must come in their order


def read_table(path: Path) -> list[Case]:
    """The rows of a robustness TSV (see the module docstring).

    Raises:
        DataError: missing file, wrong header, or a malformed row (named by line number).
    """
    cases = []
    for number, row in read_tsv(path, HEADER, "robustness table"):
        if len(row) != 4 or not row[1].isdigit() or row[3] not in ("upper", "-"):
            raise DataError(f"{path}: line {number}: expected input, sentence count, spans, upper|-")
        ordered = " > " in row[2]
        spans = tuple(s for s in row[2].split(" > " if ordered else " | ") if s)
        cases.append(Case(row[0], int(row[1]), spans, row[3] == "upper", ordered))
    return cases


def longest_run(text: str) -> int:
    """The longest run of one whitespace token repeated in a row (0 for blank text)."""
    best, run, last = 0, 0, None
    for token in text.split():
        run = run + 1 if token == last else 1
        best, last = max(best, run), token
    return best


def failures(case: Case, sentences: list[str]) -> list[str]:
    """What the translated sentences of `case` break (empty when every property holds)."""
    text = " ".join(sentences)
    broken = []
    if len(sentences) != case.sentences:
        broken.append(f"{len(sentences)} sentences, expected {case.sentences}")
    broken += [f"span {span!r} not verbatim" for span in case.verbatim if span not in text]
    if case.ordered and not in_order(text, case.verbatim):
        broken.append("spans out of order")
    if longest_run(text) > MAX_RUN:
        broken.append(f"a token repeated {longest_run(text)} times in a row")
    if CONTROL_OR_BARE_MARK.search(text):
        broken.append("a control character or a bare combining mark")
    rest = text
    for span in case.verbatim:
        rest = rest.replace(span, "")
    runs = [m.group() for m in PUNCTUATION_RUN.finditer(rest) if m.group() not in case.text]
    if runs:
        broken.append(f"punctuation run {runs[0]!r}")
    if case.upper and re.search(r"[^\W\d_]", rest) and rest != rest.upper():
        broken.append("not upper case")
    return broken


def in_order(text: str, spans: tuple[str, ...]) -> bool:
    """Whether `spans` occur in `text` one after another, in their order."""
    position = 0
    for span in spans:
        position = text.find(span, position)
        if position < 0:
            return False
        position += len(span)
    return True


@dataclass(frozen=True)
class RobustnessResult:
    passed: int
    total: int
    failed: list[tuple[str, list[str]]]  # (input, what broke)


def pass_rate(
    engine: Engine, cases: list[Case], cfg: SearchConfig, max_pieces: int | None = None
) -> RobustnessResult:
    """Translate every case (one batched call) and check its properties."""
    per_line = translate_sentences(engine, [c.text for c in cases], cfg, max_pieces=max_pieces)
    failed = [(c.text, f) for c, out in zip(cases, per_line, strict=True) if (f := failures(c, out))]
    return RobustnessResult(len(cases) - len(failed), len(cases), failed)


def uppercase_bleu(
    engine: Engine,
    en: list[str],
    refs: list[str],
    hyps: list[str],
    cfg: SearchConfig,
    *,
    max_pieces: int | None = None,
) -> tuple[float, float]:
    """Cased BLEU against upper-cased references of (the normal source's translations `hyps`
    upper-cased, the translations of the upper-cased source)."""
    upper_refs = [r.upper() for r in refs]
    upper_hyps = translate_lines(engine, [s.upper() for s in en], cfg, max_pieces=max_pieces)
    normal = score([h.upper() for h in hyps], upper_refs)["bleu"]
    return float(normal), float(score(upper_hyps, upper_refs)["bleu"])


def write_figures(
    metrics_json: Path, failures_json: Path, result: RobustnessResult, upper: tuple[float, float]
) -> None:
    """The robustness figures: numbers in `metrics_json` (a DVC metrics file), the failed inputs
    and what broke in `failures_json`."""
    normal, upper_bleu = upper
    write_json(
        metrics_json,
        {
            "passed": result.passed,
            "total": result.total,
            "uppercase_bleu": upper_bleu,
            "uppercase_bleu_normal_source": normal,
        },
    )
    write_json(failures_json, [{"input": text, "broke": why} for text, why in result.failed])


def read_figures(metrics_json: Path, failures_json: Path) -> tuple[RobustnessResult, tuple[float, float]]:
    """What `write_figures` wrote: (the table's result, (normal-source BLEU, upper-cased-source BLEU)).

    Raises:
        DataError: a file is missing or not what `write_figures` writes (names the file).
    """
    try:
        numbers = json.loads(Path(metrics_json).read_text(encoding="utf-8"))
        failed = json.loads(Path(failures_json).read_text(encoding="utf-8"))
        result = RobustnessResult(
            numbers["passed"], numbers["total"], [(f["input"], f["broke"]) for f in failed]
        )
        return result, (numbers["uppercase_bleu_normal_source"], numbers["uppercase_bleu"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(
            f"{metrics_json} / {failures_json}: not the decode stage's robustness figures ({exc})"
        ) from None
