"""Token-based, length-bucketed batching of (src, tgt) id pairs.

A batch's size in tokens is `n_pairs × longest side` (the padded tokens of its larger side, as fairseq's
`max_tokens`). Pairs are sorted by length after a seeded shuffle (so equal lengths mix differently each
epoch), cut into batches that stay under `max_tokens`, and the batch order is shuffled. The order depends
only on `(seed, epoch)`, so a run can resume at any `(epoch, batch index)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from pipeline.data.tokenizer import BOS_ID, EOS_ID

Pair = tuple[list[int], list[int]]


def batch_tokens(n_pairs: int, longest: int) -> int:
    """Padded tokens of a batch: pairs × longest src-or-tgt length (tokens)."""
    return n_pairs * longest


def longest_sides(pairs: Sequence[Pair]) -> np.ndarray:
    """`[n_pairs]` int64: the longer side of each pair (pieces), what batching sorts and cuts by."""
    return np.fromiter((max(len(s), len(t)) for s, t in pairs), dtype=np.int64, count=len(pairs))


def batch_order(lengths: np.ndarray, max_tokens: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Pair indices cut into length-bucketed batches of at most `max_tokens` padded tokens.

    `lengths` (`[n_pairs]`, pieces) is each pair's longer side. Every index appears in exactly
    one batch; a single pair longer than `max_tokens` gets a batch of its own. A seeded shuffle,
    a stable sort by length, then each batch takes the most pairs that fit: sorted ascending, a
    batch of k pairs from position s costs `k × lengths[s + k - 1]` tokens, which grows with k,
    so the cut is a binary search per batch, not a loop over pairs.

    Returns: the batches (int64 index arrays) in a shuffled order that depends only on
    `(seed, epoch)`.
    """
    lengths = np.asarray(lengths)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    order = order[np.argsort(lengths[order], kind="stable")]
    ranked = lengths[order]
    cuts, start = [0], 0
    while start < len(ranked):
        start += _batch_size(ranked, start, max_tokens)
        cuts.append(start)
    batches = [order[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    return [batches[j] for j in rng.permutation(len(batches))]


def _batch_size(ranked: np.ndarray, start: int, max_tokens: int) -> int:
    """How many pairs from `start` of the ascending `ranked` lengths fit in `max_tokens` (≥ 1)."""
    window = max_tokens // max(int(ranked[start]), 1) + 1  # more cannot fit (lengths only grow)
    while True:
        tail = ranked[start : start + window]
        cost = np.arange(1, len(tail) + 1) * tail
        fit = int(np.searchsorted(cost, max_tokens, side="right"))
        if fit < len(tail) or start + window >= len(ranked):
            return max(fit, 1)
        window *= 2  # zero-length pairs cost nothing: widen until one does not fit


class EpochOrder:
    """The seeded batch order of every epoch (`batch_order` of the pairs' `lengths`), each epoch's
    computed once, read from a position (epoch, batches of that epoch already taken)."""

    def __init__(self, lengths: np.ndarray, max_tokens: int, seed: int) -> None:
        self.lengths, self.max_tokens, self.seed, self.cached = lengths, max_tokens, seed, (-1, [])

    def __call__(self, epoch: int) -> list[np.ndarray]:
        if self.cached[0] != epoch:
            self.cached = (epoch, batch_order(self.lengths, self.max_tokens, self.seed, epoch))
        return self.cached[1]

    def take(self, n: int, epoch: int, index: int) -> tuple[list[np.ndarray], int, int]:
        """The next `n` batches from batch `index` of `epoch`, crossing into the next epochs as
        needed; returns (the batches, the epoch and index after them)."""
        out = []
        while len(out) < n:
            batches = self(epoch)
            if index >= len(batches):
                epoch, index = epoch + 1, 0
                continue
            out.append(batches[index])
            index += 1
        return out, epoch, index


def make_batches(pairs: Sequence[Pair], max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """`batch_order` of `pairs` (lists of piece ids), each batch a list of indices into `pairs`."""
    return [b.tolist() for b in batch_order(longest_sides(pairs), max_tokens, seed, epoch)]


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


def to_tensors(
    pairs: Sequence[Pair], batch: Sequence[int], pad_id: int, device: torch.device
) -> list[Tensor]:
    """The pairs at indices `batch` as `[src [B, S], tgt_in [B, T], tgt_out [B, T]]` on `device`."""
    return [t.to(device) for t in collate([pairs[i] for i in batch], pad_id, BOS_ID, EOS_ID)]


def batches(order: Sequence[int], size: int) -> Iterator[list[int]]:
    """Consecutive chunks of `order` of at most `size` items."""
    for start in range(0, len(order), size):
        yield list(order[start : start + size])


def longest_first(items: Iterable[int], lengths: Sequence[int], size: int) -> Iterator[list[int]]:
    """The indices `items` ordered longest first by `lengths[i]`, in chunks of at most `size`.

    Ties: the lower index first. This is the order every decoder here (validation, beam search,
    CTranslate2) takes sentences in, so a sentence's batch mates depend only on the lengths."""
    return batches(sorted(items, key=lambda i: (-lengths[i], i)), size)
