"""The training loop shared by `warmup_train` and `train`, readable top to bottom in `train()`:
label-smoothed cross-entropy, Adam with a learning-rate warm-up, clipping and accumulation, bf16
autocast where it pays, a validation and checkpoints every `val_every` steps, the budgets, continuing from
`last.pt`, and DDP under torchrun. The recipe and its reasons: docs/training.md, docs/distributed.md.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from pipeline.core.config import ModelConfig, OptimConfig
from pipeline.core.device import autocast
from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_path, remove_stale_temps
from pipeline.data.batching import EpochOrder, Pair, to_tensors
from pipeline.data.corpus import TokenizedCorpus
from pipeline.model.transformer import Transformer
from pipeline.tracking.tracker import NullTracker, Tracker
from pipeline.training import checkpoint, shadow
from pipeline.training.distributed import World
from pipeline.training.ema import EMA
from pipeline.training.progress import ConsoleProgress, Window
from pipeline.training.rdrop import rdrop_loss
from pipeline.training.schedule import learning_rate
from pipeline.training.stopping import stop_at_step_boundary
from pipeline.training.threads import ThreadsForLoad
from pipeline.training.validation import Validation

LOG_EVERY = 50  # steps between train-loss records (MLflow) and plain progress lines


@dataclass
class RunContext:
    """Where and how one training runs, as the stage gives it."""

    out_dir: Path  # checkpoints
    log_csv: Path  # one row per validation
    data_id: str  # identifies the training pairs (`TokenizedCorpus.digest`)
    world: World = field(default_factory=World)
    tracker: Tracker = field(default_factory=NullTracker)
    device: torch.device = torch.device("cpu")
    bf16: bool = False
    init_from: dict | None = None  # the champion a warm start began from (`pipeline.training.warm_start`)
    spm_sha256: str | None = None  # the tokenizer's SHA-256, recorded in every checkpoint (None: none)


@dataclass
class Progress:
    """Where training stands; saved in `last.pt` so a continued run picks up exactly here."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already taken
    wall_seconds: float = 0.0  # training time so far, over all sessions of the run
    target_tokens: int = 0  # non-pad target tokens trained on so far (all ranks)
    best_score: float = -math.inf
    bad_validations: int = 0  # validations since the best
    log: list[dict] = field(default_factory=list)  # the rows of the log CSV
    kept: list[str] = field(default_factory=list)  # step checkpoints kept for averaging, oldest first


@dataclass
class RunState:
    """One training run as the loop carries it: where and how it runs (`run`), its settings (`cfg`), the
    optimizer, the weight average, the identity `last.pt` records, where it stands (`progress`, what
    `last.pt` saves), and this session's clock, loss window and console."""

    run: RunContext
    cfg: OptimConfig
    optimizer: torch.optim.Optimizer
    ema: EMA | None
    identity: dict
    progress: Progress = field(default_factory=Progress)
    started: float = 0.0  # time.time() at step 0, earlier sessions included
    window: Window = field(default_factory=Window)
    console: ConsoleProgress | None = None

    @property
    def fingerprint(self) -> str:
        """The identity's SHA-256: what `last.pt`, its shadow copy and the MLflow run are matched by."""
        return checkpoint.fingerprint(self.identity)


def start(model: Transformer, cfg: OptimConfig, run: RunContext) -> RunState:
    """A run of `model` under `cfg`, ready for `train`: the model on `run.device`, the optimizer, the
    weight average (`cfg.ema_decay`) and the run's identity (`run_identity`). Reads and writes nothing."""
    model.to(run.device)
    ema = EMA(model, cfg.ema_decay) if cfg.ema_decay else None
    return RunState(run, cfg, make_optimizer(model, cfg), ema, run_identity(model, cfg, run))


def train(
    model: Transformer, pairs: TokenizedCorpus | Sequence[Pair], validate: Validation, state: RunState
) -> Progress:
    """Train `model` (the one `state` was started with) on `pairs` until a budget or the patience runs
    out, continuing `last.pt` when it has the run's identity.

    `pairs`: piece ids without specials; batches are read from the corpus as they are needed (a list
    is made one first).

    `validate(model)` returns {"val_loss": ..., validate.metric_name: score (higher = better)}.
    Rank 0 gives the tracker the training set (`run.data_id`, the pair count) and every checkpoint.
    Returns the final progress (rank 0's log and kept checkpoints), also `state.progress`.

    Raises:
        PipelineError: the loss is not finite (the last good `last.pt` is kept).
        CheckpointError: `last.pt` cannot be read.
    """
    run, cfg, world = state.run, state.cfg, state.run.world
    if not isinstance(pairs, TokenizedCorpus):
        pairs = TokenizedCorpus.from_pairs(pairs)
    run.out_dir.mkdir(parents=True, exist_ok=True)
    if world.is_main:
        for stale in remove_stale_temps(run.out_dir):
            print(f"removed {stale}: a temp file left by an interrupted checkpoint write")
    last = run.out_dir / "last.pt"
    saved = checkpoint.resume(last, state.identity, model, state.optimizer, world, ema=state.ema)
    progress = state.progress = Progress(**saved) if saved else Progress()
    if world.is_main:
        run.tracker.log_training_set(run.data_id, len(pairs))
    if world.rank or not saved:  # each rank its own dropout; rank 0's RNG state is the saved one
        seed_everything(cfg.seed + 1000 * world.rank + progress.step)
    net = model if world.size == 1 else DistributedDataParallel(model, device_ids=_device_ids(run.device))
    order = EpochOrder(pairs.lengths, cfg.max_tokens, cfg.seed)
    state.console = ConsoleProgress(cfg.max_steps, cfg.max_minutes, enabled=world.is_main, every=LOG_EVERY)
    state.started = time.time() - progress.wall_seconds  # the budget counts earlier sessions too
    state.window.reset()
    threads = threads_for_load(cfg, run)

    lr = lr_at(progress.step, cfg)
    try:
        with stop_at_step_boundary() as stop_request:
            while world.rank0_says(budget_left(state) and not stop_request):
                # this rank's share of the next accum_steps × world size batches: every world-size-th one
                batches, progress.epoch, progress.batch_in_epoch = order.take(
                    cfg.accum_steps * world.size, progress.epoch, progress.batch_in_epoch
                )
                batches = [
                    to_tensors(pairs, b, model.pad_id, run.device) for b in batches[world.rank :: world.size]
                ]
                lr = lr_at(progress.step + 1, cfg)
                loss, n_tokens = train_step(net, state.optimizer, batches, lr=lr, cfg=cfg, run=run)
                progress.step += 1
                progress.target_tokens += n_tokens
                if state.ema is not None:
                    state.ema.update(model)
                if not math.isfinite(loss):
                    raise PipelineError(
                        f"train: loss is {loss} at step {progress.step}; stopped, "
                        f"the last good checkpoint is {last}"
                    )
                state.window.add(loss, n_tokens)
                stats = {
                    "train_loss": state.window.loss(),
                    "lr": lr,
                    "tokens_per_s": state.window.tokens_per_second(),
                }
                state.console.update(progress.step, time.time() - state.started, stats)
                if threads is not None and threads.update():
                    state.console.line(
                        f"threads: {torch.get_num_threads()} (other processes keep "
                        f"{threads.others_busy_cores:.1f} of {threads.cores} cores busy)"
                    )
                if world.is_main and progress.step % LOG_EVERY == 0:
                    run.tracker.log_metrics(stats, progress.step)
                if world.is_main and progress.step % cfg.val_every == 0:
                    validation_point(model, state, validate, lr)
    finally:
        state.console.close()  # before any error message, so it gets a line of its own
    if world.rank0_says(bool(stop_request)):  # a signal: save where the run stands, then stop
        if world.is_main:
            progress.wall_seconds = time.time() - state.started
            run.tracker.log_checkpoint(save_last(model, state))
            write_log(progress.log, run.log_csv)
        raise stop_request.stopped(progress.step)
    if world.is_main and (not progress.log or progress.log[-1]["step"] != progress.step):
        validation_point(model, state, validate, lr)  # the final weights, once
    if world.is_main:
        write_log(progress.log, run.log_csv)  # also when a continued run had nothing left to do
    return progress


def train_step(
    net: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: list[list[Tensor]],
    *,
    lr: float,
    cfg: OptimConfig,
    run: RunContext,
) -> tuple[float, int]:
    """One optimizer step over this rank's micro-batches `[(src, tgt_in, tgt_out)]` at learning
    rate `lr`. Returns (loss per target token, target tokens), both summed over all ranks.

    The loss is label-smoothed cross-entropy, fused with the vocabulary projection
    (`pipeline.model.linear_loss`), or with `cfg.rdrop_alpha` R-Drop's (`pipeline.training.rdrop`).
    The summed loss of a micro-batch is scaled by world size / target tokens of the whole step: DDP
    averages gradients over ranks, so the step follows the mean loss per target token.
    """
    net.train()
    optimizer.zero_grad(set_to_none=True)
    pad_id = getattr(net, "module", net).pad_id  # the Transformer, inside DDP's wrapper or not
    n_tokens = int(run.world.sum(sum(int((tgt_out != pad_id).sum()) for *_, tgt_out in batches)))
    total = 0.0
    for src, tgt_in, tgt_out in batches:
        keep = tgt_out != pad_id  # [B, T]: the model projects only these positions onto the vocabulary
        target, smoothing = tgt_out[keep], cfg.label_smoothing
        with autocast(run.device, run.bf16):
            if cfg.rdrop_alpha:
                loss = rdrop_loss(
                    net, src, tgt_in, keep, target, label_smoothing=smoothing, alpha=cfg.rdrop_alpha
                )
            else:
                loss = net(src, tgt_in, keep, target=target, label_smoothing=smoothing)
        (loss * run.world.size / n_tokens).backward()
        total += loss.item()
    for group in optimizer.param_groups:
        group["lr"] = lr
    torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.clip_norm)
    optimizer.step()
    return run.world.sum(total) / n_tokens, n_tokens


def validation_point(model: Transformer, state: RunState, validate: Validation, lr: float) -> None:
    """Rank 0 at a validation: validate, log the row, track the metrics, update the patience count,
    save the checkpoints and the log, and start a new loss window."""
    progress = state.progress
    progress.wall_seconds = time.time() - state.started
    metrics = validate(model)
    row = {
        "step": progress.step,
        "epoch": progress.epoch,
        "train_loss": state.window.loss(),
        **metrics,
        "lr": lr,
        "tokens_per_s": state.window.tokens_per_second(),
        "wall_seconds": round(progress.wall_seconds, 1),
    }
    progress.log.append(row)
    state.console.line(
        " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
    )
    state.run.tracker.log_metrics(metrics, progress.step)
    improved = metrics[validate.metric_name] > progress.best_score
    if improved:
        progress.best_score, progress.bad_validations = metrics[validate.metric_name], 0
    else:
        progress.bad_validations += 1
    save_checkpoints(model, state, improved)
    write_log(progress.log, state.run.log_csv)
    state.window.reset()


def save_checkpoints(model: Transformer, state: RunState, improved: bool) -> None:
    """At a validation, write the checkpoints due and hand each to the tracker.

    `best.pt` when val improved and `step<N>.pt` (weights only; the newest `average_last` kept), then
    `last.pt` (everything). Each file goes to the tracker as it is written, which uploads those
    `mlflow.log_checkpoints` asks for.
    """
    run, progress = state.run, state.progress
    written, weights = [], {**checkpoint.weights(model), "step": progress.step}
    if improved:
        written.append(checkpoint.save(run.out_dir / "best.pt", weights, run.spm_sha256))
    name = f"step{progress.step:07d}.pt"
    written.append(checkpoint.save(run.out_dir / name, weights, run.spm_sha256))
    progress.kept = checkpoint.keep_newest(run.out_dir, [*progress.kept, name], state.cfg.average_last)
    written.append(save_last(model, state))
    for path in written:
        run.tracker.log_checkpoint(path)


def save_last(model: Transformer, state: RunState) -> Path:
    """`last.pt`: weights, optimizer, RNG, data position and progress: what continues the run exactly.
    The folder is then mirrored outside DVC's outputs (`shadow`), where `dvc exp run` cannot reset it."""
    saved = checkpoint.training_state(
        model, state.optimizer, asdict(state.progress), state.identity, state.ema
    )
    path = checkpoint.save(state.run.out_dir / "last.pt", saved, state.run.spm_sha256)
    shadow.mirror(state.run.out_dir)
    return path


def run_identity(model: Transformer, cfg: OptimConfig, run: RunContext) -> dict:
    """What the training trajectory depends on, hence what `last.pt` must share to be continued.

    The model, the training data, the optimizer/schedule/seed/batching fields of `cfg`
    (`OptimConfig.TRAJECTORY`), the precision and the number of processes. Not the budgets (max_steps,
    max_minutes, patience), val_every, average_last, threads or the validation set. R-Drop adds its
    `rdrop_alpha`, a warm-started run its starting point (`init_from`: the champion's version and run),
    so a `last.pt` is never continued under the other; without them the identity has no such keys
    (earlier runs' `last.pt` stay continuable).
    """
    identity = {
        "model": model.cfg.model_dump(),
        "vocab_size": model.vocab_size,
        "data": run.data_id,
        "optim": {name: getattr(cfg, name) for name in cfg.TRAJECTORY},
        "bf16": run.bf16,
        "processes": run.world.size,
    }
    identity |= {"rdrop_alpha": cfg.rdrop_alpha} if cfg.rdrop_alpha else {}
    return identity | ({"init_from": run.init_from} if run.init_from else {})


def make_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Adam:
    """The trainer's optimizer: Adam with β1 = 0.9, β2 = 0.98 and ε = 1e-9 (Vaswani et al. 2017, §5.3).

    It starts at `cfg.peak_lr` (the schedule sets each step's rate), in torch's `foreach` form."""
    return torch.optim.Adam(model.parameters(), lr=cfg.peak_lr, betas=(0.9, 0.98), eps=1e-9, foreach=True)


def lr_at(step: int, cfg: OptimConfig) -> float:
    """The learning rate of optimizer step `step` (1-based) under `cfg`'s schedule."""
    return learning_rate(step, cfg.schedule, cfg.peak_lr, cfg.warmup_steps, cfg.max_steps)


def budget_left(state: RunState) -> bool:
    """Steps, wall-clock time (earlier sessions included) and patience left?"""
    progress, cfg = state.progress, state.cfg
    return (
        progress.step < cfg.max_steps
        and time.time() - state.started < cfg.max_minutes * 60
        and progress.bad_validations < cfg.patience
    )


def threads_for_load(cfg: OptimConfig, run: RunContext) -> ThreadsForLoad | None:
    """The thread chooser of a single CPU process whose `threads` param is unset (null), else None.

    The chooser goes up to the threads torch has now (one per core unless set). None for a set count, a
    GPU, or DDP ranks sharing the cores: they keep their threads.
    """
    if cfg.threads is not None or run.device.type != "cpu" or run.world.size > 1:
        return None
    return ThreadsForLoad(max_threads=torch.get_num_threads())


def new_model(cfg: ModelConfig, vocab_size: int, pad_id: int, seed: int) -> Transformer:
    """A freshly initialised Transformer; seeded, so a run's initial weights are reproducible."""
    seed_everything(seed)
    return Transformer(cfg, vocab_size, pad_id)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _device_ids(device: torch.device) -> list[int] | None:
    return [device.index] if device.type == "cuda" else None


def write_log(rows: list[dict], path: Path) -> None:
    """Write the per-validation log as CSV, atomically."""
    with atomic_path(path) as tmp:
        pd.DataFrame(rows).to_csv(tmp, index=False, float_format="%.6g")
