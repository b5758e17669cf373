"""Corpus scores with sacreBLEU (Post 2018): BLEU and chrF with their reproducibility signatures.

We never compute BLEU ourselves: sacreBLEU's default 13a tokenisation and signature make scores
comparable with published ones. Hypotheses and references are detokenised text, one per sentence.
"""

from __future__ import annotations

from sacrebleu.metrics import BLEU, CHRF

from pipeline.errors import DataError


def score(hyps: list[str], refs: list[str]) -> dict[str, float | str]:
    """Corpus BLEU and chrF of `hyps` against one reference each.

    Returns `{"bleu", "chrf", "bleu_signature", "chrf_signature"}` (scores on 0-100).

    Raises:
        DataError: the lists differ in length, or are empty.
    """
    if len(hyps) != len(refs):
        raise DataError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not refs:
        raise DataError("nothing to score: no hypotheses")
    bleu, chrf = BLEU(), CHRF()
    return {
        "bleu": bleu.corpus_score(hyps, [refs]).score,
        "chrf": chrf.corpus_score(hyps, [refs]).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def sentence_chrf(hyp: str, ref: str) -> float:
    """chrF (0-100) of one hypothesis against one reference."""
    return CHRF().sentence_score(hyp, [ref]).score
