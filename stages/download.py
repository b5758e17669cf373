"""DVC stage `download`: Multi30k Task 1 raw files (English and `download.tgt_lang`) → validated
DatasetDict at `download.out_dir`.

Run from the repository root: `python -m stages.download`. Env `MULTI30K_MIRROR` (a folder or base
URL) is tried before the canonical URL; every file is checked against its pinned SHA-256.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import datasets

from pipeline.core.errors import run_main
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent
from pipeline.data.multi30k import build_corpus, resolve_sources, skipped_splits


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    """Fetch, validate and store the EN→`download.tgt_lang` corpus; prints the pairs kept per split
    and the splits that language lacks."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    datasets.disable_progress_bars()
    cfg = stage_params(argv).download
    for message in skipped_splits(cfg.tgt_lang):
        print(f"download: {message}")
    corpus = build_corpus(
        cfg.out_dir,
        resolve_sources(cfg.mirror),
        max_train_pairs=cfg.max_train_pairs,
        max_eval_pairs=cfg.max_eval_pairs,
        tgt_lang=cfg.tgt_lang,
    )
    sizes = ", ".join(f"{split} {len(ds)}" for split, ds in corpus.items())
    print(f"download: wrote {cfg.out_dir} (en-{cfg.tgt_lang}: {sizes} pairs)")


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
