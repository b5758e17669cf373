"""Beam search over the Transformer's KV cache (conventions: `pipeline.model.greedy`): a shrinking
beam ranked by the GNMT length penalty (Wu et al. 2016, eq. 14), with an exact early stop
(docs/decoding.md). Shapes: B sentences, K beam size, S source length, V vocabulary, L tokens
generated so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from pipeline.core.config import SearchConfig
from pipeline.model.greedy import Cache, Decoder, greedy, log_probs, max_lengths


class Hypothesis(NamedTuple):
    """A finished hypothesis: ids without bos/eos and its length-normalised log-prob
    `log P(Y) / lp(Y)` (eos included in Y)."""

    tokens: list[int]
    score: float


def check_n_best(n_best: int, beam_size: int) -> None:
    """Raises ValueError unless 1 <= `n_best` <= `beam_size` (a beam holds at most K finished)."""
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be between 1 and the beam size {beam_size}, got {n_best}")


def gnmt_length_penalty(length: Tensor | float, alpha: float) -> Tensor | float:
    """GNMT lp(Y) = ((5 + |Y|) / 6) ** alpha, |Y| = generated tokens including eos."""
    return ((5 + length) / 6) ** alpha


def topk_stable(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest values of each row of x `[N, M]` and their indices, both `[N, k]`.

    Ties are broken toward the lower index, and the result is ordered by value (descending),
    then index (ascending) -- unlike `torch.topk`, whose choice and order among ties is unspecified.
    """
    values, index = x.topk(min(k + 1, x.size(1)), dim=1)
    straddles = values.size(1) > k and bool((values[:, k - 1] == values[:, k]).any())
    values, index, kth = values[:, :k], index[:, :k], values[:, k - 1 : k]
    if straddles:  # the (k+1)-th largest equals the k-th: a tie straddles the cut
        above, tied = x > kth, x == kth
        need = k - above.sum(dim=1, keepdim=True)
        chosen = above | (tied & (tied.cumsum(dim=1) <= need))  # the lowest-index tied ones
        index = chosen.nonzero()[:, 1].view(-1, k)
    index = index.sort(dim=1).values
    values = x.gather(1, index)
    order = values.sort(dim=1, descending=True, stable=True).indices
    return values.gather(1, order), index.gather(1, order)


@dataclass
class Beam:
    """Search state of the N sentences still being decoded, K slots each.

    A dead slot (its hypothesis finished, or never used at the first step) has score -inf.
    """

    sentence: Tensor  # [N] index of each row's sentence in the input batch
    scores: Tensor  # [N, K] float64 log P of each slot's hypothesis
    tokens: Tensor  # [N*K, L] ids generated so far (no bos)
    n_alive: Tensor  # [N] slots still searching: K minus the finished hypotheses
    limits: Tensor  # [N] max length M (tokens before eos)
    cutoff: Tensor  # [N] float64 n-th best finished score, -inf while fewer have finished

    def keep(self, rows: Tensor) -> Tensor:
        """Keep the sentences `rows` `[N']` (others are done), in place; returns their slot rows
        `[N'*K]` in the flattened `[N*K]` layout."""
        k = self.scores.size(1)
        flat = (rows[:, None] * k + torch.arange(k, device=rows.device)).view(-1)
        self.sentence, self.scores, self.n_alive = self.sentence[rows], self.scores[rows], self.n_alive[rows]
        self.limits, self.cutoff, self.tokens = self.limits[rows], self.cutoff[rows], self.tokens[flat]
        return flat


def init_beam(limits: Tensor, k: int) -> Beam:
    """K slots per sentence; only slot 0 (the empty hypothesis) is live at the first step."""
    n, device = limits.size(0), limits.device
    scores = torch.full((n, k), -math.inf, dtype=torch.float64, device=device)
    scores[:, 0] = 0.0
    return Beam(
        sentence=torch.arange(n, device=device),
        scores=scores,
        tokens=torch.empty((n * k, 0), dtype=torch.long, device=device),
        n_alive=torch.full((n,), k, dtype=torch.long, device=device),
        limits=limits,
        cutoff=torch.full((n,), -math.inf, dtype=torch.float64, device=device),
    )


class Extensions(NamedTuple):
    """The best K one-token extensions of each sentence's hypotheses, each `[N, K]`, best first."""

    scores: Tensor  # float64 log P of the extended hypothesis
    slots: Tensor  # the slot of the hypothesis extended
    tokens: Tensor  # the token appended


def force_eos_at_limit(beam: Beam, logp: Tensor, eos_id: int) -> Tensor:
    """logp `[N*K, V]` with every token but eos -inf in the rows of sentences whose hypotheses
    have M tokens (fairseq's rule: the hypothesis ends there and pays for its eos)."""
    at_limit = beam.tokens.size(1) >= beam.limits
    if not bool(at_limit.any()):
        return logp
    rows = at_limit.repeat_interleave(beam.scores.size(1))[:, None]
    not_eos = torch.arange(logp.size(1), device=logp.device)[None, :] != eos_id
    return logp.masked_fill(rows & not_eos, -math.inf)


def expand(beam: Beam, logp: Tensor) -> Extensions:
    """Rank the one-token extensions of the alive hypotheses: logp `[N*K, V]` -> best K each.

    Each hypothesis' own best K tokens (ties: lower id) are the only ones of it that can be
    taken, so only those N*K*K candidates are summed in float64 and ranked (ties: lower slot,
    then lower id, as a full ranking of all N*K*V would give).
    """
    n, k = beam.scores.shape
    top, token = topk_stable(logp, k)  # [N*K, K]
    candidates = (beam.scores.view(-1, 1) + top.double()).view(n, k * k)
    scores, flat = topk_stable(candidates, k)
    return Extensions(scores, flat // k, token.view(n, k * k).gather(1, flat))


def record_finished(
    beam: Beam, ext: Extensions, ends: Tensor, alpha: float, *, n_best: int, finished: list[list[Hypothesis]]
) -> None:
    """Move the taken extensions that end in eos (`ends` `[N, K]`) to their sentence's finished
    list; update the sentences' n-th best finished score."""
    rows, ranks = ends.nonzero(as_tuple=True)
    if rows.numel() == 0:
        return
    k, length = ext.scores.size(1), beam.tokens.size(1) + 1
    prefixes = beam.tokens[rows * k + ext.slots[rows, ranks]].tolist()
    penalised = (ext.scores[rows, ranks] / gnmt_length_penalty(length, alpha)).tolist()
    for row, prefix, score in zip(rows.tolist(), prefixes, penalised, strict=True):
        hyps = finished[int(beam.sentence[row])]
        hyps.append(Hypothesis(prefix, score))
        if len(hyps) >= n_best:
            beam.cutoff[row] = sorted((h.score for h in hyps), reverse=True)[n_best - 1]


def advance(beam: Beam, cache: Cache, ext: Extensions, alive: Tensor) -> None:
    """Make the taken, unfinished extensions (`alive` `[N, K]`) the new hypotheses; reorder the
    cache rows to match."""
    n, k = ext.scores.shape
    rows = (torch.arange(n, device=alive.device)[:, None] * k + ext.slots).view(-1)
    cache.select(rows)
    beam.tokens = torch.cat([beam.tokens[rows], ext.tokens.view(-1, 1)], dim=1)
    beam.scores = ext.scores.masked_fill(~alive, -math.inf)
    beam.n_alive = alive.sum(dim=1)


def done_sentences(beam: Beam, alpha: float) -> Tensor:
    """`[N]` True where no alive hypothesis can beat the n-th best finished one (module doc)."""
    bound = beam.scores.max(dim=1).values / gnmt_length_penalty(beam.limits.double() + 1, alpha)
    return (beam.n_alive == 0) | (beam.cutoff >= bound)


def drop_done(beam: Beam, cache: Cache, last: Tensor, alpha: float) -> Tensor:
    """Remove the done sentences from the beam and the cache; returns `last` `[N'*K]` to match."""
    rows = (~done_sentences(beam, alpha)).nonzero()[:, 0]
    if rows.numel() == beam.sentence.numel():
        return last
    flat = beam.keep(rows)
    cache.select(flat, rows)
    return last[flat]


def n_best_hypotheses(hyps: list[Hypothesis], n: int) -> list[Hypothesis]:
    """The n highest-scoring finished hypotheses, best first; equal scores keep finishing order."""
    return sorted(hyps, key=lambda h: -h.score)[:n]


@torch.inference_mode()
def beam_search_n_best(
    model: Decoder, src: Tensor, bos_id: int, eos_id: int, cfg: SearchConfig, *, n_best: int
) -> list[list[Hypothesis]]:
    """Batched beam search: each sentence's `n_best` best finished hypotheses, best first.

    Uses the KV cache (rows flattened to `[N*K]`): src `[B, S]` -> for each sentence its `n_best`
    (<= `cfg.beam_size`) best finished hypotheses, with their length-normalised log-probs. See the module
    doc for the ranking, the length penalty (`cfg.length_penalty` is its alpha, >= 0), the length limit
    and the stopping rule.

    Raises:
        ValueError: negative length penalty, `n_best` outside 1..beam_size, or a beam wider
            than the vocabulary less pad and bos.
    """
    k, alpha = cfg.beam_size, cfg.length_penalty
    if alpha < 0:
        raise ValueError(f"length_penalty must be >= 0, got {alpha}")
    check_n_best(n_best, k)
    beam = init_beam(max_lengths(src, model.pad_id, cfg.max_len_a, cfg.max_len_b), k)
    cache = model.init_cache(model.encode(src), src)
    cache.select(torch.arange(src.size(0), device=src.device).repeat_interleave(k))
    banned = torch.tensor([model.pad_id, bos_id], device=src.device)
    finished: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    last = torch.full((src.size(0) * k,), bos_id, dtype=torch.long, device=src.device)
    while beam.sentence.numel():
        logp = log_probs(model.decode_step(last, cache), banned)
        if logp.size(1) - len(banned) < k:
            raise ValueError(f"beam size {k} exceeds the vocabulary size {logp.size(1)} less pad and bos")
        ext = expand(beam, force_eos_at_limit(beam, logp, eos_id))
        taken = torch.arange(k, device=src.device)[None, :] < beam.n_alive[:, None]
        ends = taken & (ext.tokens == eos_id)
        record_finished(beam, ext, ends, alpha, n_best=n_best, finished=finished)
        advance(beam, cache, ext, taken & ~ends)
        last = drop_done(beam, cache, ext.tokens.view(-1), alpha)
    return [n_best_hypotheses(hyps, n_best) for hyps in finished]


def beam_search(
    model: Decoder,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    *,
    beam_size: int,
    length_penalty: float,
    max_len_a: float,
    max_len_b: int,
) -> list[list[int]]:
    """`beam_search_n_best` with n_best 1: src `[B, S]` -> B id lists (no bos/eos), each its
    sentence's best finished hypothesis."""
    if length_penalty < 0:
        raise ValueError(f"length_penalty must be >= 0, got {length_penalty}")
    cfg = SearchConfig(
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        batch_size=len(src),
    )
    return [hyps[0].tokens for hyps in beam_search_n_best(model, src, bos_id, eos_id, cfg, n_best=1)]


def decode_batch(model: Decoder, src: Tensor, bos_id: int, eos_id: int, cfg: SearchConfig) -> list[list[int]]:
    """Greedy when `cfg.beam_size == 1` (identical to a beam of 1, and cheaper), else beam search."""
    if cfg.beam_size == 1:
        return greedy(model, src, bos_id, eos_id, max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b)
    return [hyps[0].tokens for hyps in beam_search_n_best(model, src, bos_id, eos_id, cfg, n_best=1)]
