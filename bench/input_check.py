"""A check on the trained model: files at batch speed, and what the input processing costs.

How it measures and what it writes: docs/benchmarks.md, `bench.input_check`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import datasets
import torch

from bench.common import command_line, record, timed_result
from pipeline.core.errors import run_main
from pipeline.core.metrics import score
from pipeline.core.params_file import load_params
from pipeline.data.multi30k import load_corpus
from pipeline.data.tokenizer import model_file
from pipeline.serving.torch_engine import translate
from pipeline.serving.translator import load_translator, translate_lines


def mt_translate(lines: list[str]) -> list[str]:
    """`mt-translate < file` run from a scratch directory: one output line per input line."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.en"
        src.write_text("\n".join(lines) + "\n", encoding="utf-8")
        with src.open() as stdin:
            out = subprocess.run(
                [shutil.which("mt-translate")],
                stdin=stdin,
                cwd=tmp,
                capture_output=True,
                text=True,
                check=True,
            )
    return out.stdout.splitlines()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", default="test_2016_flickr")
    args = p.parse_args()
    datasets.disable_progress_bars()
    params = load_params()
    cfg = params.decode
    loaded = load_translator(Path(params.train.model_file), model_file(params.tokenizer.out_dir))
    split = load_corpus(params.download.out_dir)[args.split]
    en, refs = list(split["en"]), list(split["de"])
    rows = {
        "decode_stage": timed_result(
            lambda: translate_lines(loaded, en, cfg, max_pieces=params.train.max_len)
        ),
        "bare_beam": timed_result(lambda: translate(loaded.model, loaded.tokenizer, en, cfg)),
        "mt_translate_file": timed_result(lambda: mt_translate(en)),
    }
    figures = {
        name: {"sent_s": round(len(en) / secs, 1), "bleu": round(score(hyps, refs)["bleu"], 2)}
        for name, (hyps, secs) in rows.items()
    }
    figures["mt_translate_vs_decode_stage"] = round(
        figures["mt_translate_file"]["sent_s"] / figures["decode_stage"]["sent_s"], 3
    )
    figures["processing_bleu_change"] = round(
        figures["decode_stage"]["bleu"] - figures["bare_beam"]["bleu"], 2
    )
    figures["mt_translate_same_lines"] = rows["mt_translate_file"][0] == rows["decode_stage"][0]
    for name, value in figures.items():
        print(f"{name:30s} {value}")
    figures = {"split": args.split, "sentences": len(en), "beam_size": cfg.beam_size, **figures}
    command = command_line("bench.input_check", sys.argv[1:])
    record("reports", "input_check", command, {"input": figures}, torch.device("cpu"))


if __name__ == "__main__":
    run_main(main)
