"""Training speed beside another busy process: all cores vs threads chosen for the load.

How it measures and what it writes: docs/benchmarks.md, `bench.shared_cpu`.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager

import torch

from bench.common import base_parser, command_line, load_inputs, parse_override, record, sig, table, timed
from bench.train_speed import Batch, Runner, make_batch, real_batches, step_of
from pipeline.core.config import OptimConfig, with_updates
from pipeline.core.device import setup
from pipeline.core.errors import ConfigError, run_main
from pipeline.model.transformer import Transformer
from pipeline.training.loop import encode_pairs, make_optimizer
from pipeline.training.threads import ThreadsForLoad, available_cores

CONDITIONS = (("alone", "all_cores"), ("alone", "for_load"), ("busy", "all_cores"), ("busy", "for_load"))
BUSY_LOOP = "while True: pass"


@contextmanager
def busy_process(on: bool):
    """A CPU-bound Python process in its own session while the block runs (nothing when not `on`)."""
    if not on:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True)
    try:
        time.sleep(0.5)  # let it start spinning before the first step
        yield
    finally:
        proc.kill()
        proc.wait()


def segment(
    runner: Runner, batches: list[Batch], warmup: int, optim: OptimConfig, for_load: bool
) -> tuple[list[float], int]:
    """Train on `batches`: (seconds of each step after the first `warmup`, threads at the end)."""
    cores = available_cores()
    torch.set_num_threads(cores)
    threads = ThreadsForLoad(cores, every_seconds=1.0) if for_load else None
    seconds = []
    for i, batch in enumerate(batches):
        if threads is not None:
            threads.update()
        step_seconds = timed(step_of(runner, batch, optim), batch.src.device)
        if i >= warmup:
            seconds.append(step_seconds)
    used = torch.get_num_threads()
    torch.set_num_threads(cores)
    return seconds, used


def run(runner: Runner, batches: list[Batch], optim: OptimConfig, rounds: int, warmup: int) -> dict:
    """The four conditions, `rounds` times each; returns the figures for bench.json."""
    seconds = {c: [] for c in CONDITIONS}
    threads = {c: [] for c in CONDITIONS}
    tokens = sum(b.tokens for b in batches[warmup:])
    for r in range(rounds):
        for load, policy in CONDITIONS[r % 4 :] + CONDITIONS[: r % 4]:
            with busy_process(load == "busy"):
                steps, used = segment(runner, batches, warmup, optim, policy == "for_load")
            seconds[(load, policy)] += steps
            threads[(load, policy)].append(used)
    tok_s = {c: tokens * rounds / sum(s) for c, s in seconds.items()}
    detail = [
        {
            "load": load,
            "threads": policy.replace("_", " "),
            "threads_used": sorted(set(threads[(load, policy)])),
            "tok_s": sig(tok_s[(load, policy)]),
            "vs_alone_all_cores": sig(tok_s[(load, policy)] / tok_s[("alone", "all_cores")]),
        }
        for load, policy in CONDITIONS
    ]
    return {
        "shared_cpu_busy_vs_alone_all_cores": sig(
            tok_s[("busy", "all_cores")] / tok_s[("alone", "all_cores")]
        ),
        "shared_cpu_busy_vs_alone_for_load": sig(tok_s[("busy", "for_load")] / tok_s[("alone", "for_load")]),
        "shared_cpu_detail": detail,
    }


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("Training speed alone and beside a busy process, all cores vs threads for the load.")
    p.add_argument("--steps", type=int, default=6, help="timed steps per segment")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first in each segment")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the four conditions")
    args = p.parse_args(argv)
    params, tok, corpus = load_inputs(args.params)
    optim = params.train.optim
    cfg = with_updates(params.train.model, parse_override(args.model_override))
    device, bf16 = setup(optim.device, optim.precision, optim.threads)
    if device.type != "cpu":
        raise ConfigError("bench.shared_cpu measures CPU threads: train.optim.device must be cpu here")
    pairs = encode_pairs(tok, corpus["train"]["en"], corpus["train"]["de"], params.train.max_len)
    ids = (tok.pad_id, tok.bos_id, tok.eos_id)
    batches = [make_batch(b, ids, device) for b in real_batches(pairs, optim, args.warmup + args.steps)]
    torch.manual_seed(optim.seed)
    model = Transformer(cfg, tok.vocab_size, ids[0]).to(device).train()
    runner = Runner("ours", model, bf16, make_optimizer(model, optim))
    figures = run(runner, batches, optim, args.rounds, args.warmup)
    print("\n".join(table(figures["shared_cpu_detail"])))
    print(
        f"beside a busy process / alone: all cores {figures['shared_cpu_busy_vs_alone_all_cores']}, "
        f"threads for the load {figures['shared_cpu_busy_vs_alone_for_load']}"
    )
    record(args.out_dir, "shared_cpu", command_line("bench.shared_cpu", argv), figures, device)
    return figures


if __name__ == "__main__":
    run_main(main)
