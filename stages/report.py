"""DVC stage `report`: the run's results page `reports/README.md` and its figures.

Usage: `python -m stages.report` followed by the paths `ARGS` names, in that order (dvc.yaml
passes them). Reads params `decode`, `train`, `download.out_dir` and `tokenizer.out_dir`.
TRAIN_FACTS, SCORE_FACTS and MLFLOW_RUN_ID may be absent. Writes REPORT_MD and the PNGs in
FIGURES_DIR (`pipeline.ops.report`), including the robustness section (`pipeline.ops.robustness`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import datasets

from pipeline.core.config import load_params
from pipeline.core.device import pick_device
from pipeline.core.errors import run_main
from pipeline.data.multi30k import skipped_splits
from pipeline.data.tokenizer import model_file
from pipeline.ops import report
from pipeline.serving.translator import load_translator

ARGS = ("model", "time_machine", "translations", "scores", "score_facts", "train_log", "train_summary",
        "train_facts", "mlflow_run_id", "robustness_json", "robustness_failures", "report_md", "figures")  # fmt: skip


def main(paths: dict[str, Path]) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    engine = load_translator(paths["model"], model_file(params.tokenizer.out_dir), pick_device("auto"))
    inputs = report.load_inputs(paths, params)
    written = report.build_report(inputs, engine, params.decode, paths["report_md"], paths["figures"])
    for message in skipped_splits(params.download.tgt_lang):
        print(f"report: {message}")
    print(f"report: {len(written) - 1} figures in {paths['figures']}, page {paths['report_md']}")


if __name__ == "__main__":
    if len(sys.argv) != len(ARGS) + 1:
        raise SystemExit("usage: python -m stages.report " + " ".join(a.upper() for a in ARGS))
    run_main(lambda: main(dict(zip(ARGS, map(Path, sys.argv[1:]), strict=True))))
