"""Greedy val BLEU by the target tokens trained on: each candidate's curve from its train log,
the study's curve table and its figure (`reports/study/greedy_val_by_tokens.png`)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from matplotlib.figure import Figure

from pipeline.core.tables import markdown_table
from pipeline.ops.report.figures import DPI, FIGSIZE, save

CURVE_FIGURE = Path("reports/study/greedy_val_by_tokens.png")
LEVELS = (40.0, 41.0)  # val BLEU levels the curve table says when each candidate passed


def val_curve(log_csv: str | None) -> dict | None:
    """{"steps": [...], "bleu_greedy": [...]} from a train log's validation rows (None without a log)."""
    if not log_csv:
        return None
    rows = [r for r in csv.DictReader(io.StringIO(log_csv)) if r.get("val_bleu")]
    return {
        "steps": [int(r["step"]) for r in rows],
        "bleu_greedy": [round(float(r["val_bleu"]), 2) for r in rows],
    }


def curve_points(row: dict) -> list[tuple[float, float]]:
    """(M target tokens trained on, greedy val BLEU) at each validation with a BLEU: the
    candidate's mean tokens per step times the step."""
    per_step = row["target_tokens"] / row["steps"]
    curve = row["val_curve"]
    return [
        (step * per_step / 1e6, bleu)
        for step, bleu in zip(curve["steps"], curve["bleu_greedy"], strict=True)
        if bleu is not None
    ]


def passed_at(points: list[tuple[float, float]], level: float) -> str:
    """When a curve first reached `level`: "5.0M", or "not by 8.0M" (its last validation)."""
    reached = [tokens for tokens, bleu in points if bleu >= level]
    if reached:
        return f"{reached[0]:.1f}M"
    return f"not by {points[-1][0]:.1f}M" if points else "–"


def with_curves(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("val_curve") and r.get("target_tokens") and r.get("steps")]


def curve_table(rows: list[dict]) -> str:
    """The Markdown table of greedy val BLEU by the target tokens trained on, one line per candidate.

    Tokens at a validation are the candidate's mean tokens per step times the step; each line also
    says at how many tokens it first reached each of `LEVELS`. "" when no candidate has a curve.
    """
    curved = with_curves(rows)
    if not curved:
        return ""
    width = max(len(r["val_curve"]["steps"]) for r in curved)
    columns = ["experiment", "target tokens per step", *(f"≥ {level:g} at" for level in LEVELS)]
    columns += [f"validation {i + 1}" for i in range(width)]
    table = []
    for row in curved:
        per_step = row["target_tokens"] / row["steps"]
        curve = row["val_curve"]
        cells = [row["name"], f"{per_step:,.0f}", *(passed_at(curve_points(row), level) for level in LEVELS)]
        cells += [
            "–" if bleu is None else f"{bleu:.2f} ({step * per_step / 1e6:.1f}M)"
            for step, bleu in zip(curve["steps"], curve["bleu_greedy"], strict=True)
        ]
        cells += [""] * (len(columns) - len(cells))  # fewer validations than the longest curve
        table.append(dict(zip(columns, cells, strict=True)))
    intro = (
        "Each cell: greedy val BLEU at a validation (M target tokens trained on by then: steps times "
        "the run's mean target tokens per step). Candidates with other batch sizes compare here per "
        f"token, not per step. Figure: `{CURVE_FIGURE.as_posix()}`."
    )
    return f"\n## Greedy val BLEU by training tokens\n\n{intro}\n\n{markdown_table(table, columns)}\n"


def plot_curves(rows: list[dict], path: Path = CURVE_FIGURE) -> Path | None:
    """Greedy val BLEU against M training target tokens, a line per candidate with a curve and a
    dashed line at each of `LEVELS`, as a PNG at `path` (None, nothing written, without curves)."""
    curved = with_curves(rows)
    if not curved:
        return None
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    for row in curved:
        tokens, bleu = zip(*curve_points(row), strict=True)
        ax.plot(tokens, bleu, marker="o", markersize=3, linewidth=1, label=row["name"])
    for level in LEVELS:
        ax.axhline(level, color="grey", linestyle="--", linewidth=0.8)
    ax.set(
        title="Greedy val BLEU by training tokens",
        xlabel="target tokens trained on (M)",
        ylabel="greedy val BLEU",
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", ncols=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save(fig, path)
