"""Decoding speed: naive greedy vs our batched greedy and beam search with the KV cache.

How it measures and what it writes: docs/benchmarks.md, `bench.decode_speed`.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial

import torch

from bench.common import (
    base_parser,
    decode_model,
    load_inputs,
    model_config,
    parse_override,
    race,
    report,
    sig,
)
from pipeline.core.config import DecodeConfig
from pipeline.core.device import pick_device
from pipeline.core.errors import run_main
from pipeline.data.batching import batches
from pipeline.data.tokenizer import Tokenizer
from pipeline.model.greedy import max_lengths
from pipeline.model.transformer import Transformer
from pipeline.serving.ct2 import ct2_translate, export_ctranslate2, load_ct2
from pipeline.serving.torch_engine import translate

Method = Callable[[list[str]], list[str]]


@torch.inference_mode()
def naive_greedy(model: Transformer, src: torch.Tensor, bos_id: int, eos_id: int, limit: int) -> list[int]:
    """Greedy for one sentence src `[1, S]`, recomputing the decoder over the prefix each step.
    Returns at most `limit` ids (eos excluded). Like our search, it never emits pad or bos."""
    memory, prefix = model.encode(src), [bos_id]
    for _ in range(limit):
        tgt_in = torch.tensor([prefix], device=src.device)
        logits = model.decode(tgt_in, memory, src)[0, -1]
        logits[[model.pad_id, bos_id]] = -torch.inf
        token = int(logits.argmax())
        if token == eos_id:
            break
        prefix.append(token)
    return prefix[1:]


def naive_translate(model: Transformer, tok: Tokenizer, sentences: list[str], cfg: DecodeConfig) -> list[str]:
    """Translate one sentence at a time with `naive_greedy` (same length limit as our search)."""
    model.eval()
    device, out = next(model.parameters()).device, []
    for text in sentences:
        src = torch.tensor([tok.encode(text) + [tok.eos_id]], device=device)
        limit = int(max_lengths(src, model.pad_id, cfg.max_len_a, cfg.max_len_b)[0])
        out.append(
            tok.decode(naive_greedy(model, src, tok.bos_id, tok.eos_id, limit)) if text.strip() else ""
        )
    return out


def methods(
    model: Transformer, tok: Tokenizer, cfg: DecodeConfig, device: torch.device, ct2_dir: str | None
) -> dict[str, Method]:
    """The methods to race; CTranslate2 ones when `ct2_dir` (where to export) is given."""
    model.eval().to(device)
    greedy_cfg, beam_cfg = cfg.model_copy(update={"beam_size": 1}), cfg.model_copy(update={"beam_size": 5})
    fns = {
        "naive_greedy": lambda texts: naive_translate(model, tok, texts, cfg),
        "greedy_cached": lambda texts: translate(model, tok, texts, greedy_cfg, device=device),
        "beam5": lambda texts: translate(model, tok, texts, beam_cfg, device=device),
    }
    if ct2_dir is not None:
        path = export_ctranslate2(model.cpu(), tok, ct2_dir)
        model.to(device)
        for name, compute_type in (("ct2_fp32_beam5", "float32"), ("ct2_int8_beam5", "int8")):
            translator = load_ct2(path, compute_type, torch.get_num_threads())
            fns[name] = lambda texts, t=translator: ct2_translate(t, tok, texts, beam_cfg)
    return fns


def race_methods(fns: dict[str, Method], chunks: list[list[str]], device: torch.device) -> tuple[dict, dict]:
    """Each method on each chunk in turns (`common.race`), after one untimed chunk of two sentences.
    Returns (summed seconds, outputs) per method."""
    lanes = {name: [partial(fn, chunk) for chunk in [chunks[0][:2], *chunks]] for name, fn in fns.items()}
    done = {name: steps[1:] for name, steps in race(lanes, device).items()}
    seconds = {name: sum(s for _, s in steps) for name, steps in done.items()}
    return seconds, {name: [line for out, _ in steps for line in out] for name, steps in done.items()}


def detail_rows(seconds: dict, outputs: dict, n: int, note: str) -> list[dict]:
    """One row per method; `same_as` the share of outputs equal to its reference method's."""
    reference = {"greedy_cached": "naive_greedy", "ct2_fp32_beam5": "beam5", "ct2_int8_beam5": "beam5"}
    naive_s = n / seconds["naive_greedy"]
    rows = []
    for name, s in seconds.items():
        row = {"method": name, "sentences": n, "seconds": sig(s), "sent_s": sig(n / s)}
        row |= {"vs_naive": sig(n / s / naive_s), "model": note}
        if name in reference:
            same = sum(a == b for a, b in zip(outputs[reference[name]], outputs[name], strict=True))
            row |= {"same_as": reference[name], "same_share": sig(same / n)}
        rows.append(row)
    return rows


def run(
    model: Transformer,
    note: str,
    *,
    tok: Tokenizer,
    sentences: list[str],
    cfg: DecodeConfig,
    device,
    ct2: bool,
) -> dict:
    """Time the methods on `sentences`; returns the figures for bench.json."""
    ids = tok.encode_batch(sentences)
    order = sorted(range(len(sentences)), key=lambda i: (-len(ids[i]), i))
    chunks = [[sentences[i] for i in chunk] for chunk in batches(order, cfg.batch_size)]
    with tempfile.TemporaryDirectory(prefix="ct2.") as tmp:
        fns = methods(model, tok, cfg, device, f"{tmp}/model" if ct2 else None)
        seconds, outputs = race_methods(fns, chunks, device)
    sent_s = {name: len(sentences) / s for name, s in seconds.items()}
    figures = {
        "naive_greedy_sent_s": sig(sent_s["naive_greedy"]),
        "greedy_cached_sent_s": sig(sent_s["greedy_cached"]),
        "beam5_sent_s": sig(sent_s["beam5"]),
        "greedy_cached_vs_naive": sig(sent_s["greedy_cached"] / sent_s["naive_greedy"]),
        "beam5_cached_vs_naive": sig(sent_s["beam5"] / sent_s["naive_greedy"]),
    }
    for kind in ("fp32", "int8") if ct2 else ():
        theirs = sent_s[f"ct2_{kind}_beam5"]
        figures |= {
            f"ct2_{kind}_beam5_sent_s": sig(theirs),
            f"beam5_vs_ct2_{kind}": sig(sent_s["beam5"] / theirs),
        }
    return figures | {"decode_detail": detail_rows(seconds, outputs, len(sentences), note)}


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("Decoding speed: naive greedy vs cached greedy and beam 5 vs CTranslate2.", decodes=True)
    p.add_argument("--no-ct2", action="store_true", help="leave out the CTranslate2 methods")
    args = p.parse_args(argv)
    params, tok, corpus = load_inputs(args.params)
    torch.set_flush_denormal(True)
    device = pick_device("auto")
    cfg = model_config(params.train.model, **parse_override(args.model_override))
    model, note = decode_model(args.checkpoint or params.train.model_file, cfg, tok)
    print(f"decode_speed: {note}")
    sentences = corpus["test_2016_flickr"]["en"][: args.sentences]
    figures = run(
        model, note, tok=tok, sentences=sentences, cfg=params.decode, device=device, ct2=not args.no_ct2
    )
    report("bench.decode_speed", argv, args.out_dir, figures, device)
    return figures


if __name__ == "__main__":
    run_main(main)
