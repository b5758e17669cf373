"""Greedy decoding over the Transformer's KV cache, and the conventions every search here follows.

Shapes: B sentences, K beam size, S source length, V vocabulary, L tokens generated so far.
Conventions (fairseq's; in full in docs/decoding.md): pad and bos are never generated; sentence i makes at
most `M_i = floor(a * src_len_i + b)` tokens, then eos is forced and its log-prob paid; returned ids exclude
bos and eos; ties go to the lower index; log-probs are float32, a hypothesis' sum float64.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor


class Cache(Protocol):
    """Incremental-decoding state: `select(rows, sources=None)` keeps/reorders decoder rows in
    place and, with `sources`, keeps only those source sentences."""

    def select(self, rows: Tensor, sources: Tensor | None = None) -> None: ...


class Decoder(Protocol):
    """What search needs from a model (`pipeline.model.transformer.Transformer` has it)."""

    pad_id: int

    def encode(self, src: Tensor) -> Tensor: ...
    def init_cache(self, memory: Tensor, src: Tensor) -> Cache: ...
    def decode_step(self, tgt_last: Tensor, cache: Cache) -> Tensor: ...


def max_lengths(src: Tensor, pad_id: int, max_len_a: float, max_len_b: int) -> Tensor:
    """src `[B, S]` -> per-sentence budget of tokens before eos `M = floor(a * src_len + b)` `[B]`
    (long, >= 1)."""
    src_len = (src != pad_id).sum(dim=1).double()
    return torch.floor(src_len * max_len_a + max_len_b).long().clamp(min=1)


def log_probs(logits: Tensor, banned: Tensor) -> Tensor:
    """Next-token logits `[R, V]` -> float32 log-probs `[R, V]`, the `banned` ids (pad, bos) -inf."""
    return F.log_softmax(logits.float(), dim=-1).index_fill_(1, banned, -math.inf)


@torch.inference_mode()
def greedy(
    model: Decoder, src: Tensor, bos_id: int, eos_id: int, *, max_len_a: float, max_len_b: int
) -> list[list[int]]:
    """Batched greedy decoding with the KV cache: src `[B, S]` -> B id lists (no bos/eos).

    A sentence leaves the batch when it emits eos or reaches its max length (its forced eos
    needs no step of its own); the loop ends when none is left.
    """
    limits = max_lengths(src, model.pad_id, max_len_a, max_len_b)
    cache = model.init_cache(model.encode(src), src)
    banned = torch.tensor([model.pad_id, bos_id], device=src.device)
    sentence = torch.arange(src.size(0), device=src.device)
    tokens = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    out: list[list[int]] = [[] for _ in range(src.size(0))]
    while sentence.numel():
        next_token = log_probs(model.decode_step(tokens[:, -1], cache), banned).argmax(dim=-1)  # first max
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        done = (next_token == eos_id) | (tokens.size(1) - 1 >= limits)
        if bool(done.any()):
            for i, ids in zip(sentence[done].tolist(), tokens[done, 1:].tolist(), strict=True):
                out[i] = ids[:-1] if ids[-1] == eos_id else ids
            keep = (~done).nonzero()[:, 0]
            sentence, limits, tokens = sentence[keep], limits[keep], tokens[keep]
            cache.select(keep, keep)
    return out
