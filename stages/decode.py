"""DVC stage `decode`: translations of the evaluation splits and of the time-machine sentences, the
time-machine table, and the robustness figures (where the model runs, so the report need not).

Usage: `python -m stages.decode` followed by the paths `ARGS` names, in that order (dvc.yaml passes
them).
Reads params `decode`, `serve` (the request limits logged with the pyfunc), `train.max_len`,
`download`, `tokenizer.out_dir`, `mlflow`. Translates
through `pipeline.serving.translator` (as `mt-translate` and the pyfunc do) into `<split>.hyp.<tgt_lang>`
files (splits the target language lacks are skipped, with a message); the time-machine table only for
German (the seed's outputs are German; otherwise the file says so). When RUN_ID_FILE names an MLflow
run, logs them and registers the pyfunc with the alias `candidate`. The robustness figures
(`pipeline.ops.robustness`: the pass count of ROBUSTNESS_TSV, the BLEU of the upper-cased
test_2016_flickr source) go to ROBUSTNESS_JSON (a DVC metrics file) and ROBUSTNESS_FAILURES.
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
from pipeline.ops import robustness
from pipeline.serving.engine import Engine
from pipeline.serving.translator import load_translator, translate_lines
from pipeline.tracking.runs import run_of

ARGS = ("model", "time_machine_tsv", "translations", "time_machine_md", "run_id_file", "robustness_tsv",
        "robustness_json", "robustness_failures")  # fmt: skip
ROBUSTNESS_SPLIT = "test_2016_flickr"  # its upper-cased source is the casing figure


def main(paths: dict[str, Path]) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    cfg, max_len, out_dir = params.decode, params.train.max_len, paths["translations"]
    spm_model = model_file(params.tokenizer.out_dir)
    engine = load_translator(paths["model"], spm_model, pick_device("auto"))
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
    write_text(paths["time_machine_md"], time_machine(engine, paths["time_machine_tsv"], out_dir, params))
    robustness_figures(engine, corpus[ROBUSTNESS_SPLIT], hyps[ROBUSTNESS_SPLIT], paths, params)
    tracker = run_of(paths["run_id_file"], params.mlflow.enabled)
    if tracker.run_id:
        from pipeline.serving.pyfunc import log_translator  # imports mlflow: only when tracking

        tracker.log_artifact(paths["time_machine_md"], "reports")
        for split in splits:
            tracker.log_artifact(tr.translation_path(out_dir, split, tgt), "reports/translations")
        config = {**cfg.model_dump(), "max_len": max_len, **params.serve.model_dump()}
        name = params.mlflow.model_name
        version = log_translator(tracker.run_id, paths["model"], spm_model, config, name)
        print(f"decode: MLflow model {name} v{version} (alias candidate), run {tracker.run_id}")


def time_machine(engine: Engine, time_machine_tsv: Path, out_dir: Path, params: Params) -> str:
    """Translate the seed's sentences into `<out_dir>/time_machine.hyp.<tgt>`; returns the table
    (German runs), or a note that it is German-only."""
    tgt = params.download.tgt_lang
    en, seed_de = tr.read_time_machine(time_machine_tsv)
    ours = translate_lines(engine, en, params.decode, max_pieces=params.train.max_len)
    tr.write_lines(tr.translation_path(out_dir, tr.TIME_MACHINE, tgt), ours)
    if not target(tgt).time_machine:
        print("decode: time machine: no table, the seed's reference outputs are German")
        return tr.time_machine_not_german(tgt)
    return tr.time_machine_markdown(en, ours, seed_de, params.decode)


def robustness_figures(
    engine: Engine, split, hyps: list[str], paths: dict[str, Path], params: Params
) -> None:
    """The robustness table's pass count and the BLEU of `split`'s upper-cased source (against its
    normal source's translations `hyps`), written for the report."""
    cfg, max_len, tgt = params.decode, params.train.max_len, params.download.tgt_lang
    table = robustness.pass_rate(engine, robustness.read_table(paths["robustness_tsv"]), cfg, max_len)
    upper = robustness.uppercase_bleu(engine, split["en"], split[tgt], hyps, cfg, max_len)
    robustness.write_figures(paths["robustness_json"], paths["robustness_failures"], table, upper)
    print(f"decode: robustness {table.passed}/{table.total}; upper-cased source BLEU {upper[1]:.2f}")


if __name__ == "__main__":
    if len(sys.argv) != len(ARGS) + 1:
        raise SystemExit("usage: python -m stages.decode " + " ".join(a.upper() for a in ARGS))
    run_main(lambda: main(dict(zip(ARGS, map(Path, sys.argv[1:]), strict=True))))
