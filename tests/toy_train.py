"""Toy training runs for the training tests: `python tests/toy_train.py OUT_DIR [KILL_AT]`.

KILL_AT = "step:N" (SIGKILL after optimizer step N), "validation:N" (inside the validation at
step N) or "checkpoint:N" (halfway through writing a checkpoint at step N). At the end the
final weights go to OUT_DIR/final.pt. Also imported by the tests for `pairs`, `ToyValidation`
and `toy_run`.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from from_params import from_params

from pipeline.core.config import ModelConfig, OptimConfig
from pipeline.model.transformer import Transformer
from pipeline.training import checkpoint
from pipeline.training import loop as train_module
from pipeline.training.loop import Progress, RunContext, start, train
from pipeline.training.validation import validation_loss

PAD, BOS, EOS = 0, 2, 3
TOY_MODEL = from_params(ModelConfig, d_model=32, n_heads=2, n_layers=1, d_ff=64, dropout=0.1)
# threads=1: the load-following thread chooser (threads: null) would change the thread count, and with
# it the float sums, when other processes load the machine; resumed runs are compared bit for bit.
TOY_MAX_LEN = 20  # pieces: toy pairs have at most 7, and a 60-token batch must hold the longest allowed
TOY_OPTIM = dict(
    seed=3, max_tokens=60, warmup_steps=5, max_steps=16, val_every=4, average_last=2, peak_lr=3e-3, threads=1
)


def pairs(n: int = 48) -> list:
    """`n` seeded toy pairs: a random id sequence and its reverse."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        src = torch.randint(4, 20, (int(torch.randint(2, 8, (1,), generator=g)),), generator=g).tolist()
        out.append((src, list(reversed(src))))
    return out


@dataclass
class ToyValidation:
    """Validation by loss alone: score = -val_loss (higher is better), so it improves as training goes."""

    pairs: list
    metric_name: str = "score"

    def score(self, model: Transformer) -> float:
        return -validation_loss(model, self.pairs, 60)

    def __call__(self, model: Transformer) -> dict[str, float]:
        loss = validation_loss(model, self.pairs, 60)
        return {"val_loss": loss, "score": -loss}


def toy_run(
    out_dir: Path, data: list, model_cfg: ModelConfig = TOY_MODEL, **optim
) -> tuple[Transformer, Progress]:
    """Train a fresh seeded toy model on `data` into `out_dir` with TOY_OPTIM updated by `optim`."""
    torch.manual_seed(0)
    model = Transformer(model_cfg, 20, PAD)
    run = RunContext(out_dir, out_dir / "log.csv", data_id="toy")
    return model, train(
        model,
        data,
        ToyValidation(data[:16]),
        start(model, from_params(OptimConfig, **(TOY_OPTIM | optim)), run),
    )


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(kill_at: str) -> None:
    """Make the run SIGKILL itself at the named point (steps counted from this process's start)."""
    where, step = kill_at.split(":")
    step, done = int(step), [0]
    original_step, original_call, original_save = train_module.train_step, ToyValidation.__call__, torch.save

    def train_step(*args, **kwargs):
        result = original_step(*args, **kwargs)
        done[0] += 1
        if where == "step" and done[0] == step:
            die()
        return result

    def validate(self, model):
        if where == "validation" and done[0] == step:
            die()
        return original_call(self, model)

    def save(obj, f, *args, **kwargs):
        if where == "checkpoint" and done[0] == step and str(f).endswith(".tmp"):
            Path(f).write_bytes(b"half a checkpoint")
            die()
        return original_save(obj, f, *args, **kwargs)

    train_module.train_step, ToyValidation.__call__, torch.save = train_step, validate, save


def main(out_dir: Path, kill_at: str | None) -> None:
    torch.set_num_threads(1)
    if kill_at:
        arm(kill_at)
    model, _ = toy_run(out_dir, pairs())
    checkpoint.save(out_dir / "final.pt", {"model": model.state_dict()})


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
