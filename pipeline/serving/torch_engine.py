"""The PyTorch engine (`TorchEngine`): batched translation of sentences with our Transformer (encode,
sort longest first, decode in batches with greedy or beam search, detokenise, in the input order)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm

from pipeline.core.config import SearchConfig
from pipeline.data.batching import longest_first, pad
from pipeline.data.tokenizer import Tokenizer
from pipeline.model.beam import Hypothesis, beam_search_n_best, check_n_best, decode_batch
from pipeline.model.ensemble import Ensemble
from pipeline.model.transformer import Transformer


def decode_sentences(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    sentences: list[str],
    cfg: SearchConfig,
    decode: Callable[[Tensor], list],
    *,
    progress: bool = False,
) -> list:
    """Run `decode` (src `[B, S]` -> one result per row) over raw sentences; results in input order.

    `cfg.batch_size` sentences at a time, longest first; None for blank inputs (the model does not see
    them). Sources are pieces + eos, as in training, on the CPU."""
    ids = tokenizer.encode_batch(list(sentences))
    todo = [i for i, text in enumerate(sentences) if text.strip()]
    outputs: list = [None] * len(sentences)
    chunks = list(longest_first(todo, [len(x) for x in ids], cfg.batch_size))
    for chunk in tqdm(chunks, desc="decode", unit="batch", disable=not progress):
        src = pad([ids[i] + [tokenizer.eos_id] for i in chunk], model.pad_id)
        for i, result in zip(chunk, decode(src), strict=True):
            outputs[i] = result
    return outputs


def translate(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    sentences: list[str],
    cfg: SearchConfig,
    *,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> list[str]:
    """Translate raw sentences; returns detokenised outputs in the input order.

    Sentences are encoded (source = pieces + eos, as in training), sorted longest first, decoded
    `cfg.batch_size` at a time on `device` (the model is moved there and set to eval mode), and
    detokenised with `tokenizer.decode`. Empty or whitespace-only inputs give "" without running
    the model. `progress` shows a tqdm bar over batches.
    """
    model.eval().to(device)
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    with torch.inference_mode():
        hyps = decode_sentences(
            model,
            tokenizer,
            sentences,
            cfg,
            lambda src: decode_batch(model, src.to(device), bos, eos, cfg),
            progress=progress,
        )
    return ["" if h is None else tokenizer.decode(h) for h in hyps]


def translate_n_best(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    sentences: list[str],
    cfg: SearchConfig,
    *,
    n_best: int,
    device: str | torch.device = "cpu",
) -> list[list[tuple[str, float]]]:
    """The `n_best` best translations of each sentence, best first, by beam search with `cfg`.

    As (detokenised text, length-normalised log-prob) pairs; beam 1 included, batched as `translate`
    does. Blank inputs give an empty list.

    Raises:
        ValueError: `n_best` outside 1..cfg.beam_size.
    """
    check_n_best(n_best, cfg.beam_size)  # before any encoding
    model.eval().to(device)
    bos, eos = tokenizer.bos_id, tokenizer.eos_id

    def decode(src: Tensor) -> list[list[Hypothesis]]:
        return beam_search_n_best(model, src.to(device), bos, eos, cfg, n_best=n_best)

    results = decode_sentences(model, tokenizer, sentences, cfg, decode)
    return [[] if r is None else [(tokenizer.decode(h.tokens), h.score) for h in r] for r in results]


@dataclass
class TorchEngine:
    """Our Transformer (eval mode, on `device`) and its tokenizer, as an `Engine`."""

    model: Transformer | Ensemble
    tokenizer: Tokenizer
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.model.eval().to(self.device)

    def translate(self, texts: list[str], cfg: SearchConfig, progress: bool = False) -> list[str]:
        return translate(self.model, self.tokenizer, texts, cfg, device=self.device, progress=progress)

    def n_best(self, texts: list[str], cfg: SearchConfig, n: int) -> list[list[tuple[str, float]]]:
        return translate_n_best(self.model, self.tokenizer, texts, cfg, n_best=n, device=self.device)
