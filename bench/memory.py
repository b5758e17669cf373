"""Peak memory (RSS) of training and of beam-5 decoding, each in a fresh child process.

How it measures and what it writes: docs/benchmarks.md, `bench.memory`.
"""

from __future__ import annotations

import multiprocessing
import resource
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import torch

from bench.common import (
    base_parser,
    decode_model,
    load_inputs,
    model_config,
    parse_override,
    report,
    sig,
    train_pairs,
)
from bench.train_speed import Runner, make_batch, step_of
from pipeline.core.config import DecodeConfig, ModelConfig, OptimConfig
from pipeline.core.device import setup
from pipeline.core.errors import run_main
from pipeline.data.batching import Pair, make_batches
from pipeline.data.tokenizer import Tokenizer, model_file
from pipeline.model.transformer import Transformer
from pipeline.serving.torch_engine import translate
from pipeline.training.loop import make_optimizer


def peak_rss_mb() -> float:
    """This process's peak RSS in MB: `VmHWM` of /proc/self/status where there is one (Linux),
    else `getrusage(RUSAGE_SELF).ru_maxrss` (bytes on macOS); docs/benchmarks.md says why."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)


def train_child(
    cfg: ModelConfig,
    *,
    vocab: int,
    ids: tuple[int, int, int],
    optim: OptimConfig,
    batches: list[list[Pair]],
    device: str,
    bf16: bool,
) -> float:
    """Train our model on `batches` (one step each); returns the peak RSS."""
    torch.manual_seed(optim.seed)
    model = Transformer(cfg, vocab, ids[0]).to(device).train()
    runner = Runner("ours", model, bf16, make_optimizer(model, optim))
    for pairs in batches:
        step_of(runner, make_batch(pairs, ids, torch.device(device)), optim)()  # the trainer's step
    return peak_rss_mb()


def decode_child(
    checkpoint: str,
    cfg: ModelConfig,
    *,
    spm: str,
    sentences: list[str],
    decode: DecodeConfig,
    device: str,
) -> float:
    """Beam-5 translation of `sentences`; returns the peak RSS."""
    tok = Tokenizer.load(spm)
    model, _ = decode_model(checkpoint, cfg, tok)
    translate(model, tok, sentences, decode.model_copy(update={"beam_size": 5}), device=device)
    return peak_rss_mb()


def with_threads(job: Callable[[], float], threads: int) -> float:
    """`job()` at `threads` CPU threads, denormals flushed (as the parent runs)."""
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    return job()


def in_child(job: Callable[[], float]) -> float:
    """Run `job` (a picklable callable) in a fresh spawned process at this process's thread count;
    return its result."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(with_threads, job, torch.get_num_threads()).result()


def memory_batches(pairs: list[Pair], optim: OptimConfig, steps: int) -> list[list[Pair]]:
    """The first `steps` batches of the epoch-0 order, plus the one holding the longest pair."""
    order = make_batches(pairs, optim.max_tokens, optim.seed, 0)
    longest = max(order, key=lambda b: max(max(len(pairs[i][0]), len(pairs[i][1])) for i in b))
    chosen = order[:steps] + ([] if longest in order[:steps] else [longest])
    return [[pairs[i] for i in b] for b in chosen]


def run(jobs: dict[str, tuple[Callable[[], float], str]]) -> dict:
    """Run each (job, description) in its own child; returns the figures for bench.json."""
    detail = [
        {"process": name, "peak_rss_mb": sig(in_child(job)), "work": what}
        for name, (job, what) in jobs.items()
    ]
    by_name = {row["process"]: row["peak_rss_mb"] for row in detail}
    return {
        "train_peak_rss_mb": by_name["train"],
        "decode_peak_rss_mb": by_name["decode"],
        "memory_detail": detail,
    }


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("Peak RSS of training and of beam-5 decoding, each in its own process.", decodes=True)
    p.add_argument("--steps", type=int, default=20, help="training steps (plus the longest batch)")
    args = p.parse_args(argv)
    params, tok, corpus = load_inputs(args.params)
    checkpoint = args.checkpoint or params.train.model_file
    optim = params.train.optim
    device, bf16 = setup(optim.device, optim.precision, optim.threads)
    cfg = model_config(params.train.model, **parse_override(args.model_override))
    batches = memory_batches(train_pairs(params, tok, corpus), optim, args.steps)
    sentences = corpus["test_2016_flickr"]["en"][: args.sentences]
    ids = (tok.pad_id, tok.bos_id, tok.eos_id)
    train = partial(
        train_child,
        cfg,
        vocab=tok.vocab_size,
        ids=ids,
        optim=optim,
        batches=batches,
        device=str(device),
        bf16=bf16,
    )
    spm = str(model_file(params.tokenizer.out_dir))
    decode = partial(
        decode_child, checkpoint, cfg, spm=spm, sentences=sentences, decode=params.decode, device=str(device)
    )
    model_note = "trained" if Path(checkpoint).is_file() else "random-weight"
    jobs = {
        "floor": (peak_rss_mb, "imports only"),
        "train": (
            train,
            f"{len(batches)} training steps, D{cfg.d_model} L{cfg.n_layers}, {'bf16' if bf16 else 'fp32'}",
        ),
        "decode": (decode, f"beam 5, {len(sentences)} sentences, {model_note} model"),
    }
    figures = run(jobs)
    report("bench.memory", argv, args.out_dir, figures, device)
    return figures


if __name__ == "__main__":
    run_main(main)
