"""A toy training run for the interruption tests: `python tests/toy_train.py OUT_DIR [KILL_AT]`.

KILL_AT = "step:N" (SIGKILL after optimizer step N), "validation:N" (inside the validation at
step N) or "checkpoint:N" (halfway through writing a checkpoint at step N). At the end the
final weights go to OUT_DIR/final.pt.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import torch

from pipeline import checkpoint
from pipeline.config import ModelConfig, OptimConfig
from pipeline.model import Transformer
from pipeline.train import Trainer, validation_loss

PAD, BOS, EOS = 0, 2, 3


def pairs(n: int = 48) -> list:
    """`n` seeded toy pairs: a random id sequence and its reverse."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        src = torch.randint(4, 20, (int(torch.randint(2, 8, (1,), generator=g)),), generator=g).tolist()
        out.append((src, list(reversed(src))))
    return out


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(trainer: Trainer, kill_at: str) -> None:
    """Make the run SIGKILL itself at the named point."""
    where, step = kill_at.split(":")
    step = int(step)
    if where == "step":
        original = trainer.train_step

        def train_step(batches):
            result = original(batches)
            if trainer.progress.step + 1 == step:
                die()
            return result

        trainer.train_step = train_step
    elif where == "validation":
        original_validate = trainer.validate

        def validate(model):
            if trainer.progress.step == step:
                die()
            return original_validate(model)

        trainer.validate = validate
    elif where == "checkpoint":
        original_save = torch.save

        def save(obj, f, *args, **kwargs):
            if trainer.progress.step == step and str(f).endswith(".tmp"):
                Path(f).write_bytes(b"half a checkpoint")
                die()
            return original_save(obj, f, *args, **kwargs)

        torch.save = save


def main(out_dir: Path, kill_at: str | None) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = pairs()
    model = Transformer(ModelConfig(d_model=32, n_heads=2, n_layers=1, d_ff=64, dropout=0.1), 20, PAD)
    cfg = OptimConfig(
        seed=3, max_tokens=60, warmup_steps=5, max_steps=16, val_every=4, average_last=2, peak_lr=3e-3
    )

    def validate(m: Transformer) -> dict[str, float]:
        loss = validation_loss(m, data[:16], 60, BOS, EOS, torch.device("cpu"))
        return {"val_loss": loss, "score": -loss}

    trainer = Trainer(
        model, data, validate, cfg, out_dir, out_dir / "log.csv", BOS, EOS, "score", "toy", meta={}
    )
    if kill_at:
        arm(trainer, kill_at)
    trainer.run()
    checkpoint.save(out_dir / "final.pt", {"model": trainer.model.state_dict()})


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
