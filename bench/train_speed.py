"""Training throughput and MFU: ours vs `torch.nn.Transformer` vs the tutorial's naive style, and
ours in the other precision and under `torch.compile`.

How it measures and what it writes: docs/benchmarks.md, `bench.train_speed`.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from statistics import median
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench import naive, nn_transformer
from bench.common import (
    base_parser,
    load_inputs,
    named_configs,
    parse_override,
    race,
    report,
    sig,
    train_pairs,
)
from bench.flops import matmul_peaks
from pipeline.core.config import ModelConfig, OptimConfig
from pipeline.core.device import autocast, setup, use_bf16
from pipeline.core.errors import PipelineError, run_main
from pipeline.data.batching import Pair, collate, make_batches
from pipeline.model.flops import train_step_flops
from pipeline.model.transformer import Transformer
from pipeline.training import loop
from pipeline.training.loop import RunContext, make_optimizer

GAP_LIMIT = 1e-4  # largest logit difference (fp32) for a model to count as computing ours' function


class Batch(NamedTuple):
    """A collated batch on the device and its sentence lengths (for the FLOP count)."""

    src: Tensor  # [B, S]
    tgt_in: Tensor  # [B, T]
    tgt_out: Tensor  # [B, T]
    src_lens: list[int]  # real source tokens per sentence (eos included)
    tgt_lens: list[int]  # real target tokens per sentence

    @property
    def tokens(self) -> int:
        return sum(self.tgt_lens)


def make_batch(pairs: list[Pair], ids: tuple[int, int, int], device: torch.device) -> Batch:
    """Collate pairs with (pad, bos, eos) ids onto `device`."""
    src, tgt_in, tgt_out = (t.to(device) for t in collate(pairs, *ids))
    return Batch(src, tgt_in, tgt_out, [len(s) + 1 for s, _ in pairs], [len(t) + 1 for _, t in pairs])


def real_batches(pairs: list[Pair], optim: OptimConfig, n: int) -> list[list[Pair]]:
    """The first `n` batches of the trainer's epoch-0 order (pairs, not indices)."""
    return [[pairs[i] for i in b] for b in make_batches(pairs, optim.max_tokens, optim.seed, 0)[:n]]


@dataclass
class Runner:
    """A model in the race, its precision and optimizer."""

    name: str
    model: nn.Module
    bf16: bool
    opt: torch.optim.Optimizer
    logit_gap: float | None = None  # largest |logit - ours'| on the probe batch (None: not checked)


@dataclass
class RaceSpec:
    """What every config's race shares."""

    vocab: int
    ids: tuple[int, int, int]  # pad, bos, eos
    optim: OptimConfig
    device: torch.device
    bf16: bool  # the trainer's precision
    untimed_steps: int  # steps each runner takes before the timed ones
    other_precision: bool = True  # race ours in the other precision too
    compile: bool = False  # race ours under torch.compile


def baseline_step(
    model: nn.Module, opt: torch.optim.Optimizer, bf16: bool, batch: Batch, optim: OptimConfig
) -> None:
    """The trainer's step for a baseline that computes logits at every target position.

    Baselines: `nn.Transformer`, the naive style, `AllPositions`. The step: autocast forward,
    label-smoothed loss per target token, backward, clip, Adam.
    """
    opt.zero_grad(set_to_none=True)
    with autocast(batch.src.device, bf16):
        logits, target = model(batch.src, batch.tgt_in).flatten(0, 1), batch.tgt_out.flatten()
    loss = F.cross_entropy(  # the unfused loss: fp32 logits [N, V], then label-smoothed cross-entropy
        logits.float(),
        target,
        ignore_index=model.pad_id,
        label_smoothing=optim.label_smoothing,
        reduction="sum",
    )
    (loss / batch.tokens).backward()
    nn.utils.clip_grad_norm_(model.parameters(), optim.clip_norm)
    opt.step()


def step_of(runner: Runner, batch: Batch, optim: OptimConfig) -> Callable[[], object]:
    """One optimizer step of `runner` on `batch`.

    Our model (compiled or not) takes the trainer's own `pipeline.training.loop.train_step`
    (logits at non-pad positions only); baselines take `baseline_step`.
    """
    if type(getattr(runner.model, "_orig_mod", runner.model)) is Transformer:
        run = RunContext(Path(), Path(), "bench", device=batch.src.device, bf16=runner.bf16)
        micro_batches = [[batch.src, batch.tgt_in, batch.tgt_out]]
        return partial(
            loop.train_step, runner.model, runner.opt, micro_batches, lr=optim.peak_lr, cfg=optim, run=run
        )
    return partial(baseline_step, runner.model, runner.opt, runner.bf16, batch, optim)


class AllPositions(Transformer):
    """Ours computing logits (and the loss) at every target position, pads included: the
    "logits only at non-pad positions" lever switched off."""


def compiled(model: Transformer) -> nn.Module:
    """`torch.compile` of a copy of `model` (dynamic shapes: every batch has its own B, S, T)."""
    module = torch.compile(copy.deepcopy(model), dynamic=True)
    module.pad_id = model.pad_id
    return module


@torch.no_grad()
def logit_gap(model: nn.Module, ours: Transformer, src: Tensor, tgt_in: Tensor) -> float:
    """The largest |logit difference| between `model` and `ours` at the real target positions of
    (`src`, `tgt_in`), both in eval mode, in fp32 on the CPU."""
    real = tgt_in != ours.pad_id
    return float((model.eval()(src, tgt_in)[real] - ours.eval()(src, tgt_in)[real]).abs().max())


def logit_gaps(
    models: list[tuple[str, nn.Module, bool]], ours: Transformer, probe: tuple[Tensor, Tensor]
) -> dict:
    """Each model's `logit_gap` to `ours` on `probe`, by name (None for a compiled model: it wraps a
    copy of ours, and compiling here would cost minutes).

    Raises:
        PipelineError: a model's logits differ from ours by more than `GAP_LIMIT`: the race would
            compare different functions.
    """
    gaps = {n: None if hasattr(m, "_orig_mod") else sig(logit_gap(m, ours, *probe)) for n, m, _ in models}
    for name, gap in gaps.items():
        if gap is not None and gap > GAP_LIMIT:
            raise PipelineError(f"bench: {name} does not compute our function (logits differ by {gap})")
    return gaps


def make_runners(cfg: ModelConfig, spec: RaceSpec, probe: tuple[Tensor, Tensor]) -> list[Runner]:
    """The raced models, each checked to compute ours' function before it moves to the device.

    They are ours, nn_transformer, naive (trainer's precision), ours in the other precision (if
    `spec.other_precision`), ours with logits at all positions (`AllPositions`), and ours
    compiled (if `spec.compile`); the check runs on `probe` (CPU tensors: `logit_gaps`).

    Raises:
        PipelineError: a model does not compute ours' function.
    """
    torch.manual_seed(spec.optim.seed)
    ours = Transformer(cfg, spec.vocab, spec.ids[0])
    all_positions = AllPositions(cfg, spec.vocab, spec.ids[0])
    all_positions.load_state_dict(ours.state_dict())
    bf16 = spec.bf16
    models = [
        ("ours", ours, bf16),
        ("nn_transformer", nn_transformer.from_ours(ours), bf16),
        ("naive", naive.from_ours(ours), bf16),
        ("ours_all_positions", all_positions, bf16),
    ]
    if spec.other_precision:
        models.insert(3, ("ours_fp32" if bf16 else "ours_bf16", copy.deepcopy(ours), not bf16))
    if spec.compile:
        models.append(("ours_compiled", compiled(ours), bf16))
    gaps = logit_gaps(models, ours, probe)
    return [
        Runner(n, m.to(spec.device).train(), b, make_optimizer(m, spec.optim), gaps[n]) for n, m, b in models
    ]


def bench_config(name: str, cfg: ModelConfig, batches: list[Batch], spec: RaceSpec) -> list[dict]:
    """Race the models on `batches` (`common.race`); returns their detail rows."""
    runners = make_runners(cfg, spec, (batches[0].src[:4].cpu(), batches[0].tgt_in[:4].cpu()))
    lanes = {r.name: [step_of(r, b, spec.optim) for b in batches] for r in runners}
    seconds = {n: [s for _, s in steps] for n, steps in race(lanes, spec.device).items()}
    dims = f"{name} (D{cfg.d_model} H{cfg.n_heads} L{cfg.n_layers} F{cfg.d_ff})"
    rows = [
        detail_row(
            dims, r, seconds[r.name], ours=seconds["ours"], batches=batches, untimed=spec.untimed_steps
        )
        for r in runners
    ]
    timed = batches[spec.untimed_steps :]
    flops = [train_step_flops(cfg, spec.vocab, b.src_lens, b.tgt_lens) for b in timed]
    ours_timed = zip(flops, seconds["ours"][spec.untimed_steps :], strict=True)
    rows[0]["achieved_gflops"] = sig(median([f / s / 1e9 for f, s in ours_timed]))
    return rows


def detail_row(
    dims: str, r: Runner, seconds: list[float], *, ours: list[float], batches: list[Batch], untimed: int
) -> dict:
    """A runner's row from its step `seconds` on `batches`, the `untimed` first left out.

    Its tok/s, ms per step and ours' speed over its own (`ours`: ours' step seconds); a compiled
    runner's row carries `compile_s`, its first step minus its median."""
    mine, ours, batches = seconds[untimed:], ours[untimed:], batches[untimed:]
    row = {
        "config": dims,
        "model": r.name,
        "precision": "bf16" if r.bf16 else "fp32",
        "tok_s": sig(median([b.tokens / s for b, s in zip(batches, mine, strict=True)])),
        "ms_per_step": sig(1e3 * median(mine)),
        "ours_vs_this": sig(median([s / o for s, o in zip(mine, ours, strict=True)])),
        "achieved_gflops": None,
        "logit_gap": r.logit_gap,
    }
    if r.name == "ours_compiled":
        row["compile_s"] = sig(seconds[0] - median(mine))
    return row


def headline(rows: list[dict], peaks: dict[str, float], bf16: bool) -> dict:
    """The top-level figures from one config's rows (ours first); `peaks`: GFLOP/s per dtype
    name, the trainer's dtype included."""
    by_model = {r["model"]: r for r in rows}
    ours = by_model["ours"]
    other = by_model.get("ours_fp32" if bf16 else "ours_bf16")
    bf16_tok_s, fp32_tok_s = (ours, other) if bf16 else (other, ours)
    dtype = "bf16" if bf16 else "fp32"
    figures = {
        "train_tok_s": ours["tok_s"],
        "train_vs_nn_transformer": by_model["nn_transformer"]["ours_vs_this"],
        "train_vs_naive": by_model["naive"]["ours_vs_this"],
        "bf16_vs_fp32": sig(bf16_tok_s["tok_s"] / fp32_tok_s["tok_s"]) if other else None,
        "mfu": sig(ours["achieved_gflops"] / peaks[dtype]),
        "peak_gflops": sig(peaks[dtype]),
        "peak_dtype": dtype,
        "achieved_gflops": ours["achieved_gflops"],
        "bf16_peak_gflops": sig(peaks["bf16"]) if not bf16 else None,
    }
    if "ours_compiled" in by_model:
        compiled_row = by_model["ours_compiled"]
        figures["compiled_vs_eager"] = sig(1 / compiled_row["ours_vs_this"])
        figures["compile_s"] = compiled_row["compile_s"]
    return figures


def run(
    pairs: list[Pair], configs: dict[str, ModelConfig], spec: RaceSpec, *, steps: int, peak_size: int
) -> dict:
    """All configs on the same real batches (the compiled runner in the headline config only:
    'default', else the last); returns the figures for bench.json.

    Raises:
        ValueError: the training data has no batch left to time.
    """
    n = spec.untimed_steps + steps
    batches = [make_batch(b, spec.ids, spec.device) for b in real_batches(pairs, spec.optim, n)]
    if len(batches) <= spec.untimed_steps:
        raise ValueError(
            f"only {len(batches)} batches of training data for {spec.untimed_steps} untimed steps"
        )
    peaks = matmul_peaks(spec.device, spec.bf16, peak_size)
    last = "default" if "default" in configs else list(configs)[-1]
    detail = []
    for name, cfg in configs.items():
        detail += bench_config(name, cfg, batches, replace(spec, compile=spec.compile and name == last))
    rows = [r for r in detail if r["config"].startswith(f"{last} ")]
    return {**headline(rows, peaks, spec.bf16), "train_detail": detail}


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("Training throughput and MFU: ours vs nn.Transformer vs naive.")
    p.add_argument(
        "--configs", default="tiny,wu_tiny,default", help="comma-separated: tiny, wu_tiny, default"
    )
    p.add_argument("--steps", type=int, default=20, help="timed steps per model")
    p.add_argument("--untimed-steps", type=int, default=3, help="untimed steps per model first")
    p.add_argument("--peak-size", type=int, default=None, help="square matmul size (2048 CPU, 8192 CUDA)")
    p.add_argument(
        "--other-precision",
        choices=("auto", "on", "off"),
        default="auto",
        help="race ours in the other precision too (auto: where bf16 is native)",
    )
    p.add_argument("--compile", action="store_true", help="race ours under torch.compile (headline config)")
    args = p.parse_args(argv)
    params, tok, corpus = load_inputs(args.params)
    optim = params.train.optim
    device, bf16 = setup(optim.device, optim.precision, optim.threads)
    configs = named_configs(params, args.configs.split(","), parse_override(args.model_override))
    other = {"on": True, "off": False}.get(args.other_precision, use_bf16(device, "auto"))
    spec = RaceSpec(
        tok.vocab_size,
        (tok.pad_id, tok.bos_id, tok.eos_id),
        optim,
        device,
        bf16,
        args.untimed_steps,
        other_precision=other,
        compile=args.compile,
    )
    peak_size = args.peak_size or (8192 if device.type == "cuda" else 2048)
    figures = run(train_pairs(params, tok, corpus), configs, spec, steps=args.steps, peak_size=peak_size)
    report("bench.train_speed", argv, args.out_dir, figures, device)
    return figures


if __name__ == "__main__":
    run_main(main)
