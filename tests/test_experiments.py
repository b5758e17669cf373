"""The study table from `dvc exp show --json` records (pipeline/ops/experiments.py)."""

from __future__ import annotations

from pipeline.ops.experiments import markdown, rows


def record(name: str, minutes: float, dropout: float, val_bleu: float) -> dict:
    """One `dvc exp show --json` entry's `data` with the fields the table reads."""
    params = {"train": {"optim": {"max_minutes": minutes}, "model": {"dropout": dropout}}}
    metrics = {
        "reports/train_summary.json": {"data": {"steps": 100, "epochs": 1, "minutes": minutes}},
        "reports/val.json": {"data": {"bleu": val_bleu, "bleu_lc_tok": val_bleu + 0.3}},
    }
    return {
        "rev": name,
        "name": name,
        "data": {"params": {"params.yaml": {"data": params}}, "metrics": metrics},
    }


def show(*exps: dict) -> list[dict]:
    base = record("abc1234", 70, 0.1, 38.0)
    base["experiments"] = [{"revs": [e]} for e in exps]
    return [{"rev": "workspace", "data": {}}, base]


def test_rows_list_changed_params_and_metrics():
    table = rows(show(record("short-drop", 12, 0.3, 20.5)))
    assert [r["experiment"] for r in table] == ["baseline abc1234", "short-drop"]
    assert table[0]["changed"] == ""
    assert table[1]["changed"] == "train.model.dropout=0.3, train.optim.max_minutes=12"
    assert table[1]["val BLEU"] == 20.5 and table[1]["val BLEU lc-tok"] == 20.8


def test_the_best_run_is_chosen_within_each_budget_only():
    table = rows(
        show(
            record("short-a", 12, 0.1, 22.0),
            record("short-b", 12, 0.3, 20.0),
            record("long-b", 70, 0.3, 37.0),
        )
    )
    lines = {line.split(" | ")[0].strip("| "): line for line in markdown(table).splitlines()[2:]}
    chosen = {name for name, line in lines.items() if "**yes**" in line}
    assert chosen == {"baseline abc1234", "short-a"}  # 22.0 beats 20.0 at 12 min; 38.0 beats 37.0 at 70


def test_each_baseline_commit_lists_its_own_experiments():
    later = record("def5678", 85, 0.1, 39.0)
    later["experiments"] = [{"revs": [record("later-drop", 85, 0.2, 39.5)]}]
    table = rows(show(record("short-drop", 12, 0.3, 20.5)) + [later])
    assert [r["experiment"] for r in table] == [
        "baseline abc1234",
        "short-drop",
        "baseline def5678",
        "later-drop",
    ]
    assert table[3]["changed"] == "train.model.dropout=0.2"  # against def5678, not abc1234
