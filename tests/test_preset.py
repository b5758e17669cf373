"""The named presets (`pipeline.ops.preset`): their steps in order, the teacher copies, a failing
step stopping the rest. The commands themselves are replaced by a recorder."""

from __future__ import annotations

from pathlib import Path

import pytest
from from_params import write_changed_params

from pipeline.core.errors import PipelineError
from pipeline.ops import preset


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    params = {
        "train": {"model_file": "models/transformer/model.pt"},
        "distill": {"teacher_dir": "models/teacher"},
    }
    write_changed_params(tmp_path / "params.yaml", params)
    return tmp_path


def recorder(calls: list, model: Path, fail_at: int = -1):
    def call(command) -> int:
        calls.append(list(command))
        model.parent.mkdir(parents=True, exist_ok=True)
        model.write_text(f"model after {len(calls)} commands")  # what that training left
        return 1 if len(calls) - 1 == fail_at else 0

    return call


def test_distill_trains_two_teachers_then_the_student(workspace: Path, monkeypatch) -> None:
    calls, model = [], workspace / "models/transformer/model.pt"
    monkeypatch.setattr(preset.subprocess, "call", recorder(calls, model))
    preset.run_preset("distill")
    assert calls[0] == ["dvc", "repro"]
    assert calls[1][:5] == ["dvc", "exp", "run", "-n", "default-seed3"] and "train.optim.seed=3" in calls[1]
    assert "distill.teacher=[seed2.pt,seed3.pt]" in calls[2] and "train.optim.seed=2" in calls[2]
    teachers = workspace / "models/teacher"
    assert (teachers / "seed2.pt").read_text() == "model after 1 commands"
    assert (teachers / "seed3.pt").read_text() == "model after 2 commands"


def test_dry_run_prints_the_steps_and_runs_nothing(workspace: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(preset.subprocess, "call", lambda command: pytest.fail(f"ran {command}"))
    done = preset.run_preset("distill", dry_run=True)
    assert len(done) == 5 and done[1] == "cp models/transformer/model.pt models/teacher/seed2.pt"
    assert capsys.readouterr().out.count("preset distill: ") == 5
    assert not (workspace / "models").exists()


def test_a_failing_step_stops_the_preset(workspace: Path, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(
        preset.subprocess, "call", recorder(calls, workspace / "models/transformer/model.pt", 1)
    )
    with pytest.raises(PipelineError, match="default-seed3.*failed"):
        preset.run_preset("distill")
    assert len(calls) == 2 and not (workspace / "models/teacher/seed3.pt").exists()


def test_an_unknown_preset_or_a_missing_model_is_one_line(workspace: Path, monkeypatch) -> None:
    with pytest.raises(PipelineError, match="choose from distill"):
        preset.run_preset("paper")
    monkeypatch.setattr(preset.subprocess, "call", lambda command: 0)
    with pytest.raises(PipelineError, match="no model to keep"):
        preset.run_preset("distill")
