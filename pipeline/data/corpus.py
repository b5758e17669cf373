"""The tokenized training set on disk, memory-mapped: what training reads its batches from.

fairseq's indexed dataset in numpy form: per side a flat array of piece ids (`src.bin`, `tgt.bin`: raw
little-endian `uint16` while the ids fit, else `uint32`) and each pair's offsets (`src.idx.npy`,
`tgt.idx.npy`: `[n_pairs + 1]` int64, pair i is `ids[idx[i]:idx[i + 1]]`), plus `meta.json` (format,
dtype, pair count, and what the caller adds, e.g. the tokenizer's SHA-256). See docs/data.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from pipeline.core.errors import DataError, PipelineError
from pipeline.core.io import current_umask, disk_full

FORMAT = 1
SIDES = ("src", "tgt")
Pair = tuple[list[int], list[int]]  # (src ids, tgt ids), no specials
HASH_CHUNK = 1 << 22  # ids hashed at a time


def id_dtype(max_id: int) -> np.dtype:
    """The narrowest unsigned dtype holding ids up to `max_id`: uint16, else uint32."""
    return np.dtype("<u2") if max_id < 2**16 else np.dtype("<u4")


class TokenizedCorpus:
    """Pairs of piece ids held as flat arrays + offsets (in memory, or memory-mapped by `open`).

    `corpus[i]` is pair i as `(src ids, tgt ids)` lists; `corpus.lengths` (`[n_pairs]` int64) the
    longer side of each pair, what batching sorts and cuts by.
    """

    def __init__(
        self,
        ids: dict[str, np.ndarray],
        offsets: dict[str, np.ndarray],
        meta: dict,
        folder: Path | None = None,
    ) -> None:
        self.ids, self.offsets, self.meta, self.folder = ids, offsets, meta, folder
        src, tgt = (np.diff(offsets[side]) for side in SIDES)
        self.lengths = np.maximum(src, tgt)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> Pair:
        return tuple(self.ids[s][self.offsets[s][i] : self.offsets[s][i + 1]].tolist() for s in SIDES)

    @classmethod
    def from_pairs(cls, pairs: Sequence[Pair]) -> TokenizedCorpus:
        """An in-memory corpus of `pairs` (the same arrays `write_corpus` would store)."""
        ids, offsets = {}, {}
        for n, side in enumerate(SIDES):
            flat, lengths = _side(pairs, n)
            offsets[side] = _offsets(lengths)
            ids[side] = flat.astype(id_dtype(int(flat.max(initial=0))))
        return cls(ids, offsets, {"format": FORMAT, "pairs": len(pairs)})

    @classmethod
    def open(
        cls, folder: str | Path, spm_sha256: str | None = None, vocab_size: int | None = None
    ) -> TokenizedCorpus:
        """The corpus `write_corpus` wrote to `folder`, memory-mapped read-only; with `vocab_size`,
        every id is checked to be below it (one pass over the files).

        Raises:
            DataError: a file is missing, or `meta.json` is not this format, or the arrays do not
                agree with it, or `spm_sha256` is given and the meta names another tokenizer, or an
                id is out of the vocabulary (naming the folder or the file).
        """
        folder = Path(folder)
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT:
                raise DataError(
                    f"{folder}: tokenized corpus format {meta.get('format')!r}, expected {FORMAT}"
                )
            dtype = np.dtype(meta["dtype"])
            ids = {s: _memmap(folder / f"{s}.bin", dtype) for s in SIDES}
            offsets = {s: np.load(folder / f"{s}.idx.npy", mmap_mode="r") for s in SIDES}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(
                f"{folder}: not a readable tokenized corpus ({exc}); run the prepare stage"
            ) from None
        for s in SIDES:
            if len(offsets[s]) != meta["pairs"] + 1 or offsets[s][-1] != len(ids[s]):
                raise DataError(f"{folder}: {s}.idx.npy does not match {s}.bin and meta.json")
        if spm_sha256 is not None and meta.get("spm_sha256") != spm_sha256:
            raise DataError(f"{folder}: tokenized with another SentencePiece model; run the prepare stage")
        corpus = cls(ids, offsets, meta, folder)
        if vocab_size is not None:
            corpus.check_ids(vocab_size)
        return corpus

    def check_ids(self, vocab_size: int) -> None:
        """Every id of both sides is below `vocab_size`.

        Raises:
            DataError: an id is not, naming the side's file (or the side, in memory).
        """
        for side in SIDES:
            largest = max((int(chunk.max()) for chunk in self._id_chunks(side) if len(chunk)), default=-1)
            if largest >= vocab_size:
                where = self.folder / f"{side}.bin" if self.folder is not None else f"{side} ids"
                raise DataError(
                    f"{where}: id {largest} is outside the vocabulary of {vocab_size}; run the prepare stage"
                )

    def digest(self) -> str:
        """SHA-256 of the pairs' offsets and ids (as uint32, whatever the storage dtype).

        Hashed in chunks: the same pairs give the same digest in memory and on disk. On disk the ids are
        read with plain reads, not through the mapping, so hashing does not map the whole file in."""
        h = hashlib.sha256()
        for side in SIDES:
            h.update(np.ascontiguousarray(self.offsets[side], dtype="<i8").tobytes())
            for chunk in self._id_chunks(side):
                h.update(chunk.astype("<u4").tobytes())
        return h.hexdigest()

    def _id_chunks(self, side: str) -> Iterator[np.ndarray]:
        ids = self.ids[side]
        if self.folder is None:
            yield from (ids[i : i + HASH_CHUNK] for i in range(0, len(ids), HASH_CHUNK))
            return
        with (self.folder / f"{side}.bin").open("rb") as f:
            while chunk := f.read(HASH_CHUNK * ids.dtype.itemsize):
                yield np.frombuffer(chunk, dtype=ids.dtype)


def _side(pairs: Sequence[Pair], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Side `n` (0 src, 1 tgt) of `pairs`: its ids concatenated and each pair's length, int64."""
    flat = np.fromiter((i for p in pairs for i in p[n]), dtype=np.int64)
    return flat, np.fromiter((len(p[n]) for p in pairs), dtype=np.int64, count=len(pairs))


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _memmap(path: Path, dtype: np.dtype) -> np.ndarray:
    if path.stat().st_size == 0:  # np.memmap refuses an empty file
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def write_corpus(folder: str | Path, chunks: Iterable[Sequence[Pair]], max_id: int, meta: dict) -> dict:
    """Write the pairs of `chunks` as a corpus `open` reads; returns the meta written.

    `chunks` is an iterable of pair lists, consumed one at a time and streamed to disk (memory does not
    grow with the pairs); ids are stored in `id_dtype(max_id)`. Atomic: built in a temp folder beside
    `folder`, which replaces `folder` only when complete; an error or a stop (Ctrl-C, SIGTERM raised as
    an exception) removes the temp folder. `meta` is read once every chunk is written (a generator of
    chunks may fill in counts).

    Returns:
        The meta written: `meta` plus format, dtype, pairs.

    Raises:
        DataError: an id is above `max_id` (nothing is written).
        PipelineError: the disk filled up (nothing is replaced).
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())
        arrays = _write_arrays(tmp, chunks, id_dtype(max_id), max_id, folder)
        meta = {**meta, **arrays}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        _replace_dir(tmp, folder)
    except OSError as err:
        if disk_full(err, folder.parent):
            raise PipelineError(
                f"{folder}: no space left on device in {folder.parent}; nothing was replaced"
            ) from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return meta


def _write_arrays(
    tmp: Path, chunks: Iterable[Sequence[Pair]], dtype: np.dtype, max_id: int, where: Path
) -> dict:
    """Stream the ids to `<side>.bin` and the offsets to `<side>.idx.npy` (the bytes `np.save` writes)."""
    with contextlib.ExitStack() as files:
        ids = {s: files.enter_context((tmp / f"{s}.bin").open("wb")) for s in SIDES}
        offsets = {s: files.enter_context(_OffsetsFile(tmp / f"{s}.idx.npy")) for s in SIDES}
        for chunk in chunks:
            for n, side in enumerate(SIDES):
                flat, counts = _side(chunk, n)
                if flat.size and (flat.max() > max_id or flat.min() < 0):
                    raise DataError(f"{where}: a piece id outside 0..{max_id}")
                ids[side].write(flat.astype(dtype).tobytes())
                offsets[side].append(counts)
    return {"format": FORMAT, "dtype": dtype.str, "pairs": offsets["src"].pairs}


class _OffsetsFile:
    """A `[n_pairs + 1]` int64 `.npy` array of offsets written as the pair lengths come.

    The header is written first for an empty array and rewritten for the final shape on close: numpy
    pads a 1-D header so that its size does not depend on the length."""

    def __init__(self, path: Path) -> None:
        self.path, self.pairs, self.end = path, 0, 0
        self.file = path.open("wb")
        self.file.write(_npy_header(0))
        self._write(np.zeros(1, dtype=np.int64))

    def __enter__(self) -> _OffsetsFile:
        return self

    def append(self, lengths: np.ndarray) -> None:
        """Add the offsets that end pairs of these lengths (`[n]` int64)."""
        self._write(self.end + np.cumsum(lengths, dtype=np.int64))
        self.pairs += len(lengths)
        self.end += int(lengths.sum())

    def _write(self, offsets: np.ndarray) -> None:
        self.file.write(offsets.astype("<i8").tobytes())

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                header = _npy_header(self.pairs + 1)
                if len(header) != len(_npy_header(0)):
                    raise RuntimeError(f"{self.path}: numpy's .npy header grew with the array's length")
                self.file.seek(0)
                self.file.write(header)
        finally:
            self.file.close()


def _npy_header(length: int) -> bytes:
    """The `.npy` header `np.save` writes for a `[length]` little-endian int64 array."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": "<i8", "fortran_order": False, "shape": (length,)})
    return out.getvalue()


def _replace_dir(new: Path, folder: Path) -> None:
    """Put `new` at `folder`, moving an existing `folder` aside first (then deleting it)."""
    old = None
    if folder.exists():
        old = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.old.", suffix=".tmp"))
        os.replace(folder, old / folder.name)
    os.replace(new, folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
