"""Sequence-level knowledge distillation (Kim & Rush 2016): a teacher's beam translations of the
training sources become training targets."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from pipeline.core.config import DistillConfig
from pipeline.core.errors import ConfigError

Pair = tuple[str, str]  # (English, target)


def teacher_files(cfg: DistillConfig) -> list[Path]:
    """The teacher checkpoints `cfg.teacher` in `cfg.teacher_dir`.

    Raises:
        ConfigError: a name is not a plain file name, or the file is missing.
    """
    files = []
    for name in cfg.teacher:
        if Path(name).name != name:
            raise ConfigError(f"distill.teacher: {name!r}: give a file name in {cfg.teacher_dir}, not a path")
        path = Path(cfg.teacher_dir) / name
        if not path.is_file():
            raise ConfigError(f"distill.teacher: {path}: no such checkpoint (copy the teacher there)")
        files.append(path)
    return files


def distilled_pairs(pairs: Sequence[Pair], translations: Sequence[str], keep_original: bool) -> list[Pair]:
    """The training pairs of distillation: the original `pairs` first when `keep_original`, then each
    source with its teacher translation (a source the teacher left empty keeps only its original pair).

    Raises:
        ValueError: `translations` is not one per pair.
    """
    if len(translations) != len(pairs):
        raise ValueError(f"{len(translations)} teacher translations for {len(pairs)} pairs")
    taught = [(en, hyp) for (en, _), hyp in zip(pairs, translations, strict=True) if hyp.strip()]
    return [*pairs, *taught] if keep_original else taught


def sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
