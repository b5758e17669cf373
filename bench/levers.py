"""The trainer's speed levers raced on and off, side by side in one run, on real batches.

How it measures and what it writes: docs/benchmarks.md, `bench.levers`.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.common import (
    WU_TINY,
    base_parser,
    command_line,
    load_inputs,
    median,
    model_config,
    parse_override,
    record,
    sig,
    table,
)
from bench.train_speed import Batch, Runner, make_batch, matmul_peaks, race_lanes, real_batches
from pipeline.core.config import ModelConfig, OptimConfig, Params, with_updates
from pipeline.core.device import setup
from pipeline.core.errors import ConfigError, run_main
from pipeline.model import transformer
from pipeline.model.flops import train_step_flops
from pipeline.model.transformer import Transformer
from pipeline.training.loop import encode_pairs, make_optimizer

PAPER = {**WU_TINY, "dropout": 0.3, "act_dropout": 0.0, "attn_dropout": 0.0}  # docs/results.md
PAPER_MAX_TOKENS = 3750
PAPER_OPTIM = {"max_tokens": PAPER_MAX_TOKENS, "accum_steps": 2}  # the recipe's 7,500-token updates


def named_shapes(configs: str, params: Params, override: dict) -> list[tuple[str, ModelConfig, OptimConfig]]:
    """(name, model, optim) of each name in the comma-separated `configs`: 'paper' (Wu et al.'s
    shape with the paper recipe's batches) or 'default' (params' `train`), `override` on the model.

    Raises:
        ConfigError: a name that is neither.
    """
    known = {"paper": (PAPER, PAPER_OPTIM), "default": ({}, {})}
    names = configs.split(",")
    if any(n not in known for n in names):
        raise ConfigError(f"--configs {configs!r}: choose from {sorted(known)}")
    return [
        (
            n,
            model_config(params.train.model, **{**known[n][0], **override}),
            with_updates(params.train.optim, known[n][1]),
        )
        for n in names
    ]


@dataclass(frozen=True)
class Lane:
    """Which levers a racer has on."""

    name: str
    fused_loss: bool
    fused_adam: bool
    fused_attention: bool = False  # the fused CPU attention kernel in place of the explicit math
    bucket: int = 1  # batch lengths padded up to a multiple of this (fewer distinct shapes)


LANES = (
    Lane("before", False, False),
    Lane("fused_loss", True, False),
    Lane("fused_adam", False, True),
    Lane("after", True, True),
    Lane("fused_attention", True, False, fused_attention=True),
    Lane("buckets_16", True, False, bucket=16),
)
TRAINER = "fused_loss"  # the lane that steps as the trainer does


def fused_cpu_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float = 0.0
) -> Tensor:
    """`F.scaled_dot_product_attention` on every device (the model uses it on CUDA only)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


@contextmanager
def fused_attention() -> Iterator[None]:
    """The model's attention replaced by the fused kernel while the block runs."""
    explicit = transformer.attention
    transformer.attention = fused_cpu_attention
    try:
        yield
    finally:
        transformer.attention = explicit


def bucketed(batch: Batch, pad_id: int, bucket: int) -> Batch:
    """`batch` with its source and target lengths padded up to a multiple of `bucket` (the
    padding is masked, so the loss is the same)."""
    if bucket == 1:
        return batch

    def grow(t: Tensor) -> Tensor:
        return F.pad(t, (0, -t.size(1) % bucket), value=pad_id)

    return batch._replace(src=grow(batch.src), tgt_in=grow(batch.tgt_in), tgt_out=grow(batch.tgt_out))


def race_config(name, cfg, optim, *, pairs, ids, vocab, device, bf16, steps, warmup, peak) -> list[dict]:
    """Race `LANES` on one config's batches; returns one row per lane."""
    batches = [make_batch(b, ids, device) for b in real_batches(pairs, optim, warmup + steps)]
    if len(batches) < warmup + steps:
        raise ConfigError(f"bench: {len(batches)} batches of training data, {warmup + steps} needed")
    torch.manual_seed(optim.seed)
    first = Transformer(cfg, vocab, ids[0]).to(device)
    runners = []
    for lane in LANES:
        model = copy.deepcopy(first).train()
        opt = make_optimizer(model, optim, fused=lane.fused_adam)
        around = fused_attention if lane.fused_attention else nullcontext
        runners.append(Runner(lane.name, model, bf16, opt, fused_loss=lane.fused_loss, around_step=around))
    race_lanes(
        runners, [[bucketed(b, ids[0], lane.bucket) for b in batches] for lane in LANES], warmup, optim
    )
    timed_batches = batches[warmup:]
    tokens = sum(b.tokens for b in timed_batches)
    flops = sum(train_step_flops(cfg, vocab, b.src_lens, b.tgt_lens) for b in timed_batches)
    before = runners[0].seconds
    trainer = next(r for r in runners if r.name == TRAINER).seconds
    return [
        {
            "config": name,
            "lane": r.name,
            "precision": "bf16" if bf16 else "fp32",
            "tgt_tokens_per_step": sig(tokens / len(timed_batches)),
            "ms_per_step": sig(1e3 * median(r.seconds)),
            "tok_s": sig(tokens / sum(r.seconds)),
            "vs_before": sig(median([b / s for b, s in zip(before, r.seconds, strict=True)])),
            "vs_trainer": sig(median([t / s for t, s in zip(trainer, r.seconds, strict=True)])),
            "mfu": sig(flops / sum(r.seconds) / 1e9 / peak),
        }
        for r in runners
    ]


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("The trainer's speed levers on and off, side by side.")
    p.add_argument("--configs", default="paper,default", help="comma-separated: paper, default")
    p.add_argument("--steps", type=int, default=12, help="timed steps per lane")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per lane first")
    p.add_argument("--peak-size", type=int, default=None, help="square matmul size (2048 CPU, 8192 CUDA)")
    args = p.parse_args(argv)
    params, tok, corpus = load_inputs(args.params)
    base = params.train.optim
    device, bf16 = setup(base.device, base.precision, base.threads)
    shapes = named_shapes(args.configs, params, parse_override(args.model_override))
    pairs = encode_pairs(tok, corpus["train"]["en"], corpus["train"]["de"], params.train.max_len)
    ids = (tok.pad_id, tok.bos_id, tok.eos_id)
    peaks = matmul_peaks(device, bf16, args.peak_size or (8192 if device.type == "cuda" else 2048))
    peak = peaks["bf16" if bf16 else "fp32"]
    rows = []
    for name, cfg, optim in shapes:
        rows += race_config(
            name,
            cfg,
            optim,
            pairs=pairs,
            ids=ids,
            vocab=tok.vocab_size,
            device=device,
            bf16=bf16,
            steps=args.steps,
            warmup=args.warmup,
            peak=peak,
        )
    print("\n".join(table(rows)))
    figures = {"levers_detail": rows, "levers_peak_gflops": sig(peak)}
    record(args.out_dir, "levers", command_line("bench.levers", argv), figures, device)
    return figures


if __name__ == "__main__":
    run_main(main)
