"""DVC stage `decode`: translations of the evaluation splits and the time-machine sentences, the
time-machine table and the robustness figures, all through `pipeline.serving.translator`; with an
MLflow run in `train.run_id_file`, the translations are logged and the model registered as
`candidate`. Paths: `decode.*` in params.yaml (the README's stage table).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import datasets

from pipeline.core.config import Params
from pipeline.core.device import pick_device
from pipeline.core.errors import run_main
from pipeline.core.io import write_text
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent
from pipeline.data import time_machine as tm
from pipeline.data import translations as tr
from pipeline.data.languages import target
from pipeline.data.multi30k import load_corpus, skipped_splits
from pipeline.data.tokenizer import model_file
from pipeline.ops import robustness
from pipeline.serving.engine import Engine
from pipeline.serving.translator import load_translator, translate_lines
from pipeline.tracking.mlflow_tracker import run_of, translation_artifact
from pipeline.tracking.registry import describe_version
from pipeline.tracking.store import check_store

ROBUSTNESS_SPLIT = "test_2016_flickr"  # its upper-cased source is the casing figure


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    datasets.disable_progress_bars()
    # registering the model downloads its artifacts: MLflow's progress bars only clutter DVC's log
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    params = stage_params(argv)
    if params.mlflow.enabled:
        check_store()  # before minutes of translating, not after
    cfg, max_len, out_dir = params.decode, params.train.max_len, Path(params.decode.translations_dir)
    spm_model, model = model_file(params.tokenizer.out_dir), Path(params.train.model_file)
    engine = load_translator(model, spm_model, pick_device("auto"), ensemble=params.decode.ensemble)
    corpus, tgt = load_corpus(params.download.out_dir), params.download.tgt_lang
    splits = [split for split in tr.EVAL_SPLITS if split in corpus]
    hyps = {}
    for split in splits:
        hyps[split] = translate_lines(
            engine, corpus[split]["en"], cfg, progress=sys.stderr.isatty(), max_pieces=max_len
        )
        tr.write_lines(tr.translation_path(out_dir, split, tgt), hyps[split])
        print(f"decode: {split}: {len(hyps[split])} sentences -> {tr.translation_path(out_dir, split, tgt)}")
    for message in skipped_splits(tgt):
        print(f"decode: {message}")
    time_machine_md = Path(cfg.time_machine_md)
    write_text(time_machine_md, time_machine(engine, Path(cfg.time_machine_tsv), out_dir, params))
    robustness_figures(engine, corpus[ROBUSTNESS_SPLIT], hyps[ROBUSTNESS_SPLIT], params)
    tracker = run_of(Path(params.train.run_id_file), params.mlflow.enabled)
    if tracker.run_id:
        from pipeline.serving.pyfunc import log_translator  # imports mlflow: only when tracking

        tracker.log_artifact(time_machine_md, "reports")
        for split in splits:
            text = tr.translation_path(out_dir, split, tgt).read_text(encoding="utf-8")
            tracker.log_text(text, translation_artifact(split, tgt))
        config = {**cfg.settings(), "max_len": max_len, **params.serve.model_dump()}
        name = params.mlflow.model_name
        members = [Path(path) for path in cfg.ensemble]
        version = log_translator(tracker.run_id, model, spm_model, config, name, ensemble=members)
        decoding = f"beam {cfg.beam_size}, length penalty {cfg.length_penalty}"
        decoding += f", an ensemble with {', '.join(cfg.ensemble)}" if cfg.ensemble else ""
        describe_version(name, version, tracker.run_id, decoding)
        print(f"decode: MLflow model {name} v{version} (alias candidate), run {tracker.run_id}")


def time_machine(engine: Engine, time_machine_tsv: Path, out_dir: Path, params: Params) -> str:
    """Translate the tutorial's sentences into `<out_dir>/time_machine.hyp.<tgt>`; returns the
    time-machine page (German runs), or a note that it is German-only."""
    tgt = params.download.tgt_lang
    en, tutorial_de = tm.read(time_machine_tsv)
    ours = translate_lines(engine, en, params.decode, max_pieces=params.train.max_len)
    tr.write_lines(tr.translation_path(out_dir, tm.TIME_MACHINE, tgt), ours)
    if not target(tgt).time_machine:
        print("decode: time machine: no table, the tutorial's outputs are German")
        return tm.not_german(tgt)
    return tm.markdown(tm.rows(en, ours, tutorial_de), params.decode)


def robustness_figures(engine: Engine, split, hyps: list[str], params: Params) -> None:
    """The robustness table's pass count and the BLEU of `split`'s upper-cased source (against its
    normal source's translations `hyps`), written for the report."""
    cfg, max_len, tgt = params.decode, params.train.max_len, params.download.tgt_lang
    table = robustness.pass_rate(engine, robustness.read_table(Path(cfg.robustness_tsv)), cfg, max_len)
    upper = robustness.uppercase_bleu(engine, split["en"], split[tgt], hyps, cfg, max_pieces=max_len)
    robustness.write_figures(Path(cfg.robustness_json), Path(cfg.robustness_failures_json), table, upper)
    print(f"decode: robustness {table.passed}/{table.total}; upper-cased source BLEU {upper[1]:.2f}")


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
