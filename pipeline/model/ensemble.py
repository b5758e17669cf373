"""An ensemble of Transformers that share a vocabulary, as one `Decoder` for greedy and beam search.

Each step returns the mean of the members' next-token log-probabilities (a renormalised geometric
mean of their distributions once search applies its log-softmax), as in Sennrich et al. 2016.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from pipeline.model.transformer import DecoderCache, Transformer


@dataclass
class EnsembleCache:
    """One `DecoderCache` per member, selected together."""

    members: list[DecoderCache]

    def select(self, rows: Tensor, sources: Tensor | None = None) -> None:
        """Keep/reorder decoder rows `rows` `[R']` (and source sentences `sources` `[N']`) in every member."""
        for cache in self.members:
            cache.select(rows, sources)


class Ensemble(nn.Module):
    """Transformers decoded together: `decode_step` gives their mean log-probabilities `[R, V]`.

    Raises:
        ValueError: no member, or members that differ in vocabulary size or pad id.
    """

    def __init__(self, members: Sequence[Transformer]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        shapes = {(m.vocab_size, m.pad_id) for m in members}
        if len(shapes) > 1:
            raise ValueError(f"ensemble members differ in (vocabulary size, pad id): {sorted(shapes)}")
        self.members = nn.ModuleList(members)
        self.vocab_size, self.pad_id = shapes.pop()

    def encode(self, src: Tensor) -> list[Tensor]:
        """src `[B, S]` -> each member's encoder memory `[B, S, d_model]`."""
        return [m.encode(src) for m in self.members]

    def init_cache(self, memory: list[Tensor], src: Tensor) -> EnsembleCache:
        """The members' decoder caches over their memories (from `encode`) and src `[B, S]`."""
        return EnsembleCache([m.init_cache(mem, src) for m, mem in zip(self.members, memory, strict=True)])

    def decode_step(self, tgt_last: Tensor, cache: EnsembleCache) -> Tensor:
        """The newest token ids `[R]` -> the members' mean next-token log-probs `[R, V]` (float32)."""
        steps = [
            F.log_softmax(m.decode_step(tgt_last, c).float(), dim=-1)
            for m, c in zip(self.members, cache.members, strict=True)
        ]
        return sum(steps[1:], steps[0]) / len(steps)
