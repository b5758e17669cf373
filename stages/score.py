"""DVC stage `score`: sacreBLEU BLEU and chrF of the `decode` stage's translations.

Usage: `python -m stages.score TRANSLATIONS_DIR METRICS_JSON RUN_ID_FILE` (dvc.yaml passes the
paths). Reads `<TRANSLATIONS_DIR>/<split>.hyp.de` for each evaluation split and the German
references from the corpus at `download.out_dir`; writes METRICS_JSON as
`{"<split>": {"bleu", "chrf", "bleu_signature", "chrf_signature"}}`, and logs `bleu_<split>` and
`chrf_<split>` to the train stage's MLflow run named in RUN_ID_FILE (when tracked) and as tags of
the model version `decode` registered (the `candidate`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import datasets

from pipeline.config import load_params
from pipeline.data import load_corpus
from pipeline.errors import DataError, run_main
from pipeline.io import write_json
from pipeline.metrics import score
from pipeline.tracking import run_of
from stages.decode import EVAL_SPLITS, translation_path


def read_lines(path: Path) -> list[str]:
    """One item per line, as `stages.decode.write_lines` wrote them (empty lines kept).

    Raises:
        DataError: the file is missing (run the decode stage).
    """
    if not path.is_file():
        raise DataError(f"{path}: translations not found (run the decode stage)")
    lines = path.read_text(encoding="utf-8").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def main(translations_dir: Path, metrics_json: Path, run_id_file: Path) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    corpus = load_corpus(params.download.out_dir)
    metrics = {}
    for split in EVAL_SPLITS:
        path = translation_path(translations_dir, split)
        hyps = read_lines(path)
        try:
            metrics[split] = score(hyps, corpus[split]["de"])
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from None
        print(f"score: {split}: BLEU {metrics[split]['bleu']:.2f}  chrF {metrics[split]['chrf']:.2f}")
    write_json(metrics_json, metrics)
    tracker = run_of(run_id_file, params.mlflow.enabled)
    flat = {f"{name}_{split}": m[name] for split, m in metrics.items() for name in ("bleu", "chrf")}
    tracker.log_metrics(flat, step=0)
    tracker.log_artifact(metrics_json, "reports")
    if tracker.run_id:
        from pipeline.registry import tag_candidate  # imports mlflow: only when tracking

        version = tag_candidate(params.mlflow.model_name, tracker.run_id, flat)
        if version:
            print(f"score: tagged MLflow model {params.mlflow.model_name} v{version} with the scores")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: python -m stages.score TRANSLATIONS_DIR METRICS_JSON RUN_ID_FILE")
    run_main(lambda: main(*map(Path, sys.argv[1:4])))
