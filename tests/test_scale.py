"""`python -m bench.scale` end to end at two small sizes on a tiny corpus and model: every stage
runs in its own process and is measured, and consecutive sizes are compared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict
from from_params import from_params, write_changed_params
from test_bench import TINY, pairs

from pipeline.core.config import TokenizerConfig
from pipeline.data.multi30k import save_dataset_dict
from pipeline.data.tokenizer import train_tokenizer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scale")
    data = pairs(300)
    split = Dataset.from_dict({"en": [e for e, _ in data], "de": [d for _, d in data]})
    corpus = DatasetDict(
        train=split, val=split.select(range(20)), test_2016_flickr=split.select(range(20, 40))
    )
    save_dataset_dict(corpus, root / "corpus")
    train_tokenizer(
        [s for p in data for s in p], root / "spm", from_params(TokenizerConfig, vocab_size=300, out_dir="x")
    )
    params = {
        "download": {"out_dir": str(root / "corpus"), "tgt_lang": "de"},
        "tokenizer": {"out_dir": str(root / "spm")},
    }
    write_changed_params(root / "params.yaml", params)
    return root


def test_two_sizes_measure_every_stage_and_their_ratios_into_bench_json(workspace: Path) -> None:
    argv = [
        "--sizes",
        "1000,2000",
        "--params",
        str(workspace / "params.yaml"),
        "--out-dir",
        str(workspace / "reports"),
        "--model-override",
        TINY,
    ]
    done = subprocess.run(
        [sys.executable, "-m", "bench.scale", *argv], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    data = json.loads((workspace / "reports" / "bench.json").read_text())
    rows = data["scale_detail"]
    assert [(r["pairs"], r["stage"]) for r in rows] == [
        (n, stage) for n in (1000, 2000) for stage in ("incoming", "distill", "prepare", "train")
    ]
    for row in rows:
        assert row["cpu_s"] > 0 and row["wall_s"] > 0 and 20 < row["peak_rss_mib"] < 4000
        assert row["rss_mib_per_m_pairs"] == pytest.approx(
            row["peak_rss_mib"] / (row["pairs"] / 1e6), rel=1e-3
        )
    by = {(r["pairs"], r["stage"]): r for r in rows}
    assert [r["stage"] for r in data["scale_ratio_detail"]] == ["incoming", "distill", "prepare", "train"]
    for ratio in data["scale_ratio_detail"]:
        small, big = by[1000, ratio["stage"]], by[2000, ratio["stage"]]
        assert (ratio["sizes"], ratio["pairs_ratio"]) == ("2000/1000", 2.0)
        assert ratio["cpu_ratio"] == pytest.approx(big["cpu_s"] / small["cpu_s"], rel=1e-3)
        assert ratio["rss_ratio"] == pytest.approx(big["peak_rss_mib"] / small["peak_rss_mib"], rel=1e-3)
    assert (
        "scale" in data["runs"]
        and "## scale_ratio_detail" in (workspace / "reports" / "bench.md").read_text()
    )
