"""Real-input processing: sentences, protected spans and placeholders, casing, repeats."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.config import TokenizerConfig
from pipeline.data import placeholders as ph
from pipeline.data.tokenizer import Tokenizer, train_tokenizer
from pipeline.serving import textproc as tp

CORPUS = (
    [f"a man walks {w} in the park with two dogs." for w in ("fast", "slowly", "home")] * 60
    + [f"ein Mann geht {w} im Park mit zwei Hunden." for w in ("schnell", "langsam", "heim")] * 60
    + ["ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 .,:;!?@/-_=?&"] * 5
)


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    out = tmp_path_factory.mktemp("spm")
    return Tokenizer.load(train_tokenizer(CORPUS, out, TokenizerConfig(vocab_size=120, out_dir="unused")))


def test_placeholders_are_single_pieces_that_survive_normalisation(tok: Tokenizer) -> None:
    text = "｟1｠ men at ｟2｠pm, ｟9｠."
    assert tok.decode(tok.encode(text)) == text
    for mark in ph.PLACEHOLDERS:
        assert mark in tok.id_to_piece(tok.encode(mark))


def test_protect_and_restore_round_trip(tok: Tokenizer) -> None:
    line = "A man holds 3 balloons at 5:30 and 2.5 kg, see www.example.com or a.b@example.org 東京 ☕."
    protected, spans = tp.protect(line, lambda ch: tok.unk_id not in tok.encode(ch))
    assert spans == ["3", "5:30", "2.5", "www.example.com", "a.b@example.org", "東京 ☕"]
    rest = ph.PLACEHOLDER_RE.sub("", protected)
    assert not any(s in rest for s in spans) and protected.count("｟") == 6
    assert tp.restore(protected, spans) == line


def test_restore_appends_missing_and_drops_unknown_placeholders() -> None:
    assert tp.restore("Ein Mann ｟2｠ und ｟7｠ hier ｟2｠.", ["3", "12"]) == "Ein Mann 12 und hier. 3"
    assert tp.missing_placeholders("Ein ｟2｠", 2) == 1


def test_nothing_translatable() -> None:
    for text in ("🙂🙂", "12:30", "www.example.com", "!!!"):
        assert not tp.translatable(tp.protect(text, lambda ch: ch.isascii() and ch not in "🙂")[0])
    assert tp.translatable(tp.protect("A dog 🙂", lambda ch: ch.isascii())[0])


def test_split_sentences_keeps_links_and_abbreviations() -> None:
    assert tp.split_sentences("A dog runs. Two men talk! See https://x.org/a?b=1. Mr. Li sings.") == [
        "A dog runs.",
        "Two men talk!",
        "See https://x.org/a?b=1.",
        "Mr. Li sings.",
    ]
    assert tp.split_sentences("   ") == []


def test_split_long_prefers_punctuation() -> None:
    chunks = tp.split_long("a b c d, e f g h, i j", lambda w: 1, 5)
    assert chunks == ["a b c d,", "e f g h,", "i j"]
    assert tp.split_long("a b c d e f g", lambda w: 1, 3) == ["a b c", "d e f", "g"]
    assert tp.split_long("a b", lambda w: 1, 5) == ["a b"]


def test_case_forms() -> None:
    assert tp.case_form("A MAN IS WALKING HIS DOG.") == "upper"
    assert tp.case_form("Man Bites Dog In Park") == "title"
    assert tp.case_form("A man bites a dog.") == "as_is"
    assert tp.normalise_case("A MAN IS WALKING ｟1｠ DOGS.", "upper") == "A man is walking ｟1｠ dogs."
    assert tp.restore_case("Ein Mann geht.", "upper") == "EIN MANN GEHT."
    assert tp.restore_case("Ein Mann geht.", "title") == "Ein Mann geht."


def test_collapse_repeats() -> None:
    assert tp.collapse_repeats("ist ist ist ist ist gut gut") == "ist ist ist gut gut"


def test_robustness_table_is_well_formed() -> None:
    from pipeline.ops.robustness import read_table

    cases = read_table(Path(__file__).parent / "robustness.tsv")
    assert len(cases) >= 40
    assert all(len(tp.split_sentences(c.text)) == c.sentences for c in cases)
    assert sum(c.upper for c in cases) >= 5 and sum(bool(c.verbatim) for c in cases) >= 15


@pytest.mark.parametrize(
    "line",
    ["1" * 10_000, ("A man walks 12 dogs in the park at 5:30. " * 5000)[:200_000], "a." * 100_000],
    ids=["10k-digits", "200kB-sentences", "200kB-dots"],
)
def test_long_lines_are_prepared_in_seconds(tok: Tokenizer, line: str) -> None:
    import time

    from pipeline.serving.translator import prepare

    start = time.perf_counter()
    sentences = prepare([line], tok, max_pieces=64)
    assert time.perf_counter() - start < 10
    assert "".join(s.text for s in sentences).replace(" ", "") == line.replace(" ", "")


@pytest.mark.parametrize(
    ("text", "spans"),
    [
        ("Meet me on 12/05/2023 or 2023-05-12.", ["12/05/2023", "2023-05-12"]),
        ("It costs $3.5 or 1,000.50 € or 12.5% more.", ["$3.5", "1,000.50 €", "12.5%"]),
        ("Call +49 30 1234567 or (555) 123-4567.", ["+49 30 1234567", "(555) 123-4567"]),
        ("It is -5 degrees, ages 5-10.", ["-5", "5-10"]),
        ("He came 1st, she came 3rd.", ["1.", "3."]),  # German ordinals
        ("A <b>big</b> **dog**, [a link](http://x.y).", ["<b>", "</b>", "**", "**", "[", "](http://x.y)"]),
        ("The code ｟1｠ is literal.", ["｟1｠"]),
    ],
)
def test_formatted_numbers_markup_and_literal_placeholders_are_spans(text: str, spans: list[str]) -> None:
    protected, found = tp.protect(text)
    assert [f.strip(tp.GLUE_NEXT + tp.GLUE_PREV) for f in found] == spans
    assert tp.restore(protected, found) == text.replace("1st", "1.").replace("3rd", "3")


def test_restore_is_one_pass_so_a_span_that_looks_like_a_placeholder_stays() -> None:
    assert tp.restore("Der Code ｟2｠ und ｟1｠.", ["｟2｠", "7"]) == "Der Code 7 und ｟2｠."
    assert tp.restore("Sie wurde ｟1｠.", ["3."]) == "Sie wurde 3."


def test_clean_composes_accents_and_drops_control_characters() -> None:
    assert tp.clean("cafe\u0301\x00 ok\tx\x1b") == "café ok x"


def test_punctuation_runs_are_cut_unless_the_source_has_them() -> None:
    assert tp.collapse_punctuation("„Hallo“))))) ja", 'said "hello" (quietly)') == "„Hallo“) ja"
    assert tp.collapse_punctuation("Hilfe!!!!", "Help!!!!") == "Hilfe!!!!"


def test_more_spans_than_placeholders_are_translated_in_parts(tok: Tokenizer) -> None:
    from pipeline.serving.translator import prepare

    line = "There are " + ", ".join(f"{n} cats" for n in range(11, 31)) + "."
    sentences = prepare([line], tok)
    assert all(len(s.spans) <= len(ph.PLACEHOLDERS) for s in sentences)
    assert [s.continues for s in sentences] == [False] + [True] * (len(sentences) - 1)
    assert [span for s in sentences for span in s.spans] == [str(n) for n in range(11, 31)]


def test_capitalised_words_the_training_data_never_had_are_names() -> None:
    seen = {"a", "dog", "and", "are", "walking", "in", "the", "park", "skateboarders", "jump", "see"}
    rule = lambda word: word.lower() not in seen  # noqa: E731
    protected, spans = tp.protect("Rex, O'Brien and Müller are walking in the Park.", is_name=rule)
    assert spans == ["Rex", "O'Brien", "Müller"] and "Park" in protected
    assert tp.protect("Skateboarders jump. THE DOG", is_name=rule)[1] == []  # seen, or all capitals
    assert tp.protect("See www.Example.com", is_name=rule)[1] == ["www.Example.com"]  # inside a span


def test_source_words_are_written_and_loaded_beside_the_model(tok: Tokenizer, tmp_path: Path) -> None:
    from pipeline.data.tokenizer import write_source_words

    assert tok.source_words is None  # no list beside this model: no name rule
    path = write_source_words(["A man's dog runs.", "Two T-Rex toys."], tmp_path)
    assert path.read_text(encoding="utf-8").split() == ["a", "dog", "man's", "runs", "t-rex", "toys", "two"]
    (tmp_path / "spm.model").write_bytes(tok.sp.serialized_model_proto())
    assert Tokenizer.load(tmp_path / "spm.model").source_words == {
        "a",
        "dog",
        "man's",
        "runs",
        "t-rex",
        "toys",
        "two",
    }


def test_markup_glued_to_words_is_a_word_of_its_own_for_the_model() -> None:
    protected, spans = tp.protect("A <b>big</b> dog, [a link](http://x.y) and **this**.")
    assert protected == "A ｟1｠ big ｟2｠ dog, ｟3｠ a link ｟4｠ and ｟5｠ this ｟6｠."
    german = "Ein ｟1｠ großer ｟2｠ Hund, ｟3｠ ein Link ｟4｠ und ｟5｠ dies ｟6｠."
    assert tp.restore(german, spans) == "Ein <b>großer</b> Hund, [ein Link](http://x.y) und **dies**."


def test_a_long_span_list_is_cut_between_spans_never_inside_one() -> None:
    text = (
        "Call +49 30 1234567, " + ", ".join(f"{n} cats" for n in range(10, 20)) + " and <a href='x y'>me</a>."
    )
    spans = tp.find_spans(text)
    parts = tp.split_between_spans(text, spans, 9)
    assert len(parts) == 2 and " ".join(parts) == text
    assert all(len(tp.find_spans(p)) <= 9 for p in parts) and "+49 30 1234567" in parts[0]
    assert tp.split_between_spans("A 1 b.", tp.find_spans("A 1 b."), 9) == ["A 1 b."]
    assert tp.protect("[http://a.b](http://a.b)")[1][1] == "http://a.b"  # a URL stops at "]("
