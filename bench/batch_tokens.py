"""Training cost per target token at two batch sizes: ours at `max_tokens` A vs B, side by side,
optionally also in both precisions and under `torch.compile`.

How it measures and what it writes: docs/benchmarks.md, `bench.batch_tokens`.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from bench.common import (
    base_parser,
    command_line,
    load_inputs,
    median,
    named_configs,
    parse_override,
    record,
    sig,
    table,
)
from bench.train_speed import (
    Batch,
    Runner,
    compiled,
    make_batch,
    matmul_peaks,
    race_lanes,
    real_batches,
)
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
    *,
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


@dataclass(frozen=True)
class Lane:
    """One racer: a batch size, a precision, eager or compiled."""

    size: int
    bf16: bool
    compiled: bool = False

    @property
    def name(self) -> str:
        mode = " compiled" if self.compiled else ""
        return f"max_tokens {self.size} {'bf16' if self.bf16 else 'fp32'}{mode}"


def lanes_of(sizes: Sequence[int], precisions: Sequence[bool], compile: bool) -> list[Lane]:
    """Every (size, precision, eager / compiled) combination, size by size."""
    modes = [False, True] if compile else [False]
    return [Lane(s, p, c) for s in sizes for p in precisions for c in modes]


def run(
    pairs: list[Pair],
    cfg: ModelConfig,
    *,
    vocab: int,
    ids: tuple[int, int, int],
    optim: OptimConfig,
    lanes: Sequence[Lane],
    device: torch.device,
    steps: int,
    warmup: int,
    peak_size: int,
) -> dict:
    """Race one model per lane; returns the figures for bench.json."""
    sizes = sorted({lane.size for lane in lanes})
    by_size = size_batches(pairs, optim, sizes=sizes, n=warmup + steps, ids=ids, device=device)
    torch.manual_seed(optim.seed)
    first = Transformer(cfg, vocab, ids[0]).to(device)
    runners = []
    for lane in lanes:
        model = copy.deepcopy(first).train()
        model = compiled(model) if lane.compiled else model
        runners.append(Runner(lane.name, model, lane.bf16, make_optimizer(model, optim)))
    race_lanes(runners, [by_size[lane.size] for lane in lanes], warmup, optim)
    peaks = matmul_peaks(device, all(lane.bf16 for lane in lanes), peak_size)  # fp32 lanes: both dtypes
    speeds = {
        lane: per_step_speeds(by_size[lane.size][warmup:], r) for lane, r in zip(lanes, runners, strict=True)
    }
    detail = []
    for lane, r in zip(lanes, runners, strict=True):
        timed_batches = by_size[lane.size][warmup:]
        tokens = [b.tokens for b in timed_batches]
        flops = sum(train_step_flops(cfg, vocab, b.src_lens, b.tgt_lens) for b in timed_batches)
        achieved = flops / sum(r.seconds) / 1e9
        reference = speeds[Lane(lane.size, lanes[0].bf16)]
        detail.append(
            {
                "max_tokens": lane.size,
                "precision": "bf16" if lane.bf16 else "fp32",
                "compiled": lane.compiled,
                "tgt_tokens_per_step": sig(sum(tokens) / len(tokens)),
                "ms_per_step": sig(1e3 * median(r.seconds)),
                "tok_s": sig(sum(tokens) / sum(r.seconds)),
                "vs_first_lane": sig(median([a / b for a, b in zip(speeds[lane], reference, strict=True)])),
                "achieved_gflops": sig(achieved),
                "mfu": sig(achieved / peaks["bf16" if lane.bf16 else "fp32"]),
            }
        )
    small, large = (speeds[Lane(size, lanes[0].bf16)] for size in (sizes[0], sizes[-1]))
    speedup = median([b / a for a, b in zip(small, large, strict=True)])
    return {"per_token_speedup": sig(speedup), "batch_tokens_detail": detail}


def per_step_speeds(batches: Sequence[Batch], runner: Runner) -> list[float]:
    """Target tokens/s of each timed step of `runner` on `batches`."""
    return [b.tokens / s for b, s in zip(batches, runner.seconds, strict=True)]


def parse_precisions(text: str | None) -> list[bool] | None:
    """`"fp32,bf16"` -> [False, True] (bf16 or not); None -> None (the trainer's precision).

    Raises:
        ConfigError: an unknown name or a repeat.
    """
    if text is None:
        return None
    names = text.split(",")
    if any(n not in ("fp32", "bf16") for n in names) or len(set(names)) < len(names):
        raise ConfigError(f"--precisions {text!r}: give fp32 and/or bf16, comma-separated, each once")
    return [n == "bf16" for n in names]


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("Training cost per target token at two max_tokens, side by side.")
    p.add_argument("--max-tokens", default="2500,5000", help="comma-separated sizes, smallest first")
    p.add_argument("--steps", type=int, default=12, help="timed steps per size")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per size first")
    p.add_argument("--peak-size", type=int, default=None, help="square matmul size (2048 CPU, 8192 CUDA)")
    p.add_argument("--config", default="default", help="model shape: default (train.model), wu_tiny, tiny")
    p.add_argument(
        "--precisions", default=None, help="fp32 and/or bf16, e.g. fp32,bf16 (default: the trainer's)"
    )
    p.add_argument("--compile", action="store_true", help="race each lane under torch.compile too")
    p.add_argument("--label", default="", help="names the figures: batch_tokens_<label>_detail")
    args = p.parse_args(argv)
    sizes, precisions = parse_sizes(args.max_tokens), parse_precisions(args.precisions)
    params, tok, corpus = load_inputs(args.params)
    optim = params.train.optim
    cfg = named_configs(params, [args.config], parse_override(args.model_override))[args.config]
    device, bf16 = setup(optim.device, optim.precision, optim.threads)
    lanes = lanes_of(sizes, precisions or [bf16], args.compile)
    pairs = encode_pairs(tok, corpus["train"]["en"], corpus["train"]["de"], params.train.max_len)
    ids = (tok.pad_id, tok.bos_id, tok.eos_id)
    peak_size = args.peak_size or (8192 if device.type == "cuda" else 2048)
    figures = run(
        pairs,
        cfg,
        vocab=tok.vocab_size,
        ids=ids,
        optim=optim,
        lanes=lanes,
        device=device,
        steps=args.steps,
        warmup=args.warmup,
        peak_size=peak_size,
    )
    print("\n".join(table(figures["batch_tokens_detail"])))
    print(f"per_token_speedup (max_tokens {sizes[-1]} vs {sizes[0]}): {figures['per_token_speedup']}")
    if args.label:  # kept beside the unlabelled run's figures
        figures = {
            f"per_token_speedup_{args.label}": figures["per_token_speedup"],
            f"batch_tokens_{args.label}_detail": figures["batch_tokens_detail"],
        }
    name = f"batch_tokens_{args.label}" if args.label else "batch_tokens"
    record(args.out_dir, name, command_line("bench.batch_tokens", argv), figures, device)
    return figures


if __name__ == "__main__":
    run_main(main)
