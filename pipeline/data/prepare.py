"""The merged training set tokenized once, for training to memory-map (`pipeline.data.corpus`).

Each pair gets its number placeholders, both sides are encoded (or, with subword sampling, written
several times, each copy a fresh sample of segmentations), and a pair with a side over `max_len`
pieces is dropped. The set is read, encoded and written `CHUNK_PAIRS` pairs at a time.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from pipeline.core.errors import DataError, PipelineError
from pipeline.data.corpus import Pair, id_dtype, write_corpus
from pipeline.data.incoming import iter_merged
from pipeline.data.placeholders import protect_pair
from pipeline.data.tokenizer import Tokenizer

CHUNK_PAIRS = 20_000
OFFSET_BYTES = 8  # an int64 offset per pair and side
SIZE_MARGIN = 1.2  # the size estimated from the first chunk, with room for longer pairs later


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
    progress: tqdm | None = None,
) -> Iterator[list[Pair]]:
    """The pairs of `merged` as (src ids, tgt ids), protected and encoded, a chunk at a time.

    With `sampling`, each chunk comes `sampling.copies` times, each copy sampled afresh. The pairs dropped
    for `max_len` are counted in `counts["dropped_max_len"]`; `progress` advances by the pairs read.
    """
    pairs = iter_merged(merged, tgt)
    for n_chunk in itertools.count():
        if not (chunk := list(itertools.islice(pairs, CHUNK_PAIRS))):
            return
        protected = [protect_pair(en, de, tgt_lang=tgt) for en, de in chunk]
        src_text, tgt_text = [en for en, _ in protected], [de for _, de in protected]
        for src, tgt_ids in _copies(tok, src_text, tgt_text, sampling, n_chunk):
            kept = [
                p for p in zip(src, tgt_ids, strict=True) if max_len is None or max(map(len, p)) <= max_len
            ]
            counts["dropped_max_len"] += len(chunk) - len(kept)
            if progress is not None:
                progress.update(len(chunk))
            yield kept


def _copies(
    tok: Tokenizer, src_text: list[str], tgt_text: list[str], sampling: Sampling | None, n_chunk: int
) -> Iterator[tuple[list[list[int]], list[list[int]]]]:
    """The (src ids, tgt ids) of one chunk: encoded once, or each sampled copy in turn (one at a time
    in memory, however many copies)."""
    if sampling is None:
        yield tok.encode_batch(src_text), tok.encode_batch(tgt_text)
        return
    for copy in range(sampling.copies):
        src, tgt_ids = (
            tok.sample_batch(text, sampling.alpha, _seed(sampling.seed, n_chunk, copy, side))
            for side, text in enumerate((src_text, tgt_text))
        )
        yield src, tgt_ids


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
    progress: bool = False,
) -> dict:
    """Tokenize the merged set at `merged` into a corpus folder `out_dir` (atomically).

    Returns its meta: `meta` plus format, dtype, pairs, `dropped_max_len` and the sampling settings.
    `progress` shows a bar of the pairs read on stderr (`estimate`'s total).

    Raises:
        DataError: the merged set is missing or a line of it is invalid (nothing is written).
        PipelineError: the disk filled up (nothing is replaced).
    """
    meta = {**meta, "max_len": max_len, "dropped_max_len": 0}  # the count fills in as chunks are read
    total = None
    if sampling is not None:
        meta["sampling"] = {"alpha": sampling.alpha, "copies": sampling.copies, "seed": sampling.seed}
    if progress:
        total = count_pairs(merged) * (1 if sampling is None else sampling.copies)
    with tqdm(total=total, desc="prepare", unit="pair", disable=not progress) as bar:
        chunks = encoded_chunks(
            merged, tok, max_len=max_len, tgt=tgt, counts=meta, sampling=sampling, progress=bar
        )
        return write_corpus(out_dir, chunks, tok.vocab_size - 1, meta)


@dataclass(frozen=True)
class Estimate:
    """What `prepare` will write, about: `pairs` read, each `copies` times, in `bytes` on disk."""

    pairs: int
    copies: int
    bytes: int


def estimate(merged: str | Path, tok: Tokenizer, tgt: str, sampling: Sampling | None) -> Estimate:
    """The corpus folder's size, about: the first chunk's ids and offsets per pair (one sampled copy with
    `sampling`) times the pairs times the copies, plus `SIZE_MARGIN`.

    Raises:
        DataError: the merged set is missing or a line of its first chunk is invalid.
    """
    n_pairs, copies = count_pairs(merged), 1 if sampling is None else sampling.copies
    chunk = list(itertools.islice(iter_merged(merged, tgt), CHUNK_PAIRS))
    if not chunk:
        return Estimate(n_pairs, copies, 0)
    src_text, tgt_text = zip(*(protect_pair(en, de, tgt_lang=tgt) for en, de in chunk), strict=True)
    one = Sampling(sampling.alpha, 1, sampling.seed) if sampling is not None else None
    src, tgt_ids = next(_copies(tok, list(src_text), list(tgt_text), one, 0))
    n_ids = sum(map(len, src)) + sum(map(len, tgt_ids))
    per_pair = (n_ids * id_dtype(tok.vocab_size - 1).itemsize + 2 * OFFSET_BYTES) / len(chunk)
    return Estimate(n_pairs, copies, int(per_pair * n_pairs * copies * SIZE_MARGIN))


def count_pairs(merged: str | Path) -> int:
    """The lines of the merged set (one pair each), counted without parsing them.

    Raises:
        DataError: the file is missing or unreadable.
    """
    try:
        with Path(merged).open("rb") as f:
            return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))
    except OSError as exc:
        raise DataError(f"{merged}: cannot read the merged training set ({exc.strerror or exc})") from None


def check_space(out_dir: str | Path, size: Estimate) -> int:
    """The free bytes on the disk of `out_dir`, once known to hold `size` (the previous output stays
    until the new one is complete, so its space does not count as free).

    Raises:
        PipelineError: `size` would not fit (one line, with the sizes and what to change).
    """
    folder = Path(out_dir).absolute()
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if size.bytes > free:
        raise PipelineError(
            f"{out_dir}: {size.pairs} pairs x {size.copies} copies need about {size.bytes / 1e9:.1f} GB, "
            f"{free / 1e9:.1f} GB free on its disk; lower prepare.sampling_copies or free space"
        )
    return free
