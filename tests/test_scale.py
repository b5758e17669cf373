"""`bench.scale` end to end at its smallest size (30,000 synthetic pairs) on a tiny corpus and model:
every stage runs in its own process and is measured; the synthetic corpus is seeded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from datasets import Dataset, DatasetDict
from test_bench import TINY, pairs

from bench import scale
from pipeline.core.config import TokenizerConfig
from pipeline.data.multi30k import save_dataset_dict
from pipeline.data.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scale")
    data = pairs(300)
    split = Dataset.from_dict({"en": [e for e, _ in data], "de": [d for _, d in data]})
    corpus = DatasetDict(
        train=split, val=split.select(range(20)), test_2016_flickr=split.select(range(20, 40))
    )
    save_dataset_dict(corpus, root / "corpus")
    train_tokenizer([s for p in data for s in p], root / "spm", TokenizerConfig(vocab_size=300, out_dir="x"))
    params = {
        "download": {"out_dir": str(root / "corpus"), "tgt_lang": "de"},
        "tokenizer": {"out_dir": str(root / "spm")},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root


def test_synthetic_pairs_are_seeded_joined_pairs_without_inner_tabs() -> None:
    en, de = ["A a.", "B\tb."], ["X x.", "Y y."]
    lines = list(scale.synthetic_pairs(en, de, 50, seed=4))
    assert (
        lines
        == list(scale.synthetic_pairs(en, de, 50, seed=4))
        != list(scale.synthetic_pairs(en, de, 50, seed=5))
    )
    assert all(line.count("\t") == 1 and line.endswith("\n") for line in lines)
    assert {line.split("\t")[0] for line in lines} <= {"A a. A a.", "A a. B b.", "B b. A a.", "B b. B b."}


def test_smallest_size_measures_every_stage_into_bench_json(workspace: Path) -> None:
    argv = ["--sizes", "30000", "--params", str(workspace / "params.yaml"), "--out-dir", str(workspace / "reports"),
            "--model-override", TINY]  # fmt: skip
    scale.main(argv)
    data = json.loads((workspace / "reports" / "bench.json").read_text())
    rows = data["scale_detail"]
    assert [r["stage"] for r in rows] == ["incoming", "prepare", "train"]
    for row in rows:
        assert row["pairs"] == 30000 and row["cpu_s"] > 0 and row["wall_s"] > 0
        assert 20 < row["peak_rss_mib"] < 4000
        assert row["rss_mib_per_m_pairs"] == pytest.approx(row["peak_rss_mib"] / 0.03, rel=1e-3)
    assert data["scale_ratio_detail"] == [] and "scale" in data["runs"]
    assert "## scale_detail" in (workspace / "reports" / "bench.md").read_text()


def test_ratios_pair_consecutive_sizes_per_stage() -> None:
    rows = [
        {"pairs": n, "stage": "a", "cpu_s": c, "peak_rss_mib": m}
        for n, c, m in ((10, 1.0, 5.0), (100, 9.0, 10.0))
    ]
    assert scale.ratios(rows) == [
        {"stage": "a", "sizes": "100/10", "pairs_ratio": 10.0, "cpu_ratio": 9.0, "rss_ratio": 2.0}
    ]
