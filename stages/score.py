"""DVC stage `score`: cased sacreBLEU BLEU, chrF and the paper-comparable `bleu_lc_tok` of the
`decode` stage's translations into `<score.scores_dir>/<split>.json` (numbers) and
`score.facts_json` (signatures), logged to the MLflow run and as tags of the `candidate` version.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import datasets

from pipeline.core.errors import DataError, run_main
from pipeline.core.io import write_json
from pipeline.core.metrics import split_scores
from pipeline.core.params_file import flatten, stage_params
from pipeline.core.signals import die_with_parent
from pipeline.data.multi30k import load_corpus, skipped_splits
from pipeline.data.translations import (
    EVAL_SPLITS,
    read_lines,
    scores_path,
    translation_path,
    write_absent,
    write_scores,
)
from pipeline.tracking.mlflow_tracker import run_of
from pipeline.tracking.registry import tag_candidate
from pipeline.tracking.store import check_store


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    datasets.disable_progress_bars()
    params = stage_params(argv)
    if params.mlflow.enabled:
        check_store()
    translations_dir, scores_dir = Path(params.decode.translations_dir), Path(params.score.scores_dir)
    facts_json, run_id_file = Path(params.score.facts_json), Path(params.train.run_id_file)
    corpus, tgt = load_corpus(params.download.out_dir), params.download.tgt_lang
    metrics, facts = {}, {}
    for split in (s for s in EVAL_SPLITS if s in corpus):
        path = translation_path(translations_dir, split, tgt)
        try:
            metrics[split], facts[split] = split_scores(read_lines(path), corpus[split][tgt], tgt)
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from None
        print(f"score: {split}: " + "  ".join(f"{k} {v:.2f}" for k, v in metrics[split].items()))
    for message in skipped_splits(tgt):
        print(f"score: {message}")
    for split in (s for s in EVAL_SPLITS if s not in corpus):
        write_absent(scores_dir, split)
    write_scores(scores_dir, metrics)
    write_json(facts_json, facts)
    tracker = run_of(run_id_file, params.mlflow.enabled)
    flat = {name: float(value) for name, value in flatten(metrics).items()}
    tracker.log_metrics(flat, step=0)
    for path in [*(scores_path(scores_dir, split) for split in metrics), facts_json]:
        tracker.log_artifact(path, "reports")
    if tracker.run_id:
        version = tag_candidate(params.mlflow.model_name, tracker.run_id, flat)
        if version:
            print(f"score: tagged MLflow model {params.mlflow.model_name} v{version} with the scores")


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
