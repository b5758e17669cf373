"""Validation during training: loss, and greedy outputs scored by exact match or sacreBLEU
(`bleu_validation`: Multi30k val, the `train` stage's).

Greedy decoding reads the `decode` section of params.yaml (batch size, max length a·src + b), so
validation and the decode stage bound their outputs the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from pipeline.core.config import DecodeConfig
from pipeline.core.metrics import score
from pipeline.data.batching import Pair, collate, longest_first, make_batches, pad
from pipeline.data.tokenizer import BOS_ID, EOS_ID, Tokenizer
from pipeline.model.greedy import greedy
from pipeline.model.transformer import Transformer

Metric = Callable[[list[str], list[str]], float]  # (hypotheses, references) -> score, higher = better


def exact_match(hyps: list[str], refs: list[str]) -> float:
    """Fraction of hypotheses equal to their reference string."""
    return sum(h == r for h, r in zip(hyps, refs, strict=True)) / max(len(refs), 1)


@torch.inference_mode()
def greedy_ids(model: Transformer, srcs: list[list[int]], decode: DecodeConfig) -> list[list[int]]:
    """Greedy outputs (ids without specials) for source id lists (without eos), in input order.

    Sources are decoded longest first, `decode.batch_size` at a time, on the model's device; a
    sentence of S source ids (eos included) gets at most `max_len_a · S + max_len_b` tokens.
    """
    model.eval()
    device = next(model.parameters()).device
    out: list[list[int]] = [[] for _ in srcs]
    for chunk in longest_first(range(len(srcs)), [len(s) for s in srcs], decode.batch_size):
        src = pad([srcs[i] + [EOS_ID] for i in chunk], model.pad_id).to(device)
        for i, ids in zip(
            chunk,
            greedy(model, src, BOS_ID, EOS_ID, max_len_a=decode.max_len_a, max_len_b=decode.max_len_b),
            strict=True,
        ):
            out[i] = ids
    return out


@torch.inference_mode()
def validation_loss(model: Transformer, pairs: list[Pair], max_tokens: int) -> float:
    """Mean per-target-token cross-entropy (no smoothing, nats) of `model` on `pairs`."""
    model.eval()
    device = next(model.parameters()).device
    total, n = 0.0, 0
    for batch in make_batches(pairs, max_tokens, seed=0, epoch=0):
        src, tgt_in, tgt_out = (
            t.to(device) for t in collate([pairs[i] for i in batch], model.pad_id, BOS_ID, EOS_ID)
        )
        keep = tgt_out != model.pad_id  # [B, T]: the loss of the non-pad positions only
        total += model(src, tgt_in, keep, target=tgt_out[keep]).item()
        n += int(keep.sum())
    return total / max(n, 1)


@dataclass(frozen=True)
class Validation:
    """What a model is validated on: `pairs` (src, tgt ids without specials) for the loss, and the
    greedy outputs of their sources, turned to text by `to_text`, scored against `refs` by `metric`.

    `validation(model)` -> {"val_loss": ..., metric_name: ...}; `validation.score(model)` -> the
    metric alone (the model is moved to `device` first).
    """

    pairs: list[Pair]
    refs: list[str]
    to_text: Callable[[list[int]], str]
    metric_name: str  # e.g. "val_bleu", "val_exact_match"
    metric: Metric
    decode: DecodeConfig
    max_tokens: int = 2500  # batch size of the loss computation (padded tokens)
    device: torch.device = torch.device("cpu")

    def score(self, model: Transformer) -> float:
        model.to(self.device)
        hyps = [self.to_text(ids) for ids in greedy_ids(model, [s for s, _ in self.pairs], self.decode)]
        return self.metric(hyps, self.refs)

    def __call__(self, model: Transformer) -> dict[str, float]:
        model.to(self.device)
        return {
            "val_loss": validation_loss(model, self.pairs, self.max_tokens),
            self.metric_name: self.score(model),
        }


def bleu_validation(
    tok: Tokenizer,
    val: Mapping[str, list[str]],
    decode: DecodeConfig,
    *,
    max_tokens: int,
    device: torch.device,
    tgt: str = "de",
) -> Validation:
    """Validation on Multi30k val sentences (`val["en"]`, `val[tgt]`): loss, and sacreBLEU of the
    greedy outputs (`val_bleu`)."""
    return Validation(
        encode_pairs(tok, val["en"], val[tgt]),
        list(val[tgt]),
        tok.decode,
        "val_bleu",
        lambda hyps, refs: score(hyps, refs)["bleu"],
        decode,
        max_tokens,
        device,
    )


def encode_pairs(tok: Tokenizer, en: list[str], de: list[str], max_len: int | None = None) -> list[Pair]:
    """(src ids, tgt ids) per pair; pairs with a side over `max_len` pieces are dropped."""
    pairs = list(zip(tok.encode_batch(en), tok.encode_batch(de), strict=True))
    return [p for p in pairs if max_len is None or max(len(p[0]), len(p[1])) <= max_len]
