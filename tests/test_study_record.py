"""The study's record and page (study/rows.py, study/record.py, study/tables.py, study/curve.py):
lines from DVC's experiment records, the paired test against a baseline, the generated tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_tables import table_rows

from pipeline.core.errors import PipelineError
from study import curve, record, rows, tables

SUMMARY, VAL = "reports/train_summary.json", "reports/val.json"  # the metrics files a record reads


def exp_data(dropout: float, val_bleu: float, max_minutes: float = 150) -> dict:
    """One `dvc exp show --json` entry's `data` with the fields the record reads."""
    params = {
        "train": {"optim": {"max_minutes": max_minutes, "max_steps": 3200}, "model": {"dropout": dropout}},
        "mlflow": {"enabled": True},
    }
    metrics = {
        SUMMARY: {"data": {"steps": 3200, "epochs": 16, "minutes": 104.5}},
        VAL: {"data": {"bleu": val_bleu, "bleu_lc_tok": val_bleu + 0.3}},
    }
    return {"params": {"params.yaml": {"data": params}}, "metrics": metrics}


def shown() -> list[dict]:
    exps = [{"revs": [{"rev": "e1" * 20, "name": "drop-0.3", "data": exp_data(0.3, 40.0)}]}]
    return [
        {"rev": "workspace", "data": {}},
        {"rev": "b0" * 20, "data": exp_data(0.1, 39.0), "experiments": exps},
    ]


def test_find_experiment_by_name_and_its_baseline_commit():
    rev, base, data = rows.find_experiment(shown(), "drop-0.3")
    assert (rev, base) == ("e1" * 20, "b0" * 20)
    assert data["metrics"]["reports/val.json"]["data"]["bleu"] == 40.0
    with pytest.raises(PipelineError, match="'nope': not found"):
        rows.find_experiment(shown(), "nope")


def test_entry_keeps_recipe_params_metrics_and_facts():
    facts = {
        "stopped_by": "max_steps",
        "final_model": {"source": "ema", "candidates": {"ema": 38.1}},
        "cpu": "x",
    }
    row = rows.entry("drop-0.3", "e1", "b0", exp_data(0.3, 40.0), facts, summary_json=SUMMARY, val_json=VAL)
    assert row["params"] == {"train.model.dropout": 0.3, "train.optim.max_steps": 3200}  # no caps, no mlflow
    assert (row["steps"], row["val_bleu"], row["val_bleu_lc_tok"]) == (3200, 40.0, 40.3)
    assert (row["stopped_by"], row["final_model"]) == ("max_steps", "ema")


def test_table_shows_what_changed_against_the_baseline_and_p():
    base = rows.entry("base", "b", "b", exp_data(0.1, 39.0), {}, summary_json=SUMMARY, val_json=VAL)
    cand = rows.entry("drop-0.3", "e", "b", exp_data(0.3, 40.0), {}, summary_json=SUMMARY, val_json=VAL) | {
        "baseline": "base",
        "p_vs_baseline": 0.012,
    }
    lines = table_rows(tables.markdown([base, cand]))
    assert lines[2][:5] == ("base", "(baseline)", "3200", "16", "104.50")
    again = tables.markdown([base, base | {"name": "again", "baseline": "base"}])
    assert table_rows(again)[3][:2] == ("again", "(the recipe of base)")
    assert lines[3][:2] == ("drop-0.3", "model.dropout=0.3") and ("40.00", "40.30", "0.01") == lines[3][8:11]
    older = base | {"params": {k: v for k, v in base["params"].items() if k != "train.model.dropout"}}
    assert rows.changed(cand, older) == "model.dropout=0.3"  # a knob the baseline predates: its default 0.1
    sampled = cand | {"params": cand["params"] | {"distill.teacher": [], "prepare.sampling_alpha": 0.3}}
    assert (
        rows.changed(sampled, older) == "prepare.sampling_alpha=0.3, model.dropout=0.3"
    )  # [] is the default


def test_curve_reads_validation_rows_and_the_table_counts_tokens():
    log = "step,epoch,train_loss,val_loss,val_bleu,lr\n200,1,5.0,3.0,13.444,0.001\n300,1,4.9,,,0.001\n400,2,4.0,2.4,24.59,0.002\n"
    assert curve.val_curve(log) == {"steps": [200, 400], "bleu_greedy": [13.44, 24.59]}
    assert curve.val_curve(None) is None
    small = {
        "name": "t2500",
        "steps": 3200,
        "target_tokens": 8e6,
        "val_curve": {"steps": [400], "bleu_greedy": [19.4]},
    }
    large = {"name": "t5000", "steps": 1600, "target_tokens": 8e6, "val_curve": curve.val_curve(log)}
    lines = table_rows(curve.curve_table([small, large, {"name": "no-curve"}]))
    assert ("t2500", "2,500", "not by 1.0M", "not by 1.0M", "19.40 (1.0M)", "") in lines
    assert ("t5000", "5,000", "not by 2.0M", "not by 2.0M", "13.44 (1.0M)", "24.59 (2.0M)") in lines
    assert not any("no-curve" in line for line in lines)
    assert curve.curve_table([{"name": "old"}]) == ""


def test_the_tokens_at_which_a_curve_passes_each_level_and_its_figure(tmp_path):
    row = {
        "name": "long",
        "steps": 3000,
        "target_tokens": 3e6,
        "val_curve": {"steps": [1000, 2000, 3000], "bleu_greedy": [39.0, None, 40.5]},
    }
    assert curve.curve_points(row) == [(1.0, 39.0), (3.0, 40.5)]
    assert [curve.passed_at(curve.curve_points(row), level) for level in (39.0, 40.0, 41.0)] == [
        "1.0M",
        "3.0M",
        "not by 3.0M",
    ]
    assert ("long", "1,000", "3.0M", "not by 3.0M", "39.00 (1.0M)", "–", "40.50 (3.0M)") in table_rows(
        curve.curve_table([row])
    )
    figure = tmp_path / "curves.png"
    tables.render([row], tmp_path / "experiments.md", figure)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 5000
    assert curve.plot_curves([{"name": "old"}], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_a_broken_record_line_names_file_and_line(tmp_path):
    path = tmp_path / "experiments.jsonl"
    path.write_text('{"name": "a"}\nnot json\n')
    with pytest.raises(PipelineError, match=r"experiments.jsonl:2: not a JSON line"):
        rows.read_record(path)


def test_compare_runs_the_paired_bootstrap_against_the_recorded_baseline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refs = [f"ein hund läuft über die wiese nummer {i} ." for i in range(60)]
    worse = [f"eine katze sitzt {i}" for i in range(60)]
    (tmp_path / "reports" / "study").mkdir(parents=True)
    (tmp_path / "reports" / "study" / "base.val.hyp.de").write_text("\n".join(worse) + "\n")
    result = record.compare(refs, "base", "de", refs)  # a perfect system against a poor one
    assert result["baseline"] == "base" and result["p_vs_baseline"] < 0.05
    with pytest.raises(PipelineError, match="no val translations of the baseline 'other'"):
        record.compare(refs, "other", "de", refs)


def test_the_committed_page_is_the_record_rendered(tmp_path):
    """reports/experiments.md is generated: it says what reports/experiments.jsonl holds."""
    root = Path(__file__).resolve().parents[1]
    tables.render(rows.read_record(root / rows.RECORD), tmp_path / "experiments.md", tmp_path / "curves.png")
    page = (tmp_path / "experiments.md").read_text(encoding="utf-8")
    assert page == (root / tables.TABLE).read_text(encoding="utf-8"), "run `python -m study.tables`"
