"""DVC stage `incoming`: Multi30k train + the new pairs in `incoming.in_dir` → the merged training set.

Usage: `python -m stages.incoming` (paths: `incoming.*` in params.yaml). Reads the corpus at
`download.out_dir`; validates every `*.tsv` in `in_dir`
(`en<TAB><tgt>`, tgt = `download.tgt_lang`; see `pipeline.data.incoming`), drops pairs that leak val/test sentences and duplicates,
and writes `out_jsonl` (train pairs, then the new ones) and `metrics_json` (files, pairs_read,
dropped_leak, dropped_dup, added, train_pairs). An absent or empty `in_dir` gives exactly the
train split. A bad file is a one-line error and nothing is written. Each other entry of
`in_dir` (not a `*.tsv` file: `NEW.TSV`, a directory, a symbolic link, ...) gets one warning
line on stderr, naming it and why it is ignored. (Under DVC a broken link never gets that far:
DVC cannot hash the folder; the flow names it before any stage runs.)
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import datasets

from pipeline.core.config import load_params
from pipeline.core.errors import run_main
from pipeline.core.io import write_json
from pipeline.data.incoming import ignored_entries, merge_folder
from pipeline.data.multi30k import TRAIN_SPLIT, load_corpus


def main() -> None:
    datasets.disable_progress_bars()
    params = load_params()
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
    run_main(main)
