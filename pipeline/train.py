"""The training loop shared by `warmup_train` and `train`.

Label-smoothed cross-entropy, Adam with the inverse-square-root warmup schedule
(Vaswani et al. 2017, §5.3), gradient clipping and accumulation, bf16 autocast where it
pays, periodic validation, atomic `last.pt`/`best.pt`, exact resume, early stopping,
wall-clock and step budgets, and averaging of the last N checkpoints.

Under `torchrun` (see `pipeline.distributed`) the model is wrapped in DistributedDataParallel:
each optimizer step takes the next `accum_steps × world size` batches of the seeded order and
rank r trains on every world-size-th of them, so the ranks see disjoint batches and the step is
the one a single process would take with `accum_steps × world size` micro-batches. Rank 0
alone validates, decides when to stop (broadcast to all), and writes checkpoints, the log,
tracking records and progress output.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from pipeline import checkpoint
from pipeline.batching import Pair, collate, make_batches
from pipeline.config import OptimConfig
from pipeline.device import autocast
from pipeline.distributed import World
from pipeline.errors import PipelineError
from pipeline.io import atomic_path
from pipeline.model import Transformer
from pipeline.tracking import NullTracker, Tracker

Validate = Callable[[Transformer], dict[str, float]]  # -> {"val_loss": ..., "<score name>": ...}


def label_smoothed_loss(logits: Tensor, target: Tensor, pad_id: int, smoothing: float) -> Tensor:
    """Summed label-smoothed cross-entropy over non-pad targets (Szegedy et al. 2016; §5.4).

    The true class gets 1 - ε + ε/V, every other class ε/V. Args: logits `[N, V]`
    (any float dtype, computed in fp32), target `[N]`. Returns a scalar (nats).
    """
    return F.cross_entropy(
        logits.float(), target, ignore_index=pad_id, label_smoothing=smoothing, reduction="sum"
    )


def inverse_sqrt_lr(step: int, peak_lr: float, warmup_steps: int) -> float:
    """lr = peak · min(step / warmup, √(warmup / step)): §5.3's schedule, scaled to peak at warmup."""
    step = max(step, 1)
    return peak_lr * min(step / warmup_steps, math.sqrt(warmup_steps / step))


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint so a resumed run continues exactly."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already consumed
    wall_seconds: float = 0.0
    best_score: float = -math.inf
    bad_validations: int = 0  # validations since the best
    log: list[dict] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # step checkpoints kept for averaging


@dataclass
class Trainer:
    """Trains `model` on `pairs` (piece ids without specials) and writes checkpoints to `out_dir`.

    `score_name` is the validation key that selects `best.pt` (higher is better).
    `fingerprint` identifies the run's inputs; `last.pt` resumes only when it matches.
    `world` is this process's rank among the data-parallel processes (default: alone).
    """

    model: Transformer
    pairs: list[Pair]
    validate: Validate
    cfg: OptimConfig
    out_dir: Path
    log_path: Path
    bos_id: int
    eos_id: int
    score_name: str
    fingerprint: str
    meta: dict  # extra keys stored in every checkpoint (e.g. vocab_size)
    device: torch.device = torch.device("cpu")
    use_bf16: bool = False
    tracker: Tracker = field(default_factory=NullTracker)
    world: World = field(default_factory=World)

    def __post_init__(self) -> None:
        self.model.to(self.device)
        self.net = self.model  # what the forward pass runs: DDP's wrapper under torchrun
        if self.world.size > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = DistributedDataParallel(self.model, device_ids=ids)
        cfg = self.cfg
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg.peak_lr, betas=(0.9, 0.98), eps=1e-9
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: inverse_sqrt_lr(s + 1, 1.0, cfg.warmup_steps)
        )
        self.progress = Progress()
        self._order: tuple[int, list[list[int]]] = (-1, [])

    # ---- checkpoints -------------------------------------------------------------
    def state(self) -> dict:
        return {
            **self.meta,
            "model": self.model.state_dict(),
            "model_cfg": self.model.cfg.model_dump(),
            "vocab_size": self.model.vocab_size,
            "pad_id": self.model.pad_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_state(),
            "progress": self.progress.__dict__,
            "fingerprint": self.fingerprint,
        }

    def save(self, name: str) -> Path:
        path = self.out_dir / name
        checkpoint.save(path, self.state())
        self.tracker.log_artifact(path, "checkpoints")
        return path

    def try_resume(self) -> bool:
        """Restore everything from `last.pt` when it exists and belongs to this run's inputs."""
        path = self.out_dir / "last.pt"
        if not path.exists():
            return False
        state = checkpoint.load(path)
        if state.get("fingerprint") != self.fingerprint:
            print(f"{path}: from a different configuration or data; starting afresh")
            return False
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        self.progress = Progress(**state["progress"])
        if self.world.rank:  # rank 0's RNG state was saved; the others need dropout of their own
            seed_everything(self.cfg.seed + 1000 * self.world.rank + self.progress.step)
        print(f"resuming from {path} at step {self.progress.step}")
        return True

    def keep_for_averaging(self) -> None:
        """Save `step<N>.pt` and drop the oldest beyond `average_last`."""
        name = f"step{self.progress.step:07d}.pt"
        self.save(name)
        kept = self.progress.kept + [name]
        for old in kept[: -self.cfg.average_last]:
            (self.out_dir / old).unlink(missing_ok=True)
        self.progress.kept = kept[-self.cfg.average_last :]

    # ---- one step ----------------------------------------------------------------
    def micro_batch_loss(self, batch: list[int]) -> Tensor:
        """Summed label-smoothed loss (nats) of one batch of pair indices."""
        src, tgt_in, tgt_out = (
            t.to(self.device)
            for t in collate([self.pairs[i] for i in batch], self.model.pad_id, self.bos_id, self.eos_id)
        )
        with autocast(self.device, self.use_bf16):
            logits = self.net(src, tgt_in)
        return label_smoothed_loss(
            logits.flatten(0, 1), tgt_out.flatten(), self.model.pad_id, self.cfg.label_smoothing
        )

    def train_step(self, batches: list[list[int]]) -> tuple[float, int]:
        """One optimizer step over this rank's micro-batches. Returns (loss per target token,
        target tokens), both over all ranks."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        local_tokens = sum(len(self.pairs[i][1]) + 1 for b in batches for i in b)
        n_tokens = int(self.world.sum(local_tokens))
        total = 0.0
        for batch in batches:
            loss = self.micro_batch_loss(batch)
            # DDP averages gradients over ranks; × size makes the sum over all ranks' tokens
            (loss * self.world.size / n_tokens).backward()
            total += loss.item()
        total = self.world.sum(total)
        if not math.isfinite(total):
            raise PipelineError(
                f"train: loss is {total} at step {self.progress.step + 1}; "
                f"stopped, last good checkpoint kept in {self.out_dir / 'last.pt'}"
            )
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.optimizer.step()
        self.scheduler.step()
        return total / n_tokens, n_tokens

    # ---- the loop ----------------------------------------------------------------
    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """The seeded batch order of `epoch` (computed once per epoch)."""
        if self._order[0] != epoch:
            self._order = (epoch, make_batches(self.pairs, self.cfg.max_tokens, self.cfg.seed, epoch))
        return self._order[1]

    def next_batches(self) -> list[list[int]]:
        """This rank's share of the next `accum_steps × world size` batches in the seeded order
        (crossing epochs): every world-size-th batch, starting at its rank."""
        p, out = self.progress, []
        while len(out) < self.cfg.accum_steps * self.world.size:
            order = self.epoch_batches(p.epoch)
            if p.batch_in_epoch >= len(order):
                p.epoch, p.batch_in_epoch = p.epoch + 1, 0
                continue
            out.append(order[p.batch_in_epoch])
            p.batch_in_epoch += 1
        return out[self.world.rank :: self.world.size]

    def budget_left(self, started: float) -> bool:
        """Steps and wall-clock time left? `started` is the run's start, moved back by the wall
        seconds of the runs this one resumes."""
        return self.progress.step < self.cfg.max_steps and time.time() - started < self.cfg.max_minutes * 60

    def run(self) -> Progress:
        """Train until a budget runs out or patience is exhausted; returns the final progress."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if not self.try_resume():
            seed_everything(self.cfg.seed + 1000 * self.world.rank)  # each rank its own dropout
        p, started, window = self.progress, time.time() - self.progress.wall_seconds, _Window()
        main = self.world.is_main
        bar = tqdm(
            initial=p.step, total=self.cfg.max_steps, desc="train", mininterval=2, dynamic_ncols=True,
            disable=not main,
        )  # fmt: skip
        try:
            while self.world.rank0_says(self.budget_left(started) and p.bad_validations < self.cfg.patience):
                loss, n_tokens = self.train_step(self.next_batches())
                p.step += 1
                window.add(loss, n_tokens)
                lr = self.scheduler.get_last_lr()[0]
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{window.tokens_per_second():.0f}")
                if p.step % 50 == 0 and main:
                    self.tracker.log_metrics(
                        {"train_loss": window.loss(), "lr": lr, "tokens_per_s": window.tokens_per_second()},
                        p.step,
                    )
                if p.step % self.cfg.val_every == 0 and main:
                    p.wall_seconds = time.time() - started
                    self.validation(window, lr)
        finally:
            bar.close()  # before any error message, so it gets a line of its own
        if main and (not p.log or p.log[-1]["step"] != p.step):  # the final weights, once
            p.wall_seconds = time.time() - started
            self.validation(_Window() if window.empty() else window, self.scheduler.get_last_lr()[0])
        if main:
            write_log(p.log, self.log_path)  # also when a resumed run had nothing left to do
        return p

    def validation(self, window: _Window, lr: float) -> None:
        p = self.progress
        metrics = self.validate(self.model)
        score = metrics[self.score_name]
        row = {"step": p.step, "epoch": p.epoch, "train_loss": window.loss(), **metrics, "lr": lr}
        row |= {"tokens_per_s": window.tokens_per_second(), "wall_seconds": round(p.wall_seconds, 1)}
        p.log.append(row)
        self.tracker.log_metrics(metrics, p.step)
        tqdm.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
        if score > p.best_score:
            p.best_score, p.bad_validations = score, 0
            self.save("best.pt")
        else:
            p.bad_validations += 1
        self.keep_for_averaging()
        self.save("last.pt")
        write_log(p.log, self.log_path)
        window.reset()


class _Window:
    """Running train loss and throughput since the last validation."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss_sum, self.tokens, self.started = 0.0, 0, time.time()

    def add(self, loss_per_token: float, n_tokens: int) -> None:
        self.loss_sum += loss_per_token * n_tokens
        self.tokens += n_tokens

    def empty(self) -> bool:
        return self.tokens == 0

    def loss(self) -> float:
        return self.loss_sum / max(self.tokens, 1)

    def tokens_per_second(self) -> float:
        return self.tokens / max(time.time() - self.started, 1e-9)


def write_log(rows: list[dict], path: Path) -> None:
    """Write the per-validation log as CSV, atomically."""
    with atomic_path(path) as tmp:
        pd.DataFrame(rows).to_csv(tmp, index=False, float_format="%.6g")


@torch.inference_mode()
def validation_loss(
    model: Transformer, pairs: list[Pair], max_tokens: int, bos_id: int, eos_id: int, device: torch.device
) -> float:
    """Mean per-token cross-entropy (no smoothing, nats) of `model` on `pairs`."""
    model.eval()
    total, n = 0.0, 0
    for batch in make_batches(pairs, max_tokens, seed=0, epoch=0):
        src, tgt_in, tgt_out = (
            t.to(device) for t in collate([pairs[i] for i in batch], model.pad_id, bos_id, eos_id)
        )
        logits = model(src, tgt_in)
        total += label_smoothed_loss(logits.flatten(0, 1), tgt_out.flatten(), model.pad_id, 0.0).item()
        n += int((tgt_out != model.pad_id).sum())
    return total / max(n, 1)


def final_model(out_dir: Path, kept: list[str], validate: Validate, score_name: str) -> tuple[dict, dict]:
    """Choose the final weights on validation: `best.pt` or the average of the kept checkpoints.

    Returns (model checkpoint dict, {"source": ..., score_name: ...}).
    """
    best = checkpoint.load(out_dir / "best.pt")
    candidates = {"best": {k: best[k] for k in checkpoint.MODEL_KEYS}}
    if len(kept) > 1:
        candidates[f"average_last_{len(kept)}"] = checkpoint.average([out_dir / k for k in kept])
    scored = {}
    for name, state in candidates.items():
        scored[name] = validate(checkpoint.build_model(state))[score_name]
        print(f"final-model candidate {name}: {score_name}={scored[name]:.4g}")
    choice = max(scored, key=lambda n: (scored[n], n.startswith("average")))
    return candidates[choice], {"source": choice, score_name: scored[choice], "candidates": scored}
