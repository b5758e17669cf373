"""The tokenized, memory-mapped training set (`pipeline.data.corpus`) and the stage step that
writes it (`pipeline.data.prepare`): the same pairs as encoding in memory, the same training."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from from_params import from_params
from toy_train import TOY_MODEL, TOY_OPTIM, ToyValidation, pairs

from pipeline.core.config import OptimConfig, TokenizerConfig
from pipeline.core.errors import DataError, PipelineError
from pipeline.data.corpus import TokenizedCorpus, write_corpus
from pipeline.data.incoming import read_merged, write_merged
from pipeline.data.placeholders import protect_pair
from pipeline.data.prepare import Sampling, check_space, encoded_chunks, estimate, prepare
from pipeline.data.tokenizer import Tokenizer, train_tokenizer
from pipeline.model.transformer import Transformer
from pipeline.training.loop import RunContext, start, train
from pipeline.training.validation import encode_pairs

MERGED = [
    ("Two men play 3 songs.", "Zwei Männer spielen 3 Lieder."),
    ("A dog runs on the beach at 10:30.", "Ein Hund rennt um 10:30 am Strand."),
    ("Three girls, one ball.", "Drei Mädchen, ein Ball."),
    ("A very long sentence " + "and more " * 40, "Ein sehr langer Satz " + "und mehr " * 40),
    ("A man.", "Ein Mann.\tJa."),  # a tab inside a sentence, as in Multi30k train
]


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def test_written_corpus_reads_back_the_same_pairs_memory_mapped(tmp_path: Path) -> None:
    data = pairs(50)
    meta = write_corpus(tmp_path / "ids", chunks(data, 7), max_id=19, meta={"note": "x"})
    corpus = TokenizedCorpus.open(tmp_path / "ids")
    assert [corpus[i] for i in range(len(corpus))] == data
    assert isinstance(corpus.ids["src"], np.memmap) and corpus.ids["src"].dtype == np.uint16
    assert meta == json.loads((tmp_path / "ids" / "meta.json").read_text())
    assert (meta["pairs"], meta["note"], meta["dtype"]) == (50, "x", "<u2")
    assert corpus.lengths.tolist() == [max(len(s), len(t)) for s, t in data]
    assert corpus.digest() == TokenizedCorpus.from_pairs(data).digest()
    other = [(s, t[:-1]) for s, t in data]
    assert TokenizedCorpus.from_pairs(other).digest() != corpus.digest()


def test_ids_past_uint16_are_stored_as_uint32(tmp_path: Path) -> None:
    data = [([70_000, 5], [1]), ([], [65_535])]
    write_corpus(tmp_path / "ids", [data], max_id=70_000, meta={})
    corpus = TokenizedCorpus.open(tmp_path / "ids")
    assert corpus.ids["src"].dtype == np.uint32 and [corpus[0], corpus[1]] == data
    assert corpus.digest() == TokenizedCorpus.from_pairs(data).digest()


def test_a_failed_write_leaves_the_old_corpus_and_no_temp_folder(tmp_path: Path) -> None:
    write_corpus(tmp_path / "ids", [pairs(5)], max_id=19, meta={})
    with pytest.raises(DataError, match=r"ids: a piece id outside 0\.\.19"):
        write_corpus(tmp_path / "ids", [pairs(5), [([4, 25], [4])]], max_id=19, meta={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids"]
    assert [TokenizedCorpus.open(tmp_path / "ids")[i] for i in range(5)] == pairs(5)


def test_open_names_the_folder_when_files_or_tokenizer_do_not_match(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"absent: not a readable tokenized corpus"):
        TokenizedCorpus.open(tmp_path / "absent")
    write_corpus(tmp_path / "ids", [pairs(5)], max_id=19, meta={"spm_sha256": "abc"})
    TokenizedCorpus.open(tmp_path / "ids", spm_sha256="abc")
    with pytest.raises(DataError, match=r"ids: tokenized with another SentencePiece model"):
        TokenizedCorpus.open(tmp_path / "ids", spm_sha256="def")
    (tmp_path / "ids" / "tgt.bin").write_bytes(b"\x00\x00")
    with pytest.raises(DataError, match=r"ids: tgt.idx.npy does not match tgt.bin"):
        TokenizedCorpus.open(tmp_path / "ids")


def test_open_with_a_vocabulary_size_names_the_file_of_an_id_outside_it(tmp_path: Path) -> None:
    """A corpus written for a larger vocabulary (or damaged in place) is caught when opened, before
    training could start afresh or index an embedding out of range."""
    write_corpus(tmp_path / "ids", [pairs(5)], max_id=19, meta={})
    assert len(TokenizedCorpus.open(tmp_path / "ids", vocab_size=20)) == 5
    src = tmp_path / "ids" / "src.bin"
    ids = np.fromfile(src, dtype=np.uint16)
    ids[3] = 65535
    ids.tofile(src)  # the same size: only the range check can tell
    with pytest.raises(DataError, match=rf"{src}: id 65535 is outside the vocabulary of 20; run the prepare"):
        TokenizedCorpus.open(tmp_path / "ids", vocab_size=20)
    TokenizedCorpus.open(tmp_path / "ids")  # without a vocabulary size, no check


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    lines = [s for pair in MERGED for s in pair] * 20
    out = tmp_path_factory.mktemp("spm")
    return Tokenizer.load(
        train_tokenizer(lines, out, from_params(TokenizerConfig, vocab_size=120, out_dir="x"))
    )


def test_prepare_stores_what_encoding_in_memory_gives(tmp_path: Path, tok: Tokenizer, monkeypatch) -> None:
    """Placeholders, encoding and the max_len filter as the trainer applied them in memory, in chunks."""
    monkeypatch.setattr("pipeline.data.prepare.CHUNK_PAIRS", 2)
    write_merged(tmp_path / "merged.jsonl", MERGED)
    meta = prepare(
        tmp_path / "merged.jsonl", tok, tmp_path / "ids", max_len=64, tgt="de", meta={"spm_sha256": "s"}
    )
    protected = [protect_pair(en, de) for en, de in zip(*read_merged(tmp_path / "merged.jsonl"), strict=True)]
    expected = encode_pairs(tok, [en for en, _ in protected], [de for _, de in protected], 64)
    corpus = TokenizedCorpus.open(tmp_path / "ids", spm_sha256="s")
    assert [corpus[i] for i in range(len(corpus))] == expected
    assert (meta["pairs"], meta["dropped_max_len"], meta["max_len"]) == (4, 1, 64)
    assert json.loads((tmp_path / "ids" / "meta.json").read_text())["dropped_max_len"] == 1


def test_subword_sampling_writes_copies_that_decode_to_the_same_pair(tmp_path: Path, tok: Tokenizer) -> None:
    """Kudo 2018: each copy is another segmentation of the same text; a seed repeats the copies."""
    write_merged(tmp_path / "merged.jsonl", MERGED[:3])
    sampling = Sampling(alpha=0.1, copies=4, seed=7)
    meta = prepare(
        tmp_path / "merged.jsonl", tok, tmp_path / "a", max_len=64, tgt="de", meta={}, sampling=sampling
    )
    corpus = TokenizedCorpus.open(tmp_path / "a")
    assert (meta["pairs"], meta["sampling"]) == (12, {"alpha": 0.1, "copies": 4, "seed": 7})
    plain = encode_pairs(tok, *zip(*(protect_pair(en, de) for en, de in MERGED[:3]), strict=True))
    copies = [[corpus[c * 3 + i] for c in range(4)] for i in range(3)]
    for (src, tgt), sampled in zip(plain, copies, strict=True):
        assert {(tok.decode(s), tok.decode(t)) for s, t in sampled} == {(tok.decode(src), tok.decode(tgt))}
    assert any(len({tuple(s) for s, _ in sampled}) > 1 for sampled in copies)  # not one segmentation
    prepare(tmp_path / "merged.jsonl", tok, tmp_path / "b", max_len=64, tgt="de", meta={}, sampling=sampling)
    other = Sampling(alpha=0.1, copies=4, seed=8)
    prepare(tmp_path / "merged.jsonl", tok, tmp_path / "c", max_len=64, tgt="de", meta={}, sampling=other)
    digests = [TokenizedCorpus.open(tmp_path / d).digest() for d in "abc"]
    assert digests[0] == digests[1] != digests[2]


def test_prepare_of_a_bad_line_writes_nothing(tmp_path: Path, tok: Tokenizer) -> None:
    (tmp_path / "merged.jsonl").write_text('{"en": "A man.", "de": "Ein Mann."}\n[1]\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"merged.jsonl: line 2: not a JSON object with fields en, de"):
        prepare(tmp_path / "merged.jsonl", tok, tmp_path / "ids", max_len=64, tgt="de", meta={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged.jsonl"]


def test_training_on_the_mapped_corpus_equals_training_on_lists(tmp_path: Path) -> None:
    """Bit for bit: the same losses, validations and weights from the disk corpus and from lists."""
    data = pairs(48)
    write_corpus(tmp_path / "ids", chunks(data, 10), max_id=19, meta={})
    results = []
    for name, source in (("lists", data), ("mapped", TokenizedCorpus.open(tmp_path / "ids"))):
        torch.manual_seed(0)
        model = Transformer(TOY_MODEL, 20, 0)
        run = RunContext(tmp_path / name, tmp_path / name / "log.csv", data_id="toy")
        state = start(model, from_params(OptimConfig, **TOY_OPTIM), run)
        progress = train(model, source, ToyValidation(data[:16]), state)
        results.append((progress.log, [p.detach().clone() for p in model.parameters()]))
    (log_a, weights_a), (log_b, weights_b) = results
    assert [r["train_loss"] for r in log_a] == [r["train_loss"] for r in log_b] and len(log_a) == 4
    assert [r["val_loss"] for r in log_a] == [r["val_loss"] for r in log_b]
    assert all(torch.equal(a, b) for a, b in zip(weights_a, weights_b, strict=True))


def test_prepare_writes_the_bytes_of_the_in_memory_format(
    tmp_path: Path, tok: Tokenizer, monkeypatch
) -> None:
    """Without sampling, the files are byte for byte those of the ids, offsets and meta built in memory
    (`np.save` of the offsets): the streamed writer changes nothing the default training reads."""
    monkeypatch.setattr("pipeline.data.prepare.CHUNK_PAIRS", 2)
    write_merged(tmp_path / "merged.jsonl", MERGED * 3)
    meta = prepare(tmp_path / "merged.jsonl", tok, tmp_path / "ids", max_len=64, tgt="de", meta={"m": 1})
    protected = [protect_pair(en, de) for en, de in MERGED * 3]
    kept = encode_pairs(tok, [en for en, _ in protected], [de for _, de in protected], 64)
    dtype = np.dtype(meta["dtype"])
    for n, side in enumerate(("src", "tgt")):
        ids = np.array([i for pair in kept for i in pair[n]], dtype=dtype)
        assert (tmp_path / "ids" / f"{side}.bin").read_bytes() == ids.tobytes()
        saved = io.BytesIO()
        np.save(saved, np.concatenate([[0], np.cumsum([len(p[n]) for p in kept])]).astype(np.int64))
        assert (tmp_path / "ids" / f"{side}.idx.npy").read_bytes() == saved.getvalue()
    expected = {"m": 1, "max_len": 64, "dropped_max_len": 3, "format": 1, "dtype": "<u2", "pairs": 12}
    assert (tmp_path / "ids" / "meta.json").read_text() == json.dumps(expected, indent=2) + "\n"


def test_subword_copies_are_sampled_one_at_a_time(tmp_path: Path, tok: Tokenizer, monkeypatch) -> None:
    """The copies of a chunk are made as they are written: the first comes before the second is sampled."""
    calls = []
    monkeypatch.setattr(
        Tokenizer, "sample_batch", lambda self, texts, a, seed: calls.append(seed) or [[5]] * len(texts)
    )
    write_merged(tmp_path / "merged.jsonl", MERGED[:3])
    counts = {"dropped_max_len": 0}
    sampling = Sampling(alpha=0.1, copies=1000, seed=7)
    chunks = encoded_chunks(
        tmp_path / "merged.jsonl", tok, max_len=64, tgt="de", counts=counts, sampling=sampling
    )
    assert next(chunks) == [([5], [5])] * 3 and len(calls) == 2  # one copy: src and tgt
    assert sum(1 for _ in chunks) == 999 and len(calls) == 2000


def test_write_corpus_memory_does_not_grow_with_the_pairs(tmp_path: Path) -> None:
    """Ids and offsets are streamed to disk: 100 times the pairs, about the same peak memory."""
    chunk = pairs(500)

    def peak(n_chunks: int) -> int:
        tracemalloc.start()
        write_corpus(tmp_path / f"ids{n_chunks}", (chunk for _ in range(n_chunks)), max_id=19, meta={})
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return top

    small, large = peak(10), peak(1000)
    assert large < 1.5 * small, (small, large)
    corpus = TokenizedCorpus.open(tmp_path / "ids1000")
    assert len(corpus) == 500_000 and corpus[499_999] == chunk[-1]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_one_line_and_keeps_the_old_corpus(tmp_path: Path, monkeypatch) -> None:
    """Writes that fail with ENOSPC (a side's file is /dev/full) end in one line naming the folder; the
    previous corpus stays and no temp folder is left."""
    write_corpus(tmp_path / "ids", [pairs(5)], max_id=19, meta={})
    mkdtemp = tempfile.mkdtemp

    def full_disk(**kwargs) -> str:
        folder = mkdtemp(**kwargs)
        os.symlink("/dev/full", os.path.join(folder, "tgt.bin"))
        return folder

    monkeypatch.setattr("pipeline.data.corpus.tempfile.mkdtemp", full_disk)
    with pytest.raises(
        PipelineError, match=rf"^{tmp_path / 'ids'}: no space left on device in {tmp_path}"
    ) as err:
        write_corpus(tmp_path / "ids", [pairs(5000)], max_id=19, meta={})
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids"]
    assert [TokenizedCorpus.open(tmp_path / "ids")[i] for i in range(5)] == pairs(5)


def test_the_size_estimate_bounds_what_is_written_and_refuses_a_small_disk(
    tmp_path: Path, tok: Tokenizer, monkeypatch
) -> None:
    write_merged(tmp_path / "merged.jsonl", MERGED[:3] * 40)
    sampling = Sampling(alpha=0.1, copies=5, seed=7)
    size = estimate(tmp_path / "merged.jsonl", tok, "de", sampling)
    prepare(
        tmp_path / "merged.jsonl", tok, tmp_path / "ids", max_len=None, tgt="de", meta={}, sampling=sampling
    )
    written = sum(f.stat().st_size for f in (tmp_path / "ids").iterdir() if f.name != "meta.json")
    assert (size.pairs, size.copies) == (120, 5) and written <= size.bytes <= 1.5 * written
    assert check_space(tmp_path / "new" / "ids", size) > size.bytes  # an absent folder: its disk
    monkeypatch.setattr(
        "pipeline.data.prepare.shutil.disk_usage", lambda _: shutil._ntuple_diskusage(9, 9, 4)
    )
    with pytest.raises(
        PipelineError, match=r"ids: 120 pairs x 5 copies need about 0\.0 GB, 0\.0 GB free on its"
    ):
        check_space(tmp_path / "ids", size)
