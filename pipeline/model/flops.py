"""Matmul FLOPs of one training step of `pipeline.model.transformer.Transformer`.

Only matrix multiplies count (2 FLOPs per multiply-add). Training does each forward matmul
three times (forward, gradient w.r.t. the input, gradient w.r.t. the weight): 3 × 2 = 6 per
weight per token. Real tokens only (padding is wasted work, not model FLOPs). For a batch with
source lengths s_i (eos included), target lengths t_i (bos … / … eos), N_src = Σ s_i,
N_tgt = Σ t_i, L layers, D d_model, F d_ff, V vocabulary:

    FLOPs = 6 · [ L·(4D² + 2DF) · N_src      encoder: q, k, v, out projections + FFN
                + L·2D² · N_src              decoder cross-attention k, v of the memory
                + L·(6D² + 2DF) · N_tgt      decoder: self q, k, v, out + cross q, out + FFN
                + D·V · N_tgt ]              output projection (the tied embedding)
          + 12 · D · L · Σ_i (s_i² + t_i² + t_i·s_i)
                                             attention Q·Kᵀ and A·V (2 matmuls × 2D per
                                             query-key pair × 3): encoder self, decoder self,
                                             cross; causal self-attention counted in full

Embedding lookups, biases, layer norms, softmax, the loss and Adam are not matmuls and are left
out. The bracket's weights are exactly the model's non-embedding `nn.Linear` weights
(`matmul_weights`; a test checks it against the model).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.core.config import ModelConfig


def matmul_weights(cfg: ModelConfig) -> tuple[int, int]:
    """Non-embedding matmul weights applied per (source token, target token)."""
    d, f, n = cfg.d_model, cfg.d_ff, cfg.n_layers
    return n * (4 * d * d + 2 * d * f + 2 * d * d), n * (6 * d * d + 2 * d * f)


def train_step_flops(
    cfg: ModelConfig, vocab_size: int, src_lens: Sequence[int], tgt_lens: Sequence[int]
) -> int:
    """Matmul FLOPs of forward + backward on sentences of these lengths (see the module doc).

    Raises:
        ValueError: `src_lens` and `tgt_lens` differ in length.
    """
    per_src, per_tgt = matmul_weights(cfg)
    n_src, n_tgt = sum(src_lens), sum(tgt_lens)
    weights = 6 * (per_src * n_src + (per_tgt + cfg.d_model * vocab_size) * n_tgt)
    pairs = sum(s * s + t * t + t * s for s, t in zip(src_lens, tgt_lens, strict=True))
    return weights + 12 * cfg.d_model * cfg.n_layers * pairs
