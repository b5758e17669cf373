"""CTranslate2 export check on the trained model: same translations and BLEU as our beam search?

How it measures and what it writes: docs/benchmarks.md, `bench.ct2_check`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import datasets
import torch

from bench.common import command_line, record, timed_result
from pipeline.core.errors import run_main
from pipeline.core.metrics import score
from pipeline.core.params_file import load_params
from pipeline.data.multi30k import load_corpus
from pipeline.data.tokenizer import model_file
from pipeline.serving.ct2 import ct2_translate, export_ctranslate2, load_ct2
from pipeline.serving.torch_engine import translate
from pipeline.serving.translator import load_translator


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--out", type=Path, default=Path("models/ct2"))
    args = p.parse_args()
    datasets.disable_progress_bars()
    params = load_params()
    cfg, threads = params.decode, torch.get_num_threads()
    loaded = load_translator(Path(params.train.model_file), model_file(params.tokenizer.out_dir))
    export_ctranslate2(loaded.model, loaded.tokenizer, args.out)
    split = load_corpus(params.download.out_dir)[args.split]
    en, refs = list(split["en"]), list(split["de"])
    ours, seconds = timed_result(lambda: translate(loaded.model, loaded.tokenizer, en, cfg))
    rows = {"ours": (ours, seconds)}
    for compute_type in ("float32", "int8"):
        engine = load_ct2(args.out, compute_type, threads)
        rows[f"ct2_{compute_type}"] = timed_result(
            lambda e=engine: ct2_translate(e, loaded.tokenizer, en, cfg)
        )
    figures = {}
    for name, (hyps, secs) in rows.items():
        same = sum(h == o for h, o in zip(hyps, ours, strict=True)) / len(ours)
        figures[name] = {
            "sent_s": round(len(en) / secs, 1),
            "bleu": round(score(hyps, refs)["bleu"], 2),
            "same_as_ours": round(same, 4),
        }
        print(f"{name:12s} {figures[name]}")
    figures = {
        "split": args.split,
        "beam_size": cfg.beam_size,
        "length_penalty": cfg.length_penalty,
        "threads": threads,
        **figures,
    }
    command = command_line("bench.ct2_check", sys.argv[1:])
    record("reports", "ct2_check", command, {"ct2": figures}, torch.device("cpu"))


if __name__ == "__main__":
    run_main(main)
