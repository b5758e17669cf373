"""The Transformer of Vaswani et al. 2017 ("Attention Is All You Need"), from scratch.

Shapes: B batch, S source length, T target length, D d_model, H heads, E = D / H head size, V vocabulary;
everything is batch-first. A boolean mask is True where attention is ALLOWED (everywhere in this file):
`src_mask` is `[B, S]`, True at real (non-pad) source tokens. Target padding needs no mask of its own: pads
sit at the end, and the causal mask already stops every real position from seeing a later one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipeline.core.config import ModelConfig
from pipeline.model.linear_loss import linear_label_smoothed_loss


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float = 0.0) -> Tensor:
    """Scaled dot-product attention, softmax(Q Kᵀ / √E) V (§3.2.1, eq. 1).

    On CUDA the fused kernel (`F.scaled_dot_product_attention`); on CPU the explicit math of
    `attention_explicit`, no slower there with a boolean mask (docs/training.md). tests/test_model.py
    checks that both give the same output.

    Args:
        q: `[B, H, T, E]`; k, v: `[B, H, S, E]`.
        mask: boolean, broadcastable to `[B, H, T, S]`, True = may attend; None = all.
        dropout_p: dropout on the attention weights (training only; callers pass 0 in eval).
    Returns:
        `[B, H, T, E]`.
    """
    if q.is_cuda:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    out, _ = attention_explicit(q, k, v, mask, dropout_p)
    return out


def attention_explicit(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """The math of eq. 1 written out; also returns the weights `[B, H, T, S]` (rows sum to 1,
    before dropout).

    Masked scores get the dtype's lowest finite value, not -inf, and a fully masked row
    gets all-zero weights (output 0, as the fused kernel gives) instead of NaN.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return dropout(weights, dropout_p) @ v, weights


def dropout(x: Tensor, p: float) -> Tensor:
    """Inverted dropout (Srivastava et al. 2014; §5.4): zero each element with probability `p`,
    scale the rest by 1 / (1 - p). `p` = 0 returns `x` itself.

    The keep mask comes from 16-bit random integers (four per `torch.randint` int64), so `p` is
    rounded to a multiple of 1/65536: several times faster on CPU than `torch.bernoulli_`, which
    `nn.Dropout` uses (docs/training.md).

    Args: x any shape. Returns the same shape and dtype.
    """
    if p == 0.0:
        return x
    n = x.numel()
    bits = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=x.device)
    threshold = round(p * 65536) - 32768  # int16 values are uniform on [-32768, 32767]
    keep = bits.view(torch.int16)[:n].view(x.shape) >= threshold
    return x * keep / (1.0 - p)


class Dropout(nn.Module):
    """`dropout` as a module: active in training mode only."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p) if self.training else x


def sinusoid_positions(positions: Tensor, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(·) (§3.5), for any positions.

    Args:
        positions: `[T]` integer positions. Returns `[T, D]` float32.
    """
    i = torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float32)
    angles = positions.float()[:, None] / torch.pow(10000.0, i / d_model)[None, :]
    pe = torch.zeros(len(positions), d_model, device=positions.device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe


@dataclass
class KVCache:
    """Keys/values one attention reuses across calls, and optionally its attention weights.

    Cross-attention: the memory's keys/values `[N, H, S, E]`, projected once per source sentence and
    shared by its decoder rows (beams). Self-attention: those of the target positions so far
    `[R, H, t, E]` (None at first); each call appends its own. `keep_weights`: the last call's
    attention weights `[R, H, T, keys]` go to `weights`.
    """

    k: Tensor | None = None
    v: Tensor | None = None
    keep_weights: bool = False
    weights: Tensor | None = None


def group_rows(x: Tensor, n: int) -> Tensor:
    """`[n*G, H, T, E]` (G consecutive rows per sentence) -> `[n, H, G*T, E]`: the G rows of a
    sentence become extra query positions, so they share one key/value block of that sentence."""
    r, h, t, e = x.shape
    return x.view(n, r // n, h, t, e).transpose(1, 2).reshape(n, h, (r // n) * t, e)


def ungroup_rows(x: Tensor, rows: int) -> Tensor:
    """Inverse of `group_rows`: `[n, H, G*T, E]` -> `[rows, H, T, E]` with G = rows / n."""
    n, h, gt, e = x.shape
    g = rows // n
    return x.view(n, h, g, gt // g, e).transpose(1, 2).reshape(rows, h, gt // g, e)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (§3.2.2): H heads of size E = D / H, then an output projection.

    Self-attention projects Q, K, V with one `[D, 3D]` matrix; cross-attention projects Q from the
    decoder and K, V (one `[D, 2D]` matrix) from the encoder memory. The incremental keys/values and
    weights live in the `KVCache` given to `forward` (fairseq's incremental state).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float, cross: bool) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.dropout, self.cross = n_heads, dropout, cross
        if cross:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def split_heads(self, x: Tensor) -> Tensor:
        """`[B, L, D]` -> `[B, H, L, E]`."""
        b, length, d = x.shape
        return x.view(b, length, self.n_heads, d // self.n_heads).transpose(1, 2)

    def project_kv(self, memory: Tensor) -> KVCache:
        """Cross-attention keys and values of the memory `[N, S, D]`, each `[N, H, S, E]`."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        return KVCache(self.split_heads(k), self.split_heads(v))

    def merge(self, heads: Tensor) -> Tensor:
        """`[B, H, L, E]` -> output projection of the concatenated heads `[B, L, D]`."""
        b, _, length, _ = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(b, length, -1))

    def self_qkv(self, x: Tensor, cache: KVCache | None) -> tuple[Tensor, Tensor, Tensor]:
        """Queries `[R, H, T, E]` of `x` `[R, T, D]` and the keys/values `[R, H, t, E]` it attends
        to: its own, after the cached ones (the cache then holds all t)."""
        q, k, v = (self.split_heads(y) for y in self.qkv_proj(x).chunk(3, dim=-1))
        if cache is not None:
            if cache.k is not None:
                k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
            cache.k, cache.v = k, v
        return q, k, v

    def forward(self, x: Tensor, mask: Tensor | None, cache: KVCache | None = None) -> Tensor:
        """Attend from `x` `[R, T, D]`; returns `[R, T, D]`. `mask`: True = attend.

        Self-attention: `mask` broadcasts to `[R, H, T, t]` (t keys, cached ones first); `cache`
        (optional) holds and receives the keys/values. Cross-attention: `cache` (required) holds
        the memory keys/values `[N, H, S, E]` with N dividing R: rows g*G .. g*G+G-1 (G = R / N)
        attend to sentence g; `mask` is `[N, 1, 1, S]`.
        """
        if self.cross:
            q, k, v = group_rows(self.split_heads(self.q_proj(x)), cache.k.size(0)), cache.k, cache.v
        else:
            q, k, v = self.self_qkv(x, cache)
        p = self.dropout if self.training else 0.0
        if cache is not None and cache.keep_weights:
            out, weights = attention_explicit(q, k, v, mask, p)
            cache.weights = ungroup_rows(weights, x.size(0)) if self.cross else weights
        else:
            out = attention(q, k, v, mask, p)
        return self.merge(ungroup_rows(out, x.size(0)) if self.cross else out)


class FeedForward(nn.Module):
    """Position-wise FFN(x) = max(0, x W1 + b1) W2 + b2 (§3.3, eq. 2): `[B, L, D]` -> `[B, L, D]`."""

    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.w1, self.w2, self.dropout = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(F.relu(self.w1(x))))


def act_dropout(cfg: ModelConfig) -> float:
    """The FFN's dropout after ReLU: `act_dropout`, or the residual `dropout` when unset."""
    return cfg.dropout if cfg.act_dropout is None else cfg.act_dropout


class Residual(nn.Module):
    """A sublayer with residual and layer norm (§5.4 dropout): post-norm LN(x + Drop(f(x))) as in
    the paper, or pre-norm x + Drop(f(LN(x))) (Wang et al. 2019)."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), Dropout(dropout), pre_norm

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each wrapped in `Residual` (§3.1)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout, cross=False)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, act_dropout(cfg))
        self.res1, self.res2 = (Residual(cfg.d_model, cfg.dropout, cfg.pre_norm) for _ in range(2))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x `[B, S, D]`, mask `[B, 1, 1, S]` -> `[B, S, D]`."""
        x = self.res1(x, lambda h: self.self_attn(h, mask))
        return self.res2(x, self.ffn)


@dataclass
class LayerCache:
    """One decoder layer's attention caches: self-attention (positions so far) and cross-attention
    (the memory's keys/values)."""

    self_attn: KVCache
    cross_attn: KVCache


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the memory, FFN (§3.1)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout, cross=False)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout, cross=True)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, act_dropout(cfg))
        self.res1, self.res2, self.res3 = (Residual(cfg.d_model, cfg.dropout, cfg.pre_norm) for _ in range(3))

    def forward(self, x: Tensor, causal: Tensor | None, src_mask: Tensor, cache: LayerCache) -> Tensor:
        """x `[R, T, D]` (the T newest positions), causal `[T, t]` over all t positions so far
        (None: every query sees every key), src_mask `[N, 1, 1, S]` -> `[R, T, D]`."""
        x = self.res1(x, lambda h: self.self_attn(h, causal, cache.self_attn))
        x = self.res2(x, lambda h: self.cross_attn(h, src_mask, cache.cross_attn))
        return self.res3(x, self.ffn)


@dataclass
class DecoderCache:
    """The decoder's state over N source sentences and R = N*G decoder rows (G per sentence: 1 for
    training and greedy, the beam size in beam search): per-layer caches, the source mask
    `[N, 1, 1, S]` and the index of the next target position."""

    layers: list[LayerCache]
    src_mask: Tensor
    position: int = 0

    def select(self, rows: Tensor, sources: Tensor | None = None) -> None:
        """Keep/reorder the decoder rows `rows` `[R']` (e.g. beam reordering), in place; with `sources`
        `[N']`, keep only those source sentences too. The memory keys/values are never copied per row."""
        if sources is not None:
            self.src_mask = self.src_mask[sources]
        for c in self.layers:
            if sources is not None:
                c.cross_attn.k, c.cross_attn.v = c.cross_attn.k[sources], c.cross_attn.v[sources]
            if c.self_attn.k is not None:
                c.self_attn.k, c.self_attn.v = c.self_attn.k[rows], c.self_attn.v[rows]


class Transformer(nn.Module):
    """Encoder-decoder Transformer over one joint vocabulary (shared source/target ids)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, pad_id: int) -> None:
        super().__init__()
        self.cfg, self.vocab_size, self.pad_id = cfg, vocab_size, pad_id
        d = cfg.d_model
        self.src_embed = nn.Embedding(vocab_size, d, padding_idx=pad_id)
        tied = cfg.tie_embeddings
        self.tgt_embed = self.src_embed if tied else nn.Embedding(vocab_size, d, padding_idx=pad_id)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.enc_norm = nn.LayerNorm(d) if cfg.pre_norm else nn.Identity()
        self.dec_norm = nn.LayerNorm(d) if cfg.pre_norm else nn.Identity()
        self.dropout = Dropout(cfg.dropout)
        self.out_proj = None if cfg.tie_embeddings else nn.Linear(d, vocab_size, bias=False)
        self._init_weights()

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        for emb in {self.src_embed, self.tgt_embed}:
            nn.init.normal_(emb.weight, std=self.cfg.d_model**-0.5)
            nn.init.zeros_(emb.weight[self.pad_id])

    def src_mask(self, src: Tensor) -> Tensor:
        """The source padding mask, built here only: src `[B, S]` -> `[B, 1, 1, S]`, True at real tokens."""
        return (src != self.pad_id)[:, None, None, :]

    def embed(self, embedding: nn.Embedding, ids: Tensor, offset: int = 0) -> Tensor:
        """Token embedding × √D plus sinusoidal positions (§3.4, §3.5): `[B, L]` -> `[B, L, D]`."""
        positions = torch.arange(offset, offset + ids.size(1), device=ids.device)
        x = embedding(ids) * math.sqrt(self.cfg.d_model) + sinusoid_positions(positions, self.cfg.d_model)
        return self.dropout(x)

    def encode(self, src: Tensor) -> Tensor:
        """src `[B, S]` token ids -> memory `[B, S, D]`."""
        mask = self.src_mask(src)
        x = self.embed(self.src_embed, src)
        for layer in self.encoder:
            x = layer(x, mask)
        return self.enc_norm(x)

    def init_cache(self, memory: Tensor, src: Tensor) -> DecoderCache:
        """A fresh decoder state: the memory `[N, S, D]` projected to keys/values once per layer,
        the source mask of src `[N, S]`, no target position yet."""
        layers = [LayerCache(KVCache(), layer.cross_attn.project_kv(memory)) for layer in self.decoder]
        return DecoderCache(layers, self.src_mask(src))

    def decoder_states(self, tgt: Tensor, cache: DecoderCache) -> Tensor:
        """The one decoder: tgt `[R, T]` ids of the next T positions -> final states `[R, T, D]`.

        The states are taken before the final norm of pre-norm models. Earlier positions are not
        recomputed: their keys/values are in `cache`, which is updated in place."""
        t, start = tgt.size(1), cache.position
        causal = None
        if t > 1:
            causal = torch.ones(t, start + t, dtype=torch.bool, device=tgt.device).tril(diagonal=start)
        x = self.embed(self.tgt_embed, tgt, offset=start)
        for layer, layer_cache in zip(self.decoder, cache.layers, strict=True):
            x = layer(x, causal, cache.src_mask, layer_cache)
        cache.position += t
        return x

    def logits(self, x: Tensor) -> Tensor:
        """Decoder states `[..., D]` -> vocabulary logits `[..., V]` (tied or own projection)."""
        return self.dec_norm(x) @ self.output_weight().t()

    def output_weight(self) -> Tensor:
        """The `[V, D]` vocabulary projection: the tied target embedding or the own projection."""
        return self.tgt_embed.weight if self.out_proj is None else self.out_proj.weight

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        """Teacher-forced decoder: tgt_in `[B, T]` (starts with bos), memory `[B, S, D]`,
        src `[B, S]` (for its padding mask) -> logits `[B, T, V]`."""
        return self.logits(self.decoder_states(tgt_in, self.init_cache(memory, src)))

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        keep: Tensor | None = None,
        target: Tensor | None = None,
        label_smoothing: float = 0.0,
    ) -> Tensor:
        """src `[B, S]`, tgt_in `[B, T]` -> logits `[B, T, V]`.

        With `keep` (bool `[B, T]`), only the kept positions' logits `[N, V]` (N = keep.sum(), in
        `keep.nonzero()` order: `forward(src, tgt_in)[keep]`, so the projection skips pads). With
        `target` (`[N]` ids; needs `keep`), the summed label-smoothed cross-entropy (scalar, nats)
        instead, computed without the logits (`pipeline.model.linear_loss`); `pad_id` targets add 0.
        """
        x = self.decoder_states(tgt_in, self.init_cache(self.encode(src), src))
        x = x if keep is None else x[keep]
        if target is None:
            return self.logits(x)
        h = self.dec_norm(x)
        return linear_label_smoothed_loss(
            h, self.output_weight(), target, pad_id=self.pad_id, smoothing=label_smoothing
        )

    def decode_step(self, tgt_last: Tensor, cache: DecoderCache) -> Tensor:
        """Incremental decoding: the newest token ids `[R]` -> next-token logits `[R, V]`."""
        return self.logits(self.decoder_states(tgt_last[:, None], cache)[:, 0])
