"""The number-to-words warm-up task: the converter, the split by number, and a tiny vocabulary.

"142" → "one hundred forty two": English cardinals for 0..999,999 without "and" or hyphens. The
task checks the training loop end to end on a problem a small Transformer solves exactly.
"""

from __future__ import annotations

import string
from collections.abc import Iterable

import numpy as np
from datasets import Dataset, DatasetDict

from pipeline.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_PIECES, UNK_ID

MAX_NUMBER = 999_999
ONES = (  # index = value
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
)
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")  # index = tens
SCALE_WORDS = ("hundred", "thousand")
DIGITS = tuple(string.digits)  # "0".."9"
WARMUP_SPLITS = ("train", "val", "test")  # the keys of `split_numbers` and the saved DatasetDict


def _below_thousand(n: int) -> list[str]:
    """Words for 1..999 (never "zero")."""
    words: list[str] = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(TENS[tens])
        if ones:
            words.append(ONES[ones])
    elif rest:
        words.append(ONES[rest])
    return words


def number_to_words(n: int) -> str:
    """Spell `n` in English words: 142 → "one hundred forty two", 1001 → "one thousand one".

    Raises:
        ValueError: `n` is outside 0..999,999.
    """
    if not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"number_to_words: {n} is outside 0..{MAX_NUMBER}")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    words = [*_below_thousand(thousands), "thousand"] if thousands else []
    return " ".join(words + _below_thousand(rest))


def split_numbers(max_number: int, n_train: int, n_val: int, n_test: int, seed: int) -> dict[str, np.ndarray]:
    """Draw n_train+n_val+n_test distinct numbers from 0..max_number and partition them.

    The same arguments give the same split; no number is in two splits.

    Raises:
        ValueError: more numbers requested than 0..max_number holds.
    """
    total = n_train + n_val + n_test
    if total > max_number + 1:
        raise ValueError(f"{total} numbers requested from 0..{max_number}")
    drawn = np.random.default_rng(seed).choice(max_number + 1, size=total, replace=False)
    parts = (drawn[:n_train], drawn[n_train : n_train + n_val], drawn[n_train + n_val :])
    return dict(zip(WARMUP_SPLITS, parts, strict=True))


def build_warmup_dataset(splits: dict[str, np.ndarray]) -> DatasetDict:
    """Turn numbers per split into a DatasetDict with `src` (digits) and `tgt` (words) columns."""
    return DatasetDict(
        {
            name: Dataset.from_dict(
                {
                    "src": [str(int(n)) for n in numbers],
                    "tgt": [number_to_words(int(n)) for n in numbers],
                }
            )
            for name, numbers in splits.items()
        }
    )


class WarmupVocab:
    """Joint vocabulary: the 4 specials (same ids as `pipeline.data.tokenizer`), digits, then words.

    Source strings are split into characters, target strings on whitespace; an unknown token
    encodes to `unk_id`.
    """

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self) -> None:
        words = ONES + TENS[2:] + SCALE_WORDS
        self.tokens: tuple[str, ...] = SPECIAL_PIECES + DIGITS + words
        self._ids = {tok: i for i, tok in enumerate(self.tokens)}
        self._skip = {PAD_ID, BOS_ID, EOS_ID}

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return len(self.tokens)

    def encode_src(self, s: str) -> list[int]:
        """Digit string → one id per character (no bos/eos)."""
        return [self._ids.get(ch, UNK_ID) for ch in s]

    def encode_tgt(self, s: str) -> list[int]:
        """Words → one id per whitespace-separated word (no bos/eos)."""
        return [self._ids.get(w, UNK_ID) for w in s.split()]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids → words joined by single spaces; pad/bos/eos are dropped, unk shows as `<unk>`.

        Raises:
            IndexError: an id is outside 0..vocab_size-1.
        """
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < len(self.tokens)]
        if bad:
            raise IndexError(f"WarmupVocab.decode: ids {bad[:5]} outside 0..{len(self.tokens) - 1}")
        return " ".join(self.tokens[i] for i in ids if i not in self._skip)


def encode(split: Dataset, vocab: WarmupVocab) -> list[tuple[list[int], list[int]]]:
    """(digit ids, word ids) per row of a number-to-words split (no specials)."""
    return [
        (vocab.encode_src(s), vocab.encode_tgt(t)) for s, t in zip(split["src"], split["tgt"], strict=True)
    ]
