"""Validation during training: greedy outputs scored by exact match or sacreBLEU."""

from __future__ import annotations

from collections.abc import Callable

import torch

from pipeline.batching import pad
from pipeline.model import Transformer
from pipeline.search import greedy


@torch.inference_mode()
def greedy_ids(
    model: Transformer,
    srcs: list[list[int]],
    eos_id: int,
    bos_id: int,
    batch_size: int = 128,
    device: torch.device | None = None,
) -> list[list[int]]:
    """Greedy outputs (ids without specials) for source id lists (without eos), in input order.

    Sources are decoded longest first in batches of `batch_size` sentences.
    """
    model.eval()
    order = sorted(range(len(srcs)), key=lambda i: -len(srcs[i]))
    out: list[list[int]] = [[] for _ in srcs]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = pad([srcs[i] + [eos_id] for i in chunk], model.pad_id).to(device or "cpu")
        for i, ids in zip(
            chunk, greedy(model, src, bos_id, eos_id, max_len_a=1.5, max_len_b=10), strict=True
        ):
            out[i] = ids
    return out


def exact_match(hyps: list[str], refs: list[str]) -> float:
    """Fraction of hypotheses equal to their reference string."""
    return sum(h == r for h, r in zip(hyps, refs, strict=True)) / max(len(refs), 1)


def greedy_scorer(
    srcs: list[list[int]],
    refs: list[str],
    decode_ids: Callable[[list[int]], str],
    metric: Callable[[list[str], list[str]], float],
    bos_id: int,
    eos_id: int,
    device: torch.device,
) -> Callable[[Transformer], float]:
    """A function model -> metric(greedy hypotheses, refs)."""

    def score(model: Transformer) -> float:
        hyps = [decode_ids(ids) for ids in greedy_ids(model, srcs, eos_id, bos_id, device=device)]
        return metric(hyps, refs)

    return score
