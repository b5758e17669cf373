"""A toy data-parallel run for tests/test_distributed.py.

`python tests/toy_ddp.py OUT_DIR MAX_STEPS ACCUM_STEPS`, alone or under
`python -m torch.distributed.run --standalone --nproc-per-node=N`. Writes, per rank,
OUT_DIR/rank<r>.json: the loss of each optimizer step, the files that rank wrote, and a checksum
of its final weights. With env TOY_UNREADABLE_RANK=r, rank r cannot read checkpoints.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from from_params import from_params
from toy_train import PAD, ToyValidation, pairs  # a script (also under torchrun): its folder is sys.path[0]

from pipeline.core.config import ModelConfig, OptimConfig
from pipeline.core.errors import CheckpointError, run_main
from pipeline.model.transformer import Transformer
from pipeline.training import checkpoint, distributed
from pipeline.training import loop as train_module
from pipeline.training.loop import RunContext, start, train


def record(world: distributed.World) -> tuple[list[float], list[str]]:
    """Patch the loop to record its losses and the files it writes."""
    losses, written = [], []
    save, write_log, step = checkpoint.save, train_module.write_log, train_module.train_step
    checkpoint.save = lambda path, *rest: (written.append(Path(path).name), save(path, *rest))[1]
    train_module.write_log = lambda rows, path: (written.append(Path(path).name), write_log(rows, path))[1]
    train_module.train_step = lambda *args, **kw: (result := step(*args, **kw), losses.append(result[0]))[0]
    if os.environ.get("TOY_UNREADABLE_RANK") == str(world.rank):

        def unreadable(path):
            raise CheckpointError(f"{path}: permission denied")

        checkpoint.load = unreadable
    return losses, written


def main(out_dir: Path, max_steps: int, accum_steps: int) -> None:
    torch.set_num_threads(1)
    world, device = distributed.init(torch.device("cpu"))
    losses, written = record(world)
    torch.manual_seed(world.rank)  # different initial weights per rank: DDP must sync them
    data = pairs(96)
    model = Transformer(
        from_params(ModelConfig, d_model=32, n_heads=2, n_layers=1, d_ff=64, dropout=0.0), 20, PAD
    )
    cfg = from_params(
        OptimConfig,
        seed=3,
        max_tokens=60,
        warmup_steps=5,
        max_steps=max_steps,
        val_every=4,
        average_last=2,
        peak_lr=3e-3,
        accum_steps=accum_steps,
    )
    try:
        run = RunContext(out_dir, out_dir / "log.csv", "toy", world)
        train(model, data, ToyValidation(data[:16]), start(model, cfg, run))
        checksum = sum(float(p.double().sum()) for p in model.parameters())
        result = {"losses": losses, "written": written, "checksum": checksum}
        (out_dir / f"rank{world.rank}.json").write_text(json.dumps(result))
    finally:
        distributed.close()


if __name__ == "__main__":
    run_main(lambda: main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
