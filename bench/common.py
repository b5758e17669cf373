"""The harness every benchmark runs on: inputs, the timed race, the report.

The report is two files in `--out-dir` (default `reports`): `bench.json`, into which every
command merges its figures (read, update, atomic write), and `bench.md`, regenerated from it
each time: the command lines run with their machines, the headline figures, the detail tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import torch
import yaml
from datasets import DatasetDict

from pipeline.core.config import ModelConfig, Params
from pipeline.core.device import cpu_name
from pipeline.core.errors import ConfigError
from pipeline.core.io import write_json, write_text
from pipeline.core.params_file import FieldError, load_params, with_updates
from pipeline.core.tables import markdown_table
from pipeline.data.batching import Pair
from pipeline.data.multi30k import load_corpus
from pipeline.data.tokenizer import Tokenizer, model_file
from pipeline.model.transformer import Transformer
from pipeline.training.checkpoint import load_model
from pipeline.training.validation import encode_pairs

TUTORIAL_DIMS = {"d_model": 256, "n_heads": 4, "n_layers": 3, "d_ff": 512}  # the tutorial's "tiny"
WU_TINY = {"d_model": 128, "n_heads": 4, "n_layers": 4, "d_ff": 256}  # Wu et al.'s tiny (4+4 layers)
CPU = torch.device("cpu")
T = TypeVar("T")
HEADER = (  # bench.md's first line
    "Written by `python -m bench.<name>` and `python -m checks.<name>`; how they measure: "
    "docs/benchmarks.md and docs/checks.md."
)

HEADLINE = {  # key -> meaning, in the order bench.md lists them
    "train_tok_s": "ours, default config: target tokens/s of a training step (fwd + bwd + Adam)",
    "train_vs_nn_transformer": "ours / torch.nn.Transformer baseline, training speed (default config)",
    "train_vs_naive": "ours / naive tutorial-style baseline, training speed (default config)",
    "bf16_vs_fp32": "ours under bf16 autocast / ours in fp32, training speed (default config)",
    "mfu": "model FLOPs utilization of our training step: achieved_gflops / peak_gflops",
    "achieved_gflops": "matmul GFLOP/s of our training step (pipeline/model/flops.py formula)",
    "peak_gflops": "this machine's matmul peak in peak_dtype (best of several square matmuls)",
    "peak_dtype": "the dtype our training step's matmuls run in (the trainer's precision)",
    "bf16_peak_gflops": "this machine's bf16 matmul peak, when the trainer runs fp32 (why auto chose fp32)",
    "per_token_speedup": "target tokens/s at the larger max_tokens / at the smaller (a settled experiment)",
    "compiled_vs_eager": "ours under torch.compile / ours eager, training speed after compilation",
    "compile_s": "seconds torch.compile added to its first training step (default config)",
    "naive_greedy_sent_s": "sentences/s, greedy re-running the whole decoder per step, 1 sentence at a time",
    "greedy_cached_sent_s": "sentences/s, our batched greedy with the KV cache",
    "beam5_sent_s": "sentences/s, our batched beam search (beam 5) with the KV cache",
    "greedy_cached_vs_naive": "greedy_cached_sent_s / naive_greedy_sent_s",
    "beam5_cached_vs_naive": "beam5_sent_s / naive_greedy_sent_s",
    "ct2_fp32_beam5_sent_s": "sentences/s, the same model exported to CTranslate2, fp32, beam 5",
    "ct2_int8_beam5_sent_s": "sentences/s, the same model exported to CTranslate2, int8, beam 5",
    "beam5_vs_ct2_fp32": "beam5_sent_s / ct2_fp32_beam5_sent_s (our beam 5 as a fraction of CTranslate2's)",
    "beam5_vs_ct2_int8": "beam5_sent_s / ct2_int8_beam5_sent_s",
    "train_peak_rss_mb": "peak RSS (MB) of a process running our training steps (default config)",
    "decode_peak_rss_mb": "peak RSS (MB) of a process running beam-5 decoding",
    "shared_cpu_busy_vs_alone_all_cores": "training tok/s beside one busy process / alone, one thread per core (a settled experiment)",
    "shared_cpu_busy_vs_alone_for_load": "the same with threads chosen for the load (pipeline.training.threads)",
}


# ---- inputs --------------------------------------------------------------------------


def base_parser(description: str, *, decodes: bool = False) -> argparse.ArgumentParser:
    """Options every benchmark takes; with `decodes`, those of one that decodes the test split."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--params", default="params.yaml", help="the pipeline's params file")
    p.add_argument("--out-dir", default="reports", help="where bench.json and bench.md live")
    p.add_argument(
        "--model-override",
        default="",
        help="ModelConfig fields over every config, e.g. d_model=32,n_heads=2 (tests)",
    )
    if decodes:
        p.add_argument(
            "--sentences", type=int, default=None, help="first N of test_2016_flickr (default all)"
        )
        p.add_argument("--checkpoint", help="trained model (default: train.model_file; random if missing)")
    return p


def parse_override(text: str) -> dict:
    """`"d_model=32,dropout=0.0"` -> `{"d_model": 32, "dropout": 0.0}` (YAML scalars)."""
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    if any(len(p) != 2 for p in pairs):
        raise ConfigError(f"--model-override: expected key=value[,key=value], got {text!r}")
    return {k.strip(): yaml.safe_load(v) for k, v in pairs}


def model_config(base: ModelConfig, **fields) -> ModelConfig:
    """`base` with `fields` replaced, validated (an unknown field is an error)."""
    try:
        return with_updates(base, fields)
    except FieldError as err:
        raise ConfigError(f"model config: {err}") from None


def named_configs(params: Params, names: Sequence[str], override: dict) -> dict[str, ModelConfig]:
    """'tiny' (the tutorial's sizes), 'wu_tiny' (Wu et al.'s 4+4 layers, D128, d_ff 256) and/or
    'default' (params `train.model`), each with `override`."""
    known = {"tiny": TUTORIAL_DIMS, "wu_tiny": WU_TINY, "default": {}}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--configs: unknown {unknown}; choose from {sorted(known)}")
    return {n: model_config(params.train.model, **{**known[n], **override}) for n in names}


def load_inputs(params_path: str) -> tuple[Params, Tokenizer, DatasetDict]:
    """The params, the pipeline's SentencePiece model and the Multi30k corpus."""
    params = load_params(params_path)
    tok = Tokenizer.load(model_file(params.tokenizer.out_dir))
    return params, tok, load_corpus(params.download.out_dir)


def train_pairs(params: Params, tok: Tokenizer, corpus: DatasetDict) -> list[Pair]:
    """The training pairs as the train stage encodes them (over `train.max_len` pieces dropped)."""
    return encode_pairs(tok, corpus["train"]["en"], corpus["train"]["de"], params.train.max_len)


def decode_model(path: str, cfg: ModelConfig, tok: Tokenizer) -> tuple[Transformer, str]:
    """The trained model at `path` or, when there is none, a seeded random model of `cfg`
    (decoding speed then still means something, translations do not). Returns (model, note)."""
    if Path(path).is_file():
        return load_model(path, vocab_size=tok.vocab_size)[0], f"trained model {path}"
    torch.manual_seed(0)
    model = Transformer(cfg, tok.vocab_size, tok.pad_id).eval()
    return model, f"random weights: {path} not found"


# ---- timing --------------------------------------------------------------------------


def timed_result(fn: Callable[[], T], device: torch.device = CPU) -> tuple[T, float]:
    """(fn's result, wall seconds of `fn()`, CUDA work included)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start


def race(
    lanes: dict[str, Sequence[Callable[[], T]]], device: torch.device
) -> dict[str, list[tuple[T, float]]]:
    """Each lane's steps in turns: step i of every lane runs before step i + 1 of any, the lanes'
    order rotating each step, so machine noise hits all alike (lanes of equal length).

    Returns each lane's (result, seconds) per step; the caller leaves its untimed steps out.
    """
    names = list(lanes)
    done: dict[str, list[tuple[T, float]]] = {name: [] for name in names}
    for i in range(len(lanes[names[0]])):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            done[name].append(timed_result(lanes[name][i], device))
    return done


def sig(x: float, digits: int = 4) -> float:
    """Round to `digits` significant digits: benchmark figures carry no more."""
    return float(f"{x:.{digits}g}")


# ---- report --------------------------------------------------------------------------


def machine(device: torch.device) -> dict:
    """Where a benchmark ran."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    return {
        "processor": platform.processor() or platform.machine(),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": name,
    }


def record(out_dir: str | Path, name: str, command: str, figures: dict, device: torch.device) -> dict:
    """Merge `figures` into `<out_dir>/bench.json` (atomically), note the run, rewrite bench.md."""
    path = Path(out_dir) / "bench.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    runs = data.pop("runs", {})
    runs[name] = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M"), **machine(device)}
    data = {**data, **figures, "runs": runs}
    write_json(path, data)
    write_text(Path(out_dir) / "bench.md", markdown(data))
    return data


def report(
    module: str, argv: Sequence[str], out_dir: str | Path, figures: dict, device: torch.device
) -> dict:
    """Print `figures` and `record` them as the run of `module` (`bench.<name>` or
    `checks.<name>`), under its last name."""
    show(figures)
    command = " ".join(["python -m", module, shlex.join(argv)]).strip()
    return record(out_dir, module.rsplit(".", 1)[-1], command, figures, device)


def show(figures: dict, indent: str = "") -> None:
    """Print figures one a line, detail rows as a table, a nested dict indented."""
    for key, value in figures.items():
        if isinstance(value, list):
            print(f"{indent}{key}:", *table(value), sep="\n")
        elif isinstance(value, dict):
            print(f"{indent}{key}:")
            show(value, indent + "  ")
        else:
            print(f"{indent}{key:30s} {value}")


def fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return "–" if value is None else str(value)


def table(rows: list[dict]) -> list[str]:
    """The lines of a Markdown table of dict rows (columns: the union of their keys, first-seen
    order), values written by `fmt`; no lines for no rows."""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    return markdown_table([{c: fmt(r.get(c)) for c in cols} for r in rows], cols).splitlines()


def markdown(data: dict) -> str:
    """bench.md: runs, headline figures, then each `*_detail` table."""
    runs = [{"benchmark": k, **v, "command": f"`{v['command']}`"} for k, v in data.get("runs", {}).items()]
    lines = ["# Benchmarks", "", HEADER, "", "## Runs", "", *table(runs), "", "## Figures", ""]
    lines += table([{"key": k, "value": data[k], "meaning": m} for k, m in HEADLINE.items() if k in data])
    for key, rows in data.items():
        if key.endswith("_detail") and rows:
            lines += ["", f"## {key}", "", *table(rows)]
    return "\n".join(lines) + "\n"


@torch.no_grad()
def copy_embeddings(dst: torch.nn.Module, ours: Transformer) -> None:
    """Copy our embeddings (and untied output projection) into a baseline with the same attribute names."""
    dst.src_embed.weight.copy_(ours.src_embed.weight)
    dst.tgt_embed.weight.copy_(ours.tgt_embed.weight)
    if ours.out_proj is not None:
        dst.out_proj.weight.copy_(ours.out_proj.weight)
