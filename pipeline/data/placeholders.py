"""The placeholder symbols shared by training and translation, and `protect_pair`, which puts them
into training pairs so the model learns to copy what they stand for.

A placeholder (｟1｠ .. ｟9｠) is one SentencePiece user-defined symbol, untouched by its NFKC normalisation.
In training, digit spans shared by both sides and some number words become the same placeholders on both
sides; at translation time `pipeline.serving.protection.protect` puts them in (docs/input-processing.md).
"""

from __future__ import annotations

import functools
import hashlib
import re

from pipeline.data.languages import SOURCE, target

PLACEHOLDERS = tuple(f"\uff5f{i}\uff60" for i in range(1, 10))  # ｟1｠ .. ｟9｠
PAIR_WORD_RATE = 0.3  # share of eligible training pairs whose number words become placeholders
NUMBER = r"\d+(?:[.,:]\d+)*"
NUMBER_RE = re.compile(NUMBER)
PLACEHOLDER_RE = re.compile("\uff5f[1-9]\uff60")


def _number_word(text: str, words: tuple[str, ...]) -> re.Match | None:
    """The one number word of `words` in `text` (whole word, any case), or None if not exactly one."""
    hits = list(_words_re(words).finditer(text))
    return hits[0] if len(hits) == 1 else None


@functools.cache
def _words_re(words: tuple[str, ...]) -> re.Pattern:
    return re.compile(r"\b(" + "|".join(words) + r")\b", flags=re.IGNORECASE)


def _value(word: re.Match, words: tuple[str, ...]) -> int:
    """The index in `words` (two = 0) of a matched number word; an entry may be "form|form"."""
    return next(i for i, forms in enumerate(words) if word.group().lower() in forms.split("|"))


def protect_pair(en: str, de: str, rate: float = PAIR_WORD_RATE, tgt_lang: str = "de") -> tuple[str, str]:
    """A training pair with the same placeholders on both sides, so the model learns to copy them.

    Digit spans (`NUMBER`) appearing identically on both sides get placeholders ｟1｠, ｟2｠, ... in
    English order. In addition, when exactly one English number word two..ten and exactly one
    target-language one (`pipeline.data.languages`; `de` is the target side, whatever
    `tgt_lang`) occur and they are the same number, a deterministic pseudo-random `rate` share
    of such pairs (chosen by a hash of the pair's text) has both replaced by the next placeholder:
    "Two men ..." / "Zwei Männer ..." -> "｟1｠ men ..." / "｟1｠ Männer ...".
    """
    digest = hashlib.sha256(f"{en}\t{de}".encode()).digest()  # of the pair as given
    de_numbers = set(NUMBER_RE.findall(de))
    shared = [m for m in NUMBER_RE.finditer(en) if m.group() in de_numbers]
    for i, value in enumerate(dict.fromkeys(m.group() for m in shared)):
        if i >= len(PLACEHOLDERS) - 1:
            break
        pattern = rf"(?<![\d.,:]){re.escape(value)}(?![\d]|[.,:]\d)"
        en, de = (re.sub(pattern, PLACEHOLDERS[i], side) for side in (en, de))
    src_words, tgt_words = SOURCE.number_words, target(tgt_lang).number_words
    en_word, de_word = _number_word(en, src_words), _number_word(de, tgt_words)
    if en_word is None or de_word is None:
        return en, de
    same = _value(en_word, src_words) == _value(de_word, tgt_words)
    if not same or int.from_bytes(digest[:4], "big") / 2**32 >= rate:
        return en, de
    mark = PLACEHOLDERS[len(set(PLACEHOLDER_RE.findall(en)))]
    return (
        en[: en_word.start()] + mark + en[en_word.end() :],
        de[: de_word.start()] + mark + de[de_word.end() :],
    )
