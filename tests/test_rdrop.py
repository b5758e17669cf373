"""R-Drop: with dropout off its two passes agree and the loss is the trainer's plain loss; with
dropout on they differ, the KL term counts, and a toy run with it trains."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from from_params import from_params
from toy_train import PAD, TOY_MODEL, TOY_OPTIM, pairs, toy_run

from pipeline.core.config import OptimConfig
from pipeline.data.batching import pad
from pipeline.model.transformer import Transformer
from pipeline.training.loop import RunContext, run_identity
from pipeline.training.rdrop import rdrop_loss


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    data = pairs(8)
    src = pad([s for s, _ in data], PAD)
    tgt = pad([[2, *t, 3] for _, t in data], PAD)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    keep = tgt_out != PAD
    return src, tgt_in, keep, tgt_out[keep]


def test_without_dropout_the_two_passes_agree_and_the_loss_is_the_plain_one():
    torch.manual_seed(0)
    model = Transformer(TOY_MODEL.model_copy(update={"dropout": 0.0}), 20, PAD).train()
    src, tgt_in, keep, target = batch()
    plain = model(src, tgt_in, keep, target=target, label_smoothing=0.1)
    for alpha in (0.0, 5.0):
        got = rdrop_loss(model, src, tgt_in, keep, target, label_smoothing=0.1, alpha=alpha)
        assert got.item() == pytest.approx(plain.item(), rel=1e-5)


def test_with_dropout_the_kl_term_counts_and_has_a_gradient():
    torch.manual_seed(0)
    model = Transformer(TOY_MODEL.model_copy(update={"dropout": 0.3}), 20, PAD).train()
    src, tgt_in, keep, target = batch()
    torch.manual_seed(1)
    without = rdrop_loss(model, src, tgt_in, keep, target, label_smoothing=0.1, alpha=0.0)
    torch.manual_seed(1)  # the same two dropout masks: only the KL term differs
    with_kl = rdrop_loss(model, src, tgt_in, keep, target, label_smoothing=0.1, alpha=5.0)
    assert with_kl.item() > without.item()
    with_kl.backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


def test_a_run_with_rdrop_trains_and_is_not_continued_as_one_without(tmp_path: Path):
    data = pairs(64)
    _, progress = toy_run(tmp_path, data, max_steps=8, rdrop_alpha=5.0)
    assert progress.step == 8 and progress.log[-1]["val_loss"] < progress.log[0]["val_loss"]
    model, run = Transformer(TOY_MODEL, 20, PAD), RunContext(Path("x"), Path("x.csv"), "data")
    off = run_identity(model, from_params(OptimConfig, **TOY_OPTIM), run)
    on = run_identity(model, from_params(OptimConfig, **TOY_OPTIM, rdrop_alpha=5.0), run)
    assert "rdrop_alpha" not in off and on != off
