"""The translate pipeline around the model (`pipeline.serving.translator`), with an engine that
returns its inputs: what the model is given, and how its outputs become lines again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from from_params import from_params

from pipeline.core.config import DecodeConfig, TokenizerConfig
from pipeline.data import placeholders as ph
from pipeline.data.tokenizer import Tokenizer, train_tokenizer, write_source_words
from pipeline.serving.translator import prepare, translate_lines, translate_lines_n_best, translate_sentences

CORPUS = (
    [f"a man walks {w} in the park with two dogs." for w in ("fast", "slowly", "home")] * 60
    + [f"ein Mann geht {w} im Park mit zwei Hunden." for w in ("schnell", "langsam", "heim")] * 60
    + ["ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 .,:;!?@/-_=?&"] * 5
)
CFG = from_params(DecodeConfig, beam_size=2)


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    out = tmp_path_factory.mktemp("spm")
    return Tokenizer.load(
        train_tokenizer(CORPUS, out, from_params(TokenizerConfig, vocab_size=120, out_dir="unused"))
    )


class Echo:
    """An engine whose translation of a model input is the input itself."""

    device = "cpu"

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.seen: list[str] = []

    def translate(self, texts: list[str], cfg: DecodeConfig, progress: bool = False) -> list[str]:
        self.seen += texts
        return list(texts)

    def n_best(self, texts: list[str], cfg: DecodeConfig, n: int) -> list[list[tuple[str, float]]]:
        return [[(t, -1.0)] * n for t in texts]


def test_placeholders_are_single_pieces_that_survive_normalisation(tok: Tokenizer) -> None:
    text = "｟1｠ men at ｟2｠pm, ｟9｠."
    assert tok.decode(tok.encode(text)) == text
    for mark in ph.PLACEHOLDERS:
        assert mark in tok.id_to_piece(tok.encode(mark))


@pytest.mark.parametrize(
    "line",
    ["1" * 10_000, ("A man walks 12 dogs in the park at 5:30. " * 5000)[:200_000], "a." * 100_000],
    ids=["10k-digits", "200kB-sentences", "200kB-dots"],
)
def test_long_lines_are_prepared_in_seconds(tok: Tokenizer, line: str) -> None:
    start = time.process_time()  # CPU seconds: wall time depends on the machine's load
    sentences = prepare([line], tok, max_pieces=64)
    assert time.process_time() - start < 10
    assert "".join(s.text for s in sentences).replace(" ", "") == line.replace(" ", "")


def test_a_word_longer_than_the_model_takes_is_copied_with_its_emoji(tok: Tokenizer) -> None:
    word = "".join("x" * 13 + mark for mark in "🙂🐕🙂🐕")  # emoji: spans in the word
    engine = Echo(tok)
    [out] = translate_lines(engine, [f"A {word} b."], CFG, max_pieces=16)  # 15 pieces: ▁, 13 x, `🙂`
    assert engine.seen == ["A", "b."] and all(len(tok.encode(text)) <= 15 for text in engine.seen)
    assert out.split() == ["A", word, "b."]  # the word whole, between the two translated parts


def test_more_spans_than_placeholders_are_translated_in_parts(tok: Tokenizer) -> None:
    line = "There are " + ", ".join(f"{n} cats" for n in range(11, 31)) + "."
    sentences = prepare([line], tok)
    assert all(len(s.spans) <= len(ph.PLACEHOLDERS) for s in sentences)
    assert [s.continues for s in sentences] == [False] + [True] * (len(sentences) - 1)
    assert [span.text for s in sentences for span in s.spans] == [str(n) for n in range(11, 31)]


def test_twelve_numbers_in_one_sentence_all_come_back(tok: Tokenizer) -> None:
    line = "I counted " + ", ".join(str(n) for n in range(101, 113)) + " birds. Then I left."
    engine = Echo(tok)
    assert translate_lines(engine, [line], CFG) == [line]
    assert all(text.count("｟") <= len(ph.PLACEHOLDERS) for text in engine.seen)
    assert all(str(n) not in " ".join(engine.seen) for n in range(101, 113))  # every one protected
    assert translate_sentences(Echo(tok), [line], CFG) == [
        [line.removesuffix(" Then I left."), "Then I left."]
    ]


def test_spans_that_touch_are_joined_back_without_a_space(tok: Tokenizer) -> None:
    line = "".join(f"<b>{n}</b>" for n in range(1, 5)) + " dogs run."
    assert translate_lines(Echo(tok), [line], CFG) == [line]
    assert translate_lines_n_best(Echo(tok), [line, ""], CFG, 2) == [[(line, -1.0)] * 2, [("", 0.0)] * 2]


def test_ordinals_follow_the_target_language(tok: Tokenizer) -> None:
    line = "He came 3rd."
    assert translate_lines(Echo(tok), [line], CFG) == ["He came 3."]
    assert translate_lines(Echo(tok), [line], CFG, tgt_lang="fr") == ["He came 3e."]
    with pytest.raises(KeyError, match="unknown target language 'xx'"):
        prepare([], tok, tgt_lang="xx")


def test_source_words_are_written_and_loaded_beside_the_model(tok: Tokenizer, tmp_path: Path) -> None:
    assert tok.source_words is None  # no list beside this model: no name rule
    path = write_source_words(["A man's dog runs.", "Two T-Rex toys."], tmp_path)
    assert path.read_text(encoding="utf-8").split() == ["a", "dog", "man's", "runs", "t-rex", "toys", "two"]
    (tmp_path / "spm.model").write_bytes(tok.sp.serialized_model_proto())
    loaded = Tokenizer.load(tmp_path / "spm.model")
    assert loaded.source_words == {"a", "dog", "man's", "runs", "t-rex", "toys", "two"}
    [sentence] = prepare(["Rex runs to a dog."], loaded)
    assert [s.text for s in sentence.spans] == ["Rex"]  # never seen: a name, copied verbatim


def test_pre_encoded_pieces_reach_the_model_as_text_with_a_warning(tok: Tokenizer, capsys) -> None:
    engine = Echo(tok)
    out = translate_lines(engine, ["▁A ▁man ▁is ▁walking ."], CFG)
    assert engine.seen == ["A man is walking."]
    assert out == ["A man is walking."]
    assert "line 1: SentencePiece pieces" in capsys.readouterr().err
