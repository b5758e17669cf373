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
from pathlib import Path

import pytest
import torch
from datasets import Dataset, DatasetDict
from from_params import from_params, write_changed_params

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
    """bench.json after train_speed, batch_tokens, decode_speed and memory ran into one folder."""
    none = str(workspace / "none.pt")
    args = ["--configs", "tiny,default", "--steps", "2", "--warmup", "1", "--peak-size", "128"]
    bench("bench.train_speed", *common_args(workspace), *args, "--other-precision", "on")
    args = ["--max-tokens", "200,400", "--steps", "2", "--warmup", "1", "--peak-size", "128"]
    bench("bench.batch_tokens", *common_args(workspace), *args)
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


def test_train_speed_levers_other_precision_off_and_compile(workspace: Path) -> None:
    """Without the other precision bf16_vs_fp32 is None; `--compile` adds a compiled runner to the
    headline config only (torch.compile is the identity here: compiling takes minutes). The
    baselines are pre-norm with untied embeddings here, and compute our function still."""
    args = ["--configs", "tiny,default", "--steps", "2", "--warmup", "1", "--peak-size", "64"]
    override = ["--model-override", f"{TINY},pre_norm=true,tie_embeddings=false"]
    levers = ["--other-precision", "off", "--compile"]
    bench("bench.train_speed", *common_args(workspace, "levers"), *override, *args, *levers, no_compile=True)
    data = json.loads((workspace / "levers" / "bench.json").read_text())
    assert data["bf16_vs_fp32"] is None
    rows = [(row["config"].split()[0], row["model"]) for row in data["train_detail"]]
    assert [m for c, m in rows if c == "tiny"] == ["ours", "nn_transformer", "naive", "ours_all_positions"]
    assert [m for c, m in rows if c == "default"][-1] == "ours_compiled"
    assert data["compiled_vs_eager"] > 0 and data["compile_s"] is not None
    if data["peak_dtype"] == "fp32":
        assert data["bf16_peak_gflops"] > 0
    assert_same_function(data["train_detail"])


def test_batch_tokens_compares_two_sizes(reports: dict) -> None:
    assert_positive(reports, ["per_token_speedup"])
    small, large = reports["batch_tokens_detail"]
    assert (small["max_tokens"], large["max_tokens"]) == (200, 400)
    assert small["tgt_tokens_per_step"] < large["tgt_tokens_per_step"] <= 400
    assert all(row["tok_s"] > 0 and 0 < row["mfu"] for row in (small, large))


def test_batch_tokens_races_each_size_in_both_precisions_eager_and_compiled(workspace: Path) -> None:
    """torch.compile is the identity here: compiling takes minutes."""
    args = ["--max-tokens", "200,400", "--steps", "2", "--warmup", "1", "--peak-size", "128"]
    lanes = ["--config", "wu_tiny", "--precisions", "fp32,bf16", "--compile", "--label", "paper"]
    bench("bench.batch_tokens", *common_args(workspace, "lanes"), *args, *lanes, no_compile=True)
    data = json.loads((workspace / "lanes" / "bench.json").read_text())
    assert "batch_tokens_detail" not in data and "batch_tokens_paper" in data["runs"]
    rows = data["batch_tokens_paper_detail"]
    assert [(r["max_tokens"], r["precision"], r["compiled"]) for r in rows] == [
        (size, precision, compiled)
        for size in (200, 400)
        for precision in ("fp32", "bf16")
        for compiled in (False, True)
    ]
    assert [r["vs_first_lane"] for r in rows if r["precision"] == "fp32" and not r["compiled"]] == [1, 1]
    assert all(r["tok_s"] > 0 and r["vs_first_lane"] > 0 for r in rows)
    done = bench("bench.batch_tokens", "--precisions", "fp32,fp16", ok=False)
    assert last_error(done).endswith("give fp32 and/or bf16, comma-separated, each once")


def last_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]


def test_batch_tokens_names_a_size_with_too_few_batches(workspace: Path) -> None:
    args = ["--max-tokens", "200,100000", "--steps", "2"]
    done = bench("bench.batch_tokens", *common_args(workspace, "unused"), *args, ok=False)
    assert last_error(done).startswith("error: --max-tokens 100000: 1 batches")
    for bad in ("2500", "5000,2500", "a,b", "0,100"):
        done = bench("bench.batch_tokens", "--max-tokens", bad, ok=False)
        assert last_error(done).endswith("give two or more positive integers, smallest first"), bad


def test_shared_cpu_measures_four_conditions(workspace: Path) -> None:
    """Alone and beside a busy process, with every core and with threads for the load."""
    args = ["--steps", "1", "--warmup", "1", "--rounds", "1"]
    bench("bench.shared_cpu", *common_args(workspace, "shared"), *args)
    data = json.loads((workspace / "shared" / "bench.json").read_text())
    assert_positive(data, ["shared_cpu_busy_vs_alone_all_cores", "shared_cpu_busy_vs_alone_for_load"])
    rows = [(row["load"], row["threads"]) for row in data["shared_cpu_detail"]]
    assert rows == [
        ("alone", "all cores"),
        ("alone", "for load"),
        ("busy", "all cores"),
        ("busy", "for load"),
    ]
    assert all(row["tok_s"] > 0 and row["threads_used"] for row in data["shared_cpu_detail"])


def test_a_benchmark_reports_a_missing_input_in_one_line(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    write_changed_params(params, {"tokenizer": {"out_dir": str(tmp_path / "no_spm")}})
    out = bench("bench.batch_tokens", "--params", str(params), ok=False)
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
    assert list(runs) == ["train_speed", "batch_tokens", "decode_speed", "memory"]
    assert runs["memory"]["command"].startswith("python -m bench.memory --params ")
    assert all(run["cpu"] and run["cores"] > 0 for run in runs.values())
    assert {"train_tok_s", "per_token_speedup", "beam5_sent_s", "train_peak_rss_mb"} <= set(reports)
    md = (workspace / "reports" / "bench.md").read_text()
    assert f"`{runs['memory']['command']}`" in md and re.search(r"^\| train_tok_s +\| ", md, re.M)
    assert all(f"## {key}" in md for key in ("train_detail", "batch_tokens_detail", "memory_detail"))


def test_flop_count_weights_are_the_models_linear_weights() -> None:
    cfg = from_params(ModelConfig, d_model=24, n_heads=2, n_layers=3, d_ff=40)
    model = Transformer(cfg, vocab_size=50, pad_id=0)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert sum(matmul_weights(cfg)) == linear
    per_src, per_tgt = matmul_weights(cfg)
    one = 6 * (per_src * 3 + (per_tgt + 24 * 50) * 2) + 12 * 24 * 3 * (9 + 4 + 6)
    assert train_step_flops(cfg, 50, [3], [2]) == one


def test_profile_step_charges_the_step_to_the_parts_of_the_model(workspace: Path) -> None:
    args = ["--config", "default", "--steps", "2", "--warmup", "1", "--label", "t"]
    bench("bench.profile_step", *common_args(workspace, "profile"), *args)
    data = json.loads((workspace / "profile" / "bench.json").read_text())
    parts = {row["part"]: row for row in data["profile_default_t_detail"]}
    for part in ("vocabulary projection + loss", "attention", "feed-forward", "layer norm", "Adam", "total"):
        assert parts[part]["ms_per_step"] > 0, part
    shares = sum(row["share"] for name, row in parts.items() if name != "total")
    assert shares == pytest.approx(1.0, abs=0.01)
    assert data["profile_default_t_ops_detail"][0]["calls_per_step"] > 0


def test_levers_race_each_lever_against_all_off(workspace: Path) -> None:
    args = ["--configs", "default", "--steps", "2", "--warmup", "1", "--peak-size", "128"]
    bench("bench.levers", *common_args(workspace, "levers"), *args)
    rows = json.loads((workspace / "levers" / "bench.json").read_text())["levers_detail"]
    lanes = ["before", "fused_loss", "fused_adam", "after", "fused_attention", "buckets_16"]
    assert [row["lane"] for row in rows] == lanes
    assert rows[0]["vs_before"] == 1.0 and rows[1]["vs_trainer"] == 1.0
    assert all(row["tok_s"] > 0 and row["mfu"] > 0 for row in rows)


def test_loss_check_compares_curves_step_by_step() -> None:
    from bench.loss_check import compare

    off, on = [3.0, 2.0, 1.0, 1.5], [3.0, 2.1, 1.0, 1.4]
    got = compare(off, on, last=2)
    assert got["max_abs_diff"] == pytest.approx(0.1, abs=1e-3)
    assert got["mean_abs_diff"] == pytest.approx(0.05, abs=1e-3)
    assert got["mean_abs_step_change_off"] == pytest.approx(2.5 / 3, abs=1e-3)
    assert got["mean_loss_last_off"] == pytest.approx(1.25, abs=1e-3)
    assert got["mean_loss_last_on"] == pytest.approx(1.2, abs=1e-3)


def test_data_parallel_races_two_one_thread_processes_against_one(workspace: Path) -> None:
    args = ["--configs", "default", "--rounds", "2", "--steps", "1", "--warmup", "1"]
    bench("bench.data_parallel", *common_args(workspace, "data_parallel"), *args)
    rows = json.loads((workspace / "data_parallel" / "bench.json").read_text())["data_parallel_detail"]
    assert [(row["lane"], row["processes x threads"]) for row in rows] == [
        ("one_process", "1 x 2"),
        ("data_parallel", "2 x 1"),
    ]
    assert rows[0]["vs_one_process"] == 1.0
    assert all(row["tok_s"] > 0 for row in rows)


def test_data_parallel_deals_the_same_tokens_per_step() -> None:
    from bench.data_parallel import rank_updates, tokens, updates
    from pipeline.core.config import OptimConfig

    rows = [([1] * (3 + i % 7), [2] * (4 + i % 5)) for i in range(2000)]
    even = from_params(OptimConfig, max_tokens=60, accum_steps=2)
    assert rank_updates(rows, even, 5, ranks=2) == updates(rows, even, 5)  # the micro-batches dealt out
    odd = from_params(OptimConfig, max_tokens=400, accum_steps=1)
    halves = rank_updates(rows, odd, 5, ranks=2)
    assert all(len(u) == 2 for u in halves)
    one, two = sum(map(tokens, updates(rows, odd, 5))), sum(map(tokens, halves))
    assert abs(one - two) / one < 0.1


def test_levers_buckets_pad_with_masked_positions_only() -> None:
    from bench.levers import bucketed
    from bench.train_speed import make_batch

    batch = make_batch([([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11])], (0, 1, 2), torch.device("cpu"))
    grown = bucketed(batch, 0, 16)
    assert grown.src.shape == (2, 16) and grown.tgt_in.shape == grown.tgt_out.shape == (2, 16)
    assert (
        torch.equal(grown.src[:, : batch.src.size(1)], batch.src) and int(grown.src[:, 4:].abs().sum()) == 0
    )
    assert int((grown.tgt_out != 0).sum()) == int((batch.tgt_out != 0).sum())


def test_levers_fused_attention_lane_swaps_the_kernel_back() -> None:
    from bench.levers import fused_attention, fused_cpu_attention
    from pipeline.model import transformer

    explicit = transformer.attention
    q, k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    mask = torch.rand(2, 1, 3, 5) > 0.3
    mask[..., 0] = True
    with fused_attention():
        assert transformer.attention is fused_cpu_attention
        fused = transformer.attention(q, k, v, mask)
    assert transformer.attention is explicit
    assert torch.allclose(fused, explicit(q, k, v, mask), atol=1e-5)
