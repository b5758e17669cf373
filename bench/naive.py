"""A speed baseline written the way the tutorial writes a Transformer (our own code).

How it is built: docs/benchmarks.md, "The baselines".
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.common import copy_embeddings
from pipeline.core.config import ModelConfig
from pipeline.model.transformer import Transformer


def position_table(max_len: int, d_model: int) -> Tensor:
    """Sinusoidal positions `[max_len, D]`, computed once as the tutorial does (exp/log form)."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table


class NaiveAttention(nn.Module):
    """Multi-head attention with separate projections and explicit masked softmax."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)

    def heads(self, x: Tensor) -> Tensor:
        """`[B, L, D]` -> `[B, H, L, E]`."""
        return x.view(x.size(0), -1, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor) -> Tensor:
        """query `[B, T, D]`, key/value `[B, S, D]`, mask broadcastable to `[B, 1, T, S]`."""
        q, k, v = self.heads(self.w_q(query)), self.heads(self.w_k(key)), self.heads(self.w_v(value))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_head)
        scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = self.dropout(F.softmax(scores, dim=-1))
        out = torch.matmul(weights, v).transpose(1, 2).contiguous()
        return self.w_o(out.view(query.size(0), -1, self.n_heads * self.d_head))


def feed_forward(cfg: ModelConfig) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(cfg.d_model, cfg.d_ff), nn.ReLU(), nn.Dropout(cfg.dropout), nn.Linear(cfg.d_ff, cfg.d_model)
    )


class NaiveEncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = NaiveAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.ff = feed_forward(cfg)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.dropout1, self.dropout2 = nn.Dropout(cfg.dropout), nn.Dropout(cfg.dropout)
        self.pre_norm = cfg.pre_norm

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        if self.pre_norm:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, src_mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, src_mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))


class NaiveDecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = NaiveAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.cross_attn = NaiveAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.ff = feed_forward(cfg)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(cfg.d_model) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(cfg.dropout) for _ in range(3))
        self.pre_norm = cfg.pre_norm

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> Tensor:
        if self.pre_norm:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, tgt_mask))
            x = x + self.dropout2(self.cross_attn(self.norm2(x), memory, memory, src_mask))
            return x + self.dropout3(self.ff(self.norm3(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout2(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + self.dropout3(self.ff(x)))


class NaiveTransformer(nn.Module):
    """Encoder-decoder in the tutorial's style; `forward(src, tgt_in) -> logits [B, T, V]` as ours."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, pad_id: int, max_len: int = 5000) -> None:
        super().__init__()
        self.cfg, self.pad_id = cfg, pad_id
        self.src_embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        self.tgt_embed = (
            self.src_embed
            if cfg.tie_embeddings
            else nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        )
        self.out_proj = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, vocab_size, bias=False)
        self.register_buffer("pe", position_table(max_len, cfg.d_model), persistent=False)
        self.encoder = nn.ModuleList(NaiveEncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.decoder = nn.ModuleList(NaiveDecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.enc_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.dec_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.dropout = nn.Dropout(cfg.dropout)

    def embed(self, embedding: nn.Embedding, ids: Tensor) -> Tensor:
        x = embedding(ids) * math.sqrt(self.cfg.d_model)
        return self.dropout(x + self.pe[: ids.size(1)])

    def masks(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """src mask `[B, 1, 1, S]`; target mask `[B, 1, T, T]` = target padding & causal."""
        t = tgt_in.size(1)
        causal = torch.tril(torch.ones(t, t, device=tgt_in.device)).bool()
        return (src != self.pad_id)[:, None, None, :], (tgt_in != self.pad_id)[:, None, None, :] & causal

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src `[B, S]`, tgt_in `[B, T]` -> logits `[B, T, V]`."""
        src_mask, tgt_mask = self.masks(src, tgt_in)
        memory = self.embed(self.src_embed, src)
        for layer in self.encoder:
            memory = layer(memory, src_mask)
        memory = self.enc_norm(memory)
        x = self.embed(self.tgt_embed, tgt_in)
        for layer in self.decoder:
            x = layer(x, memory, src_mask, tgt_mask)
        x = self.dec_norm(x)
        return x @ self.tgt_embed.weight.t() if self.out_proj is None else self.out_proj(x)


def _copy_linear(dst: nn.Linear, weight: Tensor, bias: Tensor) -> None:
    dst.weight.copy_(weight)
    dst.bias.copy_(bias)


def _copy_attention(dst: NaiveAttention, src) -> None:
    """Our fused projections (rows q, k, v or q | k, v) -> separate w_q, w_k, w_v, w_o."""
    if src.cross:
        weights = (src.q_proj.weight, *src.kv_proj.weight.chunk(2))
        biases = (src.q_proj.bias, *src.kv_proj.bias.chunk(2))
    else:
        weights, biases = src.qkv_proj.weight.chunk(3), src.qkv_proj.bias.chunk(3)
    for lin, w, b in zip((dst.w_q, dst.w_k, dst.w_v), weights, biases, strict=True):
        _copy_linear(lin, w, b)
    _copy_linear(dst.w_o, src.out_proj.weight, src.out_proj.bias)


@torch.no_grad()
def from_ours(ours: Transformer) -> NaiveTransformer:
    """A `NaiveTransformer` computing the same function as `ours` (same weights)."""
    naive = NaiveTransformer(ours.cfg, ours.vocab_size, ours.pad_id)
    copy_embeddings(naive, ours)
    pairs = [*zip(naive.encoder, ours.encoder, strict=True), *zip(naive.decoder, ours.decoder, strict=True)]
    for dst, src in pairs:
        _copy_attention(dst.self_attn, src.self_attn)
        if hasattr(src, "cross_attn"):
            _copy_attention(dst.cross_attn, src.cross_attn)
        _copy_linear(dst.ff[0], src.ffn.w1.weight, src.ffn.w1.bias)
        _copy_linear(dst.ff[3], src.ffn.w2.weight, src.ffn.w2.bias)
        for i in (1, 2, 3) if hasattr(src, "res3") else (1, 2):
            getattr(dst, f"norm{i}").load_state_dict(getattr(src, f"res{i}").norm.state_dict())
    naive.enc_norm.load_state_dict(ours.enc_norm.state_dict())
    naive.dec_norm.load_state_dict(ours.dec_norm.state_dict())
    return naive
