"""R-Drop (Liang et al. 2021, eq. 3): each batch goes through the model twice, with dropout masks of
its own each time, and the two output distributions are trained to agree."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def rdrop_loss(
    net: torch.nn.Module,
    src: Tensor,
    tgt_in: Tensor,
    keep: Tensor,
    target: Tensor,
    *,
    label_smoothing: float,
    alpha: float,
) -> Tensor:
    """The summed R-Drop loss (scalar, nats) of one micro-batch over its kept target positions:
    ½(CE₁ + CE₂) + α · ½(KL(P₁‖P₂) + KL(P₂‖P₁)), CE label-smoothed.

    src `[B, S]`, tgt_in `[B, T]`, keep bool `[B, T]` (the real target positions), target `[N]`
    ids of the kept positions. The two passes' logits `[N, V]` are computed in full (in fp32).
    With dropout off both passes agree, and the loss is the plain label-smoothed cross-entropy.
    """
    logits = [net(src, tgt_in, keep).float() for _ in range(2)]  # 2 x [N, V], other dropout masks
    ce = sum(F.cross_entropy(z, target, label_smoothing=label_smoothing, reduction="sum") for z in logits)
    logp, logq = (F.log_softmax(z, dim=-1) for z in logits)
    kl = F.kl_div(logp, logq, log_target=True, reduction="sum") + F.kl_div(
        logq, logp, log_target=True, reduction="sum"
    )
    return 0.5 * ce + 0.5 * alpha * kl
