"""Where a training step's CPU time goes: `torch.profiler` over real steps of the trainer.

How it measures and what it writes: docs/benchmarks.md, `bench.profile_step`.
"""

from __future__ import annotations

import contextlib
import sys
from collections import defaultdict
from collections.abc import Sequence

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from bench.common import (
    base_parser,
    command_line,
    load_inputs,
    named_configs,
    parse_override,
    record,
    sig,
    table,
)
from bench.train_speed import make_batch, real_batches
from pipeline.core.config import with_updates
from pipeline.core.device import setup
from pipeline.core.errors import run_main
from pipeline.model import transformer as tf
from pipeline.training import loop

SCOPE = "part: "  # prefix of the record_function ranges this benchmark opens

GROUPS = {  # module class -> the part of the model its ops are charged to
    tf.MultiHeadAttention: "attention",
    tf.FeedForward: "feed-forward",
    torch.nn.LayerNorm: "layer norm",
    tf.Dropout: "dropout",
    torch.nn.Embedding: "embedding + positions",
}


def scoped(name: str, fn):
    """`fn` run inside a record_function range named `SCOPE + name`."""

    def wrapper(*args, **kwargs):
        with record_function(SCOPE + name):
            return fn(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def labelled(model: tf.Transformer):
    """Open a named range around each part of `model`, the loss, clipping and Adam while inside."""
    patched = []
    for module in model.modules():
        group = next((g for cls, g in GROUPS.items() if isinstance(module, cls)), None)
        if group is not None:
            module.forward = scoped(group, module.forward)
            patched.append(module)
    saved = (tf.linear_label_smoothed_loss, loop.label_smoothed_loss, torch.nn.utils.clip_grad_norm_)
    model.logits = scoped("vocabulary projection + loss", model.logits)
    model.embed = scoped("embedding + positions", model.embed)
    tf.linear_label_smoothed_loss = scoped("vocabulary projection + loss", tf.linear_label_smoothed_loss)
    loop.label_smoothed_loss = scoped("vocabulary projection + loss", loop.label_smoothed_loss)
    torch.nn.utils.clip_grad_norm_ = scoped("gradient clipping", torch.nn.utils.clip_grad_norm_)
    try:
        yield
    finally:
        for module in patched:
            del module.forward
        del model.logits, model.embed
        tf.linear_label_smoothed_loss, loop.label_smoothed_loss, torch.nn.utils.clip_grad_norm_ = saved


def scope_of(event) -> str | None:
    """The innermost benchmark range (or Adam's own range) around a profiler event."""
    parent = event
    while parent is not None:
        if parent.name.startswith(SCOPE):
            return parent.name[len(SCOPE) :]
        if parent.name.startswith("Optimizer.step"):
            return "Adam"
        if parent.name.startswith("Optimizer.zero_grad"):
            return "Adam"
        parent = parent.cpu_parent
    return None


def group_events(events) -> tuple[dict[str, float], dict[tuple[str, str], list[float]]]:
    """Self CPU µs per group, and per (op, group) [µs, calls]. Backward ops are charged to the
    group of the forward op with the same sequence number; the rest to "other"."""
    forward_group = {}
    for e in events:
        g = scope_of(e)
        if g is not None and e.sequence_nr >= 0 and not e.name.startswith("autograd::"):
            forward_group.setdefault(e.sequence_nr, g)
    groups: dict[str, float] = defaultdict(float)
    ops: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.name.startswith(SCOPE) or e.name.startswith("Optimizer."):
            continue
        g = scope_of(e) or backward_group(e, forward_group) or "other"
        groups[g] += e.self_cpu_time_total
        ops[(e.name, g)][0] += e.self_cpu_time_total
        ops[(e.name, g)][1] += 1
    return groups, ops


def backward_group(event, forward_group: dict[int, str]) -> str | None:
    """The forward group of a backward op: its autograd node's sequence number, looked up."""
    parent = event
    while parent is not None:
        if parent.name.startswith("autograd::engine::evaluate_function"):
            return forward_group.get(parent.sequence_nr, "backward, unattributed")
        parent = parent.cpu_parent
    return None


def profile_steps(model, opt, batches, optim, run) -> tuple[dict, dict, float]:
    """Profile one `train_step` per batch; returns (groups, ops, wall µs), all summed."""
    step = [[b.src, b.tgt_in, b.tgt_out] for b in batches]
    with labelled(model), profile(activities=[ProfilerActivity.CPU]) as prof:
        for micro in step:
            loop.train_step(model, opt, [micro], lr=optim.peak_lr, cfg=optim, run=run)
    events = prof.events()
    wall = sum(e.self_cpu_time_total for e in events)
    groups, ops = group_events(events)
    return groups, ops, wall


def rows_of(groups: dict, ops: dict, steps: int, tokens: int, top: int) -> tuple[list[dict], list[dict]]:
    """The group table and the top-`top` op table (ms per step, share of the step)."""
    total = sum(groups.values())
    group_rows = [
        {"part": g, "ms_per_step": sig(us / steps / 1e3), "share": sig(us / total, 3)}
        for g, us in sorted(groups.items(), key=lambda kv: -kv[1])
    ]
    group_rows.append(
        {
            "part": "total",
            "ms_per_step": sig(total / steps / 1e3),
            "share": 1.0,
            "tok_s": sig(tokens / (total / 1e6)),
        }
    )
    op_rows = [
        {
            "op": name,
            "part": g,
            "calls_per_step": sig(n / steps, 3),
            "ms_per_step": sig(us / steps / 1e3),
            "share": sig(us / total, 3),
        }
        for (name, g), (us, n) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:top]
    ]
    return group_rows, op_rows


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("Where a training step's CPU time goes (torch.profiler).")
    p.add_argument("--config", default="default", help="default, wu_tiny or tiny")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per batch (default: params)")
    p.add_argument("--steps", type=int, default=4, help="profiled steps")
    p.add_argument("--warmup", type=int, default=2, help="unprofiled steps first")
    p.add_argument("--top", type=int, default=20, help="ops listed")
    p.add_argument("--label", default="", help="suffix of the bench.json keys")
    p.add_argument("--unfused-loss", action="store_true", help="the loss from fp32 logits (the lever off)")
    args = p.parse_args(argv)
    params, tok, corpus = load_inputs(args.params)
    optim = params.train.optim
    if args.max_tokens:
        optim = with_updates(optim, {"max_tokens": args.max_tokens})
    device, bf16 = setup(optim.device, optim.precision, optim.threads)
    cfg = named_configs(params, [args.config], parse_override(args.model_override))[args.config]
    pairs = loop.encode_pairs(tok, corpus["train"]["en"], corpus["train"]["de"], params.train.max_len)
    ids = (tok.pad_id, tok.bos_id, tok.eos_id)
    batches = [make_batch(b, ids, device) for b in real_batches(pairs, optim, args.warmup + args.steps)]
    torch.manual_seed(optim.seed)
    model = tf.Transformer(cfg, tok.vocab_size, tok.pad_id).to(device).train()
    opt = loop.make_optimizer(model, optim)
    run = loop.RunContext(None, None, "bench", device=device, bf16=bf16, fused_loss=not args.unfused_loss)
    for b in batches[: args.warmup]:
        loop.train_step(model, opt, [[b.src, b.tgt_in, b.tgt_out]], lr=optim.peak_lr, cfg=optim, run=run)
    timed = batches[args.warmup :]
    groups, ops, _ = profile_steps(model, opt, timed, optim, run)
    tokens = sum(b.tokens for b in timed)
    group_rows, op_rows = rows_of(groups, ops, len(timed), tokens, args.top)
    print("\n".join(table(group_rows)))
    print("\n".join(table(op_rows)))
    key = f"profile_{args.config}" + (f"_{args.label}" if args.label else "")
    figures = {f"{key}_detail": group_rows, f"{key}_ops_detail": op_rows}
    record(args.out_dir, key, command_line("bench.profile_step", argv), figures, device)
    return figures


if __name__ == "__main__":
    run_main(main)
