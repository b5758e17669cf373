"""The benchmarks (bench/), each command run as a user runs it (`python -m bench.<name>`) on a
tiny corpus, tokenizer and model: every key in bench.json, the baselines computing our function,
one report merged from every run. And the FLOP count's weights are the model's. No timing
assertions."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch
from datasets import Dataset, DatasetDict
from from_params import from_params, write_changed_params

from bench.common import race
from pipeline.core.config import ModelConfig, TokenizerConfig
from pipeline.data.multi30k import save_dataset_dict
from pipeline.data.tokenizer import train_tokenizer
from pipeline.model.flops import matmul_weights, train_step_flops
from pipeline.model.transformer import Transformer

REPO = Path(__file__).resolve().parents[1]

MIRROR = Path(os.environ.get("MULTI30K_MIRROR", REPO.parent / "shared" / "multi30k"))
SAMPLE = [  # used when the mirror is absent
    ("A man in an orange hat looks at something.", "Ein Mann mit einem orangefarbenen Hut schaut etwas an."),
    ("Two young girls play in the street.", "Zwei junge Mädchen spielen auf der Straße."),
    ("A boy jumps into the water.", "Ein Junge springt ins Wasser."),
    ("A dog runs across the green grass with a ball.", "Ein Hund rennt mit einem Ball über das grüne Gras."),
]
TINY = "d_model=32,n_heads=2,n_layers=1,d_ff=64"
NO_COMPILE = (  # runs a bench module with torch.compile replaced by the identity: compiling takes minutes
    "import runpy, sys, torch\n"
    "torch.compile = lambda module, **kwargs: module\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
)


def pairs(n: int = 300) -> list[tuple[str, str]]:
    """The first n val pairs from the mirror, or the sample repeated."""
    if not (MIRROR / "val.en.gz").is_file():
        return (SAMPLE * n)[:n]
    sides = []
    for lang in ("en", "de"):
        with gzip.open(MIRROR / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            sides.append(f.read().splitlines()[:n])
    return list(zip(*sides, strict=True))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny corpus, SentencePiece model and params.yaml; reports go to <workspace>/reports."""
    root = tmp_path_factory.mktemp("bench")
    data = pairs()
    split = Dataset.from_dict({"en": [e for e, _ in data], "de": [d for _, d in data]})
    save_dataset_dict(DatasetDict(train=split, test_2016_flickr=split.select(range(6))), root / "corpus")
    train_tokenizer(
        [s for p in data for s in p], root / "spm", from_params(TokenizerConfig, vocab_size=300, out_dir="x")
    )
    params = {
        "download": {"out_dir": str(root / "corpus")},
        "tokenizer": {"out_dir": str(root / "spm")},
        "train": {"optim": {"max_tokens": 300}},
        "decode": {"batch_size": 4},
    }
    write_changed_params(root / "params.yaml", params)
    return root


def common_args(root: Path, out: str = "reports") -> list[str]:
    return ["--params", str(root / "params.yaml"), "--out-dir", str(root / out), "--model-override", TINY]


def bench(module: str, *args: str, ok: bool = True, no_compile: bool = False) -> subprocess.CompletedProcess:
    """`python -m <module> ARGS` in the repository root; with `ok`, its exit status must be 0."""
    launch = ["-c", NO_COMPILE] if no_compile else ["-m"]
    done = subprocess.run(
        [sys.executable, *launch, module, *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert not ok or done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def reports(workspace: Path) -> dict:
    """bench.json after train_speed, decode_speed and memory ran into one folder."""
    none = str(workspace / "none.pt")
    args = ["--configs", "tiny,default", "--steps", "2", "--untimed-steps", "1", "--peak-size", "128"]
    bench("bench.train_speed", *common_args(workspace), *args, "--other-precision", "on")
    bench("bench.decode_speed", *common_args(workspace), "--sentences", "6", "--checkpoint", none)
    args = ["--steps", "2", "--sentences", "4", "--checkpoint", none]
    bench("bench.memory", *common_args(workspace), *args)
    return json.loads((workspace / "reports" / "bench.json").read_text())


def assert_positive(data: dict, keys: list[str]) -> None:
    for key in keys:
        assert isinstance(data[key], float) and data[key] > 0, (key, data.get(key))


def assert_same_function(rows: list[dict]) -> None:
    """Every model's logit gap to ours is float noise (a compiled model's is not measured)."""
    for row in rows:
        gap = row["logit_gap"]
        assert 0 <= gap < 1e-4 if gap is not None else row["model"] == "ours_compiled", row


def test_train_speed_writes_its_keys(reports: dict) -> None:
    keys = ["train_tok_s", "train_vs_nn_transformer", "train_vs_naive", "bf16_vs_fp32", "mfu"]
    assert_positive(reports, keys + ["peak_gflops", "achieved_gflops"])
    assert reports["peak_dtype"] in ("bf16", "fp32")
    models = [row["model"] for row in reports["train_detail"]]
    assert len(models) == 10 and models[:3] == ["ours", "nn_transformer", "naive"]
    assert models[4] == "ours_all_positions"
    assert reports["train_detail"][0]["config"].startswith("tiny ")
    assert all(row["tok_s"] > 0 and row["ms_per_step"] > 0 for row in reports["train_detail"])
    assert_same_function(reports["train_detail"])  # post-norm, tied embeddings


def test_train_speed_other_precision_off_and_compile(workspace: Path) -> None:
    """Without the other precision bf16_vs_fp32 is None; `--compile` adds a compiled runner to the
    headline config only (torch.compile is the identity here: compiling takes minutes). The
    baselines are pre-norm with untied embeddings here, and compute our function still."""
    args = ["--configs", "tiny,default", "--steps", "2", "--untimed-steps", "1", "--peak-size", "64"]
    override = ["--model-override", f"{TINY},pre_norm=true,tie_embeddings=false"]
    lanes = ["--other-precision", "off", "--compile"]
    bench("bench.train_speed", *common_args(workspace, "levers"), *override, *args, *lanes, no_compile=True)
    data = json.loads((workspace / "levers" / "bench.json").read_text())
    assert data["bf16_vs_fp32"] is None
    rows = [(row["config"].split()[0], row["model"]) for row in data["train_detail"]]
    assert [m for c, m in rows if c == "tiny"] == ["ours", "nn_transformer", "naive", "ours_all_positions"]
    assert [m for c, m in rows if c == "default"][-1] == "ours_compiled"
    assert data["compiled_vs_eager"] > 0 and data["compile_s"] is not None
    if data["peak_dtype"] == "fp32":
        assert data["bf16_peak_gflops"] > 0
    assert_same_function(data["train_detail"])


def test_a_benchmark_reports_a_missing_input_in_one_line(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    write_changed_params(params, {"tokenizer": {"out_dir": str(tmp_path / "no_spm")}})
    out = bench("bench.train_speed", "--params", str(params), ok=False)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'no_spm' / 'spm.model'}: SentencePiece model not found (run the tokenizer stage)"
    ]


def test_decode_speed_writes_its_keys(reports: dict) -> None:
    keys = ["naive_greedy_sent_s", "greedy_cached_sent_s", "beam5_sent_s", "ct2_fp32_beam5_sent_s"]
    assert_positive(reports, keys + ["greedy_cached_vs_naive", "beam5_cached_vs_naive", "beam5_vs_ct2_int8"])
    rows = {row["method"]: row for row in reports["decode_detail"]}
    assert "random weights" in rows["naive_greedy"]["model"]
    assert rows["greedy_cached"]["same_share"] > 0.5  # same model, same greedy rule
    assert rows["ct2_fp32_beam5"]["same_as"] == "beam5" and 0 <= rows["ct2_int8_beam5"]["same_share"] <= 1


def test_memory_writes_its_keys(reports: dict) -> None:
    assert_positive(reports, ["train_peak_rss_mb", "decode_peak_rss_mb"])
    floor = {r["process"]: r["peak_rss_mb"] for r in reports["memory_detail"]}["floor"]
    assert 0 < floor <= reports["train_peak_rss_mb"]


def test_every_run_merges_into_one_report(workspace: Path, reports: dict) -> None:
    """bench.json keeps each command's figures and run; bench.md is regenerated from all of them."""
    runs = reports["runs"]
    assert list(runs) == ["train_speed", "decode_speed", "memory"]
    assert runs["memory"]["command"].startswith("python -m bench.memory --params ")
    assert all(run["cpu"] and run["cores"] > 0 for run in runs.values())
    assert {"train_tok_s", "beam5_sent_s", "train_peak_rss_mb"} <= set(reports)
    md = (workspace / "reports" / "bench.md").read_text()
    assert f"`{runs['memory']['command']}`" in md and re.search(r"^\| train_tok_s +\| ", md, re.M)
    assert all(f"## {key}" in md for key in ("train_detail", "decode_detail", "memory_detail"))


def test_the_race_runs_step_i_of_every_lane_before_step_i_plus_1_in_rotating_order() -> None:
    order: list[str] = []
    lanes = {name: [partial(order.append, f"{name}{i}") for i in range(3)] for name in "abc"}
    done = race(lanes, torch.device("cpu"))
    assert order == ["a0", "b0", "c0", "b1", "c1", "a1", "c2", "a2", "b2"]
    assert all(len(steps) == 3 and all(s >= 0 for _, s in steps) for steps in done.values())


def test_flop_count_weights_are_the_models_linear_weights() -> None:
    cfg = from_params(ModelConfig, d_model=24, n_heads=2, n_layers=3, d_ff=40)
    model = Transformer(cfg, vocab_size=50, pad_id=0)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert sum(matmul_weights(cfg)) == linear
    per_src, per_tgt = matmul_weights(cfg)
    one = 6 * (per_src * 3 + (per_tgt + 24 * 50) * 2) + 12 * 24 * 3 * (9 + 4 + 6)
    assert train_step_flops(cfg, 50, [3], [2]) == one
