"""One trainer per checkpoint folder (`pipeline.training.checkpoint.trainer_lock`, built on
`pipeline.core.lock.exclusive`): an orphaned trainer, whose parent was SIGKILLed, keeps the folder;
a second trainer stops at once with one line naming it; the lock ends with its holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from from_params import write_changed_params

from pipeline.core.errors import PipelineError
from pipeline.training.checkpoint import TRAINER_LOCK, trainer_lock

# A parent (as `dvc repro` is) that starts a trainer holding the lock, prints its pid, and waits.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(600)
"""
TRAINER = """
import sys, time
from pathlib import Path
from pipeline.training.checkpoint import trainer_lock
with trainer_lock(Path(sys.argv[1])):
    print("training", flush=True)
    time.sleep(600)
"""


def test_a_killed_parent_leaves_its_trainer_holding_the_folder_and_a_second_one_stops(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, TRAINER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    child_pid = None
    try:
        assert parent.stdout.readline().strip() == "training"
        child_pid = int((tmp_path / TRAINER_LOCK).read_text())
        parent.send_signal(signal.SIGKILL)  # `kill -9` of `dvc repro`: its trainer lives on
        parent.wait(timeout=30)
        os.kill(child_pid, 0)  # still running, orphaned
        with pytest.raises(PipelineError) as info:
            with trainer_lock(tmp_path):
                pytest.fail("a second trainer entered a held folder")
        message = str(info.value)
        assert message == (
            f"{tmp_path}: a training is already running (pid {child_pid}, lock "
            f"{tmp_path / TRAINER_LOCK}); wait for it to end, or stop it"
        )
    finally:
        parent.kill()
        if child_pid:
            os.kill(child_pid, signal.SIGKILL)
    assert_free_soon(tmp_path)  # released once its holder is gone, however it ended


def assert_free_soon(folder: Path, seconds: float = 30.0) -> None:
    """The folder's lock can be taken within `seconds` (a killed process takes a moment to exit)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with trainer_lock(folder):
                assert int((folder / TRAINER_LOCK).read_text()) == os.getpid()
                return
        except PipelineError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_the_warmup_stage_takes_the_lock_before_training(tmp_path: Path, monkeypatch) -> None:

    from stages import warmup_data, warmup_train

    params = {
        "warmup_data": {"max_number": 999, "n_train": 50, "n_val": 5, "n_test": 5},
        "warmup_train": {
            "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32},
            "optim": {"max_steps": 2, "val_every": 2, "max_tokens": 400},
        },
    }
    write_changed_params(tmp_path / "params.yaml", params)
    monkeypatch.chdir(tmp_path)
    warmup_data.main()
    with trainer_lock(tmp_path / "models/warmup"):
        with pytest.raises(PipelineError, match=r"models/warmup: a training is already running"):
            warmup_train.main()
    assert not list((tmp_path / "models/warmup").glob("*.pt"))  # it wrote nothing
