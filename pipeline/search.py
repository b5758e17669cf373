"""Decoding: greedy and beam search over the Transformer's KV cache, and batch translation.

Shapes: B sentences, K beam size, S source length, V vocabulary, L tokens generated so far.

Conventions shared by both searches:
- Max length: sentence i generates at most `M_i = floor(a * src_len_i + b)` tokens, eos included,
  where `src_len_i` counts its non-pad source ids (the source ends with eos, as in training). A
  hypothesis that reaches `M_i` tokens without eos is finalised as it stands.
- Returned ids exclude bos and eos. A hypothesis that emitted eos is never extended.
- Ties are broken deterministically toward the lower index (token id, then beam slot), so the
  output of a sentence does not depend on the other sentences in its batch or on padding.
- Log-probs are summed in float64, so ranking extensions of one prefix equals ranking their
  log-probs: `beam_search(beam_size=1)` returns exactly what `greedy` does.

Beam search (a "shrinking" beam, as in Nematus): each sentence has K slots. At every step the
alive hypotheses of a sentence propose all their one-token extensions; the best `n_alive` are
taken (n_alive = K minus the hypotheses finished so far); a taken extension that ends in eos (or
reaches M_i) moves to the sentence's finished list and keeps its slot, so the beam shrinks. Hypotheses are
ranked by `log P(Y) / lp(Y)` with the GNMT length penalty `lp(Y) = ((5 + |Y|) / 6) ** alpha`
(Wu et al. 2016, eq. 14), where |Y| counts the generated tokens INCLUDING eos (excluding bos).

Stopping rule (per sentence): done when K hypotheses have finished (no alive one is left), or
when no alive hypothesis can still beat the best finished one, or at max length (alive ones are
then finalised). The bound is exact for alpha >= 0: extending a hypothesis only lowers its
log-prob (<= 0), and its length is at most M_i, so its final score is at most
`log P(prefix) / lp(M_i)`; the search stops once that bound is <= the best finished score. Early
stopping therefore never changes the result (equal scores keep the earlier-finished hypothesis).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from pipeline.batching import pad
from pipeline.config import DecodeConfig

if TYPE_CHECKING:
    from pipeline.model import Transformer
    from pipeline.tokenizer import Tokenizer


class Cache(Protocol):
    """Incremental-decoding state; `select(index)` keeps/reorders batch rows in place."""

    def select(self, index: Tensor) -> None: ...


class Decoder(Protocol):
    """What search needs from a model (`pipeline.model.Transformer` has it)."""

    pad_id: int

    def encode(self, src: Tensor) -> Tensor: ...
    def init_cache(self, memory: Tensor, src: Tensor) -> Cache: ...
    def decode_step(self, tgt_last: Tensor, cache: Cache) -> Tensor: ...


def gnmt_length_penalty(length: Tensor | float, alpha: float) -> Tensor | float:
    """GNMT lp(Y) = ((5 + |Y|) / 6) ** alpha, |Y| = generated tokens including eos."""
    return ((5 + length) / 6) ** alpha


def max_lengths(src: Tensor, pad_id: int, max_len_a: float, max_len_b: int) -> Tensor:
    """src `[B, S]` -> per-sentence token budget `M = floor(a * src_len + b)` `[B]` (long, >= 1)."""
    src_len = (src != pad_id).sum(dim=1).double()
    return torch.floor(src_len * max_len_a + max_len_b).long().clamp(min=1)


def log_probs(logits: Tensor) -> Tensor:
    """Next-token logits `[N, V]` -> log-probs `[N, V]` in float64 (computed in float32)."""
    return F.log_softmax(logits.float(), dim=-1).double()


def topk_stable(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest values of each row of x `[N, M]` and their indices, both `[N, k]`.

    Ties are broken toward the lower index, and the result is ordered by value (descending),
    then index (ascending) -- unlike `torch.topk`, whose choice and order among ties is unspecified.
    """
    values, index = x.topk(k, dim=1)
    kth = values[:, -1:]
    if bool(((x == kth).sum(dim=1) > (values == kth).sum(dim=1)).any()):  # a tie straddles the cut
        above, tied = x > kth, x == kth
        need = k - above.sum(dim=1, keepdim=True)
        chosen = above | (tied & (tied.cumsum(dim=1) <= need))  # the lowest-index tied ones
        index = chosen.nonzero()[:, 1].view(-1, k)
    index = index.sort(dim=1).values
    values = x.gather(1, index)
    order = values.sort(dim=1, descending=True, stable=True).indices
    return values.gather(1, order), index.gather(1, order)


def strip_after_eos(tokens: Tensor, eos_id: int) -> list[list[int]]:
    """`[B, L]` ids -> one list per row, cut at its first eos (excluded)."""
    out = []
    for row in tokens.tolist():
        out.append(row[: row.index(eos_id)] if eos_id in row else row)
    return out


@torch.inference_mode()
def greedy(
    model: Decoder, src: Tensor, bos_id: int, eos_id: int, max_len_a: float, max_len_b: int
) -> list[list[int]]:
    """Batched greedy decoding with the KV cache: src `[B, S]` -> B id lists (no bos/eos).

    A sentence that emitted eos stays finished (it is fed eos until the batch ends); the loop
    stops when every sentence has finished or reached its max length.
    """
    limits = max_lengths(src, model.pad_id, max_len_a, max_len_b)
    cache = model.init_cache(model.encode(src), src)
    last = torch.full_like(limits, bos_id)
    finished = torch.zeros_like(limits, dtype=torch.bool)
    steps = []
    for t in range(int(limits.max())):
        token = log_probs(model.decode_step(last, cache)).argmax(dim=-1)  # first max on ties
        token = token.masked_fill(finished, eos_id)
        steps.append(token)
        finished |= (token == eos_id) | (t + 1 >= limits)
        if bool(finished.all()):
            break
        last = token
    return strip_after_eos(torch.stack(steps, dim=1), eos_id)


@dataclass
class Finished:
    """A finished hypothesis: ids without bos/eos and its length-penalised score."""

    tokens: list[int]
    score: float


@dataclass
class Beam:
    """Search state of the N sentences still being decoded, K slots each.

    A dead slot (its hypothesis finished, or never used at the first step) has score -inf.
    """

    sentence: Tensor  # [N] index of each row's sentence in the input batch
    scores: Tensor  # [N, K] float64 log P of each slot's hypothesis
    tokens: Tensor  # [N*K, L] ids generated so far (no bos)
    n_alive: Tensor  # [N] slots still searching: K minus the finished hypotheses
    limits: Tensor  # [N] max length M
    best: Tensor  # [N] float64 best finished score, -inf when none

    def keep(self, rows: Tensor) -> Tensor:
        """Keep the sentences `rows` `[N']` (others are done), in place; returns their slot rows
        `[N'*K]` in the flattened `[N*K]` layout."""
        k = self.scores.size(1)
        flat = (rows[:, None] * k + torch.arange(k, device=rows.device)).view(-1)
        self.sentence, self.scores, self.n_alive = self.sentence[rows], self.scores[rows], self.n_alive[rows]
        self.limits, self.best, self.tokens = self.limits[rows], self.best[rows], self.tokens[flat]
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
        best=torch.full((n,), -math.inf, dtype=torch.float64, device=device),
    )


class Extensions(NamedTuple):
    """The best K one-token extensions of each sentence's hypotheses, each `[N, K]`, best first."""

    scores: Tensor  # float64 log P of the extended hypothesis
    slots: Tensor  # the slot of the hypothesis extended
    tokens: Tensor  # the token appended


def expand(beam: Beam, logp: Tensor) -> Extensions:
    """Rank every one-token extension of the alive hypotheses: logp `[N*K, V]` -> best K each."""
    n, k = beam.scores.shape
    vocab = logp.size(-1)
    if vocab < k:
        raise ValueError(f"beam size {k} exceeds the vocabulary size {vocab}")
    candidates = (beam.scores.view(-1, 1) + logp).view(n, k * vocab)
    scores, flat = topk_stable(candidates, k)
    return Extensions(scores, flat // vocab, flat % vocab)


def record_finished(
    beam: Beam, ext: Extensions, ends: Tensor, eos_id: int, alpha: float, finished: list[list[Finished]]
) -> None:
    """Move the taken extensions that end (`ends` `[N, K]`) to their sentence's finished list."""
    rows, ranks = ends.nonzero(as_tuple=True)
    if rows.numel() == 0:
        return
    k, length = ext.scores.size(1), beam.tokens.size(1) + 1
    prefixes = beam.tokens[rows * k + ext.slots[rows, ranks]].tolist()
    penalised = (ext.scores[rows, ranks] / gnmt_length_penalty(length, alpha)).tolist()
    last = ext.tokens[rows, ranks].tolist()
    for row, prefix, token, score in zip(rows.tolist(), prefixes, last, penalised, strict=True):
        hyp = Finished(prefix if token == eos_id else prefix + [token], score)
        finished[int(beam.sentence[row])].append(hyp)
        beam.best[row] = max(float(beam.best[row]), score)


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
    """`[N]` True where no alive hypothesis can beat the best finished one (see the module doc)."""
    bound = beam.scores.max(dim=1).values / gnmt_length_penalty(beam.limits.double(), alpha)
    return (beam.n_alive == 0) | (beam.best >= bound)


def drop_done(beam: Beam, cache: Cache, last: Tensor, alpha: float) -> Tensor:
    """Remove the done sentences from the beam and the cache; returns `last` `[N'*K]` to match."""
    rows = (~done_sentences(beam, alpha)).nonzero()[:, 0]
    if rows.numel() == beam.sentence.numel():
        return last
    flat = beam.keep(rows)
    cache.select(flat)
    return last[flat]


def best_hypothesis(hyps: list[Finished]) -> list[int]:
    """The highest-scoring finished hypothesis; on equal scores the earliest finished."""
    return max(hyps, key=lambda h: h.score).tokens if hyps else []  # max keeps the first of equals


@torch.inference_mode()
def beam_search(
    model: Decoder,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int,
    length_penalty: float,
    max_len_a: float,
    max_len_b: int,
) -> list[list[int]]:
    """Batched beam search with the KV cache (rows flattened to `[N*K]`): src `[B, S]` -> B id
    lists (no bos/eos), each its sentence's best finished hypothesis. See the module doc for the
    ranking, the length penalty (`length_penalty` is its alpha, >= 0) and the stopping rule."""
    if length_penalty < 0:
        raise ValueError(f"length_penalty must be >= 0, got {length_penalty}")
    k, alpha = beam_size, length_penalty
    beam = init_beam(max_lengths(src, model.pad_id, max_len_a, max_len_b), k)
    cache = model.init_cache(model.encode(src), src)
    cache.select(torch.arange(src.size(0), device=src.device).repeat_interleave(k))
    finished: list[list[Finished]] = [[] for _ in range(src.size(0))]
    last = torch.full((src.size(0) * k,), bos_id, dtype=torch.long, device=src.device)
    while beam.sentence.numel():
        ext = expand(beam, log_probs(model.decode_step(last, cache)))
        taken = torch.arange(k, device=src.device)[None, :] < beam.n_alive[:, None]
        at_limit = (beam.tokens.size(1) + 1 >= beam.limits)[:, None]
        ends = taken & ((ext.tokens == eos_id) | at_limit)
        record_finished(beam, ext, ends, eos_id, alpha, finished)
        advance(beam, cache, ext, taken & ~ends)
        last = drop_done(beam, cache, ext.tokens.view(-1), alpha)
    return [best_hypothesis(hyps) for hyps in finished]


def batches(order: Sequence[int], size: int) -> Iterator[list[int]]:
    """Consecutive chunks of `order` of at most `size` items."""
    for start in range(0, len(order), size):
        yield list(order[start : start + size])


def decode_batch(model: Decoder, src: Tensor, bos_id: int, eos_id: int, cfg: DecodeConfig) -> list[list[int]]:
    """Greedy when `cfg.beam_size == 1` (identical to a beam of 1, and cheaper), else beam search."""
    if cfg.beam_size == 1:
        return greedy(model, src, bos_id, eos_id, cfg.max_len_a, cfg.max_len_b)
    return beam_search(
        model, src, bos_id, eos_id, cfg.beam_size, cfg.length_penalty, cfg.max_len_a, cfg.max_len_b
    )


def translate(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: list[str],
    cfg: DecodeConfig,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> list[str]:
    """Translate raw sentences; returns detokenised outputs in the input order.

    Sentences are encoded (source = pieces + eos, as in training), sorted longest first, decoded
    `cfg.batch_size` at a time on `device` (the model is moved there and set to eval mode), and
    detokenised with `tokenizer.decode`. Empty or whitespace-only inputs give "" without running
    the model. `progress` shows a tqdm bar over batches.
    """
    model.eval().to(device)
    ids = tokenizer.encode_batch(list(sentences))
    todo = [i for i, text in enumerate(sentences) if text.strip()]
    order = sorted(todo, key=lambda i: (-len(ids[i]), i))
    outputs = [""] * len(sentences)
    chunks = list(batches(order, cfg.batch_size))
    with torch.inference_mode():
        for chunk in tqdm(chunks, desc="decode", unit="batch", disable=not progress):
            src = pad([ids[i] + [tokenizer.eos_id] for i in chunk], model.pad_id).to(device)
            hyps = decode_batch(model, src, tokenizer.bos_id, tokenizer.eos_id, cfg)
            for i, hyp in zip(chunk, hyps, strict=True):
                outputs[i] = tokenizer.decode(hyp)
    return outputs
