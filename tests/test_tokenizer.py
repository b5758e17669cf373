"""SentencePiece training and the Tokenizer wrapper, on val sentences (or a built-in sample)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import sentencepiece as spm
from datasets import Dataset, DatasetDict
from from_params import from_params, write_changed_params

from pipeline.core.config import TokenizerConfig
from pipeline.core.errors import CheckpointError
from pipeline.data.multi30k import save_dataset_dict
from pipeline.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "multi30k"  # offline Multi30k copies
SAMPLE = [  # used when the mirror is absent; covers umlauts, ß, digits and a no-break space
    "A man in an orange hat starring at something.",
    "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
    "Two young girls are playing in the street with 2 dogs.",
    "Zwei junge Mädchen spielen mit 2 Hunden auf der Straße.",
    "A boy jumps into the water,  while his friends watch.",
    "Ein Junge springt ins Wasser, während seine Freunde zusehen.",
    "The dog is größer than\u00a0the cat.",
]


def val_sentences() -> list[str]:
    """EN+DE val sentences from the mirror, or `SAMPLE` repeated when it is absent."""
    if not MIRROR.is_dir():
        return SAMPLE * 20
    lines = []
    for lang in ("en", "de"):
        with gzip.open(MIRROR / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            lines += f.read().splitlines()
    return lines


SMALL = from_params(TokenizerConfig, vocab_size=500, out_dir="unused")


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return val_sentences()


@pytest.fixture(scope="module")
def model_path(sentences: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(sentences, tmp_path_factory.mktemp("spm"), SMALL)


@pytest.fixture(scope="module")
def tok(model_path: Path) -> Tokenizer:
    return Tokenizer.load(model_path)


def test_special_ids_and_pieces(tok: Tokenizer, model_path: Path) -> None:
    trained = spm.SentencePieceProcessor(model_file=str(model_path))  # the file itself, not our constants
    assert (trained.pad_id(), trained.unk_id(), trained.bos_id(), trained.eos_id()) == (0, 1, 2, 3)
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tok.id_to_piece([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert 4 < tok.vocab_size <= 500


def test_round_trip_equals_normalized_text(tok: Tokenizer, sentences: list[str]) -> None:
    for s in sentences + SAMPLE:
        assert tok.decode(tok.encode(s)) == tok.normalize(s), s
    assert tok.normalize(" A  man\u00a0runs. ") == "A man runs."


def test_encode_adds_no_specials_and_decode_drops_them(tok: Tokenizer) -> None:
    ids = tok.encode("A man runs.")
    assert ids and not {PAD_ID, BOS_ID, EOS_ID} & set(ids)
    assert tok.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == "A man runs."
    assert tok.encode_batch(["A man runs.", "Ein Hund."]) == [ids, tok.encode("Ein Hund.")]


def test_training_is_byte_reproducible(sentences: list[str], model_path: Path, tmp_path: Path) -> None:
    again = train_tokenizer(sentences, tmp_path, SMALL)
    assert again.read_bytes() == model_path.read_bytes()
    assert (tmp_path / "spm.vocab").read_bytes() == (model_path.parent / "spm.vocab").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spm.model", "spm.vocab"]


def test_bpe_and_a_vocab_larger_than_the_corpus_supports(tmp_path: Path) -> None:
    cfg = from_params(TokenizerConfig, model_type="bpe", vocab_size=8000, out_dir="unused")
    tok = Tokenizer.load(train_tokenizer(SAMPLE * 5, tmp_path, cfg))
    assert tok.vocab_size < 8000
    assert tok.decode(tok.encode(SAMPLE[3])) == SAMPLE[3]


def test_vocab_file_lists_every_piece(model_path: Path, tok: Tokenizer) -> None:
    lines = (model_path.parent / "spm.vocab").read_text(encoding="utf-8").splitlines()
    assert len(lines) == tok.vocab_size
    assert lines[0].split("\t")[0] == "<pad>"


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        Tokenizer.load(tmp_path / "spm.model")
    (tmp_path / "spm.model").write_bytes(b"not a model")
    with pytest.raises(CheckpointError, match="not a SentencePiece model"):
        Tokenizer.load(tmp_path)  # a folder resolves to <folder>/spm.model


def test_stage_trains_on_train_split_only(tmp_path: Path, monkeypatch) -> None:
    from stages import tokenizer as stage

    corpus = DatasetDict(
        train=Dataset.from_dict({"en": SAMPLE[0:6:2] * 10, "de": SAMPLE[1:6:2] * 10}),
        val=Dataset.from_dict({"en": ["Quiz"], "de": ["Qxqxqx"]}),
    )
    save_dataset_dict(corpus, tmp_path / "data" / "multi30k")
    params = {"download": {"out_dir": "data/multi30k"}, "tokenizer": {"vocab_size": 100, "out_dir": "spm"}}
    write_changed_params(tmp_path / "params.yaml", params)
    monkeypatch.chdir(tmp_path)
    stage.main()
    tok = Tokenizer.load(tmp_path / "spm" / "spm.model")
    assert UNK_ID in tok.encode("Qxqxqx")  # 'Q' occurs in val only
