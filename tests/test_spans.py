"""Protected spans: which parts of an English sentence are copied, and how each is written."""

from __future__ import annotations

import dataclasses

import pytest

from pipeline.data.languages import TARGETS
from pipeline.serving.spans import Span, find_spans, foreign


def texts(text: str, **kwargs) -> list[str]:
    return [s.text for s in find_spans(text, **kwargs)]


@pytest.mark.parametrize(
    ("text", "spans"),
    [
        ("Meet me on 12/05/2023 or 2023-05-12.", ["12/05/2023", "2023-05-12"]),
        ("It costs $3.5 or 1,000.50 € or 12.5% more.", ["$3.5", "1,000.50 €", "12.5%"]),
        ("Call +49 30 1234567 or (555) 123-4567.", ["+49 30 1234567", "(555) 123-4567"]),
        ("It is -5 degrees, ages 5-10.", ["-5", "5-10"]),
        ("He came 1st, she came 3rd.", ["1st", "3rd"]),
        ("A <b>big</b> **dog**, [a link](http://x.y).", ["<b>", "</b>", "**", "**", "[", "](http://x.y)"]),
        ("The code ｟1｠ is literal.", ["｟1｠"]),
        ("See www.example.com or a.b@example.org now.", ["www.example.com", "a.b@example.org"]),
        ("A dog runs in the park.", []),
    ],
)
def test_pattern_spans(text: str, spans: list[str]) -> None:
    found = find_spans(text)
    assert [s.text for s in found] == spans
    assert all(text[s.start : s.end] == s.text for s in found)


def test_a_url_stops_before_a_markdown_link_and_trailing_punctuation() -> None:
    assert texts("[http://a.b](http://a.b)") == ["[", "http://a.b", "](http://a.b)"]
    assert texts("See https://x.org/a?b=1.") == ["https://x.org/a?b=1"]


@pytest.mark.parametrize(
    ("lang", "written"), [("de", ["21.", "3."]), ("cs", ["21.", "3."]), ("fr", ["21e", "3e"])]
)
def test_ordinals_are_written_the_target_languages_way(lang: str, written: list[str]) -> None:
    found = find_spans("He came 21st, she came 3RD.", target_language=TARGETS[lang])
    assert [s.text for s in found] == ["21st", "3RD"]
    assert [s.output for s in found] == written
    assert TARGETS[lang].ordinal_form("7") == written[1].replace("3", "7")


def test_other_spans_are_written_verbatim() -> None:
    assert [s.output for s in find_spans("At 5:30 see www.x.org.")] == ["5:30", "www.x.org"]


def test_markup_glued_to_a_word_is_marked_to_glue_back() -> None:
    found = find_spans("A <b>big</b> dog, **this** and ** loose ** and <i> x </i>.")
    glue = [(s.text, s.glue_prev, s.glue_next) for s in found]
    assert glue == [
        ("<b>", False, True),
        ("</b>", True, False),
        ("**", False, True),  # opens a pair
        ("**", True, False),  # closes it
        ("**", False, False),  # spaced on both sides: nothing to glue
        ("**", False, False),
        ("<i>", False, False),
        ("</i>", False, False),
    ]


def test_unrepresentable_runs_merge_across_spaces_only() -> None:
    found = texts("A sign 東京 ☕ and 日本, ok.", representable=lambda ch: ch.isascii())
    assert found == ["東京 ☕", "日本"]


def test_capitalised_words_the_training_data_never_had_are_names() -> None:
    seen = {"a", "dog", "and", "are", "walking", "in", "the", "park", "skateboarders", "jump", "see"}
    rule = lambda word: word.lower() not in seen  # noqa: E731
    assert texts("Rex, O'Brien and Müller are walking in the Park.", is_name=rule) == [
        "Rex",
        "O'Brien",
        "Müller",
    ]
    assert texts("Skateboarders jump. THE DOG", is_name=rule) == []  # seen, or all capitals
    assert texts("See www.Example.com", is_name=rule) == ["www.Example.com"]  # inside a span


def test_foreign_characters() -> None:
    assert all(foreign(ch) for ch in "東Жم🙂☕\ue000")
    assert not any(foreign(ch) for ch in "aéßÄ1.,")


def test_a_span_is_immutable() -> None:
    span = Span(0, 1, "3", "3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        span.output = "4"  # type: ignore[misc]
