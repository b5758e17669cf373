"""Greedy and beam search: against hand-built next-token tables with known answers, against a
naive reference beam search, and for independence from batching."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from from_params import from_params

from pipeline.core.config import DecodeConfig, ModelConfig
from pipeline.data.batching import pad
from pipeline.model.beam import Hypothesis, beam_search, beam_search_n_best, gnmt_length_penalty, topk_stable
from pipeline.model.greedy import greedy, max_lengths
from pipeline.model.transformer import Transformer
from pipeline.serving.torch_engine import translate, translate_n_best

PAD, UNK, BOS, EOS, A, B, C = range(7)
V = 7


# --- a hand-built model: next-token probabilities from a table keyed by the prefix ----------------


class TableCache:
    """The decoded prefix (tokens after bos) of each batch row."""

    def __init__(self, n: int) -> None:
        self.prefixes: list[tuple[int, ...]] = [() for _ in range(n)]

    def select(self, rows: torch.Tensor, sources: torch.Tensor | None = None) -> None:
        self.prefixes = [self.prefixes[i] for i in rows.tolist()]


class TableModel:
    """`table[prefix]` gives some tokens' probabilities; the rest of the mass is spread evenly over
    the other ids. Prefixes not in the table use `default`. The source is ignored."""

    pad_id = PAD

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], default: dict[int, float]) -> None:
        self.table, self.default = table, default

    def probs(self, prefix: tuple[int, ...]) -> torch.Tensor:
        given = self.table.get(prefix, self.default)
        rest = (1.0 - sum(given.values())) / (V - len(given))
        return torch.tensor([given.get(i, rest) for i in range(V)], dtype=torch.float64)

    def log_prob(self, tokens: list[int]) -> float:
        """log P(tokens) under the table (tokens after bos, eos included if any)."""
        return sum(math.log(self.probs(tuple(tokens[:i]))[t]) for i, t in enumerate(tokens))

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return src

    def init_cache(self, memory: torch.Tensor, src: torch.Tensor) -> TableCache:
        return TableCache(src.size(0))

    def decode_step(self, tgt_last: torch.Tensor, cache: TableCache) -> torch.Tensor:
        for row, token in enumerate(tgt_last.tolist()):
            if token != BOS:
                cache.prefixes[row] += (token,)
        return torch.stack([self.probs(p).log() for p in cache.prefixes]).float()


# "A" then eos ends first and is the most probable sequence; "B C C C C" ends four steps later,
# less probable but better under a length penalty with alpha = 1. After an ended "A eos", a
# continuation "C eos" is near-certain: a search that extended ended hypotheses would prefer it.
LATE_WINNER = TableModel(
    {
        (): {A: 0.6, B: 0.35},
        (A,): {EOS: 0.7, C: 0.2},
        (B,): {C: 0.95},
        (B, C): {C: 0.95},
        (B, C, C): {C: 0.95},
        (B, C, C, C): {C: 0.95},
        (B, C, C, C, C): {EOS: 0.95},
        (A, EOS): {C: 0.99},
        (A, EOS, C): {EOS: 0.99},
    },
    default={EOS: 0.9},
)
SHORT, LONG = [A], [B, C, C, C, C]
ONE_SRC = torch.tensor([[A, EOS]])


def search(model, src, beam_size: int, alpha: float, a: float = 0.0, b: int = 10) -> list[list[int]]:
    return beam_search(
        model, src, BOS, EOS, beam_size=beam_size, length_penalty=alpha, max_len_a=a, max_len_b=b
    )


def penalised(model: TableModel, tokens: list[int], alpha: float) -> float:
    return model.log_prob(tokens + [EOS]) / gnmt_length_penalty(len(tokens) + 1, alpha)


def test_length_penalty_is_gnmt() -> None:
    assert gnmt_length_penalty(1, 0.6) == pytest.approx(1.0)
    assert gnmt_length_penalty(7, 1.0) == pytest.approx(2.0)
    assert gnmt_length_penalty(7, 0.0) == pytest.approx(1.0)


def test_table_answers_are_what_the_test_claims() -> None:
    assert penalised(LATE_WINNER, SHORT, 0.0) > penalised(LATE_WINNER, LONG, 0.0)
    assert penalised(LATE_WINNER, LONG, 1.0) > penalised(LATE_WINNER, SHORT, 1.0)
    assert LATE_WINNER.log_prob([A, EOS, C, EOS]) > LATE_WINNER.log_prob(LONG + [EOS])


def test_greedy_takes_the_first_ending() -> None:
    assert greedy(LATE_WINNER, ONE_SRC, BOS, EOS, max_len_a=0.0, max_len_b=10) == [SHORT]


def test_beam_keeps_searching_after_the_top_hypothesis_ends() -> None:
    # At step 2 the top candidate is "A eos"; the longer "B C C C C eos" finishes at step 6 and wins.
    assert search(LATE_WINNER, ONE_SRC, beam_size=2, alpha=1.0) == [LONG]
    assert search(LATE_WINNER, ONE_SRC, beam_size=3, alpha=1.0) == [LONG]


def test_without_length_penalty_the_more_probable_short_one_wins() -> None:
    assert search(LATE_WINNER, ONE_SRC, beam_size=2, alpha=0.0) == [SHORT]


def test_ended_hypothesis_is_never_extended() -> None:
    for k in (1, 2, 4):
        for alpha in (0.0, 1.0, 2.0):
            (out,) = search(LATE_WINNER, ONE_SRC, beam_size=k, alpha=alpha)
            assert EOS not in out and out[:2] != [A, C]
            assert out in (SHORT, LONG)


def test_max_length_is_respected() -> None:
    never_ends = TableModel({}, default={A: 0.6, B: 0.3, EOS: 1e-6})
    src = torch.tensor([[A, B, C, EOS], [A, EOS, PAD, PAD]])  # 4 and 2 real tokens
    assert max_lengths(src, PAD, 1.0, 2).tolist() == [6, 4]
    assert max_lengths(src, PAD, 1.5, 1).tolist() == [7, 4]  # floor(1.5 * 2 + 1) = 4
    assert greedy(never_ends, src, BOS, EOS, max_len_a=1.0, max_len_b=2) == [[A] * 6, [A] * 4]
    for k in (1, 3):
        out = search(never_ends, src, beam_size=k, alpha=0.6, a=1.0, b=2)
        assert [len(o) for o in out] == [6, 4]


def test_ties_go_to_the_lower_token_id() -> None:
    tied = TableModel({(): {C: 0.45, B: 0.45}}, default={EOS: 0.9})
    assert greedy(tied, ONE_SRC, BOS, EOS, max_len_a=0.0, max_len_b=10) == [[B]]
    for k in (1, 2, 3):
        assert search(tied, ONE_SRC, beam_size=k, alpha=0.6) == [[B]]


def test_topk_stable_breaks_ties_toward_the_lower_index() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    values, index = topk_stable(x, 2)
    assert index.tolist() == [[1, 2], [0, 1]] and values.tolist() == [[3.0, 3.0], [0.0, 0.0]]
    assert topk_stable(x, 4)[1].tolist() == [[1, 2, 4, 3], [0, 1, 2, 3]]
    assert topk_stable(x[:1], 3)[1].tolist() == [[1, 2, 4]]  # no tie across the cut


def test_beam_wider_than_vocabulary_is_an_error() -> None:
    with pytest.raises(ValueError, match="exceeds the vocabulary"):
        search(LATE_WINNER, ONE_SRC, beam_size=V + 1, alpha=0.6)


def test_pad_and_bos_are_never_generated() -> None:
    # pad and bos are the most probable tokens at every step; eos is next after "A".
    likes_specials = TableModel({(): {PAD: 0.5, BOS: 0.3, A: 0.1}}, default={PAD: 0.6, BOS: 0.1, EOS: 0.25})
    assert greedy(likes_specials, ONE_SRC, BOS, EOS, max_len_a=0.0, max_len_b=10) == [[A]]
    for k in (1, 2, 3):
        assert search(likes_specials, ONE_SRC, beam_size=k, alpha=0.6) == [[A]]
        cfg = from_params(DecodeConfig, beam_size=k, length_penalty=0.6, max_len_a=0.0, max_len_b=10)
        for hyp in beam_search_n_best(likes_specials, ONE_SRC, BOS, EOS, cfg, n_best=k)[0]:
            assert PAD not in hyp.tokens and BOS not in hyp.tokens and math.isfinite(hyp.score)


# "A A" is far more probable than "B" but reaches the max length (2) where eos is very unlikely:
# finished with its eos paid for, it loses to "B eos" (unpaid, it would win: log 0.495 > log 0.225).
CUT_OFF = TableModel(
    {(): {A: 0.5, B: 0.45}, (A,): {A: 0.99}, (A, A): {EOS: 0.001}, (B,): {EOS: 0.5}},
    default={EOS: 0.9},
)


def test_hypothesis_at_max_length_pays_for_its_eos() -> None:
    assert CUT_OFF.log_prob([A, A]) > CUT_OFF.log_prob([B, EOS])  # what an unpaid cut would compare
    assert penalised(CUT_OFF, [B], 0.6) > penalised(CUT_OFF, [A, A], 0.6)
    assert search(CUT_OFF, ONE_SRC, beam_size=2, alpha=0.6, b=2) == [[B]]
    assert greedy(CUT_OFF, ONE_SRC, BOS, EOS, max_len_a=0.0, max_len_b=2) == [
        [A, A]
    ]  # greedy: cut at the limit


def test_n_best_lists_the_finished_hypotheses_with_normalised_scores() -> None:
    cfg = from_params(DecodeConfig, beam_size=2, length_penalty=0.6, max_len_a=0.0, max_len_b=2)
    (hyps,) = beam_search_n_best(CUT_OFF, ONE_SRC, BOS, EOS, cfg, n_best=2)
    assert [h.tokens for h in hyps] == [[B], [A, A]]
    for h in hyps:
        assert isinstance(h, Hypothesis) and h.score == pytest.approx(penalised(CUT_OFF, h.tokens, 0.6))
    (one,) = beam_search_n_best(CUT_OFF, ONE_SRC, BOS, EOS, cfg, n_best=1)
    assert one == hyps[:1]
    with pytest.raises(ValueError, match="n_best"):
        beam_search_n_best(CUT_OFF, ONE_SRC, BOS, EOS, cfg, n_best=3)


# --- a random tiny Transformer --------------------------------------------------------------------

TINY_V = 40


@pytest.fixture(scope="module")
def random_transformer() -> Transformer:
    torch.manual_seed(0)
    cfg = from_params(ModelConfig, d_model=32, n_heads=2, n_layers=2, d_ff=64, dropout=0.0)
    model = Transformer(cfg, TINY_V, PAD).eval()
    with torch.no_grad():
        model.src_embed.weight[EOS] *= 2.0  # eos likely enough that output lengths vary
    return model


@pytest.fixture(scope="module")
def sources() -> list[list[int]]:
    """20 sources of 1..15 pieces, each ending with eos (as in training)."""
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 16, (20,), generator=g).tolist()
    return [torch.randint(4, TINY_V, (n,), generator=g).tolist() + [EOS] for n in lengths]


def in_batches(fn, model, sources: list[list[int]], size: int, **kwargs) -> list[list[int]]:
    out = []
    for start in range(0, len(sources), size):
        out += fn(model, pad(sources[start : start + size], PAD), BOS, EOS, **kwargs)
    return out


LIMITS = {"max_len_a": 1.0, "max_len_b": 5}


def test_beam_of_one_equals_greedy(random_transformer, sources) -> None:
    expected = in_batches(greedy, random_transformer, sources, 64, **LIMITS)
    assert len({len(o) for o in expected}) > 3  # lengths vary: some end early, some hit the limit
    for alpha in (0.0, 0.6, 2.0):
        got = in_batches(
            beam_search, random_transformer, sources, 64, beam_size=1, length_penalty=alpha, **LIMITS
        )
        assert got == expected


@pytest.mark.parametrize("fn, kwargs", [(greedy, {}), (beam_search, {"beam_size": 5, "length_penalty": 0.6})])
def test_output_does_not_depend_on_batch_size(random_transformer, sources, fn, kwargs) -> None:
    outs = [in_batches(fn, random_transformer, sources, size, **kwargs, **LIMITS) for size in (1, 7, 64)]
    assert outs[0] == outs[1] == outs[2]
    limits = [math.floor(1.0 * len(s) + 5) for s in sources]
    assert all(len(o) <= m for o, m in zip(outs[0], limits, strict=True))


def reference_beam(model: Transformer, src: list[int], k: int, alpha: float, limit: int) -> list[int]:
    """One sentence, full recomputation (no cache), no early stopping: the rules of the module doc
    (pad and bos never generated; at `limit` tokens only eos is allowed, and paid for)."""
    src_t = torch.tensor([src])
    memory = model.encode(src_t)
    alive, finished = [([], 0.0)], []
    for t in range(limit + 1):
        candidates = []
        for tokens, score in alive:
            logits = model.decode(torch.tensor([[BOS] + tokens]), memory, src_t)[0, -1]
            logp = F.log_softmax(logits.float(), dim=-1).double().tolist()
            for v, lp in enumerate(logp):
                allowed = v not in (PAD, BOS) and (t < limit or v == EOS)
                candidates.append((score + lp if allowed else -math.inf, tokens, v))
        candidates.sort(key=lambda c: -c[0])  # stable: ties keep (slot, token) order
        alive = []
        for score, tokens, v in candidates[: k - len(finished)]:
            if v == EOS:
                finished.append((score / gnmt_length_penalty(t + 1, alpha), tokens))
            else:
                alive.append((tokens + [v], score))
        if not alive:
            break
    return max(finished, key=lambda f: f[0])[1]  # the earliest of equal scores


def test_n_best_heads_equal_beam_search_and_are_sorted(random_transformer, sources) -> None:
    cfg = from_params(DecodeConfig, beam_size=4, length_penalty=0.6, batch_size=64, **LIMITS)
    best = in_batches(beam_search, random_transformer, sources, 64, beam_size=4, length_penalty=0.6, **LIMITS)
    n_best = beam_search_n_best(random_transformer, pad(sources, PAD), BOS, EOS, cfg, n_best=4)
    assert [hyps[0].tokens for hyps in n_best] == best
    for hyps in n_best:
        assert len(hyps) == 4 and len({tuple(h.tokens) for h in hyps}) == 4
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_batched_beam_matches_a_naive_reference(random_transformer, sources) -> None:
    some = sources[:8]
    got = in_batches(beam_search, random_transformer, some, 64, beam_size=3, length_penalty=1.0, **LIMITS)
    with torch.inference_mode():
        expected = [reference_beam(random_transformer, s, 3, 1.0, len(s) + 5) for s in some]
    assert got == expected


# --- translate ------------------------------------------------------------------------------------


class WordTokenizer:
    """One id per word (4..TINY_V-1, by a fixed hash); decode writes ids as `w<id>`."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def encode(self, text: str) -> list[int]:
        return [4 + sum(map(ord, w)) % (TINY_V - 4) for w in text.split()]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        return " ".join(f"w{i}" for i in ids if i not in (PAD, BOS, EOS))


SENTENCES = [
    "a man walks his dog",
    "",
    "two children play near a big fountain in the park",
    "   ",
    "a cat",
    "people wait",
    "a woman in a red coat reads a book on a bench by the lake",
    "dogs",
    "a cyclist rides through a crowded street",
]


def test_translate_restores_order_and_skips_blank_lines(random_transformer) -> None:
    tok = WordTokenizer()
    cfg = from_params(DecodeConfig, beam_size=3, length_penalty=0.6, max_len_a=1.0, max_len_b=5, batch_size=3)
    outs = translate(random_transformer, tok, SENTENCES, cfg)
    assert outs[1] == "" and outs[3] == ""
    for text, out in zip(SENTENCES, outs, strict=True):
        if text.strip():
            src = torch.tensor([tok.encode(text) + [EOS]])
            (ids,) = beam_search(
                random_transformer, src, BOS, EOS, beam_size=3, length_penalty=0.6, max_len_a=1.0, max_len_b=5
            )
            assert out == tok.decode(ids)
    for size in (1, 7, 64):
        assert (
            translate(random_transformer, tok, SENTENCES, cfg.model_copy(update={"batch_size": size})) == outs
        )


def test_translate_n_best_first_equals_translate(random_transformer) -> None:
    tok = WordTokenizer()
    cfg = from_params(DecodeConfig, beam_size=3, length_penalty=0.6, max_len_a=1.0, max_len_b=5, batch_size=4)
    got = translate_n_best(random_transformer, tok, SENTENCES, cfg, n_best=3)
    assert got[1] == [] and got[3] == []
    firsts = [hyps[0][0] if hyps else "" for hyps in got]
    assert firsts == translate(random_transformer, tok, SENTENCES, cfg)
    assert all(len(hyps) == 3 for text, hyps in zip(SENTENCES, got, strict=True) if text.strip())


def test_translate_blank_input_does_not_run_the_model() -> None:
    class Exploding:
        pad_id = PAD

        def eval(self):
            return self

        def to(self, device):
            return self

        def encode(self, src):
            raise AssertionError("the model ran")

    assert translate(Exploding(), WordTokenizer(), ["", " \t"], from_params(DecodeConfig)) == ["", ""]
