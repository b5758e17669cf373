"""The BLEU cost of the name rule on a split (val by default): the sentences it changes, decoded with
and without it, side by side in one run.

How it measures and what it writes: docs/benchmarks.md, `bench.name_rule`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from bench.common import command_line, record
from pipeline.core.config import load_params
from pipeline.core.errors import run_main
from pipeline.core.metrics import score
from pipeline.data.multi30k import load_corpus
from pipeline.data.tokenizer import WORD_RE, model_file
from pipeline.data.translations import translation_path
from pipeline.serving.spans import find_spans
from pipeline.serving.translator import load_translator, translate_lines, unseen_name


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", help="the model (default: train.model_file)")
    p.add_argument("--spm", help="the SentencePiece model (default: the tokenizer stage's)")
    p.add_argument("--hyps", default=None, help="the split's translations (default: the decode stage's)")
    p.add_argument("--train-en", default=None, help="English training sentences, one per line")
    p.add_argument("--split", default="val")
    args = p.parse_args(argv)
    params = load_params()
    split = load_corpus(params.download.out_dir)[args.split]
    en, refs = list(split["en"]), list(split[params.download.tgt_lang])
    tgt = params.download.tgt_lang
    hyps_path = args.hyps or translation_path(Path(params.decode.translations_dir), args.split, tgt)
    hyps = Path(hyps_path).read_text(encoding="utf-8").splitlines()
    spm = args.spm or model_file(params.tokenizer.out_dir)
    engine = load_translator(args.checkpoint or params.train.model_file, spm)
    if args.train_en:
        lines = Path(args.train_en).read_text(encoding="utf-8").splitlines()
        engine.tokenizer.source_words = frozenset(w.lower() for s in lines for w in WORD_RE.findall(s))
    rule = unseen_name(engine.tokenizer)
    if rule is None:
        raise SystemExit(f"error: no source_words.txt beside {args.spm}: give --train-en")
    hit = [i for i, s in enumerate(en) if any(w.text[:1].isalpha() for w in find_spans(s, is_name=rule))]
    on = translate_lines(engine, [en[i] for i in hit], params.decode)
    words, engine.tokenizer.source_words = engine.tokenizer.source_words, None
    off = translate_lines(engine, [en[i] for i in hit], params.decode)
    engine.tokenizer.source_words = words
    full_off, full_on = list(hyps), list(hyps)
    for k, i in enumerate(hit):
        full_off[i], full_on[i] = off[k], on[k]
    touched = [refs[i] for i in hit]
    figures = {
        "split": args.split,
        "sentences_changed": len(hit),
        "sentences": len(en),
        "bleu_changed_without": round(score(off, touched)["bleu"], 2),
        "bleu_changed_with": round(score(on, touched)["bleu"], 2),
        "bleu_split_without": round(score(full_off, refs)["bleu"], 2),
        "bleu_split_with": round(score(full_on, refs)["bleu"], 2),
    }
    for name, value in figures.items():
        print(f"{name:22s} {value}")
    command = command_line("bench.name_rule", sys.argv[1:] if argv is None else argv)
    record("reports", "name_rule", command, {"name_rule": figures}, torch.device("cpu"))


if __name__ == "__main__":
    run_main(main)
