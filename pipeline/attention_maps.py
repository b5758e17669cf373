"""Cross-attention weights of the last decoder layer, every head, without touching `model.py`.

`pipeline.model` computes attention with the fused kernel, which returns no weights. Here the
teacher-forced decoder is run again layer by layer: every layer but the last through its own
`forward`, the last one sub-layer by sub-layer with its cross-attention recomputed by
`attention_explicit` from the layer's own `q_proj`, `split_heads`, `project_kv` and `merge`.
The logits returned alongside the weights are the model's (tests check they equal
`Transformer.decode` within 1e-5), so the weights shown are those of the computation that ran.

Shapes: B batch, H heads, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from pipeline.model import DecoderLayer, Transformer, attention_explicit
from pipeline.tokenizer import Tokenizer


class CrossAttention(NamedTuple):
    """The re-run decoder's logits `[B, T, V]` and the last layer's cross-attention `[B, H, T, S]`."""

    logits: Tensor
    weights: Tensor


class AttentionMap(NamedTuple):
    """One sentence: source pieces (S, eos included), target pieces (T, the tokens each decoder
    position predicts, eos included) and the weights `[H, T, S]` (each row sums to 1)."""

    src_pieces: list[str]
    tgt_pieces: list[str]
    weights: Tensor


def _last_layer(
    layer: DecoderLayer, x: Tensor, memory_kv: tuple[Tensor, Tensor], causal: Tensor, src_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """`DecoderLayer.forward` spelt out, with explicit cross-attention: x `[B, T, D]` ->
    (`[B, T, D]`, weights `[B, H, T, S]`)."""
    attn = layer.cross_attn
    weights: list[Tensor] = []

    def cross(h: Tensor) -> Tensor:
        out, w = attention_explicit(attn.split_heads(attn.q_proj(h)), *memory_kv, src_mask)
        weights.append(w)
        return attn.merge(out)

    x = layer.res1(x, lambda h: layer.self_attn(h, causal))
    x = layer.res2(x, cross)
    return layer.res3(x, layer.ffn), weights[0]


@torch.inference_mode()
def cross_attention(model: Transformer, src: Tensor, tgt_in: Tensor) -> CrossAttention:
    """Teacher-forced decoding of tgt_in `[B, T]` (starts with bos) over src `[B, S]`; returns the
    logits and the last decoder layer's cross-attention weights. Eval mode: no dropout."""
    model.eval()
    memory = model.encode(src)
    t = tgt_in.size(1)
    causal = torch.ones(t, t, dtype=torch.bool, device=tgt_in.device).tril()
    src_mask = (src != model.pad_id)[:, None, None, :]
    x = model.embed(model.tgt_embed, tgt_in)
    *first, last = model.decoder
    for layer in first:
        x = layer(x, layer.cross_attn.project_kv(memory), causal, src_mask)
    x, weights = _last_layer(last, x, last.cross_attn.project_kv(memory), causal, src_mask)
    return CrossAttention(model.logits(x), weights)


def attention_map(model: Transformer, tok: Tokenizer, source: str, translation: str) -> AttentionMap:
    """The last decoder layer's cross-attention for one sentence and a translation of it (the
    model's own, as detokenised text: it is re-encoded, so the pieces are the tokenizer's).

    Source ids are pieces + eos (as in training and search); the decoder is fed bos + pieces and
    row t of the weights is the position that predicts target piece t (the last one eos).
    """
    device = next(model.parameters()).device
    src_ids = tok.encode(source) + [tok.eos_id]
    tgt_ids = tok.encode(translation)
    src = torch.tensor([src_ids], device=device)
    tgt_in = torch.tensor([[tok.bos_id, *tgt_ids]], device=device)
    weights = cross_attention(model, src, tgt_in).weights[0].float().cpu()
    return AttentionMap(tok.id_to_piece(src_ids), tok.id_to_piece(tgt_ids + [tok.eos_id]), weights)
