"""DVC stage `decode`: beam-search translations of the evaluation splits, and the time-machine table.

Usage: `python -m stages.decode MODEL TIME_MACHINE_TSV TRANSLATIONS_DIR TIME_MACHINE_MD RUN_ID_FILE`
(dvc.yaml passes the paths). Reads params `decode`, `download.out_dir`, `tokenizer.out_dir` and
`mlflow`. Writes `<TRANSLATIONS_DIR>/<split>.hyp.de` (one line per source line) for each evaluation
split, and TIME_MACHINE_MD: our German for the seed's 20 sentences beside the seed's pre-computed
German. Decodes on CUDA when available, else on the CPU.

When the train stage's MLflow run id is in RUN_ID_FILE, adds to that run the translations, the
time-machine table and the translator pyfunc (`pipeline.registry`), registered as a new version of
`mlflow.model_name` with the alias `candidate`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import datasets

from pipeline.checkpoint import load_model
from pipeline.config import DecodeConfig, load_params
from pipeline.data import SPLITS, TRAIN_SPLIT, load_corpus
from pipeline.device import pick_device
from pipeline.errors import CheckpointError, DataError, run_main
from pipeline.io import write_text
from pipeline.model import Transformer
from pipeline.search import translate
from pipeline.tokenizer import Tokenizer
from pipeline.tracking import run_of

EVAL_SPLITS = tuple(s for s in SPLITS if s != TRAIN_SPLIT)
TIME_MACHINE_HEADER = ["en", "seed_de"]


def translation_path(out_dir: Path, split: str) -> Path:
    """Where a split's German translations live: `<out_dir>/<split>.hyp.de` (`<split>.de` is the
    corpus's own file name, which must never be committed)."""
    return out_dir / f"{split}.hyp.de"


def write_lines(path: Path, lines: list[str]) -> None:
    """Atomically write one line per item (newlines inside an item become spaces)."""
    write_text(path, "".join(line.replace("\n", " ") + "\n" for line in lines))


def detokenize_en(text: str) -> str:
    """Undo the seed's space tokenisation as Multi30k's raw text has it: "park ." -> "park."."""
    return re.sub(r" +([.,!?;:])", r"\1", text)


def read_time_machine(path: Path) -> tuple[list[str], list[str]]:
    """The seed's English sentences and its German outputs from a `en<TAB>seed_de` TSV.

    Raises:
        DataError: the file is missing, lacks the header, or a row has not two fields.
    """
    if not path.is_file():
        raise DataError(f"{path}: time-machine sentences not found")
    header, *rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
    if header != TIME_MACHINE_HEADER:
        raise DataError(f"{path}: header must be {'<TAB>'.join(TIME_MACHINE_HEADER)}, got {header}")
    for number, row in enumerate(rows, start=2):
        if len(row) != 2:
            raise DataError(f"{path}: line {number}: expected 2 tab-separated fields, got {len(row)}")
    return [en for en, _ in rows], [de for _, de in rows]


def time_machine_markdown(en: list[str], ours: list[str], seed_de: list[str], cfg: DecodeConfig) -> str:
    """A Markdown table: #, English (as translated), our German, the seed's German."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "# Time machine: the seed's 20 sentences",
        "",
        f"Our model: beam {cfg.beam_size}, length penalty α = {cfg.length_penalty}. The seed's English is",
        'space-tokenised ("in the park ."); Multi30k\'s raw text is not ("in the park."), so the space',
        "before punctuation was removed before translating; the English column shows the text we",
        "translated. The seed's German (its own pre-computed outputs) is shown verbatim: space-tokenised,",
        "with umlauts written ae/oe/ue.",
        "",
        "| # | English | ours | seed's German |",
        "|---|---|---|---|",
    ]
    for i, row in enumerate(zip(en, ours, seed_de, strict=True), start=1):
        lines.append(f"| {i} | " + " | ".join(cell(text) for text in row) + " |")
    return "\n".join(lines) + "\n"


def load_translator(model_path: Path, tok: Tokenizer) -> Transformer:
    """The checkpoint's model, checked against the tokenizer (vocabulary size and special ids).

    Raises:
        CheckpointError: unreadable checkpoint, or a vocabulary / special-id mismatch.
    """
    model, state = load_model(model_path, vocab_size=tok.vocab_size)
    if (state["bos_id"], state["eos_id"], state["pad_id"]) != (tok.bos_id, tok.eos_id, tok.pad_id):
        raise CheckpointError(f"{model_path}: special ids differ from the tokenizer's")
    return model


def main(
    model_path: Path, time_machine_tsv: Path, out_dir: Path, time_machine_md: Path, run_id_file: Path
) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    cfg, device, progress = params.decode, pick_device("auto"), sys.stderr.isatty()
    tok = Tokenizer.load(Path(params.tokenizer.out_dir) / "spm.model")
    model = load_translator(model_path, tok)
    corpus = load_corpus(params.download.out_dir)
    for split in EVAL_SPLITS:
        hyps = translate(model, tok, corpus[split]["en"], cfg, device, progress)
        write_lines(translation_path(out_dir, split), hyps)
        print(f"decode: {split}: {len(hyps)} sentences -> {translation_path(out_dir, split)}")
    en, seed_de = read_time_machine(time_machine_tsv)
    en = [detokenize_en(s) for s in en]
    ours = translate(model, tok, en, cfg, device)
    write_text(time_machine_md, time_machine_markdown(en, ours, seed_de, cfg))
    print(f"decode: time machine -> {time_machine_md}")
    tracker = run_of(run_id_file, params.mlflow.enabled)
    if tracker.run_id:
        from pipeline.registry import log_translator  # imports mlflow: only when tracking

        tracker.log_artifact(time_machine_md, "reports")
        for split in EVAL_SPLITS:
            tracker.log_artifact(translation_path(out_dir, split), "reports/translations")
        spm_model = Path(params.tokenizer.out_dir) / "spm.model"
        name = params.mlflow.model_name
        version = log_translator(tracker.run_id, model_path, spm_model, cfg.model_dump(), name)
        print(f"decode: MLflow model {name} v{version} (alias candidate), run {tracker.run_id}")


if __name__ == "__main__":
    if len(sys.argv) != 6:
        raise SystemExit(
            "usage: python -m stages.decode MODEL TIME_MACHINE_TSV TRANSLATIONS_DIR TIME_MACHINE_MD RUN_ID_FILE"
        )
    run_main(lambda: main(*map(Path, sys.argv[1:6])))
