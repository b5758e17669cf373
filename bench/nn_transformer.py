"""A speed baseline: our architecture built on `torch.nn.Transformer`.

How it is built: docs/benchmarks.md, "The baselines".
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bench.common import copy_embeddings
from pipeline.core.config import ModelConfig
from pipeline.model.transformer import MultiHeadAttention, Transformer, sinusoid_positions


class TorchTransformer(nn.Module):
    """`forward(src, tgt_in) -> logits [B, T, V]`, as ours."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, pad_id: int) -> None:
        super().__init__()
        self.cfg, self.pad_id, d = cfg, pad_id, cfg.d_model
        self.src_embed = nn.Embedding(vocab_size, d, padding_idx=pad_id)
        self.tgt_embed = (
            self.src_embed if cfg.tie_embeddings else nn.Embedding(vocab_size, d, padding_idx=pad_id)
        )
        self.out_proj = None if cfg.tie_embeddings else nn.Linear(d, vocab_size, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)
        layer = dict(dim_feedforward=cfg.d_ff, dropout=cfg.dropout, batch_first=True, norm_first=cfg.pre_norm)
        encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, cfg.n_heads, **layer),
            cfg.n_layers,
            norm=nn.LayerNorm(d) if cfg.pre_norm else None,
            enable_nested_tensor=False,
        )
        decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(d, cfg.n_heads, **layer),
            cfg.n_layers,
            norm=nn.LayerNorm(d) if cfg.pre_norm else None,
        )
        self.core = nn.Transformer(
            d, cfg.n_heads, custom_encoder=encoder, custom_decoder=decoder, batch_first=True
        )
        for attn in self.attentions():
            attn.dropout = cfg.attn_dropout

    def attentions(self) -> list[nn.MultiheadAttention]:
        enc = [layer.self_attn for layer in self.core.encoder.layers]
        return enc + [
            a for layer in self.core.decoder.layers for a in (layer.self_attn, layer.multihead_attn)
        ]

    def embed(self, embedding: nn.Embedding, ids: Tensor) -> Tensor:
        positions = torch.arange(ids.size(1), device=ids.device)
        x = embedding(ids) * math.sqrt(self.cfg.d_model) + sinusoid_positions(positions, self.cfg.d_model)
        return self.dropout(x)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src `[B, S]`, tgt_in `[B, T]` -> logits `[B, T, V]`."""
        t = tgt_in.size(1)
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt_in.device).triu(1)  # True = masked
        src_pad = src == self.pad_id
        x = self.core(
            self.embed(self.src_embed, src),
            self.embed(self.tgt_embed, tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return x @ self.tgt_embed.weight.t() if self.out_proj is None else self.out_proj(x)


def _copy_attention(dst: nn.MultiheadAttention, src: MultiHeadAttention) -> None:
    if src.cross:
        dst.in_proj_weight.copy_(torch.cat([src.q_proj.weight, src.kv_proj.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.q_proj.bias, src.kv_proj.bias]))
    else:
        dst.in_proj_weight.copy_(src.qkv_proj.weight)
        dst.in_proj_bias.copy_(src.qkv_proj.bias)
    dst.out_proj.load_state_dict(src.out_proj.state_dict())


def _copy_layer(dst: nn.Module, src: nn.Module) -> None:
    """Our encoder/decoder layer -> PyTorch's (`res<i>.norm` -> `norm<i>`, `ffn.w<i>` -> `linear<i>`)."""
    _copy_attention(dst.self_attn, src.self_attn)
    if hasattr(src, "cross_attn"):
        _copy_attention(dst.multihead_attn, src.cross_attn)
    dst.linear1.load_state_dict(src.ffn.w1.state_dict())
    dst.linear2.load_state_dict(src.ffn.w2.state_dict())
    for i in (1, 2, 3) if hasattr(src, "res3") else (1, 2):
        getattr(dst, f"norm{i}").load_state_dict(getattr(src, f"res{i}").norm.state_dict())


@torch.no_grad()
def from_ours(ours: Transformer) -> TorchTransformer:
    """A `TorchTransformer` computing the same function as `ours` (same weights)."""
    model = TorchTransformer(ours.cfg, ours.vocab_size, ours.pad_id)
    copy_embeddings(model, ours)
    for dst, src in zip(model.core.encoder.layers, ours.encoder, strict=True):
        _copy_layer(dst, src)
    for dst, src in zip(model.core.decoder.layers, ours.decoder, strict=True):
        _copy_layer(dst, src)
    if ours.cfg.pre_norm:
        model.core.encoder.norm.load_state_dict(ours.enc_norm.state_dict())
        model.core.decoder.norm.load_state_dict(ours.dec_norm.state_dict())
    return model
