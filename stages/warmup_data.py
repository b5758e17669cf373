"""DVC stage `warmup_data`: the number-to-words task, split by number, at `warmup_data.out_dir`.

Run from the repository root: `python -m stages.warmup_data`.
"""

from __future__ import annotations

import datasets

from pipeline.core.config import load_params
from pipeline.core.errors import run_main
from pipeline.data.multi30k import save_dataset_dict
from pipeline.data.warmup import build_warmup_dataset, split_numbers


def main() -> None:
    """Draw the numbers, spell them, and save the DatasetDict (train/val/test; `src`, `tgt`)."""
    datasets.disable_progress_bars()
    cfg = load_params().warmup_data
    splits = split_numbers(cfg.max_number, cfg.n_train, cfg.n_val, cfg.n_test, cfg.seed)
    save_dataset_dict(build_warmup_dataset(splits), cfg.out_dir)
    sizes = ", ".join(f"{name} {len(numbers)}" for name, numbers in splits.items())
    print(f"warmup_data: wrote {cfg.out_dir} ({sizes} examples)")


if __name__ == "__main__":
    run_main(main)
