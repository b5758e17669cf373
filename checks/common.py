"""What the checks on the trained model share: the model, a split, and the figures of a translation."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import datasets

from pipeline.core.config import Params
from pipeline.core.metrics import score
from pipeline.core.params_file import load_params
from pipeline.data.multi30k import load_corpus
from pipeline.data.tokenizer import model_file
from pipeline.serving.torch_engine import TorchEngine
from pipeline.serving.translator import load_translator


@dataclass
class Trained:
    """The trained model (`train.model_file`) and a split's English and German references."""

    params: Params
    engine: TorchEngine
    en: list[str]
    refs: list[str]


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--split", default="test_2016_flickr", help="the Multi30k split translated")
    return p


def trained(split: str) -> Trained:
    """The trained model of params.yaml and `split` of its corpus."""
    datasets.disable_progress_bars()
    params = load_params()
    engine = load_translator(Path(params.train.model_file), model_file(params.tokenizer.out_dir))
    corpus = load_corpus(params.download.out_dir)[split]
    return Trained(params, engine, list(corpus["en"]), list(corpus["de"]))


def speed_and_bleu(hyps: list[str], seconds: float, refs: list[str]) -> dict:
    """Sentences/s and cased sacreBLEU of `hyps`, translated in `seconds`."""
    return {"sent_s": round(len(hyps) / seconds, 1), "bleu": round(score(hyps, refs)["bleu"], 2)}
