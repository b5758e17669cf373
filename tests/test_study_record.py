"""The study's record and page (study/rows.py, study/record.py, study/tables.py, study/curve.py):
lines from DVC's experiment records, the paired test against a baseline, test sets for the chosen
rows, the generated tables, and the docs' test figures against the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from markdown_tables import table_rows
from test_docs import section_table

from pipeline.core.errors import PipelineError
from study import curve, record, rows, tables

SUMMARY, VAL = "reports/train_summary.json", "reports/val.json"  # the metrics files a record reads
ROOT = Path(__file__).resolve().parents[1]
RECIPE_RUN = "distill-students3-s4800"  # the recipe's committed run: the README's recipe column


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


STUDENT_LOCK = """
schema: '2.0'
stages:
  student:
    cmd: python -m stages.train -S prepare.out_dir=data/distill/train_ids -S "distill.teacher=[a.pt,b.pt]"
      -S train.optim.max_steps=4800 -S train.metrics_json=reports/distill/train_summary.json
      -S train.log_csv=reports/distill/train_log.csv -S train.facts_json=reports/distill/train_facts.json
  decode:
    cmd: python -m stages.decode -S decode.translations_dir=reports/distill/translations
  score:
    cmd: python -m stages.score --set score.scores_dir=reports/distill
"""


def test_a_recipe_experiment_is_recorded_with_what_its_stages_set(tmp_path, monkeypatch):
    """A recipe's row: its metrics, log and translations from the paths its stages' `-S` set, and
    the recipe params it trained with (the student's budget and teachers), not params.yaml's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    data = exp_data(0.1, 42.0)
    data["metrics"] = {"reports/distill/" + Path(path).name: m for path, m in data["metrics"].items()}
    data["metrics"]["reports/distill/train_summary.json"]["data"]["steps"] = 4800
    commit = {
        "recipes/distill/dvc.lock": STUDENT_LOCK,
        "reports/distill/train_facts.json": json.dumps({"stopped_by": "max_steps", "cpu": "x"}),
        "reports/distill/train_log.csv": "step,val_bleu\n400,21.5\n",
        "reports/distill/translations/val.hyp.de": "ein hund .\n",
    }
    exps = [{"revs": [{"rev": "e1" * 20, "name": "student-4800", "data": data}]}]
    monkeypatch.setattr(
        record, "exp_show", lambda args: [{"rev": "b0" * 20, "data": {}, "experiments": exps}]
    )
    monkeypatch.setattr(record, "git_file", lambda rev, path: commit.get(path))
    row = record.record("student-4800", None, "a longer student", "recipes/distill/dvc.yaml")
    assert (row["val_bleu"], row["steps"], row["stopped_by"]) == (42.0, 4800, "max_steps")
    assert row["params"]["train.optim.max_steps"] == 4800 and row["params"]["distill.teacher"] == [
        "a.pt",
        "b.pt",
    ]
    assert (tmp_path / "reports/study/student-4800.val.hyp.de").read_text() == "ein hund .\n"
    assert row["val_curve"]["steps"] == [400]
    commit["recipes/distill/dvc.lock"] = STUDENT_LOCK.replace("  score:", "  scored:")
    with pytest.raises(PipelineError, match="recipes/distill/dvc.lock: no stage 'score'"):
        record.record("student-4800", None, None, "recipes/distill/dvc.yaml")
    del commit["recipes/distill/dvc.lock"]
    with pytest.raises(PipelineError, match="recipes/distill/dvc.lock: not in the experiment's commit"):
        record.record("student-4800", None, None, "recipes/distill/dvc.yaml")


def test_every_form_of_a_set_option_is_read_and_a_broken_command_is_one_line():
    words = ["python", "-m", "stages.train", "-S", "a.b=1", "--set", "c.d=x=y", "-Se.f=2", "--set=g.h=[1,2]"]
    assert rows.set_values(words) == ["a.b=1", "c.d=x=y", "e.f=2", "g.h=[1,2]"]
    assert rows.set_values(["python", "-S"]) == []
    lock = "stages:\n  train:\n    cmd: python -m stages.train -S 'a.b=1\n"
    with pytest.raises(PipelineError, match="dvc.lock: stage 'train': its command cannot be split"):
        rows.lock_overrides(lock, "dvc.lock", ("train",))


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
    tables.render(rows.read_record(ROOT / rows.RECORD), tmp_path / "experiments.md", tmp_path / "curves.png")
    page = (tmp_path / "experiments.md").read_text(encoding="utf-8")
    assert page == (ROOT / tables.TABLE).read_text(encoding="utf-8"), "run `python -m study.tables`"


def write_scores(
    folder: Path, val: tuple[float, float], tests: dict[str, tuple[float, float, float]]
) -> None:
    """The score stage's json files: val.json (BLEU, lc-tok) and one `<split>.json` per test split."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "val.json").write_text(json.dumps({"bleu": val[0], "bleu_lc_tok": val[1], "chrf": 60.0}))
    for split, (bleu, lc_tok, chrf) in tests.items():
        (folder / f"{split}.json").write_text(json.dumps({"bleu": bleu, "chrf": chrf, "bleu_lc_tok": lc_tok}))


def test_recording_test_scores_writes_them_into_that_row_and_the_page_shows_only_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chosen = rows.entry("chosen", "c", "b", exp_data(0.3, 41.0), {}, summary_json=SUMMARY, val_json=VAL)
    other = rows.entry("other", "o", "b", exp_data(0.1, 39.5), {}, summary_json=SUMMARY, val_json=VAL)
    rows.write_record([chosen, other])
    write_scores(
        tmp_path / "scores",
        (41.0, 41.3),
        {"test_2016_flickr": (39.6, 40.2, 64.1), "test_2017_flickr": (31.2, 31.4, 59.0)},
    )
    record.record_test("chosen", tmp_path / "scores", None)
    by_name = {r["name"]: r for r in rows.read_record()}
    assert by_name["chosen"]["test"] == {
        "test_2016_flickr": {"bleu": 39.6, "bleu_lc_tok": 40.2, "chrf": 64.1},
        "test_2017_flickr": {"bleu": 31.2, "bleu_lc_tok": 31.4, "chrf": 59.0},
    }
    assert "scores/test_2016_flickr.json" in by_name["chosen"]["test_source"]
    assert "test" not in by_name["other"] and "test_source" not in by_name["other"]
    page = tables.TABLE.read_text(encoding="utf-8")
    test_rows = section_table(page, "Test sets (the rows chosen on val)")
    assert test_rows == [("chosen", "41.30", "39.60", "40.20", "64.10", "31.20", "31.40", "59.00")]
    assert "reported for the rows chosen on val only" in page
    assert tables.chosen_rows_table([other]) == ""  # no row with test figures: no test table


def test_test_scores_of_another_model_or_broken_files_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows.write_record(
        [rows.entry("a", "c", "b", exp_data(0.3, 41.0), {}, summary_json=SUMMARY, val_json=VAL)]
    )
    write_scores(tmp_path / "s", (40.0, 40.3), {"test_2016_flickr": (1, 2, 3), "test_2017_flickr": (1, 2, 3)})
    with pytest.raises(
        PipelineError, match=r"val.json: val BLEU / lc-tok 40.0 / 40.3, but 'a' records 41.0 / 41.3"
    ):
        record.record_test("a", tmp_path / "s", None)
    write_scores(tmp_path / "s", (41.0, 41.3), {})
    (tmp_path / "s" / "test_2016_flickr.json").write_text('{"bleu": 39.0}')
    with pytest.raises(PipelineError, match=r"s/test_2016_flickr.json: no 'bleu_lc_tok' field"):
        record.record_test("a", tmp_path / "s", None)
    with pytest.raises(PipelineError, match="no row 'nope'"):
        record.record_test("nope", tmp_path / "s", None)
    assert "test" not in rows.read_record()[0]


def docs_test_mismatches(record_rows: dict[str, dict]) -> list[str]:
    """Where the test figures that docs/results.md and the README quote for recorded rows differ from
    the record's `test` (to 0.1): the distillation table (the study's row), the quality table's lc-tok
    columns and the README's recipe column (the recipe's committed run)."""
    results, readme = (ROOT / "docs/results.md").read_text(), (ROOT / "README.md").read_text()
    distill = record_rows["distill-ens2"]["test"]
    wrong = [
        f"results.md Distillation {split}: {tuple(cells[:3])}"
        for split, *cells in section_table(results, "Distillation")
        if split in distill
        and tuple(cells[:3]) != tuple(f"{distill[split][f]:.1f}" for f in rows.TEST_FIELDS)
    ]
    for cells in section_table(results, "Quality per CPU hour"):
        name = cells[0].split("`")[1]
        test = record_rows.get(name, {}).get("test")
        if test and tuple(cells[7:9]) != tuple(f"{test[s]['bleu_lc_tok']:.1f}" for s in rows.TEST_SPLITS):
            wrong.append(f"results.md Quality per CPU hour {name}: {cells[7:9]}")
    readme_column = {cells[0]: cells[2] for cells in section_table(readme, "Results")}
    for split, s in record_rows[RECIPE_RUN]["test"].items():
        want = f"{s['bleu']:.1f} / {s['bleu_lc_tok']:.1f} ({s['chrf']:.1f})"
        if readme_column.get(f"{split} BLEU / lc-tok (chrF)") != want:
            wrong.append(f"README recipe column {split}")
    return wrong


def test_the_docs_test_figures_for_the_chosen_rows_are_the_records():
    record_rows = {r["name"]: r for r in rows.read_record(ROOT / rows.RECORD)}
    for name in ("distill-ens2", RECIPE_RUN):
        assert record_rows[name]["test"].keys() == set(rows.TEST_SPLITS)
    assert not docs_test_mismatches(record_rows), docs_test_mismatches(record_rows)
    changed = json.loads(json.dumps(record_rows))
    changed["distill-ens2"]["test"]["test_2017_flickr"]["bleu_lc_tok"] += 1
    changed[RECIPE_RUN]["test"]["test_2016_flickr"]["chrf"] += 1
    assert [w.split(":")[0] for w in docs_test_mismatches(changed)] == [
        "results.md Distillation test_2017_flickr",
        "results.md Quality per CPU hour distill-ens2",
        "README recipe column test_2016_flickr",
    ]
