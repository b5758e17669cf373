"""The training loop: loss, schedule, exact resume, continuing with a raised budget, starting
afresh when the trajectory changes, checkpoint contents, budgets and the NaN stop."""

import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from from_params import from_params
from toy_train import TOY_MAX_LEN, TOY_MODEL, TOY_OPTIM, ToyValidation, pairs, toy_run

from pipeline.core.config import OptimConfig, TrainConfig
from pipeline.core.errors import PipelineError, Stopped
from pipeline.model import transformer
from pipeline.model.linear_loss import linear_label_smoothed_loss
from pipeline.model.transformer import Transformer
from pipeline.training import checkpoint, final_model
from pipeline.training import loop as train_module
from pipeline.training.loop import RunContext, run_identity, start

PAD = 0


def test_the_trainers_loss_is_label_smoothed_cross_entropy_by_hand():
    """The fused loss with the identity as the projection: the logits themselves."""
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 3.0, -0.5], [1.0, 1.0, 1.0, 1.0]])
    target = torch.tensor([1, 2, PAD])  # the third token is padding and must not count
    eps, v = 0.1, 4
    expected = 0.0
    for row, y in zip(logits.tolist()[:2], [1, 2], strict=True):
        log_z = math.log(sum(math.exp(x) for x in row))
        logp = [x - log_z for x in row]
        expected += -((1 - eps) * logp[y] + eps / v * sum(logp))
    got = linear_label_smoothed_loss(logits, torch.eye(v), target, pad_id=PAD, smoothing=eps)
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_resume_reproduces_uninterrupted_weights(tmp_path):
    data = pairs(64)
    full, _ = toy_run(tmp_path / "a", data, max_steps=12)
    toy_run(tmp_path / "b", data, max_steps=8)  # stops at step 8, a validation step, with last.pt saved
    resumed, progress = toy_run(tmp_path / "b", data, max_steps=12)
    assert progress.step == 12
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert [row["step"] for row in progress.log] == [4, 8, 12]


def test_raising_the_budget_continues_the_run(tmp_path, losses, capsys):
    """N steps, then the budget raised to 2N: steps N+1..2N equal an uninterrupted 2N-step run's;
    best.pt, last.pt and the step checkpoints keep being written."""
    data = pairs(64)
    toy_run(tmp_path / "full", data, max_steps=16, label_smoothing=0.0)
    uninterrupted = list(losses)
    losses.clear()
    toy_run(tmp_path / "run", data, max_steps=8, label_smoothing=0.0, max_minutes=1.0)
    best_before = checkpoint.load(tmp_path / "run" / "best.pt")["step"]
    _, progress = toy_run(tmp_path / "run", data, max_steps=16, label_smoothing=0.0, max_minutes=2.0)
    assert "at step 8" in capsys.readouterr().out and progress.step == 16
    assert losses[8:] == uninterrupted[8:]  # bit-identical, not approximately
    scores = [row["score"] for row in progress.log]
    assert max(scores[2:]) > max(scores[:2])  # val improved after step 8 ...
    assert (
        checkpoint.load(tmp_path / "run" / "best.pt")["step"] > best_before == 8
    )  # ... and best.pt followed
    assert progress.kept == ["step0000012.pt", "step0000016.pt"]
    assert sorted(p.name for p in (tmp_path / "run").glob("step*.pt")) == progress.kept


def test_sigterm_between_validations_saves_last_pt_and_the_continued_run_is_the_same(
    tmp_path, losses, monkeypatch
):
    """SIGTERM during step 7 (validations every 4): the step finishes, last.pt is saved at step 7
    and the run stops with `Stopped`; continued, its steps 8..16 equal an uninterrupted run's."""
    from pipeline.training import loop

    data = pairs(64)
    toy_run(tmp_path / "full", data, max_steps=16, label_smoothing=0.0)
    uninterrupted = list(losses)
    losses.clear()
    recorded, calls = loop.train_step, [0]

    def signalled(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 7:
            os.kill(os.getpid(), signal.SIGTERM)  # handled while the step runs
        return recorded(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", signalled)
    with pytest.raises(Stopped, match=r"stopped by SIGTERM after step 7; last.pt saved") as info:
        toy_run(tmp_path / "run", data, max_steps=16, label_smoothing=0.0)
    assert info.value.signum == signal.SIGTERM and len(losses) == 7
    assert checkpoint.load(tmp_path / "run" / "last.pt")["progress"]["step"] == 7
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is the run's alone
    monkeypatch.setattr(loop, "train_step", recorded)
    _, progress = toy_run(tmp_path / "run", data, max_steps=16, label_smoothing=0.0)
    assert progress.step == 16 and losses[7:] == uninterrupted[7:]  # bit-identical


def test_a_second_signal_interrupts_at_once():
    """The second SIGINT goes to the handler from before: Python's Ctrl-C here, set explicitly
    (a shell that starts the tests in the background ignores SIGINT, and so would the run)."""
    from pipeline.training.stopping import stop_at_step_boundary

    outside = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), stop_at_step_boundary() as request:
            os.kill(os.getpid(), signal.SIGINT)
            assert request.signal == signal.SIGINT  # the first is noted
            os.kill(os.getpid(), signal.SIGINT)  # the second is Python's own Ctrl-C
            time.sleep(5)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outside)


CHILD = """
import signal, sys, time
from pipeline.core.signals import die_with_parent
signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[1], "w").write("TERM"), sys.exit(0)))
assert die_with_parent()
open(sys.argv[1] + ".ready", "w").close()
time.sleep(60)
"""
PARENT = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]])
while not os.path.exists(sys.argv[2] + ".ready"):
    time.sleep(0.05)
os._exit(0)  # gone without waiting for its child, as a SIGKILLed DVC
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_trainer_is_sent_sigterm_when_its_parent_dies(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "parent.py").write_text(PARENT)
    mark = tmp_path / "mark"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(
        [sys.executable, tmp_path / "parent.py", tmp_path / "child.py", mark],
        check=True,
        timeout=120,
        env=env,
    )
    deadline = time.monotonic() + 30
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.read_text() == "TERM"


def test_budgets_are_not_part_of_the_identity_but_the_lr_is():
    model, run = Transformer(TOY_MODEL, 20, PAD), RunContext(Path("x"), Path("x.csv"), "data")
    base = run_identity(model, from_params(OptimConfig, **TOY_OPTIM), run)
    budgets = dict(max_steps=99, max_minutes=9.0, patience=1, val_every=7, average_last=9, threads=3)
    assert run_identity(model, from_params(OptimConfig, **TOY_OPTIM | budgets), run) == base
    for change in (dict(peak_lr=1e-4), dict(seed=4), dict(max_tokens=61), dict(accum_steps=2)):
        assert run_identity(model, from_params(OptimConfig, **TOY_OPTIM | change), run) != base, change
    assert (
        run_identity(
            model, from_params(OptimConfig, **TOY_OPTIM), RunContext(Path("x"), Path("x.csv"), "other")
        )
        != base
    )


def fail(*args, **kwargs):
    raise RuntimeError("a failure before any checkpoint")


def test_a_new_lr_starts_afresh_and_drops_the_old_checkpoints(tmp_path, capsys, monkeypatch):
    data = pairs(64)
    toy_run(tmp_path, data, max_steps=8, val_every=2, average_last=3)
    assert {p.name for p in tmp_path.glob("step*.pt")} == {
        "step0000004.pt",
        "step0000006.pt",
        "step0000008.pt",
    }
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.pt")}
    with monkeypatch.context() as m:  # a new run that fails before its first validation loses nothing
        m.setattr(train_module, "train_step", fail)
        with pytest.raises(RuntimeError, match="before any checkpoint"):
            toy_run(tmp_path, data, max_steps=4, val_every=4, average_last=3, peak_lr=1e-3)
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.pt")} == before
    capsys.readouterr()
    _, progress = toy_run(tmp_path, data, max_steps=4, val_every=4, average_last=3, peak_lr=1e-3)
    out = capsys.readouterr().out
    afresh = [line for line in out.splitlines() if "starting afresh" in line]
    assert len(afresh) == 1 and "optim.peak_lr 0.003 -> 0.001" in afresh[0], out
    assert "resuming" not in out and progress.step == 4
    assert [p.name for p in tmp_path.glob("step*.pt")] == ["step0000004.pt"] == progress.kept  # its first
    assert checkpoint.load(tmp_path / "last.pt")["progress"]["step"] == 4  # this run's, not the old one


def test_step_and_best_checkpoints_hold_weights_only(tmp_path):
    toy_run(tmp_path, pairs(), max_steps=8)
    for name in ("best.pt", "step0000008.pt"):
        assert set(checkpoint.load(tmp_path / name)) == {*checkpoint.MODEL_KEYS, "step"}, name
    last = checkpoint.load(tmp_path / "last.pt")
    assert {"optimizer", "rng", "progress", "identity", "fingerprint"} <= set(last)
    assert (tmp_path / "last.pt").stat().st_size > 2 * (tmp_path / "step0000008.pt").stat().st_size


def test_every_checkpoint_and_the_final_model_record_the_tokenizer(tmp_path):
    torch.manual_seed(0)
    model, data, digest = Transformer(TOY_MODEL, 20, PAD), pairs(), "ab" * 32
    run = RunContext(tmp_path, tmp_path / "log.csv", data_id="toy", spm_sha256=digest)
    optim = from_params(OptimConfig, **(TOY_OPTIM | {"max_steps": 8}))
    cfg = from_params(
        TrainConfig,
        out_dir=str(tmp_path),
        model_file=str(tmp_path / "final.pt"),
        max_len=TOY_MAX_LEN,
        optim=optim,
    )
    validation = ToyValidation(data[:16])
    state = start(model, cfg.optim, run)
    train_module.train(model, data, validation, state)
    final_model.save_final_model(model, state, validation, cfg)
    for name in ("best.pt", "step0000008.pt", "last.pt", "final.pt"):
        assert checkpoint.load(tmp_path / name)[checkpoint.TOKENIZER_KEY] == digest, name


def test_a_run_first_removes_the_temp_files_of_a_killed_write(tmp_path, capsys):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / ".last.pt.x1y2z3_a.tmp").write_bytes(b"half a checkpoint")
    (tmp_path / "notes.tmp").write_text("not ours")
    toy_run(tmp_path, pairs(), max_steps=4)
    assert not (tmp_path / ".last.pt.x1y2z3_a.tmp").exists() and (tmp_path / "notes.tmp").exists()
    assert f"removed {tmp_path / '.last.pt.x1y2z3_a.tmp'}: " in capsys.readouterr().out


def test_training_lowers_loss_and_keeps_checkpoints(tmp_path):
    _, progress = toy_run(tmp_path, pairs(64), max_steps=40, label_smoothing=0.0)
    losses = [row["val_loss"] for row in progress.log]
    assert losses[-1] < losses[0]
    assert {"last.pt", "best.pt"} <= {p.name for p in tmp_path.iterdir()}
    assert len(progress.kept) == 2 and all((tmp_path / k).exists() for k in progress.kept)
    assert not list(tmp_path.glob("*.tmp"))


def test_wall_clock_budget_counts_each_second_once(tmp_path, monkeypatch):
    """Each step takes 10 fake seconds; a 1-minute budget allows exactly 6 steps, continued or not."""
    clock, step = [1000.0], train_module.train_step
    monkeypatch.setattr("pipeline.training.loop.time.time", lambda: clock[0])

    def slow_step(*args, **kwargs):
        clock[0] += 10.0
        return step(*args, **kwargs)

    monkeypatch.setattr(train_module, "train_step", slow_step)
    assert toy_run(tmp_path, pairs(), max_steps=100, max_minutes=0.5, val_every=2)[1].step == 3
    assert toy_run(tmp_path, pairs(), max_steps=100, max_minutes=1.0, val_every=2)[1].step == 6


def test_a_non_finite_loss_stops_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(
        transformer,
        "linear_label_smoothed_loss",
        lambda *a, **k: torch.tensor(float("nan"), requires_grad=True),
    )
    with pytest.raises(
        PipelineError,
        match=r"^train: loss is nan at step 1; stopped, the last good checkpoint is .*last\.pt$",
    ):
        toy_run(tmp_path, pairs(), max_steps=4)


@pytest.mark.parametrize(
    ("step", "bad", "expected"),
    [(16, 0, "max_steps"), (16, 3, "max_steps"), (9, 3, "patience"), (9, 0, "max_minutes")],
)
def test_the_facts_name_the_budget_that_ended_a_run(step, bad, expected):
    cfg = from_params(OptimConfig, **TOY_OPTIM, patience=3)
    assert final_model.stopped_by(train_module.Progress(step=step, bad_validations=bad), cfg) == expected


def test_a_run_reset_by_dvc_continues_from_its_shadow_copy(tmp_path, losses):
    """`dvc exp run` resets the checkpoint folder to its recorded version (here: deleted) before it
    runs; the shadow copy puts the stopped run back, and steps 9..16 equal an uninterrupted run's."""
    from pipeline.training import shadow

    data = pairs(64)
    toy_run(tmp_path / "full", data, max_steps=16, label_smoothing=0.0)
    uninterrupted = list(losses)
    losses.clear()
    out = tmp_path / "run"
    toy_run(out, data, max_steps=8, label_smoothing=0.0, max_minutes=1.0)
    fingerprint = checkpoint.load(out / "last.pt")["fingerprint"]
    shutil.rmtree(out)
    assert shadow.restore(out, fingerprint) == 8
    _, progress = toy_run(out, data, max_steps=16, label_smoothing=0.0, max_minutes=2.0)
    assert progress.log[0]["step"] == 4 and progress.step == 16  # the log goes on from the first run
    assert losses[8:] == uninterrupted[8:]
