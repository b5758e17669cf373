"""The merged training set tokenized once, for training to memory-map (`pipeline.data.corpus`).

Each pair gets its number placeholders, both sides are encoded (or, with subword sampling, written
several times, each copy a fresh sample of segmentations), and a pair with a side over `max_len`
pieces is dropped. The set is read, encoded and written `CHUNK_PAIRS` pairs at a time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.data.corpus import Pair, write_corpus
from pipeline.data.incoming import iter_merged
from pipeline.data.placeholders import protect_pair
from pipeline.data.tokenizer import Tokenizer

CHUNK_PAIRS = 20_000


@dataclass(frozen=True)
class Sampling:
    """Subword sampling (Kudo 2018): `copies` segmentations per pair drawn at smoothing `alpha`."""

    alpha: float
    copies: int
    seed: int = 0


def encoded_chunks(
    merged: str | Path,
    tok: Tokenizer,
    *,
    max_len: int | None,
    tgt: str,
    counts: dict,
    sampling: Sampling | None,
) -> Iterator[list[Pair]]:
    """The pairs of `merged` as (src ids, tgt ids), protected and encoded, a chunk at a time.

    With `sampling`, each chunk comes `sampling.copies` times, each copy sampled afresh. The pairs dropped
    for `max_len` are counted in `counts["dropped_max_len"]`.
    """
    pairs = iter_merged(merged, tgt)
    for n_chunk in itertools.count():
        if not (chunk := list(itertools.islice(pairs, CHUNK_PAIRS))):
            return
        protected = [protect_pair(en, de, tgt_lang=tgt) for en, de in chunk]
        src_text, tgt_text = [en for en, _ in protected], [de for _, de in protected]
        if sampling is None:
            encoded = [(tok.encode_batch(src_text), tok.encode_batch(tgt_text))]
        else:
            encoded = [
                tuple(
                    tok.sample_batch(text, sampling.alpha, _seed(sampling.seed, n_chunk, copy, side))
                    for side, text in enumerate((src_text, tgt_text))
                )
                for copy in range(sampling.copies)
            ]
        for src, tgt_ids in encoded:
            kept = [
                p for p in zip(src, tgt_ids, strict=True) if max_len is None or max(map(len, p)) <= max_len
            ]
            counts["dropped_max_len"] += len(chunk) - len(kept)
            yield kept


def _seed(*keys: int) -> int:
    """A 32-bit sampler seed of its own for each (seed, chunk, copy, side)."""
    return int(np.random.SeedSequence(keys).generate_state(1)[0])


def prepare(
    merged: str | Path,
    tok: Tokenizer,
    out_dir: str | Path,
    *,
    max_len: int | None,
    tgt: str,
    meta: dict,
    sampling: Sampling | None = None,
) -> dict:
    """Tokenize the merged set at `merged` into a corpus folder `out_dir` (atomically). Returns
    its meta: `meta` plus format, dtype, pairs, `dropped_max_len` and the sampling settings.

    Raises:
        DataError: the merged set is missing or a line of it is invalid (nothing is written).
    """
    meta = {**meta, "max_len": max_len, "dropped_max_len": 0}  # the count fills in as chunks are read
    if sampling is not None:
        meta["sampling"] = {"alpha": sampling.alpha, "copies": sampling.copies, "seed": sampling.seed}
    chunks = encoded_chunks(merged, tok, max_len=max_len, tgt=tgt, counts=meta, sampling=sampling)
    return write_corpus(out_dir, chunks, tok.vocab_size - 1, meta)
