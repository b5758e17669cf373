"""The moving average of the weights: its update rule, tied weights, exact continuation from
last.pt, and its place among the final-model candidates."""

import pytest
import torch
from torch import nn
from toy_train import TOY_MODEL, pairs, toy_run

from pipeline.model.transformer import Transformer
from pipeline.training import checkpoint, final_model
from pipeline.training.ema import EMA


def test_update_follows_the_warmed_up_decay():
    layer = nn.Linear(2, 1)
    w0 = layer.weight.detach().clone()
    ema = EMA(layer, decay=0.999)
    with torch.no_grad():
        layer.weight.add_(1.0)
    ema.update(layer)
    d = min(0.999, 2 / 11)  # (1 + t) / (10 + t) at t = 1
    assert torch.allclose(ema.shadow["weight"], d * w0 + (1 - d) * (w0 + 1.0))
    for _ in range(5000):
        ema.update(layer)
    assert torch.allclose(ema.shadow["weight"], w0 + 1.0, atol=1e-3)  # converges to constant weights


def test_averaged_weights_keep_tied_embeddings_tied():
    model = Transformer(TOY_MODEL, 20, 0)
    ema = EMA(model, 0.9)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    ema.update(model)
    state = ema.averaged(model)
    assert state.keys() == model.state_dict().keys()
    tied = [k for k, v in model.state_dict().items() if v.data_ptr() == model.tgt_embed.weight.data_ptr()]
    assert len(tied) >= 2 and len({state[k].data_ptr() for k in tied}) == 1
    assert not torch.equal(state[tied[0]], model.state_dict()[tied[0]])


def test_continued_run_has_the_same_average_as_an_uninterrupted_one(tmp_path):
    data = pairs(64)
    toy_run(tmp_path / "full", data, max_steps=12, ema_decay=0.9)
    toy_run(tmp_path / "run", data, max_steps=8, ema_decay=0.9)
    toy_run(tmp_path / "run", data, max_steps=12, ema_decay=0.9)
    full, run = (checkpoint.load(tmp_path / d / "last.pt")["ema"] for d in ("full", "run"))
    assert full["updates"] == run["updates"] == 12
    for name, value in full["shadow"].items():
        assert torch.equal(value, run["shadow"][name]), name


@pytest.mark.parametrize("ema_decay", [None, 0.9])
def test_the_average_is_a_final_model_candidate_when_kept(tmp_path, ema_decay):
    _, progress = toy_run(tmp_path, pairs(64), max_steps=8, ema_decay=ema_decay)
    names = final_model.candidates(tmp_path, progress.kept, 2)
    assert ("ema" in names) == (ema_decay is not None)
    if ema_decay:
        model = checkpoint.build_model(names["ema"])  # loads: the architecture's weights
        last = checkpoint.load(tmp_path / "last.pt")["model"]
        assert any(not torch.equal(v, last[k]) for k, v in model.state_dict().items())
