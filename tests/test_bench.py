"""The benchmarks (bench/): each command end to end on a tiny corpus, tokenizer and model, writing
every key to bench.json; the baselines compute our function; the FLOP count's weights are ours.
No timing assertions."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from datasets import Dataset, DatasetDict

from bench import batch_tokens, decode_speed, memory, naive, nn_transformer, train_speed
from bench.common import record
from bench.flops import matmul_weights, train_step_flops
from pipeline.core.config import ModelConfig, TokenizerConfig
from pipeline.core.errors import ConfigError
from pipeline.data.multi30k import save_dataset_dict
from pipeline.data.tokenizer import train_tokenizer
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
    train_tokenizer([s for p in data for s in p], root / "spm", TokenizerConfig(vocab_size=300, out_dir="x"))
    params = {
        "download": {"out_dir": str(root / "corpus")},
        "tokenizer": {"out_dir": str(root / "spm")},
        "train": {"optim": {"max_tokens": 300}},
        "decode": {"batch_size": 4},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root


def common_args(root: Path) -> list[str]:
    return [
        "--params",
        str(root / "params.yaml"),
        "--out-dir",
        str(root / "reports"),
        "--model-override",
        TINY,
    ]


def bench_json(root: Path) -> dict:
    return json.loads((root / "reports" / "bench.json").read_text())


def assert_positive(data: dict, keys: list[str]) -> None:
    for key in keys:
        assert isinstance(data[key], float) and data[key] > 0, (key, data.get(key))


def test_train_speed_writes_its_keys(workspace: Path) -> None:
    args = ["--configs", "tiny,default", "--steps", "2", "--warmup", "1", "--peak-size", "128"]
    train_speed.main(common_args(workspace) + args + ["--other-precision", "on"])
    data = bench_json(workspace)
    keys = ["train_tok_s", "train_vs_nn_transformer", "train_vs_naive", "bf16_vs_fp32", "mfu"]
    assert_positive(data, keys + ["peak_gflops", "achieved_gflops"])
    assert data["peak_dtype"] in ("bf16", "fp32")
    models = [row["model"] for row in data["train_detail"]]
    assert len(models) == 10 and models[:3] == ["ours", "nn_transformer", "naive"]
    assert models[4] == "ours_all_positions"
    assert data["train_detail"][0]["config"].startswith("tiny ")
    assert all(row["tok_s"] > 0 and row["ms_per_step"] > 0 for row in data["train_detail"])


def test_train_speed_levers_other_precision_off_and_compile(workspace: Path, monkeypatch) -> None:
    """Without the other precision bf16_vs_fp32 is None; `--compile` adds a compiled runner to the
    headline config only (torch.compile is replaced by a copy here: compiling takes minutes)."""
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: module)
    args = ["--configs", "tiny,default", "--steps", "2", "--warmup", "1", "--peak-size", "64"]
    train_speed.main(common_args(workspace) + args + ["--other-precision", "off", "--compile"])
    data = bench_json(workspace)
    assert data["bf16_vs_fp32"] is None
    rows = [(row["config"].split()[0], row["model"]) for row in data["train_detail"]]
    assert [m for c, m in rows if c == "tiny"] == ["ours", "nn_transformer", "naive", "ours_all_positions"]
    assert [m for c, m in rows if c == "default"][-1] == "ours_compiled"
    assert data["compiled_vs_eager"] > 0 and data["compile_s"] is not None
    if data["peak_dtype"] == "fp32":
        assert data["bf16_peak_gflops"] > 0


def test_batch_tokens_compares_two_sizes(workspace: Path) -> None:
    args = ["--max-tokens", "200,400", "--steps", "2", "--warmup", "1", "--peak-size", "128"]
    batch_tokens.main(common_args(workspace) + args)
    data = bench_json(workspace)
    assert_positive(data, ["per_token_speedup"])
    small, large = data["batch_tokens_detail"]
    assert (small["max_tokens"], large["max_tokens"]) == (200, 400)
    assert small["tgt_tokens_per_step"] < large["tgt_tokens_per_step"] <= 400
    assert all(row["tok_s"] > 0 and 0 < row["mfu"] for row in (small, large))


def test_batch_tokens_names_a_size_with_too_few_batches(workspace: Path) -> None:
    with pytest.raises(ConfigError, match="--max-tokens 100000: 1 batches"):
        batch_tokens.main(common_args(workspace) + ["--max-tokens", "200,100000", "--steps", "2"])
    for bad in ("2500", "5000,2500", "a,b", "0,100"):
        with pytest.raises(ConfigError, match="two or more positive integers"):
            batch_tokens.parse_sizes(bad)


def test_a_benchmark_reports_a_missing_input_in_one_line(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"tokenizer": {"out_dir": str(tmp_path / "no_spm")}}))
    out = subprocess.run(
        [sys.executable, "-m", "bench.batch_tokens", "--params", str(params)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'no_spm' / 'spm.model'}: SentencePiece model not found (run the tokenizer stage)"
    ]


def test_decode_speed_writes_its_keys(workspace: Path) -> None:
    decode_speed.main(
        common_args(workspace) + ["--sentences", "6", "--checkpoint", str(workspace / "none.pt")]
    )
    data = bench_json(workspace)
    keys = ["naive_greedy_sent_s", "greedy_cached_sent_s", "beam5_sent_s", "ct2_fp32_beam5_sent_s"]
    assert_positive(data, keys + ["greedy_cached_vs_naive", "beam5_cached_vs_naive", "beam5_vs_ct2_int8"])
    rows = {row["method"]: row for row in data["decode_detail"]}
    assert "random weights" in rows["naive_greedy"]["model"]
    assert rows["greedy_cached"]["same_share"] > 0.5  # same model, same greedy rule
    assert rows["ct2_fp32_beam5"]["same_as"] == "beam5" and 0 <= rows["ct2_int8_beam5"]["same_share"] <= 1


def test_memory_writes_its_keys(workspace: Path) -> None:
    args = ["--steps", "2", "--sentences", "4", "--checkpoint", str(workspace / "none.pt")]
    memory.main(common_args(workspace) + args)
    data = bench_json(workspace)
    assert_positive(data, ["train_peak_rss_mb", "decode_peak_rss_mb"])
    floor = {r["process"]: r["peak_rss_mb"] for r in data["memory_detail"]}["floor"]
    assert 0 < floor <= data["train_peak_rss_mb"]
    assert "python -m bench.memory --params" in (workspace / "reports" / "bench.md").read_text()


def test_record_merges_runs_and_rewrites_markdown(tmp_path: Path) -> None:
    cpu = torch.device("cpu")
    record(tmp_path, "a", "python -m bench.a", {"train_tok_s": 1.0, "a_detail": [{"x": 1}]}, cpu)
    data = record(tmp_path, "b", "python -m bench.b --n 2", {"mfu": 0.5, "train_tok_s": 2.0}, cpu)
    assert data == json.loads((tmp_path / "bench.json").read_text())
    assert (data["train_tok_s"], data["mfu"], data["a_detail"]) == (2.0, 0.5, [{"x": 1}])
    assert set(data["runs"]) == {"a", "b"} and data["runs"]["b"]["command"] == "python -m bench.b --n 2"
    md = (tmp_path / "bench.md").read_text()
    assert "`python -m bench.b --n 2`" in md and "| train_tok_s | 2 |" in md and "## a_detail" in md


@pytest.mark.parametrize("pre_norm, tie", [(False, True), (True, False)])
def test_baselines_compute_our_function(pre_norm: bool, tie: bool) -> None:
    cfg = ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, pre_norm=pre_norm, tie_embeddings=tie)
    torch.manual_seed(0)
    ours = Transformer(cfg, vocab_size=50, pad_id=0).eval()
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    tgt_in = torch.tensor([[2, 11, 12, 13], [2, 14, 0, 0]])
    real = tgt_in != 0  # the baselines may differ at padded target positions only
    expected = ours(src, tgt_in)[real]
    for baseline in (naive.from_ours(ours), nn_transformer.from_ours(ours)):
        n_ours, n_base = (sum(p.numel() for p in m.parameters()) for m in (ours, baseline))
        assert n_base == n_ours
        torch.testing.assert_close(baseline.eval()(src, tgt_in)[real], expected, atol=1e-5, rtol=1e-5)


def test_flop_count_weights_are_the_models_linear_weights() -> None:
    cfg = ModelConfig(d_model=24, n_heads=2, n_layers=3, d_ff=40)
    model = Transformer(cfg, vocab_size=50, pad_id=0)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert sum(matmul_weights(cfg)) == linear
    per_src, per_tgt = matmul_weights(cfg)
    one = 6 * (per_src * 3 + (per_tgt + 24 * 50) * 2) + 12 * 24 * 3 * (9 + 4 + 6)
    assert train_step_flops(cfg, 50, [3], [2]) == one
