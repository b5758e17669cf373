"""DVC stage `report`: the run's results page `reports/README.md` and its figures.

Usage: `python -m stages.report MODEL TIME_MACHINE_TSV TRANSLATIONS_DIR METRICS_JSON TRAIN_LOG
TRAIN_SUMMARY MLFLOW_RUN_ID REPORT_MD FIGURES_DIR` (dvc.yaml passes the paths). Reads params
`decode`, `download.out_dir` and `tokenizer.out_dir`. MLFLOW_RUN_ID is optional: when the file is
absent the page says "not tracked". Writes REPORT_MD and the PNGs in FIGURES_DIR (see
`pipeline.report`). Translates the 20 time-machine sentences on CUDA when available, else on the CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import datasets

from pipeline import report
from pipeline.config import load_params
from pipeline.data import load_corpus
from pipeline.device import pick_device
from pipeline.errors import run_main
from pipeline.tokenizer import Tokenizer
from stages.decode import EVAL_SPLITS, detokenize_en, load_translator, read_time_machine, translation_path
from stages.score import read_lines

BUCKET_SPLIT = "test_2016_flickr"


def main(
    model_path: Path,
    time_machine_tsv: Path,
    translations_dir: Path,
    metrics_json: Path,
    train_log: Path,
    train_summary: Path,
    mlflow_run_id: Path,
    report_md: Path,
    figures_dir: Path,
) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    tok = Tokenizer.load(Path(params.tokenizer.out_dir) / "spm.model")
    model = load_translator(model_path, tok)
    test = load_corpus(params.download.out_dir)[BUCKET_SPLIT]
    en, seed_de = read_time_machine(time_machine_tsv)
    inputs = report.ReportInputs(
        metrics=report.read_json(metrics_json),
        log=report.read_log(train_log),
        summary=report.read_json(train_summary),
        time_machine_en=[detokenize_en(s) for s in en],
        time_machine_seed=seed_de,
        bucket_split=BUCKET_SPLIT,
        bucket_en=test["en"],
        bucket_hyps=read_lines(translation_path(translations_dir, BUCKET_SPLIT)),
        bucket_refs=test["de"],
        git_commit=report.git_commit(),
        mlflow_run_id=report.read_run_id(mlflow_run_id),
        links={
            "metrics": metrics_json,
            "training log": train_log,
            "training summary": train_summary,
            **{f"{split} translations": translation_path(translations_dir, split) for split in EVAL_SPLITS},
        },
    )
    written = report.build_report(
        inputs, model, tok, params.decode, report_md, figures_dir, pick_device("auto")
    )
    print(f"report: {len(written) - 1} figures in {figures_dir}, page {report_md}")


if __name__ == "__main__":
    if len(sys.argv) != 10:
        raise SystemExit(
            "usage: python -m stages.report MODEL TIME_MACHINE_TSV TRANSLATIONS_DIR METRICS_JSON "
            "TRAIN_LOG TRAIN_SUMMARY MLFLOW_RUN_ID REPORT_MD FIGURES_DIR"
        )
    run_main(lambda: main(*map(Path, sys.argv[1:10])))
