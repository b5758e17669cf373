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
