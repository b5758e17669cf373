"""The merged training set tokenized once, for training to memory-map (`pipeline.data.corpus`).

Each pair of the merged set (`pipeline.data.incoming.iter_merged`) gets its number placeholders
(`pipeline.data.placeholders.protect_pair`), both sides are encoded with the SentencePiece model,
and a pair with a side over `max_len` pieces is dropped. The set is read, encoded and written
`CHUNK_PAIRS` pairs at a time, so memory does not grow with it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

from pipeline.data.corpus import Pair, write_corpus
from pipeline.data.incoming import iter_merged
from pipeline.data.placeholders import protect_pair
from pipeline.data.tokenizer import Tokenizer

CHUNK_PAIRS = 20_000


def encoded_chunks(
    merged: str | Path, tok: Tokenizer, max_len: int | None, tgt: str, counts: dict
) -> Iterator[list[Pair]]:
    """The pairs of `merged` as (src ids, tgt ids), protected and encoded, a chunk at a time;
    counts the pairs dropped for `max_len` in `counts["dropped_max_len"]`."""
    pairs = iter_merged(merged, tgt)
    while chunk := list(itertools.islice(pairs, CHUNK_PAIRS)):
        protected = [protect_pair(en, de, tgt_lang=tgt) for en, de in chunk]
        src = tok.encode_batch([en for en, _ in protected])
        tgt_ids = tok.encode_batch([de for _, de in protected])
        kept = [p for p in zip(src, tgt_ids, strict=True) if max_len is None or max(map(len, p)) <= max_len]
        counts["dropped_max_len"] += len(chunk) - len(kept)
        yield kept


def prepare(
    merged: str | Path, tok: Tokenizer, out_dir: str | Path, max_len: int | None, tgt: str, meta: dict
) -> dict:
    """Tokenize the merged set at `merged` into a corpus folder `out_dir` (atomically). Returns
    its meta: `meta` plus format, dtype, pairs and `dropped_max_len`.

    Raises:
        DataError: the merged set is missing or a line of it is invalid (nothing is written).
    """
    meta = {**meta, "max_len": max_len, "dropped_max_len": 0}  # the count fills in as chunks are read
    return write_corpus(out_dir, encoded_chunks(merged, tok, max_len, tgt, meta), tok.vocab_size - 1, meta)
