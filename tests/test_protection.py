"""Protected spans replaced by placeholders and put back into the model's output."""

from __future__ import annotations

import pytest

from pipeline.data import placeholders as ph
from pipeline.data.languages import TARGETS
from pipeline.serving.protection import missing_placeholders, protect, restore, translatable
from pipeline.serving.spans import Span, find_spans


def verbatim(*texts: str) -> list[Span]:
    """Spans written as they are (positions do not matter to `restore`)."""
    return [Span(0, len(t), t, t) for t in texts]


def protected(text: str, **kwargs) -> tuple[str, list[Span]]:
    spans = find_spans(text, **kwargs)
    return protect(text, spans), spans


def test_protect_and_restore_round_trip() -> None:
    line = "A man holds 3 balloons at 5:30 and 2.5 kg, see www.example.com or a.b@example.org 東京 ☕."
    text, spans = protected(line, representable=lambda ch: ch.isascii())
    assert [s.text for s in spans] == ["3", "5:30", "2.5", "www.example.com", "a.b@example.org", "東京 ☕"]
    assert text == "A man holds ｟1｠ balloons at ｟2｠ and ｟3｠ kg, see ｟4｠ or ｟5｠ ｟6｠."
    assert restore(text, spans) == line


@pytest.mark.parametrize(
    "text",
    [
        "Meet me on 12/05/2023 or 2023-05-12.",
        "It costs $3.5 or 1,000.50 € or 12.5% more.",
        "Call +49 30 1234567 or (555) 123-4567.",
        "It is -5 degrees, ages 5-10.",
        "A <b>big</b> **dog**, [a link](http://x.y).",
        "The code ｟1｠ is literal.",
    ],
)
def test_formatted_numbers_markup_and_literal_placeholders_round_trip(text: str) -> None:
    masked, spans = protected(text)
    assert not ph.PLACEHOLDER_RE.sub("", masked).count("｟") and restore(masked, spans) == text


def test_an_ordinal_is_restored_in_the_targets_form_without_a_double_dot() -> None:
    masked, spans = protected("He came 1st, she came 3rd.")
    assert masked == "He came ｟1｠, she came ｟2｠."
    assert restore("Er wurde ｟1｠, sie wurde ｟2｠.", spans) == "Er wurde 1., sie wurde 3."
    assert restore("Sie wurde ｟2｠... ｟1｠", spans) == "Sie wurde 3.... 1."  # an ellipsis stays
    _, french = protected("She came 3rd.", target_language=TARGETS["fr"])
    assert restore("Elle est ｟1｠.", french) == "Elle est 3e."


def test_markup_glued_to_words_is_a_word_of_its_own_for_the_model() -> None:
    masked, spans = protected("A <b>big</b> dog, [a link](http://x.y) and **this**.")
    assert masked == "A ｟1｠ big ｟2｠ dog, ｟3｠ a link ｟4｠ and ｟5｠ this ｟6｠."
    output = "Ein ｟1｠ großer ｟2｠ Hund, ｟3｠ ein Link ｟4｠ und ｟5｠ dies ｟6｠."
    assert restore(output, spans) == "Ein <b>großer</b> Hund, [ein Link](http://x.y) und **dies**."
    assert restore("Ein großer Hund ｟1｠.", spans[:2]) == "Ein großer Hund <b>.</b>"  # appended: glued too


def test_restore_appends_missing_and_drops_unknown_and_repeated_placeholders() -> None:
    assert restore("Ein Mann ｟2｠ und ｟7｠ hier ｟2｠.", verbatim("3", "12")) == "Ein Mann 12 und hier. 3"
    assert missing_placeholders("Ein ｟2｠", 2) == 1


def test_restore_reads_the_whole_placeholder_number() -> None:
    spans = verbatim(*(str(n) for n in range(101, 113)))  # twelve spans
    text = " ".join(f"｟{i}｠" for i in range(12, 0, -1))
    assert restore(text, spans) == " ".join(str(n) for n in range(112, 100, -1))
    assert restore("a ｟10｠ b ｟1｠", verbatim("x")) == "a b x"  # ｟10｠ is not ｟1｠: unknown, dropped


def test_restore_is_one_pass_so_a_span_that_looks_like_a_placeholder_stays() -> None:
    assert restore("Der Code ｟2｠ und ｟1｠.", verbatim("｟2｠", "7")) == "Der Code 7 und ｟2｠."


def test_more_spans_than_placeholders_are_refused_not_dropped() -> None:
    line = "I counted " + ", ".join(str(n) for n in range(1, 11)) + " birds."
    spans = find_spans(line)
    assert len(spans) == 10
    with pytest.raises(ValueError, match="10 spans but only 9 placeholders"):
        protect(line, spans)
    assert protect(line, spans[:9]).count("｟") == 9


def test_spans_out_of_order_are_refused() -> None:
    spans = find_spans("At 5 and 6.")
    with pytest.raises(ValueError, match="overlaps or precedes"):
        protect("At 5 and 6.", spans[::-1])


def test_nothing_translatable() -> None:
    for text in ("🙂🙂", "12:30", "www.example.com", "!!!"):
        assert not translatable(protected(text, representable=lambda ch: ch.isascii() and ch != "🙂")[0])
    assert translatable(protected("A dog 🙂", representable=lambda ch: ch.isascii())[0])
