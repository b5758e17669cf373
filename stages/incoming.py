"""DVC stage `incoming`: Multi30k train + the new pairs in `incoming.in_dir` -> `incoming.out_jsonl`
and its counts `incoming.metrics_json` (`pipeline.data.incoming`; the rules: docs/retraining.md).
A bad file is a one-line error and nothing is written.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import datasets

from pipeline.core.errors import run_main
from pipeline.core.io import write_json
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent
from pipeline.data.incoming import ignored_entries, merge_folder
from pipeline.data.multi30k import TRAIN_SPLIT, load_corpus


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    datasets.disable_progress_bars()
    params = stage_params(argv)
    cfg, incoming_dir = params.download, Path(params.incoming.in_dir)
    merged_jsonl, counts_json = Path(params.incoming.out_jsonl), Path(params.incoming.metrics_json)
    corpus, tgt = load_corpus(cfg.out_dir), cfg.tgt_lang
    train = list(zip(corpus[TRAIN_SPLIT]["en"], corpus[TRAIN_SPLIT][tgt], strict=True))
    held_out = [
        pair
        for split, ds in corpus.items()
        if split != TRAIN_SPLIT
        for pair in zip(ds["en"], ds[tgt], strict=True)
    ]
    for path, why in ignored_entries(incoming_dir):
        print(f"warning: {path}: ignored ({why})", file=sys.stderr)
    counts = merge_folder(incoming_dir, train, held_out, merged_jsonl, tgt)
    write_json(counts_json, asdict(counts))
    print(
        f"incoming: {counts.files} file(s), {counts.pairs_read} pairs read, {counts.dropped_leak} dropped "
        f"(in val/test), {counts.dropped_dup} dropped (duplicates), {counts.added} added -> "
        f"{merged_jsonl} ({counts.train_pairs} training pairs)"
    )


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
