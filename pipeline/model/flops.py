"""Matmul FLOPs of one training step of `pipeline.model.transformer.Transformer`: 6 per weight
per real token for the linear layers, plus attention's Q·Kᵀ and A·V; the formula is in
docs/benchmarks.md ("FLOPs and MFU"). Embeddings, norms, softmax, the loss and Adam are left out.
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
