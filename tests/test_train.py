import math
from pathlib import Path

import pytest
import torch

from pipeline.config import ModelConfig, OptimConfig
from pipeline.model import Transformer
from pipeline.train import Trainer, inverse_sqrt_lr, label_smoothed_loss, validation_loss

PAD, BOS, EOS = 0, 2, 3


def test_label_smoothed_loss_matches_hand_computation():
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 3.0, -0.5], [1.0, 1.0, 1.0, 1.0]])
    target = torch.tensor([1, 2, PAD])  # the third token is padding and must not count
    eps, v = 0.1, 4
    expected = 0.0
    for row, y in zip(logits.tolist()[:2], [1, 2], strict=True):
        log_z = math.log(sum(math.exp(x) for x in row))
        logp = [x - log_z for x in row]
        expected += -((1 - eps) * logp[y] + eps / v * sum(logp))
    got = label_smoothed_loss(logits, target, PAD, eps)
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_inverse_sqrt_schedule():
    assert inverse_sqrt_lr(1, 1e-3, 100) == pytest.approx(1e-5)
    assert inverse_sqrt_lr(50, 1e-3, 100) == pytest.approx(5e-4)
    assert inverse_sqrt_lr(100, 1e-3, 100) == pytest.approx(1e-3)
    assert inverse_sqrt_lr(400, 1e-3, 100) == pytest.approx(5e-4)
    # proportional to the paper's d^-0.5 * min(step^-0.5, step * warmup^-1.5)
    paper = [min(s**-0.5, s * 100**-1.5) for s in (10, 100, 1000)]
    ours = [inverse_sqrt_lr(s, 1.0, 100) for s in (10, 100, 1000)]
    assert [o / p for o, p in zip(ours, paper, strict=True)] == pytest.approx([10.0] * 3)


def toy_pairs(n: int = 64) -> list:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        length = int(torch.randint(2, 8, (1,), generator=g))
        src = torch.randint(4, 20, (length,), generator=g).tolist()
        out.append((src, list(reversed(src))))
    return out


def make_trainer(tmp: Path, max_steps: int, **optim) -> Trainer:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_heads=2, n_layers=1, d_ff=64, dropout=0.1)
    pairs = toy_pairs()
    model = Transformer(cfg, 20, PAD)
    ocfg = OptimConfig(
        **{"seed": 3, "max_tokens": 60, "warmup_steps": 5, "max_steps": max_steps, "val_every": 4,
           "patience": 100, "average_last": 2, "peak_lr": 3e-3, **optim}
    )  # fmt: skip

    def validate(m: Transformer) -> dict[str, float]:
        loss = validation_loss(m, pairs[:16], 60, BOS, EOS, torch.device("cpu"))
        return {"val_loss": loss, "score": -loss}

    return Trainer(model, pairs, validate, ocfg, tmp, tmp / "log.csv", BOS, EOS, "score", "fp", meta={})


def test_resume_reproduces_uninterrupted_weights(tmp_path):
    full = make_trainer(tmp_path / "a", max_steps=12)
    full.run()
    half = make_trainer(tmp_path / "b", max_steps=8)
    half.run()  # stops at step 8, a validation step, with last.pt saved
    resumed = make_trainer(tmp_path / "b", max_steps=12)
    resumed.run()
    assert resumed.progress.step == 12
    for (name, a), (_, b) in zip(
        full.model.state_dict().items(), resumed.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert (tmp_path / "b" / "log.csv").read_text() != ""


def test_training_lowers_loss_and_keeps_checkpoints(tmp_path):
    t = make_trainer(tmp_path, max_steps=40, label_smoothing=0.0)
    progress = t.run()
    losses = [row["val_loss"] for row in progress.log]
    assert losses[-1] < losses[0]
    assert {"last.pt", "best.pt"} <= {p.name for p in tmp_path.iterdir()}
    assert len(progress.kept) == 2 and all((tmp_path / k).exists() for k in progress.kept)
    assert not list(tmp_path.glob("*.tmp"))


def test_wall_clock_budget_counts_each_second_once(tmp_path, monkeypatch):
    """Each step takes 10 fake seconds; a 1-minute budget must allow exactly 6 steps, resumed or not."""
    clock = [1000.0]
    monkeypatch.setattr("pipeline.train.time.time", lambda: clock[0])
    t = make_trainer(tmp_path, max_steps=100, max_minutes=1.0, val_every=2)
    step = t.train_step

    def slow_step(batches):
        clock[0] += 10.0
        return step(batches)

    t.train_step = slow_step
    assert t.run().step == 6
