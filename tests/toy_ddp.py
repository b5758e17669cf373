"""A toy data-parallel run for tests/test_distributed.py.

`python tests/toy_ddp.py OUT_DIR MAX_STEPS ACCUM_STEPS`, alone or under
`python -m torch.distributed.run --standalone --nproc-per-node=N`. Writes, per rank,
OUT_DIR/rank<r>.json: the loss of each optimizer step and the files that rank wrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from toy_train import BOS, EOS, PAD, pairs  # this folder is on sys.path when run as a script

from pipeline import checkpoint, distributed
from pipeline import train as train_module
from pipeline.config import ModelConfig, OptimConfig
from pipeline.model import Transformer
from pipeline.train import Trainer, validation_loss


def main(out_dir: Path, max_steps: int, accum_steps: int) -> None:
    torch.set_num_threads(1)
    world, device = distributed.init(torch.device("cpu"))
    written: list[str] = []
    save, write_log = checkpoint.save, train_module.write_log
    checkpoint.save = lambda path, state: (written.append(Path(path).name), save(path, state))[1]
    train_module.write_log = lambda rows, path: (written.append(Path(path).name), write_log(rows, path))[1]

    torch.manual_seed(world.rank)  # different initial weights per rank: DDP must sync them
    data = pairs(96)
    model = Transformer(ModelConfig(d_model=32, n_heads=2, n_layers=1, d_ff=64, dropout=0.0), 20, PAD)
    cfg = OptimConfig(
        seed=3, max_tokens=60, warmup_steps=5, max_steps=max_steps, val_every=4, average_last=2,
        peak_lr=3e-3, accum_steps=accum_steps,
    )  # fmt: skip

    def validate(m: Transformer) -> dict[str, float]:
        loss = validation_loss(m, data[:16], 60, BOS, EOS, device)
        return {"val_loss": loss, "score": -loss}

    trainer = Trainer(
        model, data, validate, cfg, out_dir, out_dir / "log.csv", BOS, EOS, "score", "toy", meta={},
        world=world,
    )  # fmt: skip
    losses, step = [], trainer.train_step

    def recorded(batches):
        loss, n = step(batches)
        losses.append(loss)
        return loss, n

    trainer.train_step = recorded
    trainer.run()
    (out_dir / f"rank{world.rank}.json").write_text(json.dumps({"losses": losses, "written": written}))
    distributed.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
