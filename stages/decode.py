"""DVC stage `decode`: translations of the evaluation splits and the time-machine table.

Usage: `python -m stages.decode MODEL TIME_MACHINE_TSV TRANSLATIONS_DIR TIME_MACHINE_MD RUN_ID_FILE`.
Reads params `decode`, `train.max_len`, `download.out_dir`, `tokenizer.out_dir`, `mlflow`. Translates
through `pipeline.translator` (as `mt-translate` and the pyfunc do) into `<split>.hyp.de` files; when
RUN_ID_FILE names an MLflow run, logs them and registers the pyfunc with the alias `candidate`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import datasets

from pipeline import translations as tr
from pipeline.config import load_params
from pipeline.data import load_corpus
from pipeline.device import pick_device
from pipeline.errors import run_main
from pipeline.io import write_text
from pipeline.tracking import run_of
from pipeline.translator import load_translator, translate_lines


def main(
    model: Path, time_machine_tsv: Path, out_dir: Path, time_machine_md: Path, run_id_file: Path
) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    cfg, device, max_len = params.decode, pick_device("auto"), params.train.max_len
    spm_model = Path(params.tokenizer.out_dir) / "spm.model"
    loaded = load_translator(model, spm_model)
    corpus = load_corpus(params.download.out_dir)
    for split in tr.EVAL_SPLITS:
        hyps = translate_lines(loaded, corpus[split]["en"], cfg, device, sys.stderr.isatty(), max_len)
        tr.write_lines(tr.translation_path(out_dir, split), hyps)
        print(f"decode: {split}: {len(hyps)} sentences -> {tr.translation_path(out_dir, split)}")
    en, seed_de = tr.read_time_machine(time_machine_tsv)
    ours = translate_lines(loaded, en, cfg, device, max_pieces=max_len)
    write_text(time_machine_md, tr.time_machine_markdown(en, ours, seed_de, cfg))
    tracker = run_of(run_id_file, params.mlflow.enabled)
    if tracker.run_id:
        from pipeline.registry import log_translator  # imports mlflow: only when tracking

        tracker.log_artifact(time_machine_md, "reports")
        for split in tr.EVAL_SPLITS:
            tracker.log_artifact(tr.translation_path(out_dir, split), "reports/translations")
        name, config = params.mlflow.model_name, {**cfg.model_dump(), "max_len": max_len}
        version = log_translator(tracker.run_id, model, spm_model, config, name)
        print(f"decode: MLflow model {name} v{version} (alias candidate), run {tracker.run_id}")


if __name__ == "__main__":
    if len(sys.argv) != 6:
        raise SystemExit(
            "usage: python -m stages.decode MODEL TIME_MACHINE_TSV TRANSLATIONS_DIR TIME_MACHINE_MD RUN_ID"
        )
    run_main(lambda: main(*map(Path, sys.argv[1:6])))
