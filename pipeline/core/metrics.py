"""Corpus scores with sacreBLEU (Post 2018): BLEU and chrF with their reproducibility signatures,
and the paper-comparable tokenised lowercased BLEU.

We never compute BLEU ourselves: `score` uses sacreBLEU's 13a tokenisation on detokenised, cased text;
`bleu_lc_tok` scores, as published Multi30k results do (e.g. Wu et al. 2021), both sides lowercased,
normalised and Moses-tokenised by `paper_tokenize` like the `*.lc.norm.tok.de` references (docs/results.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

from pipeline.core.errors import DataError


@functools.cache
def _moses(lang: str):
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    return MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)


def paper_tokenize(text: str, lang: str = "de") -> str:
    """Multi30k's `lc.norm.tok` processing of one line in `lang`: lowercase, then Moses
    `normalize-punctuation.perl -l <lang>`, then `tokenizer.perl -l <lang>` (HTML escaping on, no `-a`).

    The Perl normaliser sees each line with its newline, which its rule moving a period after a
    closing quote (`tea."` -> `tea".`) relies on at the end of a line; hence the appended "\\n".
    """
    normalizer, tokenizer = _moses(lang)
    normal = normalizer.normalize(text.lower() + "\n").strip()
    return tokenizer.tokenize(normal, return_str=True, escape=True)


def _check(hyps: list[str], refs: list[str]) -> None:
    if len(hyps) != len(refs):
        raise DataError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not refs:
        raise DataError("nothing to score: no hypotheses")


def bleu_lc_tok(hyps: list[str], refs: list[str], lang: str = "de") -> tuple[float, str]:
    """Paper-comparable corpus BLEU (0-100) and its signature: `paper_tokenize` (Moses rules of
    `lang`, the target language) on hypotheses and raw references, sacreBLEU with `tokenize="none"`.

    Raises:
        DataError: the lists differ in length, or are empty.
    """
    _check(hyps, refs)
    bleu = BLEU(tokenize="none", force=True)  # tokenised on purpose: no "forgot to detokenize?" warning
    tokenized = [paper_tokenize(h, lang) for h in hyps], [[paper_tokenize(r, lang) for r in refs]]
    return bleu.corpus_score(*tokenized).score, f"{bleu.get_signature()}|moses-lc-norm-tok:{lang}"


def score(hyps: list[str], refs: list[str]) -> dict[str, float | str]:
    """Corpus BLEU and chrF of `hyps` against one reference each.

    Returns `{"bleu", "chrf", "bleu_signature", "chrf_signature"}` (scores on 0-100).

    Raises:
        DataError: the lists differ in length, or are empty.
    """
    _check(hyps, refs)
    bleu, chrf = BLEU(), CHRF()
    return {
        "bleu": bleu.corpus_score(hyps, [refs]).score,
        "chrf": chrf.corpus_score(hyps, [refs]).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def bleu_and_length_ratio(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    """Cased corpus BLEU (0-100, as `score`) and hypothesis length over reference length in
    sacreBLEU's 13a tokens (BLEU's brevity penalty applies below 1), from one sacreBLEU call.

    Raises:
        DataError: the lists differ in length, or are empty.
    """
    _check(hyps, refs)
    result = BLEU().corpus_score(hyps, [refs])
    return result.score, result.sys_len / result.ref_len


def split_scores(
    hyps: list[str], refs: list[str], lang: str = "de"
) -> tuple[dict[str, float], dict[str, str]]:
    """One split's numbers `{bleu, chrf, bleu_lc_tok}` (for `reports/<split>.json`) and their
    signatures `{bleu, chrf, bleu_lc_tok}` (for the run-facts file); `lang`: the references' language.

    Raises:
        DataError: the lists differ in length, or are empty.
    """
    cased = score(hyps, refs)
    lc_tok, lc_tok_signature = bleu_lc_tok(hyps, refs, lang)
    numbers = {"bleu": float(cased["bleu"]), "chrf": float(cased["chrf"]), "bleu_lc_tok": lc_tok}
    signatures = {
        "bleu": str(cased["bleu_signature"]),
        "chrf": str(cased["chrf_signature"]),
        "bleu_lc_tok": lc_tok_signature,
    }
    return numbers, signatures


def sentence_chrf(hyp: str, ref: str) -> float:
    """chrF (0-100) of one hypothesis against one reference."""
    return CHRF().sentence_score(hyp, [ref]).score


LENGTH_BUCKETS = (("≤10", 0, 10), ("11–15", 11, 15), ("16–20", 16, 20), (">20", 21, math.inf))


@dataclass(frozen=True)
class Bucket:
    """One source-length bucket: its name, sentence count, sacreBLEU (None when empty), signature."""

    name: str
    count: int
    bleu: float | None
    signature: str | None


def bleu_by_length(en: Sequence[str], hyps: Sequence[str], refs: Sequence[str]) -> list[Bucket]:
    """Corpus BLEU on each `LENGTH_BUCKETS` subset, bucketed by English word count (whitespace split).

    Raises:
        DataError: the three lists differ in length.
    """
    if not len(en) == len(hyps) == len(refs):
        raise DataError(f"{len(en)} sources, {len(hyps)} hypotheses, {len(refs)} references")
    buckets = []
    for name, low, high in LENGTH_BUCKETS:
        rows = [i for i, s in enumerate(en) if low <= len(s.split()) <= high]
        if not rows:
            buckets.append(Bucket(name, 0, None, None))
            continue
        s = score([hyps[i] for i in rows], [refs[i] for i in rows])
        buckets.append(Bucket(name, len(rows), float(s["bleu"]), str(s["bleu_signature"])))
    return buckets
