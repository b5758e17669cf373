"""Data parallelism across the cores raced against one process: the trainer's DDP step in two
one-thread processes against its plain step in one process with a thread per core.

How it measures and what it writes: docs/benchmarks.md, `bench.data_parallel`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

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
from bench.levers import named_shapes
from bench.train_speed import Batch, make_batch, real_batches
from pipeline.core.config import ModelConfig, OptimConfig, with_updates
from pipeline.core.device import use_bf16
from pipeline.core.errors import ConfigError, run_main
from pipeline.data.batching import Pair
from pipeline.model.transformer import Transformer
from pipeline.serving.mlflow_server import free_port
from pipeline.training import loop
from pipeline.training.distributed import World
from pipeline.training.loop import RunContext, encode_pairs, make_optimizer

CPU = torch.device("cpu")
Update = list[list[Pair]]  # the micro-batches of one optimizer step


def updates(pairs: list[Pair], optim: OptimConfig, n: int) -> list[Update]:
    """The first `n` optimizer steps of the trainer's epoch-0 order: `optim.accum_steps`
    batches of `optim.max_tokens` each."""
    k = optim.accum_steps
    batches = real_batches(pairs, optim, n * k)
    if len(batches) < n * k:
        raise ConfigError(f"bench: {len(batches)} batches of training data, {n * k} needed")
    return [batches[i * k : (i + 1) * k] for i in range(n)]


def rank_updates(pairs: list[Pair], optim: OptimConfig, n: int, ranks: int) -> list[Update]:
    """The same `n` steps for `ranks` processes, each step's micro-batches dealt out `[r::ranks]`.

    That is the trainer's DDP order. The batches are `optim`'s own when they divide evenly, else batches
    of 1/`ranks` the tokens, so that a step holds about the same target tokens."""
    if optim.accum_steps % ranks == 0:
        return updates(pairs, optim, n)
    shared = {"max_tokens": optim.max_tokens // ranks, "accum_steps": optim.accum_steps * ranks}
    return updates(pairs, with_updates(optim, shared), n)


def train_steps(net, opt, steps: list[list[Batch]], *, optim: OptimConfig, run: RunContext) -> None:
    """The trainer's optimizer step (`loop.train_step`) on each step's micro-batches, in order."""
    for micro in steps:
        loop.train_step(
            net, opt, [[b.src, b.tgt_in, b.tgt_out] for b in micro], lr=optim.peak_lr, cfg=optim, run=run
        )


def _worker(rank: int, ranks: int, port: int, job: dict, commands: mp.Queue, results: mp.Queue) -> None:
    """One DDP process: one thread, the same initial weights as the one-process lane; runs the
    step ranges `commands` sends and (rank 0) answers each with its wall seconds."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    optim, ids = job["optim"], job["ids"]
    torch.manual_seed(optim.seed)
    model = Transformer(job["cfg"], job["vocab"], ids[0])
    net = DistributedDataParallel(model)
    opt = make_optimizer(model, optim)
    run = RunContext(Path(), Path(), "bench", world=World(rank, ranks), bf16=job["bf16"])
    steps = [[make_batch(b, ids, CPU) for b in update[rank::ranks]] for update in job["updates"]]
    while (span := commands.get()) is not None:
        dist.barrier()
        start = time.perf_counter()
        train_steps(net, opt, steps[slice(*span)], optim=optim, run=run)
        dist.barrier()
        if rank == 0:
            results.put(time.perf_counter() - start)
    dist.destroy_process_group()


class Lanes:
    """The two lanes: one process with `threads` threads here, `ranks` one-thread processes."""

    def __init__(self, job: dict, ddp_updates: list[Update], ranks: int, threads: int) -> None:
        self.job, self.threads = job, threads
        torch.manual_seed(job["optim"].seed)
        self.model = Transformer(job["cfg"], job["vocab"], job["ids"][0])
        self.opt = make_optimizer(self.model, job["optim"])
        self.run = RunContext(Path(), Path(), "bench", bf16=job["bf16"])
        self.steps = [[make_batch(b, job["ids"], CPU) for b in u] for u in job["updates"]]
        ctx, port = mp.get_context("spawn"), free_port()
        self.commands = [ctx.Queue() for _ in range(ranks)]
        self.results = ctx.Queue()
        worker_job = {**job, "updates": ddp_updates}
        self.workers = [
            ctx.Process(target=_worker, args=(r, ranks, port, worker_job, self.commands[r], self.results))
            for r in range(ranks)
        ]
        for w in self.workers:
            w.start()

    def one_process(self, span: tuple[int, int]) -> float:
        torch.set_num_threads(self.threads)
        start = time.perf_counter()
        train_steps(self.model, self.opt, self.steps[slice(*span)], optim=self.job["optim"], run=self.run)
        return time.perf_counter() - start

    def data_parallel(self, span: tuple[int, int]) -> float:
        for q in self.commands:
            q.put(span)
        return self.results.get()

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for w in self.workers:
            w.join()


def race(job: dict, ddp_updates: list[Update], *, ranks: int, rounds: int, steps: int, warmup: int) -> dict:
    """`rounds` rounds of `steps` steps per lane (the lane order alternating), after `warmup`
    untimed steps each; returns the seconds per round of each lane."""
    lanes = Lanes(job, ddp_updates, ranks, threads=ranks)
    try:
        lanes.one_process((0, warmup))
        lanes.data_parallel((0, warmup))
        seconds = {"one_process": [], "data_parallel": []}
        for r in range(rounds):
            span = (warmup + r * steps, warmup + (r + 1) * steps)
            order = ["one_process", "data_parallel"][:: 1 if r % 2 == 0 else -1]
            for name in order:
                seconds[name].append(getattr(lanes, name)(span))
        return seconds
    finally:
        lanes.close()


def tokens(update: Update) -> int:
    return sum(len(t) + 1 for batch in update for _, t in batch)


def race_shape(
    name: str, cfg: ModelConfig, optim: OptimConfig, *, pairs: list[Pair], common: dict, args
) -> list[dict]:
    """Race one shape; returns a row per lane (target tokens/s, the median of per-round ratios)."""
    n, ranks = args.warmup + args.rounds * args.steps, 2
    job = {**common, "cfg": cfg, "optim": optim, "updates": updates(pairs, optim, n)}
    lane_updates = {"one_process": job["updates"], "data_parallel": rank_updates(pairs, optim, n, ranks)}
    seconds = race(
        job,
        lane_updates["data_parallel"],
        ranks=ranks,
        rounds=args.rounds,
        steps=args.steps,
        warmup=args.warmup,
    )
    rows = []
    for lane, per_round in seconds.items():
        timed_tokens = sum(map(tokens, lane_updates[lane][args.warmup :]))
        ratios = [a / b for a, b in zip(seconds["one_process"], per_round, strict=True)]
        rows.append(
            {
                "config": name,
                "lane": lane,
                "processes x threads": f"1 x {ranks}" if lane == "one_process" else f"{ranks} x 1",
                "tgt_tokens_per_step": sig(timed_tokens / (n - args.warmup)),
                "tok_s": sig(timed_tokens / sum(per_round)),
                "vs_one_process": sig(median(ratios)),
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("Two one-thread DDP processes against one process with two threads, side by side.")
    p.add_argument("--configs", default="paper,default", help="comma-separated: paper, default")
    p.add_argument("--rounds", type=int, default=6, help="timed rounds per lane (the order alternates)")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per lane first")
    args = p.parse_args(argv)
    params, tok, corpus = load_inputs(args.params)
    base = params.train.optim
    if base.device not in ("auto", "cpu"):
        raise ConfigError(f"bench.data_parallel races CPU processes; train.optim.device is {base.device!r}")
    bf16 = use_bf16(CPU, base.precision)
    shapes = named_shapes(args.configs, params, parse_override(args.model_override))
    pairs = encode_pairs(tok, corpus["train"]["en"], corpus["train"]["de"], params.train.max_len)
    common = {"vocab": tok.vocab_size, "ids": (tok.pad_id, tok.bos_id, tok.eos_id), "bf16": bf16}
    rows = []
    for name, cfg, optim in shapes:
        rows += race_shape(name, cfg, optim, pairs=pairs, common=common, args=args)
    print("\n".join(table(rows)))
    figures = {"data_parallel_detail": rows}
    record(args.out_dir, "data_parallel", command_line("bench.data_parallel", argv), figures, CPU)
    return figures


if __name__ == "__main__":
    run_main(main)
