"""Sequence-level knowledge distillation (Kim & Rush 2016): a teacher's beam translations of the
training sources become training targets, streamed a chunk at a time."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from pipeline.core.config import DistillConfig
from pipeline.core.errors import ConfigError

Pair = tuple[str, str]  # (English, target)
CHUNK_PAIRS = 20_000  # sources a teacher translates at a time


def teacher_files(cfg: DistillConfig) -> list[Path]:
    """The teacher checkpoints `cfg.teacher` (paths in the checkout).

    Raises:
        ConfigError: a file is missing.
    """
    files = [Path(name) for name in cfg.teacher]
    for path in files:
        if not path.is_file():
            raise ConfigError(f"distill.teacher: {path}: no such checkpoint")
    return files


def teacher_groups(teachers: Sequence[Path], combine: str) -> list[list[Path]]:
    """The teachers that translate together: all at once as an ensemble (`combine: ensemble`), or each
    alone (`each`: one translation per teacher); [] without teachers."""
    if not teachers:
        return []
    return [list(teachers)] if combine == "ensemble" else [[path] for path in teachers]


def distilled(
    pairs: Callable[[], Iterable[Pair]],
    translators: Sequence[Callable[[list[str]], list[str]]],
    keep_original: bool,
    counts: dict,
    chunk_pairs: int = CHUNK_PAIRS,
) -> Iterator[Pair]:
    """The training pairs of distillation, read and translated `chunk_pairs` at a time.

    Without `translators` (no teacher), the pairs `pairs()` yields as they are; else the original pairs
    first when `keep_original`, then for each translator each source with its translation (`taught`).
    `pairs` is called once per pass over the set; the pairs of a pass are counted in `counts["pairs_in"]`.
    """
    counts["pairs_in"] = 0
    if not translators or keep_original:
        for pair in pairs():
            counts["pairs_in"] += 1
            yield pair
    for translate in translators:
        counts["pairs_in"] = 0
        sources = iter(pairs())
        while chunk := list(itertools.islice(sources, chunk_pairs)):
            counts["pairs_in"] += len(chunk)
            yield from taught(chunk, translate([en for en, _ in chunk]))


def taught(pairs: Sequence[Pair], translations: Sequence[str]) -> list[Pair]:
    """Each source of `pairs` with its teacher translation; a source the teacher left empty is left out.

    Raises:
        ValueError: `translations` is not one per pair.
    """
    if len(translations) != len(pairs):
        raise ValueError(f"{len(translations)} teacher translations for {len(pairs)} pairs")
    return [(en, hyp) for (en, _), hyp in zip(pairs, translations, strict=True) if hyp.strip()]


def sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex), read a block at a time."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
