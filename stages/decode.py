"""DVC stage `decode`: translations of the evaluation splits and the time-machine table.

Usage: `python -m stages.decode MODEL TIME_MACHINE_TSV TRANSLATIONS_DIR TIME_MACHINE_MD RUN_ID_FILE`.
Reads params `decode`, `train.max_len`, `download`, `tokenizer.out_dir`, `mlflow`. Translates
through `pipeline.serving.translator` (as `mt-translate` and the pyfunc do) into `<split>.hyp.<tgt_lang>`
files (splits the target language lacks are skipped, with a message); the time-machine table only for
German (the seed's outputs are German; otherwise the file says so). When RUN_ID_FILE names an MLflow
run, logs them and registers the pyfunc with the alias `candidate`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import datasets

from pipeline.core.config import Params, load_params
from pipeline.core.device import pick_device
from pipeline.core.errors import run_main
from pipeline.core.io import write_text
from pipeline.data import translations as tr
from pipeline.data.languages import target
from pipeline.data.multi30k import load_corpus, skipped_splits
from pipeline.data.tokenizer import model_file
from pipeline.serving.engine import Engine
from pipeline.serving.translator import load_translator, translate_lines
from pipeline.tracking.runs import run_of


def main(
    model: Path, time_machine_tsv: Path, out_dir: Path, time_machine_md: Path, run_id_file: Path
) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    cfg, max_len = params.decode, params.train.max_len
    spm_model = model_file(params.tokenizer.out_dir)
    engine = load_translator(model, spm_model, pick_device("auto"))
    corpus, tgt = load_corpus(params.download.out_dir), params.download.tgt_lang
    splits = [split for split in tr.EVAL_SPLITS if split in corpus]
    for split in splits:
        hyps = translate_lines(
            engine, corpus[split]["en"], cfg, progress=sys.stderr.isatty(), max_pieces=max_len
        )
        tr.write_lines(tr.translation_path(out_dir, split, tgt), hyps)
        print(f"decode: {split}: {len(hyps)} sentences -> {tr.translation_path(out_dir, split, tgt)}")
    for message in skipped_splits(tgt):
        print(f"decode: {message}")
    write_text(time_machine_md, time_machine(engine, time_machine_tsv, params))
    tracker = run_of(run_id_file, params.mlflow.enabled)
    if tracker.run_id:
        from pipeline.serving.pyfunc import log_translator  # imports mlflow: only when tracking

        tracker.log_artifact(time_machine_md, "reports")
        for split in splits:
            tracker.log_artifact(tr.translation_path(out_dir, split, tgt), "reports/translations")
        name, config = params.mlflow.model_name, {**cfg.model_dump(), "max_len": max_len}
        version = log_translator(tracker.run_id, model, spm_model, config, name)
        print(f"decode: MLflow model {name} v{version} (alias candidate), run {tracker.run_id}")


def time_machine(engine: Engine, time_machine_tsv: Path, params: Params) -> str:
    """The time-machine table (German runs), or a note that it is German-only."""
    if not target(params.download.tgt_lang).time_machine:
        print("decode: time machine: skipped, the seed's reference outputs are German")
        return tr.time_machine_not_german(params.download.tgt_lang)
    en, seed_de = tr.read_time_machine(time_machine_tsv)
    ours = translate_lines(engine, en, params.decode, max_pieces=params.train.max_len)
    return tr.time_machine_markdown(en, ours, seed_de, params.decode)


if __name__ == "__main__":
    if len(sys.argv) != 6:
        raise SystemExit(
            "usage: python -m stages.decode MODEL TIME_MACHINE_TSV TRANSLATIONS_DIR TIME_MACHINE_MD RUN_ID"
        )
    run_main(lambda: main(*map(Path, sys.argv[1:6])))
