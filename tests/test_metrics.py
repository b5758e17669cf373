"""sacreBLEU wrappers: perfect output, agreement with sacrebleu's own functions, and errors."""

from __future__ import annotations

import pytest
import sacrebleu

from pipeline.errors import DataError
from pipeline.metrics import score, sentence_chrf

REFS = [
    "Ein Mann führt seinen Hund im Park spazieren.",
    "Zwei Kinder spielen in der Nähe eines Brunnens.",
    "Eine Frau in einem roten Mantel liest ein Buch.",
]
HYPS = [
    "Ein Mann geht mit seinem Hund im Park spazieren.",
    "Zwei Kinder spielen nahe einem Brunnen.",
    "Eine Frau im roten Mantel liest ein Buch.",
]


def test_perfect_hypotheses_score_100() -> None:
    result = score(REFS, REFS)
    assert result["bleu"] == pytest.approx(100.0) and result["chrf"] == pytest.approx(100.0)


def test_matches_sacrebleu_directly() -> None:
    result = score(HYPS, REFS)
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert 0.0 < result["bleu"] < 100.0
    assert result["bleu_signature"].startswith("nrefs:1|") and "tok:13a" in result["bleu_signature"]
    assert result["chrf_signature"].startswith("nrefs:1|")


def test_sentence_chrf() -> None:
    assert sentence_chrf(REFS[0], REFS[0]) == pytest.approx(100.0)
    assert sentence_chrf(HYPS[1], REFS[1]) == pytest.approx(sacrebleu.sentence_chrf(HYPS[1], [REFS[1]]).score)
    assert sentence_chrf(HYPS[1], REFS[1]) < 100.0


def test_length_mismatch_raises() -> None:
    with pytest.raises(DataError, match="2 hypotheses but 3 references"):
        score(HYPS[:2], REFS)
    with pytest.raises(DataError, match="nothing to score"):
        score([], [])
