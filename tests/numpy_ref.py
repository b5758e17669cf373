"""A pure-numpy reference of the Transformer's math (Vaswani et al. 2017), for tests only.

Written to be read next to the paper, not to be fast: float64 throughout, one function per
equation. `tests/test_model.py` copies the weights of the torch modules in `pipeline.model.transformer`
into these functions and checks that both give the same numbers.

Shapes use the letters of `pipeline.model.transformer`: B batch, S source length, T target (query)
length, D d_model, H heads, E = D / H head size, F d_ff. Leading batch dimensions are
optional (written `...`).

Weights follow the paper's row-vector convention, `y = x @ W + b` with `W` `[D_in, D_out]`.
(A torch `nn.Linear` stores `weight` as `[D_out, D_in]` and computes `x @ weight.T + bias`,
so its `weight.T` goes here.)

Mask convention (as in `pipeline.model.transformer`): a boolean mask is True where attention is ALLOWED.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

LN_EPS = 1e-5  # torch.nn.LayerNorm's default


class AttentionWeights(NamedTuple):
    """Projections of one multi-head attention (§3.2.2): `w_*` `[D, D]`, `b_*` `[D]`."""

    w_q: np.ndarray
    b_q: np.ndarray
    w_k: np.ndarray
    b_k: np.ndarray
    w_v: np.ndarray
    b_v: np.ndarray
    w_o: np.ndarray
    b_o: np.ndarray


class FeedForwardWeights(NamedTuple):
    """Position-wise FFN (§3.3): `w1` `[D, F]`, `b1` `[F]`, `w2` `[F, D]`, `b2` `[D]`."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray


class NormWeights(NamedTuple):
    """Layer norm gain `gamma` `[D]` and bias `beta` `[D]`."""

    gamma: np.ndarray
    beta: np.ndarray


class EncoderLayerWeights(NamedTuple):
    """Self-attention, FFN, and the norms of their two residual sublayers (§3.1)."""

    self_attn: AttentionWeights
    ffn: FeedForwardWeights
    norm1: NormWeights
    norm2: NormWeights


class DecoderLayerWeights(NamedTuple):
    """Masked self-attention, cross-attention, FFN, and the norms of their sublayers (§3.1)."""

    self_attn: AttentionWeights
    cross_attn: AttentionWeights
    ffn: FeedForwardWeights
    norm1: NormWeights
    norm2: NormWeights
    norm3: NormWeights


def softmax(x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Softmax over the last axis, where only entries with `mask` True take part.

    Masked entries get weight exactly 0; a row with no allowed entry gets all zeros
    (not NaN). `mask` broadcasts to `x.shape`; None allows everything.
    """
    x = np.asarray(x, dtype=np.float64)
    allowed = np.ones(x.shape, dtype=bool) if mask is None else np.broadcast_to(mask, x.shape)
    filled = np.where(allowed, x, -np.inf)
    row_max = filled.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)  # fully masked row: avoid -inf - -inf
    e = np.exp(filled - row_max)  # exp(-inf) = 0 at masked entries
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def scaled_dot_product_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V (§3.2.1, eq. 1).

    Args:
        q: `[..., T, E]`; k: `[..., S, E]`; v: `[..., S, E_v]`.
        mask: boolean, broadcastable to `[..., T, S]`, True = may attend; None = all.
    Returns:
        output `[..., T, E_v]` and weights `[..., T, S]` (each row sums to 1, or is all 0
        when the row is fully masked).
    """
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    weights = softmax(scores, mask)
    return weights @ v, weights


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """`[..., L, D]` -> `[..., H, L, E]`."""
    *lead, length, d = x.shape
    return np.swapaxes(x.reshape(*lead, length, n_heads, d // n_heads), -3, -2)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """`[..., H, L, E]` -> `[..., L, H * E]` (concatenation of the heads)."""
    *lead, h, length, e = x.shape
    return np.swapaxes(x, -3, -2).reshape(*lead, length, h * e)


def multi_head_attention(
    x_q: np.ndarray, x_kv: np.ndarray, w: AttentionWeights, n_heads: int, mask: np.ndarray | None = None
) -> np.ndarray:
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O, head_i = Attention(Q W_i^Q, K W_i^K,
    V W_i^V) (§3.2.2). Head i uses columns i*E:(i+1)*E of `w_q`, `w_k`, `w_v`.

    Args:
        x_q: queries `[..., T, D]`; x_kv: keys/values `[..., S, D]` (`x_q` itself for
            self-attention, the encoder memory for cross-attention).
        w: the projections, see `AttentionWeights`.
        mask: boolean, broadcastable to `[..., T, S]` (the same for every head), True = attend.
    Returns:
        `[..., T, D]`.
    """
    q = split_heads(x_q @ w.w_q + w.b_q, n_heads)
    k = split_heads(x_kv @ w.w_k + w.b_k, n_heads)
    v = split_heads(x_kv @ w.w_v + w.b_v, n_heads)
    head_mask = None if mask is None else np.expand_dims(mask, -3)  # [..., 1, T, S]
    heads, _ = scaled_dot_product_attention(q, k, v, head_mask)
    return merge_heads(heads) @ w.w_o + w.b_o


def positional_encoding(length: int, d_model: int) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) (§3.5).

    Returns `[length, d_model]` for positions 0 .. length - 1.
    """
    pos = np.arange(length, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angles = pos / np.power(10000.0, two_i / d_model)
    pe = np.zeros((length, d_model))
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return pe


def layer_norm(x: np.ndarray, w: NormWeights, eps: float = LN_EPS) -> np.ndarray:
    """LN(x) = gamma * (x - mean) / sqrt(var + eps) + beta over the last axis (Ba et al. 2016);
    biased variance, as torch. `[..., D]` -> `[..., D]`."""
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return w.gamma * (x - mean) / np.sqrt(var + eps) + w.beta


def feed_forward(x: np.ndarray, w: FeedForwardWeights) -> np.ndarray:
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (§3.3, eq. 2): `[..., D]` -> `[..., D]`."""
    return np.maximum(0.0, x @ w.w1 + w.b1) @ w.w2 + w.b2


def residual(
    x: np.ndarray, sublayer: Callable[[np.ndarray], np.ndarray], norm: NormWeights, pre_norm: bool
) -> np.ndarray:
    """A residual sublayer (§3.1, §5.4 without dropout): post-norm LN(x + Sublayer(x)) as in
    the paper, or pre-norm x + Sublayer(LN(x)) (Wang et al. 2019). `[..., D]` -> `[..., D]`."""
    if pre_norm:
        return x + sublayer(layer_norm(x, norm))
    return layer_norm(x + sublayer(x), norm)


def encoder_layer(
    x: np.ndarray, w: EncoderLayerWeights, n_heads: int, mask: np.ndarray | None, pre_norm: bool
) -> np.ndarray:
    """One encoder layer (§3.1): self-attention, then FFN, each a residual sublayer.

    Args:
        x: `[B, S, D]`. mask: broadcastable to `[B, S, S]`, e.g. the padding mask `[B, 1, S]`.
    Returns:
        `[B, S, D]`.
    """
    x = residual(x, lambda h: multi_head_attention(h, h, w.self_attn, n_heads, mask), w.norm1, pre_norm)
    return residual(x, lambda h: feed_forward(h, w.ffn), w.norm2, pre_norm)


def decoder_layer(
    x: np.ndarray,
    memory: np.ndarray,
    w: DecoderLayerWeights,
    n_heads: int,
    self_mask: np.ndarray | None,
    src_mask: np.ndarray | None,
    pre_norm: bool,
) -> np.ndarray:
    """One decoder layer (§3.1): masked self-attention, cross-attention over the encoder
    output, then FFN, each a residual sublayer.

    Args:
        x: `[B, T, D]`; memory: encoder output `[B, S, D]`.
        self_mask: broadcastable to `[B, T, T]`, e.g. the causal mask `[T, T]`.
        src_mask: broadcastable to `[B, T, S]`, e.g. the source padding mask `[B, 1, S]`.
    Returns:
        `[B, T, D]`.
    """
    x = residual(x, lambda h: multi_head_attention(h, h, w.self_attn, n_heads, self_mask), w.norm1, pre_norm)
    x = residual(
        x, lambda h: multi_head_attention(h, memory, w.cross_attn, n_heads, src_mask), w.norm2, pre_norm
    )
    return residual(x, lambda h: feed_forward(h, w.ffn), w.norm3, pre_norm)


def causal_mask(length: int) -> np.ndarray:
    """`[T, T]` lower-triangular boolean: position t may attend to positions <= t (§3.2.3)."""
    return np.tril(np.ones((length, length), dtype=bool))
