"""DVC stage `warmup_data`: the number-to-words task, split by number, at `warmup_data.out_dir`.

Run from the repository root: `python -m stages.warmup_data`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import datasets

from pipeline.core.errors import run_main
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent
from pipeline.data.multi30k import save_dataset_dict
from pipeline.data.warmup import build_warmup_dataset, split_numbers


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    """Draw the numbers, spell them, and save the DatasetDict (train/val/test; `src`, `tgt`)."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    datasets.disable_progress_bars()
    cfg = stage_params(argv).warmup_data
    splits = split_numbers(cfg.max_number, cfg.n_train, cfg.n_val, cfg.n_test, cfg.seed)
    save_dataset_dict(build_warmup_dataset(splits), cfg.out_dir)
    sizes = ", ".join(f"{name} {len(numbers)}" for name, numbers in splits.items())
    print(f"warmup_data: wrote {cfg.out_dir} ({sizes} examples)")


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
