"""Does a speed lever train the same model? The real trainer twice from one seed, lever off and on.

How it measures and what it writes: docs/benchmarks.md, `bench.loss_check`.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.common import base_parser, command_line, model_config, record, sig, table
from bench.levers import PAPER, PAPER_MAX_TOKENS
from pipeline.core.config import load_params, with_updates
from pipeline.core.device import setup
from pipeline.core.errors import ConfigError, run_main
from pipeline.data.corpus import TokenizedCorpus
from pipeline.data.multi30k import load_corpus
from pipeline.data.tokenizer import Tokenizer, model_file, model_sha256
from pipeline.training import loop

LEVERS = ("fused_loss",)  # RunContext fields a run can switch


def train_once(
    model, pairs, validate, *, optim, device, bf16, lever: str, on: bool
) -> tuple[list[float], dict]:
    """Train a copy of `model` with `lever` on or off; returns (loss per step, the validation)."""
    losses = []
    step = loop.train_step

    def recording_step(*args, **kwargs):
        loss, n = step(*args, **kwargs)
        losses.append(loss)
        return loss, n

    with tempfile.TemporaryDirectory() as tmp:
        run = loop.RunContext(Path(tmp), Path(tmp) / "log.csv", "loss-check", device=device, bf16=bf16)
        setattr(run, lever, on)
        loop.train_step = recording_step
        try:
            progress = loop.train(model, pairs, validate, optim, run)
        finally:
            loop.train_step = step
    return losses, progress.log[-1]


def compare(off: list[float], on: list[float], last: int = 50) -> dict:
    """The figures of two loss curves of equal length."""
    diffs = [abs(a - b) for a, b in zip(off, on, strict=True)]
    steps = [abs(b - a) for a, b in zip(off[:-1], off[1:], strict=True)]
    return {
        "mean_loss_last_off": sig(sum(off[-last:]) / last),
        "mean_loss_last_on": sig(sum(on[-last:]) / last),
        "max_abs_diff": sig(max(diffs)),
        "mean_abs_diff": sig(sum(diffs) / len(diffs)),
        "mean_abs_step_change_off": sig(sum(steps) / len(steps)),
    }


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("A speed lever off and on: the same losses and val BLEU?")
    p.add_argument("--config", default="paper", help="paper or default")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps per run")
    p.add_argument("--lever", default="fused_loss", help=f"one of {', '.join(LEVERS)}")
    args = p.parse_args(argv)
    if args.lever not in LEVERS or args.config not in ("paper", "default"):
        raise ConfigError(f"--lever {args.lever!r} / --config {args.config!r}: see --help")
    params = load_params(args.params)
    spm = model_file(params.tokenizer.out_dir)
    tok = Tokenizer.load(spm)
    fields, max_tokens = (PAPER, PAPER_MAX_TOKENS) if args.config == "paper" else ({}, None)
    cfg = model_config(params.train.model, **fields)
    optim = with_updates(
        params.train.optim,
        {
            "max_steps": args.steps,
            "val_every": args.steps,
            "max_tokens": max_tokens or params.train.optim.max_tokens,
        },
    )
    device, bf16 = setup(optim.device, optim.precision, optim.threads)
    pairs = TokenizedCorpus.open(params.prepare.out_dir, model_sha256(spm), tok.vocab_size)
    val = load_corpus(params.download.out_dir)["val"][:]
    validate = loop.bleu_validation(tok, val, params.decode, max_tokens=optim.max_tokens, device=device)
    curves, ends = {}, {}
    for on in (False, True):
        model = loop.new_model(cfg, tok.vocab_size, tok.pad_id, optim.seed)
        curves[on], ends[on] = train_once(
            model, pairs, validate, optim=optim, device=device, bf16=bf16, lever=args.lever, on=on
        )
    row = {
        "config": args.config,
        "lever": args.lever,
        "steps": args.steps,
        **compare(curves[False], curves[True]),
    }
    for on in (False, True):
        suffix = "on" if on else "off"
        row[f"val_loss_{suffix}"] = sig(ends[on]["val_loss"])
        row[f"val_bleu_{suffix}"] = sig(ends[on]["val_bleu"])
    print("\n".join(table([row])))
    figures = {f"loss_check_{args.config}_{args.lever}_detail": [row]}
    record(args.out_dir, f"loss_check_{args.config}", command_line("bench.loss_check", argv), figures, device)
    return figures


if __name__ == "__main__":
    run_main(main)
