"""Token-based, length-bucketed batching of (src, tgt) id pairs.

A batch's size in tokens is `n_pairs × longest side` (the padded tokens of its larger
side, as fairseq's `max_tokens`). Pairs are sorted by length after a seeded shuffle
(so equal lengths mix differently each epoch), cut into batches that stay under
`max_tokens`, and the batch order is shuffled. The order depends only on
`(seed, epoch)`, so a run can resume at any `(epoch, batch index)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

Pair = tuple[list[int], list[int]]


def batch_tokens(n_pairs: int, longest: int) -> int:
    """Padded tokens of a batch: pairs × longest src-or-tgt length (tokens)."""
    return n_pairs * longest


def make_batches(pairs: list[Pair], max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """Split pair indices into length-bucketed batches of at most `max_tokens` padded tokens.

    Every index appears in exactly one batch. A single pair longer than `max_tokens`
    gets a batch of its own.

    Returns: a list of batches, each a list of indices into `pairs`.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(pairs))
    lengths = np.array([max(len(pairs[i][0]), len(pairs[i][1])) for i in order])
    order = order[np.argsort(lengths, kind="stable")]
    batches, current, longest = [], [], 0
    for i in order:
        n = max(len(pairs[i][0]), len(pairs[i][1]))
        if current and batch_tokens(len(current) + 1, max(longest, n)) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(int(i))
        longest = max(longest, n)
    if current:
        batches.append(current)
    return [batches[j] for j in rng.permutation(len(batches))]


def pad(seqs: list[list[int]], pad_id: int) -> Tensor:
    """Right-pad id lists into a `[B, L]` long tensor."""
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for row, s in enumerate(seqs):
        out[row, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def collate(pairs: list[Pair], pad_id: int, bos_id: int, eos_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """Pairs of piece ids (no specials) -> `src [B, S]` (ends with eos), `tgt_in [B, T]` (starts
    with bos) and `tgt_out [B, T]` (ends with eos): the teacher-forcing shift."""
    src = pad([s + [eos_id] for s, _ in pairs], pad_id)
    tgt_in = pad([[bos_id] + t for _, t in pairs], pad_id)
    tgt_out = pad([t + [eos_id] for _, t in pairs], pad_id)
    return src, tgt_in, tgt_out


def batches(order: Sequence[int], size: int) -> Iterator[list[int]]:
    """Consecutive chunks of `order` of at most `size` items."""
    for start in range(0, len(order), size):
        yield list(order[start : start + size])


def longest_first(items: Iterable[int], lengths: Sequence[int], size: int) -> Iterator[list[int]]:
    """The indices `items` ordered longest first by `lengths[i]` (ties: the lower index first), in
    chunks of at most `size`: the order every decoder here (validation, beam search, CTranslate2)
    takes sentences in, so a sentence's batch mates depend only on the lengths."""
    return batches(sorted(items, key=lambda i: (-lengths[i], i)), size)
