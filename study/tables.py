"""The study's page, `reports/experiments.md`, generated from the record: one row per candidate,
the test sets of the rows chosen on val, the curve table and figure, and the length-penalty
sweeps. `python -m study.tables` regenerates it alone (docs/study.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.core.errors import run_main
from pipeline.core.io import write_text
from pipeline.core.tables import markdown_table
from study.curve import CURVE_FIGURE, curve_table, plot_curves
from study.rows import RECORD, TEST_FIELDS, TEST_SPLITS, changed, read_record

TABLE = Path("reports/experiments.md")
COLUMNS = [
    "experiment",
    "changed",
    "steps",
    "epochs",
    "minutes",
    "ended by",
    "target tokens (M)",
    "final model",
    "val BLEU",
    "val BLEU lc-tok",
    "p vs baseline",
    "CPU",
    "note",
]
TEST_LABELS = {"bleu": "BLEU", "bleu_lc_tok": "BLEU lc-tok", "chrf": "chrF"}
LENGTH_PENALTY_COLUMNS = [
    "experiment",
    "beam",
    "α",
    "val BLEU",
    "val BLEU lc-tok",
    "length ratio",
    "p vs the choice below",
    "chosen",
]


def cells(row: dict, by_name: dict[str, dict]) -> list[str]:
    """The study table's cells of `row` (`by_name`: every recorded row, to find its baseline)."""
    base = by_name.get(row.get("baseline") or "")
    tokens = row.get("target_tokens")
    values = [
        row["name"],
        changed(row, base) or ("(baseline)" if base is None else f"(the recipe of {base['name']})"),
        row.get("steps"),
        row.get("epochs"),
        row.get("minutes"),
        row.get("stopped_by"),
        f"{tokens / 1e6:.2f}" if tokens else None,
        row.get("final_model"),
        row.get("val_bleu"),
        row.get("val_bleu_lc_tok"),
        row.get("p_vs_baseline"),
        row.get("cpu"),
        row.get("note"),
    ]
    return [cell(v) for v in values]


def cell(value: object) -> str:
    """A table cell: floats to 0.01, "–" for nothing."""
    return f"{value:.2f}" if isinstance(value, float) else ("–" if value in (None, "") else str(value))


def markdown(rows: list[dict]) -> str:
    """The study table, one row per recorded candidate in recording order."""
    by_name = {r["name"]: r for r in rows}
    return markdown_table([dict(zip(COLUMNS, cells(r, by_name), strict=True)) for r in rows], COLUMNS) + "\n"


def chosen_rows_table(rows: list[dict]) -> str:
    """The test sets' scores of the rows that have them, and where each came from ("" when none has)."""
    chosen = [r for r in rows if r.get("test")]
    splits = [s for s in TEST_SPLITS if any(s in r["test"] for r in chosen)]
    columns = ["experiment", "val BLEU lc-tok"]
    columns += [f"{split} {TEST_LABELS[field]}" for split in splits for field in TEST_FIELDS]
    table = []
    for row in chosen:
        scores = [row["test"].get(split, {}).get(field) for split in splits for field in TEST_FIELDS]
        values = [row["name"], row.get("val_bleu_lc_tok"), *scores]
        table.append(dict(zip(columns, [cell(v) for v in values], strict=True)))
    if not table:
        return ""
    intro = (
        "Selection is on val: test sets are reported for the rows chosen on val only, recorded by "
        "`python -m study.record NAME --test`; a row not listed here is val-only in the record."
    )
    sources = "".join(f"- `{r['name']}`: {r.get('test_source') or '–'}\n" for r in chosen)
    body = markdown_table(table, columns)
    return (
        f"\n## Test sets (the rows chosen on val)\n\n{intro}\n\n{body}\n\nWhere they came from:\n\n{sources}"
    )


def length_penalty_table(rows: list[dict]) -> str:
    """One line per α of each candidate `study.length_penalty` swept ("" when none was)."""
    table = []
    for row in rows:
        sweep = row.get("length_penalty")
        for i, alpha in enumerate(sweep["alphas"] if sweep else []):
            values = [
                row["name"],
                sweep["beam_size"],
                alpha,
                sweep["bleu"][i],
                sweep["bleu_lc_tok"][i],
                sweep["length_ratio"][i],
                sweep["p_vs_choice"][i],
                "yes" if alpha == sweep["chosen"] else "",
            ]
            table.append(dict(zip(LENGTH_PENALTY_COLUMNS, values, strict=True)))
    if not table:
        return ""
    intro = (
        "Written by `python -m study.length_penalty NAME`: the candidate's model decoded with each "
        "GNMT α; from the smallest, a larger α replaces the choice so far only when its val BLEU is "
        "higher with p below `promotion.p_threshold` (paired bootstrap against that choice)."
    )
    body = markdown_table(table, LENGTH_PENALTY_COLUMNS)
    return f"\n## Length penalty on val (decode only)\n\n{intro}\n\n{body}\n"


def render(rows: list[dict], out: Path = TABLE, figure: Path = CURVE_FIGURE) -> None:
    """Write the study's page to `out` and its curve figure to `figure`, atomically."""
    header = (
        "# Recipe study\n\nGenerated by `python -m study.tables` from "
        "`reports/experiments.jsonl` (chosen on val; test sets only for the chosen rows, in their own "
        "table; `changed` is against the row's baseline; p is sacreBLEU's paired bootstrap of val "
        "BLEU against the baseline; `final model` is the candidate chosen on greedy val BLEU).\n\n"
    )
    page = markdown(rows) + chosen_rows_table(rows) + curve_table(rows) + length_penalty_table(rows)
    write_text(out, header + page)
    plot_curves(rows, figure)


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(
        prog="python -m study.tables",
        description=f"Rewrite {TABLE} and its figure from {RECORD} (run after editing the record by hand).",
    ).parse_args(argv)
    rows = read_record()
    render(rows)
    print(f"tables: {len(rows)} candidates -> {TABLE}")


if __name__ == "__main__":
    run_main(main)
