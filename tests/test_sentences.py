"""A raw line into model inputs: cleaning, sentences, parts of at most nine spans, chunks."""

from __future__ import annotations

from pathlib import Path

import pytest
from from_params import from_params

from pipeline.core.config import DecodeConfig
from pipeline.data.placeholders import PLACEHOLDERS
from pipeline.serving.sentences import (
    clean,
    cut_word,
    split_at_long_words,
    split_between_spans,
    split_long,
    split_sentences,
)
from pipeline.serving.spans import find_spans

REPO = Path(__file__).resolve().parents[1]


def test_clean_composes_accents_and_drops_control_characters() -> None:
    assert clean("cafe\u0301\x00 ok\tx\x1b") == "café ok x"


def test_split_sentences_keeps_links_and_abbreviations() -> None:
    assert split_sentences("A dog runs. Two men talk! See https://x.org/a?b=1. Mr. Li sings.") == [
        "A dog runs.",
        "Two men talk!",
        "See https://x.org/a?b=1.",
        "Mr. Li sings.",
    ]
    assert split_sentences("   ") == []


def test_spans_never_end_a_sentence_and_come_back_whole() -> None:
    line = "Pay $3.5. Mail a.b@example.org. 🙂 Ages 5-10. Meet at 5:30? Yes. It is 1. Ok #0#."
    assert split_sentences(line) == [
        "Pay $3.5.",
        "Mail a.b@example.org.",
        "🙂 Ages 5-10.",
        "Meet at 5:30?",
        "Yes.",
        "It is 1.",
        "Ok #0#.",
    ]


def test_robustness_table_sentence_counts() -> None:
    from pipeline.ops.robustness import read_table

    cases = read_table(REPO / from_params(DecodeConfig).robustness_tsv)
    assert len(cases) >= 40
    assert [len(split_sentences(c.text)) for c in cases] == [c.sentences for c in cases]


def test_split_long_prefers_punctuation() -> None:
    assert split_long("a b c d, e f g h, i j", lambda w: 1, 5) == ["a b c d,", "e f g h,", "i j"]
    assert split_long("a b c d e f g", lambda w: 1, 3) == ["a b c", "d e f", "g"]
    assert split_long("a b", lambda w: 1, 5) == ["a b"]


def pieces(text: str) -> int:
    """A stand-in tokenizer's count: a word-boundary piece per word, then one per character."""
    return sum(1 + len(word) for word in text.split())


def test_a_word_over_the_limit_is_set_apart_and_the_rest_kept_in_order() -> None:
    word = "x" * 60
    assert split_at_long_words(f"A {word} b, {word}", pieces, 50) == [
        ("A", False),
        (word, True),
        ("b,", False),
        (word, True),
    ]
    assert split_at_long_words(f"  {word}  ", pieces, 50) == [(word, True)]
    assert split_at_long_words("x" * 48 + " short", pieces, 50) == [
        ("x" * 48 + " short", False)
    ]  # 49 pieces fit
    assert split_at_long_words("x" * 49, pieces, 50) == [("x" * 49, False)]  # 50: exactly the limit
    assert split_at_long_words("x" * 50, pieces, 50) == [("x" * 50, True)]
    with pytest.raises(ValueError, match="at least 1"):
        split_at_long_words("a", pieces, 0)


def test_a_word_over_the_limit_is_cut_into_runs_that_fit() -> None:
    word = "x" * 1000
    chunks = split_long(f"A {word} b,", pieces, 50)
    assert all(pieces(c) <= 50 for c in chunks)
    assert "".join(chunks).replace(" ", "") == f"A{word}b,"
    assert chunks[0] == "A" and chunks[-1] == "x" * 20 + " b,"  # runs of 49: as long as fits
    assert len(chunks) == 22


def test_a_word_is_never_cut_inside_a_placeholder() -> None:
    word = "x" * 47 + PLACEHOLDERS[0] + "x" * 100  # 50 characters hold `｟1` at 48-49: cut before it
    runs = cut_word(word, pieces, 50)
    assert runs[0] == "x" * 47 and runs[1].startswith(PLACEHOLDERS[0])
    assert "".join(runs) == word and all(pieces(r) <= 50 for r in runs)


def test_a_character_over_the_limit_is_a_run_of_its_own() -> None:
    assert cut_word("abc", lambda text: 5 * len(text), 3) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="at least 1"):
        split_long("a b", pieces, 0)


def test_a_long_span_list_is_cut_between_spans_never_inside_one() -> None:
    text = (
        "Call +49 30 1234567, " + ", ".join(f"{n} cats" for n in range(10, 20)) + " and <a href='x y'>me</a>."
    )
    parts = split_between_spans(text, find_spans(text), len(PLACEHOLDERS))
    assert [len(p.spans) for p in parts] == [9, 4]
    assert " ".join(p.text for p in parts) == text and "+49 30 1234567" in parts[0].text
    assert parts[0].text.endswith("17 cats,")  # the last space after a comma
    assert [(p.continues, p.spaced) for p in parts] == [(False, True), (True, True)]
    for part in parts:
        assert [s.text for s in part.spans] == [s.text for s in find_spans(part.text)]
        assert all(part.text[s.start : s.end] == s.text for s in part.spans)
    assert [p.text for p in split_between_spans("A 1 b.", find_spans("A 1 b."), 9)] == ["A 1 b."]


def test_spans_that_touch_are_cut_without_a_space() -> None:
    text = "".join(f"<b>{n}</b>" for n in range(1, 5)) + " dogs"  # twelve spans, no space between
    parts = split_between_spans(text, find_spans(text), 9)
    assert [len(p.spans) for p in parts] == [9, 3]
    assert [(p.continues, p.spaced) for p in parts] == [(False, True), (True, False)]
    assert "".join(p.text for p in parts) == text


def test_a_cut_goes_back_to_the_latest_gap_with_a_space() -> None:
    text = "At 1 2 3 4 5 6 7 <b>8</b> ok."  # the 9th span touches the 10th: cut after 7
    parts = split_between_spans(text, find_spans(text), 9)
    assert [p.text for p in parts] == ["At 1 2 3 4 5 6 7", "<b>8</b> ok."]
    assert all(len(p.spans) <= 9 for p in parts)


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        split_between_spans("A 1 b.", find_spans("A 1 b."), 0)
