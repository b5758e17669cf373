"""Cross-attention weights of the last decoder layer, every head, from the model's own decoder: the
teacher-forced decoder runs once with the last layer's cache keeping its weights, so the weights
shown are those that produced the logits. Shapes: B batch, H heads, S source length, T target
length, V vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from pipeline.data.tokenizer import Tokenizer
from pipeline.model.transformer import Transformer


class CrossAttention(NamedTuple):
    """The decoder's logits `[B, T, V]` and the last layer's cross-attention `[B, H, T, S]`."""

    logits: Tensor
    weights: Tensor


class AttentionMap(NamedTuple):
    """One sentence: source pieces (S, eos included), target pieces (T, the tokens each decoder
    position predicts, eos included) and the weights `[H, T, S]` (each row sums to 1)."""

    src_pieces: list[str]
    tgt_pieces: list[str]
    weights: Tensor


@torch.inference_mode()
def cross_attention(model: Transformer, src: Tensor, tgt_in: Tensor) -> CrossAttention:
    """Teacher-forced decoding of tgt_in `[B, T]` (starts with bos) over src `[B, S]`; returns the
    logits and the last decoder layer's cross-attention weights. Eval mode: no dropout."""
    model.eval()
    cache = model.init_cache(model.encode(src), src)
    last = cache.layers[-1].cross_attn
    last.keep_weights = True
    logits = model.logits(model.decoder_states(tgt_in, cache))
    return CrossAttention(logits, last.weights)


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
