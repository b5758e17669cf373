"""The vocabulary projection fused with the label-smoothed cross-entropy, chunk by chunk.

Computes the same loss as projecting `[N, D]` states onto the `[V, D]` output weights and taking
`F.cross_entropy(logits.float(), target, label_smoothing=ε, reduction="sum")`, without the fp32
`[N, V]` logits and their separate softmax, loss and backward passes.
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK_ROWS = 256  # rows per chunk: the chunk's fp32 logits (256 × V × 4 bytes) stay in cache


def linear_label_smoothed_loss(
    h: Tensor, weight: Tensor, target: Tensor, *, pad_id: int, smoothing: float, chunk_rows: int = CHUNK_ROWS
) -> Tensor:
    """Summed label-smoothed cross-entropy of the logits `h @ weightᵀ` over non-pad targets.

    Per target y with logits z (Szegedy et al. 2016; Vaswani et al. 2017, §5.4):
    loss = logsumexp(z) - (1 - ε)·z_y - ε·mean(z), whose gradient in z is
    softmax(z) - (1 - ε)·onehot(y) - ε/V. Both are computed in one pass per chunk of rows (the
    logits in fp32), and the gradients of `h` and `weight` are kept for the backward pass.
    Under autocast the matmuls run in the autocast dtype, as `h @ weightᵀ` would.

    Args:
        h: `[N, D]` final decoder states. weight: `[V, D]` output projection (the tied embedding).
        target: `[N]` ids; rows whose target is `pad_id` add nothing. smoothing: ε in [0, 1).
    Returns:
        A scalar (nats) in fp32 (fp64 for fp64 inputs), equal to the unfused loss within float
        rounding.
    """
    if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
        return _LinearLoss.apply(h, weight, target, pad_id, smoothing, chunk_rows)
    return _LinearLoss.forward(None, h, weight, target, pad_id, smoothing, chunk_rows)


class _LinearLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, target, pad_id, smoothing, chunk_rows):
        device = h.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else h.dtype
        with torch.autocast(device, enabled=False):
            loss, grad_h, grad_w = _loss_and_grads(
                h, weight, target, pad_id, smoothing, chunk_rows, dtype, grads=ctx is not None
            )
        if ctx is not None:
            ctx.save_for_backward(grad_h, grad_w)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_loss, grad_w * grad_loss, None, None, None, None


def _loss_and_grads(
    h: Tensor,
    weight: Tensor,
    target: Tensor,
    pad_id: int,
    eps: float,
    chunk_rows: int,
    dtype: torch.dtype,
    grads: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """(summed loss, d loss / d h `[N, D]`, d loss / d weight `[V, D]`), chunk by chunk of rows;
    without `grads`, the loss alone (None, None for the gradients)."""
    vocab, exact = weight.size(0), torch.promote_types(dtype, torch.float32)  # fp32, or fp64 for fp64
    w = weight.detach().to(dtype)
    rows = (target != pad_id).nonzero().squeeze(1)
    grad_h = torch.zeros(h.shape, dtype=h.dtype, device=h.device)
    grad_w = torch.zeros(weight.shape, dtype=exact, device=h.device)
    loss = torch.zeros((), dtype=exact, device=h.device)
    for part in rows.split(chunk_rows):
        x, y = h.detach()[part].to(dtype), target[part]
        z = (x @ w.t()).to(exact)  # [C, V]
        p = z.softmax(dim=1)  # one fused pass: cheaper than log_softmax, and it is the gradient's core
        z_y, p_y = z.gather(1, y[:, None]).squeeze(1), p.gather(1, y[:, None]).squeeze(1)
        lse = log_sum_exp(z, z_y, p_y)
        loss += (lse - (1 - eps) * z_y).sum() - eps / vocab * z.sum()
        if not grads:
            continue
        p.sub_(eps / vocab)
        p[torch.arange(len(y), device=y.device), y] -= 1 - eps
        grad_z = p.to(dtype)
        grad_h[part] = (grad_z @ w).to(h.dtype)
        grad_w += (grad_z.t() @ x).to(exact)
    if not grads:
        return loss, None, None
    return loss, grad_h, grad_w.to(weight.dtype)


def log_sum_exp(z: Tensor, z_y: Tensor, p_y: Tensor) -> Tensor:
    """logsumexp of each row of `z` `[C, V]` from its target logit and probability `[C]`:
    z_y - log p_y, exact where p_y is a normal float; computed directly for the other rows."""
    lse = z_y - p_y.log()
    tiny = p_y < 1e-30
    if tiny.any():
        lse[tiny] = torch.logsumexp(z[tiny], dim=1)
    return lse
