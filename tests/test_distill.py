"""Sequence-level knowledge distillation: the distilled training pairs, streamed a chunk at a time,
the teachers' files, and the stage that passes the set through without holding it in memory."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from from_params import from_params, write_changed_params

from pipeline.core.config import DistillConfig
from pipeline.core.errors import ConfigError
from pipeline.data.incoming import write_merged
from pipeline.ops.distill import distilled, taught, teacher_files, teacher_groups

PAIRS = [("A dog.", "Ein Hund."), ("A cat.", "Eine Katze."), ("Two.", "Zwei.")]


def test_the_teachers_translations_follow_the_original_pairs() -> None:
    hyps = {"A dog.": "Ein Hund .", "A cat.": "", "Two.": "Zwei"}
    teacher = {"A dog.": "Hund", "A cat.": "Katze", "Two.": " "}
    taught_pairs = [("A dog.", "Ein Hund ."), ("Two.", "Zwei")]  # an empty translation teaches nothing
    translators = [
        lambda sources: [hyps[en] for en in sources],
        lambda sources: [teacher[en] for en in sources],
    ]
    counts: dict = {}
    assert list(distilled(lambda: PAIRS, translators[:1], True, counts)) == [*PAIRS, *taught_pairs]
    assert counts["pairs_in"] == 3
    assert list(distilled(lambda: PAIRS, translators[:1], False, counts, chunk_pairs=2)) == taught_pairs
    each = list(distilled(lambda: PAIRS, translators, False, counts))  # one translation per teacher
    assert each == [*taught_pairs, ("A dog.", "Hund"), ("A cat.", "Katze")]
    assert list(distilled(lambda: PAIRS, [], False, counts)) == PAIRS  # no teacher: passed through
    with pytest.raises(ValueError, match="2 teacher translations for 3 pairs"):
        taught(PAIRS, ["a", "b"])


def test_distillation_reads_and_translates_a_chunk_at_a_time() -> None:
    """The set is pulled from its iterator as the output is consumed: a chunk ahead at most."""
    pulled, translated = [], []

    def pairs():
        for n in range(10_000):
            pulled.append(n)
            yield f"s{n}", f"t{n}"

    def translate(sources: list[str]) -> list[str]:
        translated.append(len(sources))
        return [s.upper() for s in sources]

    passed = distilled(pairs, [], True, {})
    assert next(passed) == ("s0", "t0") and len(pulled) == 1
    pulled.clear()
    taught_stream = distilled(pairs, [translate], False, {}, chunk_pairs=4)
    assert next(taught_stream) == ("s0", "S0") and len(pulled) == 4 and translated == [4]


def test_teachers_are_checkpoint_files_ensembled_or_one_each(tmp_path: Path) -> None:
    (tmp_path / "a.pt").write_bytes(b"x")
    (tmp_path / "b.pt").write_bytes(b"y")
    cfg = from_params(DistillConfig, teacher=(str(tmp_path / "a.pt"), str(tmp_path / "b.pt")))
    assert teacher_files(cfg) == [tmp_path / "a.pt", tmp_path / "b.pt"]
    assert teacher_files(from_params(DistillConfig)) == []
    with pytest.raises(ConfigError, match=r"distill.teacher: .*c.pt: no such checkpoint"):
        teacher_files(cfg.model_copy(update={"teacher": (str(tmp_path / "c.pt"),)}))
    files = teacher_files(cfg)
    assert teacher_groups(files, "ensemble") == [files]
    assert teacher_groups(files, "each") == [[files[0]], [files[1]]]
    assert teacher_groups([], "each") == []


def test_the_stage_passes_the_set_through_without_holding_it(tmp_path: Path, monkeypatch, capsys) -> None:
    """No teacher: the output has the input's bytes, the facts count the pairs, and the peak memory is a
    small part of the set's size."""
    from stages import distill

    merged = tmp_path / "data" / "train_merged.jsonl"
    pairs = [(f"A man number {n} rides a bike.", f"Ein Mann Nummer {n} fährt Rad.") for n in range(30_000)]
    write_merged(merged, pairs)
    write_changed_params(tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(distill, "die_with_parent", lambda: True)  # not on the test process itself
    tracemalloc.start()
    distill.main()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (tmp_path / "data" / "train_distilled.jsonl").read_bytes() == merged.read_bytes()
    # the set held in memory takes several times its size on disk
    assert peak < merged.stat().st_size / 4, (peak, merged.stat().st_size)
    facts = json.loads((tmp_path / "reports" / "distill.json").read_text())
    assert {k: v for k, v in facts.items() if k != "minutes"} == {
        "teacher": {},
        "keep_original": True,
        "pairs_in": 30_000,
        "pairs_out": 30_000,
    }
    assert "no teacher: passed through: 30000 -> 30000 pairs" in capsys.readouterr().out
