"""Sequence-level knowledge distillation: the distilled training pairs and the teacher's files."""

from __future__ import annotations

from pathlib import Path

import pytest
from from_params import from_params

from pipeline.core.config import DistillConfig
from pipeline.core.errors import ConfigError
from pipeline.ops.distill import distilled_pairs, teacher_files

PAIRS = [("A dog.", "Ein Hund."), ("A cat.", "Eine Katze."), ("Two.", "Zwei.")]


def test_the_teachers_translations_follow_the_original_pairs() -> None:
    hyps = ["Ein Hund .", "", "Zwei"]
    taught = [("A dog.", "Ein Hund ."), ("Two.", "Zwei")]  # an empty translation teaches nothing
    assert distilled_pairs(PAIRS, hyps, keep_original=True) == [*PAIRS, *taught]
    assert distilled_pairs(PAIRS, hyps, keep_original=False) == taught
    with pytest.raises(ValueError, match="2 teacher translations for 3 pairs"):
        distilled_pairs(PAIRS, hyps[:2], keep_original=True)


def test_teachers_are_files_in_the_teacher_folder(tmp_path: Path) -> None:
    (tmp_path / "a.pt").write_bytes(b"x")
    cfg = from_params(DistillConfig, teacher=("a.pt",), teacher_dir=str(tmp_path))
    assert teacher_files(cfg) == [tmp_path / "a.pt"]
    assert teacher_files(from_params(DistillConfig)) == []
    with pytest.raises(ConfigError, match="no such checkpoint"):
        teacher_files(cfg.model_copy(update={"teacher": ("a.pt", "b.pt")}))
    with pytest.raises(ConfigError, match="not a path"):
        teacher_files(cfg.model_copy(update={"teacher": ("../a.pt",)}))
