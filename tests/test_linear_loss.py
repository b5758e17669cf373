"""The vocabulary projection fused with the label-smoothed loss equals the plain math: values and
gradients, in fp32 and under bf16 autocast, pads, chunk edges and a vanishing target probability."""

import pytest
import torch
import torch.nn.functional as F
from from_params import from_params

from pipeline.core.config import ModelConfig
from pipeline.model.linear_loss import linear_label_smoothed_loss
from pipeline.model.transformer import Transformer

PAD = 0


def plain(h, w, target, eps):
    """The plain math: logits, then cross-entropy in the logits' dtype."""
    return F.cross_entropy(h @ w.t(), target, ignore_index=PAD, label_smoothing=eps, reduction="sum")


def unfused(h, w, target, eps):
    """The unfused way: logits, then fp32 cross-entropy."""
    return F.cross_entropy(
        (h @ w.t()).float(), target, ignore_index=PAD, label_smoothing=eps, reduction="sum"
    )


def loss_and_grads(fn, h, w, target, eps):
    h, w = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = fn(h, w, target, eps)
    (2.5 * loss).backward()  # a scale on the loss must reach the gradients
    return loss.detach(), h.grad, w.grad


def data(n=37, d=16, v=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=torch.float64)
    w = torch.randn(v, d, generator=g, dtype=torch.float64) * 0.5
    target = torch.randint(1, v, (n,), generator=g)
    target[::7] = PAD  # some rows are padding: they add nothing
    return h, w, target


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("chunk_rows", [1, 8, 37, 1000])
def test_fused_loss_equals_the_plain_math_in_float64(eps, chunk_rows):
    h, w, target = data()

    def fused(h, w, t, e):
        return linear_label_smoothed_loss(h, w, t, pad_id=PAD, smoothing=e, chunk_rows=chunk_rows)

    want = loss_and_grads(plain, h, w, target, eps)
    got = loss_and_grads(fused, h, w, target, eps)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-6, atol=1e-9)
    assert got[1][target == PAD].abs().max() == 0  # pad rows get no gradient


def test_hand_computed_loss():
    h = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    w = torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, -1.0]])
    target, eps, v = torch.tensor([2, 1]), 0.2, 3
    z = h @ w.t()
    want = sum(
        torch.logsumexp(z[i], 0) - (1 - eps) * z[i, y] - eps / v * z[i].sum() for i, y in enumerate([2, 1])
    )
    got = linear_label_smoothed_loss(h, w, target, pad_id=5, smoothing=eps)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)


def test_a_vanishing_target_probability_still_gives_the_exact_loss():
    # p_y underflows fp32: the loss must come from logsumexp, not from log p_y = -inf
    h = torch.tensor([[1.0]])
    w = torch.tensor([[0.0], [200.0]])
    target = torch.tensor([0])
    got = linear_label_smoothed_loss(h, w, target, pad_id=9, smoothing=0.0)
    assert got.item() == pytest.approx(200.0, rel=1e-6)
    assert F.cross_entropy(h @ w.t(), target).item() == pytest.approx(200.0, rel=1e-6)


def test_under_bf16_autocast_it_matches_the_unfused_way():
    h, w, target = (x.float() if x.is_floating_point() else x for x in data(n=300, d=32, v=800))

    def autocast(fn):
        def run(h, w, t, e):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return fn(h, w, t, e)

        return run

    def fused(h, w, t, e):
        return linear_label_smoothed_loss(h, w, t, pad_id=PAD, smoothing=e, chunk_rows=64)

    want = loss_and_grads(autocast(unfused), h, w, target, 0.1)
    got = loss_and_grads(autocast(fused), h, w, target, 0.1)
    assert got[0].dtype == torch.float32
    assert got[0].item() == pytest.approx(want[0].item(), rel=1e-3)
    for a, b in zip(got[1:], want[1:], strict=True):  # both round the logits' gradient to bf16
        assert (a - b).abs().max() <= 0.02 * b.abs().max()


def test_without_gradients_it_returns_the_loss_alone():
    h, w, target = data()
    with torch.no_grad():
        got = linear_label_smoothed_loss(h, w, target, pad_id=PAD, smoothing=0.1)
    assert not got.requires_grad
    assert got.item() == pytest.approx(plain(h, w, target, 0.1).item(), rel=1e-9)


@pytest.mark.parametrize("tie", [True, False])
def test_model_loss_equals_the_loss_of_its_logits(tie):
    cfg = from_params(
        ModelConfig, d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0, tie_embeddings=tie
    )
    torch.manual_seed(0)
    model = Transformer(cfg, vocab_size=40, pad_id=PAD).double()
    src = torch.randint(1, 40, (3, 5))
    tgt_in, tgt_out = torch.randint(1, 40, (3, 4)), torch.randint(1, 40, (3, 4))
    tgt_out[0, 2:] = PAD
    keep = tgt_out != PAD
    fused = model(src, tgt_in, keep, target=tgt_out[keep], label_smoothing=0.1)
    fused.backward()
    fused_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logits = model(src, tgt_in, keep)
    direct = F.cross_entropy(logits, tgt_out[keep], label_smoothing=0.1, reduction="sum")
    direct.backward()
    assert fused.item() == pytest.approx(direct.item(), rel=1e-9)
    for a, p in zip(fused_grads, model.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, rtol=1e-7, atol=1e-10)
