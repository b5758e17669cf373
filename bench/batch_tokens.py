"""Training cost per target token at two batch sizes: ours at `max_tokens` A vs B, side by side.

Usage (repository root, after the pipeline's `download` and `tokenizer` stages):

    python -m bench.batch_tokens [--max-tokens 2500,5000] [--steps 12] [--warmup 2]

Why: a step over more tokens runs larger matmuls, which may use more of the matrix peak (a bf16
CPU most of all), so the same training tokens may cost fewer seconds in fewer, larger steps.
Whether those steps buy the same BLEU is the recipe study's question; this measures the cost.

Each size gets its own copy of our model (`train.model`, the same initial weights) and its own
batches: the first `warmup + steps` batches of the trainer's epoch-0 order cut at that
`max_tokens`. Step i of every size runs before step i + 1 of any, the order of the sizes
rotating each step, so machine noise hits all alike. A step is the trainer's own
`pipeline.training.loop.train_step` in the trainer's precision.

Per size: tok/s = target tokens / seconds over the timed steps; achieved GFLOP/s likewise with
`pipeline.model.flops`'s count; mfu = achieved / the matmul peak in the step's dtype, measured in the same
run. `per_token_speedup` = median over steps i of (tok/s of the last size at step i) / (tok/s of
the first size at step i): above 1, the larger steps cost less per target token.

Writes to `<out-dir>/bench.json`: per_token_speedup, batch_tokens_detail (one row per size).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence

import torch

from bench.common import (
    base_parser,
    command_line,
    load_inputs,
    median,
    parse_override,
    record,
    sig,
    table,
)
from bench.train_speed import Batch, Runner, make_batch, matmul_peaks, race_lanes, real_batches
from pipeline.core.config import ModelConfig, OptimConfig, with_updates
from pipeline.core.device import setup
from pipeline.core.errors import ConfigError, run_main
from pipeline.data.batching import Pair
from pipeline.model.flops import train_step_flops
from pipeline.model.transformer import Transformer
from pipeline.training.loop import encode_pairs, make_optimizer


def parse_sizes(text: str) -> list[int]:
    """`"2500,5000"` -> [2500, 5000].

    Raises:
        ConfigError: not at least two positive integers, smallest first.
    """
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if len(sizes) < 2 or min(sizes) <= 0 or sizes != sorted(sizes):
        raise ConfigError(f"--max-tokens {text!r}: give two or more positive integers, smallest first")
    return sizes


def size_batches(
    pairs: list[Pair],
    optim: OptimConfig,
    sizes: Sequence[int],
    n: int,
    ids: tuple[int, int, int],
    device: torch.device,
) -> dict[int, list[Batch]]:
    """The first `n` batches of the trainer's order at each `max_tokens` in `sizes`.

    Raises:
        ConfigError: the data holds fewer than `n` batches at some size.
    """
    out = {}
    for size in sizes:
        cut = real_batches(pairs, with_updates(optim, {"max_tokens": size}), n)
        if len(cut) < n:
            raise ConfigError(f"--max-tokens {size}: {len(cut)} batches of training data, {n} needed")
        out[size] = [make_batch(b, ids, device) for b in cut]
    return out


def run(
    pairs: list[Pair],
    cfg: ModelConfig,
    vocab: int,
    ids: tuple[int, int, int],
    optim: OptimConfig,
    sizes: Sequence[int],
    device: torch.device,
    bf16: bool,
    steps: int,
    warmup: int,
    peak_size: int,
) -> dict:
    """Race one model per size; returns the figures for bench.json."""
    by_size = size_batches(pairs, optim, sizes, warmup + steps, ids, device)
    torch.manual_seed(optim.seed)
    first = Transformer(cfg, vocab, ids[0]).to(device)
    models = [first] + [copy.deepcopy(first) for _ in sizes[1:]]
    runners = [
        Runner(f"max_tokens {s}", m.train(), bf16, make_optimizer(m, optim))
        for s, m in zip(sizes, models, strict=True)
    ]
    race_lanes(runners, [by_size[s] for s in sizes], warmup, optim)
    peak = matmul_peaks(device, bf16, peak_size)["bf16" if bf16 else "fp32"]
    detail, speeds = [], []
    for size, r in zip(sizes, runners, strict=True):
        timed_batches = by_size[size][warmup:]
        tokens = [b.tokens for b in timed_batches]
        flops = sum(train_step_flops(cfg, vocab, b.src_lens, b.tgt_lens) for b in timed_batches)
        achieved = flops / sum(r.seconds) / 1e9
        speeds.append([t / s for t, s in zip(tokens, r.seconds, strict=True)])
        detail.append(
            {
                "max_tokens": size,
                "precision": "bf16" if bf16 else "fp32",
                "tgt_tokens_per_step": sig(sum(tokens) / len(tokens)),
                "ms_per_step": sig(1e3 * median(r.seconds)),
                "tok_s": sig(sum(tokens) / sum(r.seconds)),
                "achieved_gflops": sig(achieved),
                "mfu": sig(achieved / peak),
            }
        )
    speedup = median([b / a for a, b in zip(speeds[0], speeds[-1], strict=True)])
    return {"per_token_speedup": sig(speedup), "batch_tokens_detail": detail}


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("Training cost per target token at two max_tokens, side by side.")
    p.add_argument("--max-tokens", default="2500,5000", help="comma-separated sizes, smallest first")
    p.add_argument("--steps", type=int, default=12, help="timed steps per size")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per size first")
    p.add_argument("--peak-size", type=int, default=None, help="square matmul size (2048 CPU, 8192 CUDA)")
    args = p.parse_args(argv)
    sizes = parse_sizes(args.max_tokens)
    params, tok, corpus = load_inputs(args.params)
    optim = params.train.optim
    cfg = with_updates(params.train.model, parse_override(args.model_override))
    device, bf16 = setup(optim.device, optim.precision, optim.threads)
    pairs = encode_pairs(tok, corpus["train"]["en"], corpus["train"]["de"], params.train.max_len)
    ids = (tok.pad_id, tok.bos_id, tok.eos_id)
    peak_size = args.peak_size or (8192 if device.type == "cuda" else 2048)
    figures = run(
        pairs, cfg, tok.vocab_size, ids, optim, sizes, device, bf16, args.steps, args.warmup, peak_size
    )
    print("\n".join(table(figures["batch_tokens_detail"])))
    print(f"per_token_speedup (max_tokens {sizes[-1]} vs {sizes[0]}): {figures['per_token_speedup']}")
    record(args.out_dir, "batch_tokens", command_line("bench.batch_tokens", argv), figures, device)
    return figures


if __name__ == "__main__":
    run_main(main)
