"""The report stage on a tiny fake run it builds itself, and the re-run decoder behind the heatmaps."""

from __future__ import annotations

import csv
import json
import re
import warnings
from pathlib import Path

import pytest
import torch
from datasets import Dataset, DatasetDict
from from_params import from_params, write_changed_params
from matplotlib.image import imread

from pipeline.core.config import MlflowConfig, ModelConfig, Params, TokenizerConfig
from pipeline.core.errors import DataError
from pipeline.core.git import git_commit
from pipeline.core.metrics import bleu_by_length, score, split_scores
from pipeline.core.run_id import read_run_id
from pipeline.data import time_machine as tm
from pipeline.data.batching import pad
from pipeline.data.multi30k import save_dataset_dict
from pipeline.data.tokenizer import Tokenizer, train_tokenizer
from pipeline.data.translations import read_scores, translation_path, write_scores
from pipeline.model.attention_maps import attention_map, cross_attention
from pipeline.model.transformer import Transformer
from pipeline.ops.report.figures import ATTENTION_FIGSIZE, DPI, FIGSIZE
from pipeline.ops.report.inputs import ReportInputs, registry_entries
from pipeline.ops.report.page import final_model_sentence, model_lines
from pipeline.ops.robustness import RobustnessResult, write_figures
from pipeline.tracking import store
from pipeline.training import checkpoint

REPO = Path(__file__).resolve().parents[1]
TIME_MACHINE = REPO / "data" / "time_machine.tsv"  # the tutorial's 20 sentences (tracked in git)
TINY = from_params(ModelConfig, d_model=16, n_heads=4, n_layers=2, d_ff=32, dropout=0.0)
EVAL_SPLITS = ("val", "test_2016_flickr", "test_2017_flickr")
WORDS = "a man woman dog child runs walks in the park with red ball on street".split()
GERMAN = "ein Mann Frau Hund Kind läuft geht im Park mit rotem Ball auf Straße".split()
LOG_ROWS = [  # step, epoch, train_loss, val_loss, val_bleu, lr, tokens_per_s, wall_seconds
    (300, 1, 6.1, 5.2, 3.5, 3.7e-4, 9000.0, 60.0),
    (600, 1, 4.8, 4.1, 12.0, 7.5e-4, 9100.0, 120.0),
    (900, 2, 3.9, 3.5, 21.4, 9.3e-4, 9050.0, 180.0),
    (1200, 2, 3.4, 3.2, 27.9, 8.1e-4, 9020.0, 240.0),
]


def sentence(words: list[str], n: int, seed: int) -> str:
    """A deterministic n-word sentence."""
    return " ".join(words[(seed * 7 + 3 * i) % len(words)] for i in range(n)) + "."


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    lines = [sentence(WORDS, 4 + i % 20, i) for i in range(200)] + [
        sentence(GERMAN, 4 + i % 20, i) for i in range(200)
    ]
    lines += TIME_MACHINE.read_text(encoding="utf-8").replace("\t", "\n").splitlines()
    out = tmp_path_factory.mktemp("spm")
    return Tokenizer.load(
        train_tokenizer(lines, out, from_params(TokenizerConfig, vocab_size=150, out_dir="unused"))
    )


def tiny_model(vocab_size: int, cfg: ModelConfig = TINY, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(cfg, vocab_size, pad_id=0).eval()


# --------------------------------------------------------------------------- the re-run decoder


@pytest.mark.parametrize(
    "cfg",
    [TINY, TINY.model_copy(update={"pre_norm": True, "tie_embeddings": False, "n_layers": 3})],
    ids=["post-norm-tied", "pre-norm-untied"],
)
def test_rerun_decoder_equals_model_decode(cfg: ModelConfig) -> None:
    model = tiny_model(50, cfg)
    src = pad([[5, 6, 7, 8, 9, 3], [10, 11, 3]], 0)  # the second row is padded
    tgt_in = pad([[2, 12, 13, 14], [2, 15]], 0)
    got = cross_attention(model, src, tgt_in)
    with torch.no_grad():
        want = model.decode(tgt_in, model.encode(src), src)
    torch.testing.assert_close(got.logits, want, atol=1e-5, rtol=0)
    b, s, t = src.size(0), src.size(1), tgt_in.size(1)
    assert got.weights.shape == (b, cfg.n_heads, t, s)
    torch.testing.assert_close(got.weights.sum(-1), torch.ones(b, cfg.n_heads, t))
    assert got.weights[1, :, :, 3:].abs().max() == 0  # padded source positions get no weight
    assert got.weights.min() >= 0


def test_attention_map_pieces_match_weights(tok: Tokenizer) -> None:
    model = tiny_model(tok.vocab_size)
    amap = attention_map(model, tok, "A man is walking his dog in the park.", "ein Mann im Park.")
    assert amap.src_pieces[-1] == amap.tgt_pieces[-1] == "</s>"
    assert amap.weights.shape == (TINY.n_heads, len(amap.tgt_pieces), len(amap.src_pieces))
    torch.testing.assert_close(amap.weights.sum(-1), torch.ones(TINY.n_heads, len(amap.tgt_pieces)))


# --------------------------------------------------------------------------- small pieces


def test_bleu_by_length_buckets_and_counts() -> None:
    lengths = [3, 10, 11, 15, 16, 25, 40]
    en = [sentence(WORDS, n, i) for i, n in enumerate(lengths)]
    refs = [sentence(GERMAN, 6, i) for i in range(len(en))]
    hyps = [r if i % 2 else sentence(GERMAN, 6, i + 1) for i, r in enumerate(refs)]
    buckets = bleu_by_length(en, hyps, refs)
    assert [(b.name, b.count) for b in buckets] == [("≤10", 2), ("11–15", 2), ("16–20", 1), (">20", 2)]
    assert buckets[2].bleu == pytest.approx(score(hyps[4:5], refs[4:5])["bleu"])
    assert bleu_by_length(en[:2], hyps[:2], refs[:2])[1].bleu is None  # an empty bucket
    with pytest.raises(DataError):
        bleu_by_length(en, hyps[:-1], refs)


def test_small_helpers(tmp_path: Path) -> None:
    assert (
        tm.tutorial_style("Ein Mädchen läuft über die Straße.") == "Ein Maedchen laeuft ueber die Strasse ."
    )
    assert tm.tutorial_style("im Park .") == "im Park ."
    assert read_run_id(tmp_path / "absent.txt") is None
    (tmp_path / "id.txt").write_text("0123abcd\n")
    assert read_run_id(tmp_path / "id.txt") == "0123abcd"
    assert git_commit(tmp_path) == "unknown"  # pytest's tmp_path is outside any checkout
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", git_commit(REPO))


# --------------------------------------------------------------------------- the stage


def write_fake_run(root: Path, tok: Tokenizer) -> dict[str, Path]:
    """params.yaml, corpus, model, translations, metrics, log and summary of a tiny fake run."""
    d = from_params(Params)  # the stages' paths: params.yaml's defaults, relative to `root`
    paths = {
        "model": root / d.train.model_file,
        "translations": root / d.decode.translations_dir,
        "scores": root / d.score.scores_dir,
        "score_facts": root / d.score.facts_json,
        "train_log": root / d.train.log_csv,
        "train_summary": root / d.train.metrics_json,
        "train_facts": root / d.train.facts_json,
        "mlflow_run_id": root / d.train.run_id_file,
        "robustness_json": root / d.decode.robustness_json,
        "robustness_failures": root / d.decode.robustness_failures_json,
        "time_machine_md": root / d.decode.time_machine_md,
        "report_md": root / d.report.page_md,
        "figures": root / d.report.figures_dir,
    }
    params = {
        "download": {"out_dir": "data/multi30k"},
        "tokenizer": {"out_dir": "spm"},
        "decode": {
            "beam_size": 2,
            "max_len_a": 1.0,
            "max_len_b": 5,
            "batch_size": 8,
            "time_machine_tsv": str(TIME_MACHINE),
        },
    }
    write_changed_params(root / "params.yaml", params)
    (root / "spm").mkdir()
    (root / "spm" / "spm.model").write_bytes(tok.sp.serialized_model_proto())
    lengths = [4, 8, 12, 14, 18, 23, 30, 6]
    split = {"en": [sentence(WORDS, n, i) for i, n in enumerate(lengths)]}
    split["de"] = [sentence(GERMAN, max(3, n - 2), i) for i, n in enumerate(lengths)]
    save_dataset_dict(
        DatasetDict({s: Dataset.from_dict(split) for s in ("train", *EVAL_SPLITS)}),
        root / "data" / "multi30k",
    )
    model = tiny_model(tok.vocab_size)
    state = {"model": model.state_dict(), "model_cfg": TINY.model_dump(), "vocab_size": tok.vocab_size}
    checkpoint.save(
        paths["model"], state | {"pad_id": tok.pad_id, "bos_id": tok.bos_id, "eos_id": tok.eos_id}
    )
    hyps = [sentence(GERMAN, n, i + 1) for i, n in enumerate(lengths)]
    metrics, signatures = {}, {}
    for s in EVAL_SPLITS:
        (paths["translations"]).mkdir(parents=True, exist_ok=True)
        translation_path(paths["translations"], s).write_text(
            "".join(h + "\n" for h in hyps), encoding="utf-8"
        )
        metrics[s], signatures[s] = split_scores(hyps, split["de"])
    en, _ = tm.read(TIME_MACHINE)  # the decode stage's outputs of the tutorial's sentences
    translation_path(paths["translations"], tm.TIME_MACHINE).write_text(
        "".join(sentence(GERMAN, 6, i) + "\n" for i in range(len(en))), encoding="utf-8"
    )
    failed = RobustnessResult(41, 44, [("12/05/2023 was a day.", ["lost 12/05/2023"])])
    write_figures(paths["robustness_json"], paths["robustness_failures"], failed, (31.5, 28.25))
    paths["scores"].mkdir(parents=True, exist_ok=True)
    write_scores(paths["scores"], metrics)
    paths["score_facts"].write_text(json.dumps(signatures))
    with open(paths["train_log"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["step", "epoch", "train_loss", "val_loss", "val_bleu", "lr", "tokens_per_s", "wall_seconds"]
        )
        w.writerows(LOG_ROWS)
    summary = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": 1200,
        "epochs": 2,
        "minutes": 4.0,
        "mean_tokens_per_s": 9042.5,
    }
    facts = {
        "device": "cpu",
        "bf16": False,
        "threads": 1,
        "torch": torch.__version__,
        "cpu": "x86_64",
        "final_model": {"source": "best", "candidates": {"best": 27.9, "average_last_2": 27.45}},
    }
    paths["train_summary"].write_text(json.dumps(summary))
    paths["train_facts"].write_text(json.dumps(facts))
    return paths


def metrics_cell(paths: dict[str, Path], split: str) -> str:
    m = read_scores(paths["scores"])[split]
    return f"{m['bleu']:.1f} | {m['bleu_lc_tok']:.1f} | {m['chrf']:.1f} |"  # as the score files round


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels, and the image must not be blank."""
    pixels = imread(path)
    assert pixels[..., :3].var() > 1e-3, f"{path.name} looks blank"
    return pixels.shape[1], pixels.shape[0]


def test_stage_writes_page_and_figures(tok: Tokenizer, tmp_path: Path, monkeypatch, mlflow_db: str) -> None:
    from stages import report as stage

    paths = write_fake_run(tmp_path, tok)
    monkeypatch.chdir(tmp_path)  # params.yaml and relative params paths; outside git
    paths["time_machine_md"].write_text("# Time machine\n")  # what the decode stage writes
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stage.main()
    assert not [w for w in caught if "Glyph" in str(w.message)], "a piece's character has no glyph"

    figures = paths["figures"]
    line_size = (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI))
    attention_size = (round(ATTENTION_FIGSIZE[0] * DPI), round(ATTENTION_FIGSIZE[1] * DPI))
    expected = {  # the training curves are DVC's plots (dvc.yaml), not drawn here
        "bleu_by_length.png": line_size,
        "attention_01.png": attention_size,
        "attention_08.png": attention_size,
        "attention_12.png": attention_size,
    }
    assert sorted(p.name for p in figures.iterdir()) == sorted(expected)
    for name, size in expected.items():
        assert image_size(figures / name) == size, name

    page = paths["report_md"].read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)]+)\)", page)
    assert {f"figures/{name}" for name in expected} <= set(links)
    for link in links:
        assert not link.startswith("/") and (paths["report_md"].parent / link).is_file(), link
    assert "not tracked" in page and "`unknown`" in page
    assert "~33.5" in page and "BLEU" in page and "chrF" in page
    assert "BLEU lc-tok" in page and "papers report" in page and "tok:none" in page and "tok:13a" in page
    assert "## Robustness" in page and "**41 / 44**" in page and "12/05/2023 was a day." in page
    assert "BLEU **28.2**, against 31.5" in page  # the decode stage's figures, not recomputed
    assert "cpu (x86_64)" in page and "240 s" in page  # facts and summary read from their two files
    for s in EVAL_SPLITS:
        assert f"| {s} | {metrics_cell(paths, s)}" in page
    assert (
        "| ≤10 | 3 |" in page
        and "| 11–15 | 2 |" in page
        and "| 16–20 | 1 |" in page
        and "| >20 | 2 |" in page
    )
    assert "[train_log.csv](train_log.csv)" in page and "dvc plots show" in page
    final = (
        "`best.pt` (the best validation), chosen on greedy val BLEU (27.90) over the average of the last 2"
    )
    assert f"Final weights: {final} step checkpoints (27.45)." in page
    assert "- Not tracked: no MLflow run, no registered version." in page
    assert re.search(r"\[time_machine.md\]\(time_machine.md\): mean chrF\s+\d+\.\d as is, \d+\.\d", page)

    paths["mlflow_run_id"].write_text("abc123\n")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    stage.main()
    page = paths["report_md"].read_text(encoding="utf-8")
    assert "`abc123`" in page
    assert "- MLflow run `abc123` has no version of `multi30k-en-de-transformer` in this database." in page


# --------------------------------------------------------------------------- the model and its registry entry


def test_final_model_choice_reads_as_a_sentence() -> None:
    choice = {"source": "average_last_4", "candidates": {"best": 40.51, "average_last_4": 40.93, "ema": 40.8}}
    assert final_model_sentence(choice) == (
        "the average of the last 4 step checkpoints, chosen on greedy val BLEU (40.93) over "
        "`best.pt` (the best validation) (40.51) and the moving average of the weights (40.80)"
    )
    assert final_model_sentence(None) == "–"


@pytest.fixture(scope="module")
def mlflow_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A temporary sqlite tracking URI shared by this module's tests (creating one costs seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def test_page_names_the_runs_version_its_aliases_and_the_promotion(monkeypatch, mlflow_db: str) -> None:
    """A champion v1 from an older run; this run's v2 is the candidate the flow did not promote."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    client, name = store.client(), "report-test"
    exp_id = store.experiment_id("report-test")
    older, ours = (client.create_run(exp_id).info.run_id for _ in range(2))
    client.create_registered_model(name)
    for run_id in (older, ours):
        client.create_model_version(name, "file:///nowhere", run_id=run_id)
    client.set_registered_model_alias(name, "champion", "1")
    client.set_model_version_tag(name, "1", "promotion.decision", "promoted")
    client.set_model_version_tag(name, "1", "promotion.time", "2026-12-01T09:00:00+00:00")
    client.set_registered_model_alias(name, "candidate", "2")
    promotion = {
        "decision": "kept",
        "time": "2026-12-02T13:05:00+00:00",
        "champion_version": "1",
        "bleu_candidate": "40.1000",
        "bleu_champion": "40.9000",
        "p_value": "0.8100",
        "p_threshold": "0.05",
    }
    for key, value in promotion.items():
        client.set_model_version_tag(name, "2", f"promotion.{key}", value)
    params = from_params(Params, mlflow=from_params(MlflowConfig, model_name=name))

    versions, champion = registry_entries(params, ours)
    inputs = ReportInputs(
        {}, {}, [], [], [], "val", [], [], [], mlflow_run_id=ours, versions=versions, champion=champion
    )
    assert model_lines(inputs, name) == [
        "`report-test` v2 (aliases `candidate`): the champion was kept on 2026-12-02: val BLEU 40.10 "
        "against champion v1's 40.90, paired bootstrap p = 0.8100",
        "The champion is v1, another run's model.",
    ]
    versions, champion = registry_entries(params, older)
    inputs = ReportInputs(
        {}, {}, [], [], [], "val", [], [], [], mlflow_run_id=older, versions=versions, champion=champion
    )
    assert model_lines(inputs, name) == [
        "`report-test` v1 (aliases `champion`): promoted to champion on 2026-12-01, the first champion"
    ]
    assert registry_entries(
        params.model_copy(update={"mlflow": from_params(MlflowConfig, enabled=False)}), ours
    ) == (
        None,
        None,
    )
