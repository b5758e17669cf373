"""The recipe study's committed record (`reports/experiments.jsonl`, val only) and the tables and
figure generated from it: `python -m pipeline.ops.experiments record NAME [--baseline BASE]` and
`render` (docs/results.md, "Running a candidate").
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from matplotlib.figure import Figure

from pipeline.core.config import DecodeConfig
from pipeline.core.errors import PipelineError, run_main
from pipeline.core.io import write_text
from pipeline.core.params_file import default_params, flatten, load_params
from pipeline.core.tables import markdown_table
from pipeline.data.multi30k import load_corpus
from pipeline.data.translations import scores_path, translation_path
from pipeline.ops.promotion import paired_bootstrap
from pipeline.ops.report.figures import DPI, FIGSIZE, save

RECORD = Path("reports/experiments.jsonl")
HYPS_DIR = Path("reports/study")
TABLE = Path("reports/experiments.md")
CURVE_FIGURE = HYPS_DIR / "greedy_val_by_tokens.png"
LEVELS = (40.0, 41.0)  # val BLEU levels the curve table says when each candidate passed
SUMMARY_FIELDS = ("steps", "epochs", "minutes", "target_tokens")  # from `train.metrics_json`
VAL_FIELDS = {"val_bleu": "bleu", "val_bleu_lc_tok": "bleu_lc_tok"}  # from the score stage's val.json
RECIPE_PREFIXES = (
    "train.model.",
    "train.optim.",
    "train.max_len",
    "decode.",
    "tokenizer.",
    "distill.",
    "prepare.",
)
BOOKKEEPING = {  # recipe-prefixed params that cannot change the model
    "train.optim.max_minutes",
    "train.optim.device",
    "train.optim.precision",
    "train.optim.threads",
    "tokenizer.out_dir",
    "decode.batch_size",
    *(f"decode.{name}" for name in DecodeConfig.PATHS),
    "distill.teacher_dir",
    "distill.out_jsonl",
    "distill.facts_json",
    "prepare.out_dir",
}


def exp_show(args: list[str]) -> list[dict]:
    """`dvc exp show --json [args]` of the repository in the working directory.

    Raises:
        PipelineError: dvc failed (e.g. not a DVC repository).
    """
    out = subprocess.run(["dvc", "exp", "show", "--json", *args], capture_output=True, text=True)
    if out.returncode:
        raise PipelineError(f"dvc exp show: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout)


def find_experiment(records: list[dict], name: str) -> tuple[str, str, dict]:
    """(experiment commit, baseline commit, its `data`) of the experiment called `name`.

    Raises:
        PipelineError: no experiment has that name.
    """
    for base in records:
        for exp in base.get("experiments") or []:
            rev = exp["revs"][0]
            if rev.get("name") == name:
                return rev["rev"], base["rev"], rev["data"]
    raise PipelineError(f"experiment {name!r}: not found by `dvc exp show --all-commits`")


def git_file(rev: str, path: str) -> str | None:
    """The text of `path` at commit `rev`, or None when it is not there."""
    out = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def val_curve(log_csv: str | None) -> dict | None:
    """{"steps": [...], "bleu_greedy": [...]} from a train log's validation rows (None without a log)."""
    if not log_csv:
        return None
    rows = [r for r in csv.DictReader(io.StringIO(log_csv)) if r.get("val_bleu")]
    return {
        "steps": [int(r["step"]) for r in rows],
        "bleu_greedy": [round(float(r["val_bleu"]), 2) for r in rows],
    }


def recipe(params: dict) -> dict:
    """The params that can change a candidate's model (not paths, budgets' caps or devices)."""
    return {k: v for k, v in sorted(params.items()) if k.startswith(RECIPE_PREFIXES) and k not in BOOKKEEPING}


def entry(
    name: str, rev: str, base: str, data: dict, facts: dict, *, summary_json: str, val_json: str
) -> dict:
    """The record line of one finished experiment (`summary_json`: its `train.metrics_json`;
    `val_json`: its val scores, `<score.scores_dir>/val.json`)."""
    params = flatten(data.get("params", {}).get("params.yaml", {}).get("data", {}))
    metrics = {file: flatten(m.get("data", {})) for file, m in data.get("metrics", {}).items()}
    summary, val = metrics.get(summary_json, {}), metrics.get(val_json, {})
    out = {"name": name, "commit": rev, "baseline_commit": base}
    out |= {field: summary.get(field) for field in SUMMARY_FIELDS}
    out |= {field: val.get(key) for field, key in VAL_FIELDS.items()}
    final = facts.get("final_model", {})
    ran_out = out["steps"] is not None and out["steps"] >= params.get("train.optim.max_steps", float("inf"))
    out |= {
        "stopped_by": facts.get("stopped_by") or ("max_steps" if ran_out else None),  # older runs: inferred
        "final_model": final.get("source"),
        "candidates_val_bleu_greedy": final.get("candidates"),
        "cpu": facts.get("cpu"),
        "bf16": facts.get("bf16"),
        "params": recipe(params),
    }
    return out


def read_record(path: Path = RECORD) -> list[dict]:
    """The recorded candidates, in recording order ([] when there is no record yet).

    Raises:
        PipelineError: a line is not JSON (names the file and line).
    """
    rows = []
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    for number, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            raise PipelineError(f"{path}:{number}: not a JSON line") from None
    return rows


def recorded(rows: list[dict], name: str) -> dict | None:
    """The record line of candidate `name`, or None."""
    return next((r for r in rows if r["name"] == name), None)


def write_record(rows: list[dict], path: Path = RECORD) -> None:
    write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def record(name: str, baseline: str | None, note: str | None) -> dict:
    """Record experiment `name` (see the module docstring); returns its line.

    Raises:
        PipelineError: the experiment, its val translations or the baseline's are missing.
    """
    params = load_params()
    lang = params.download.tgt_lang
    rev, base, data = find_experiment(exp_show(["--all-commits"]), name)
    facts = json.loads(git_file(rev, params.train.facts_json) or "{}")
    hyps = git_file(rev, str(translation_path(Path(params.decode.translations_dir), "val", lang)))
    if hyps is None:
        raise PipelineError(f"experiment {name!r} ({rev[:7]}): no val translations in its commit")
    val_json = str(scores_path(Path(params.score.scores_dir), "val"))
    row = entry(name, rev, base, data, facts, summary_json=params.train.metrics_json, val_json=val_json) | {
        "val_curve": val_curve(git_file(rev, params.train.log_csv)),
        "recorded": datetime.now(UTC).strftime("%Y-%m-%d"),
        "recorded_on": platform.node(),
        "note": note,
    }
    if baseline is not None:
        row |= compare(hyps.splitlines(), baseline, lang, load_corpus(params.download.out_dir)["val"][lang])
    write_text(HYPS_DIR / f"{name}.val.hyp.{lang}", hyps)
    rows = read_record()
    earlier = recorded(rows, name) or {}
    if earlier.get("commit") == rev and "length_penalty" in earlier:  # the same model: its sweep holds
        row["length_penalty"] = earlier["length_penalty"]
    rows = [r for r in rows if r["name"] != name] + [row]
    write_record(rows)
    render(rows)
    return row


def compare(hyps: list[str], baseline: str, lang: str, refs: list[str]) -> dict:
    """{"baseline": name, "p_vs_baseline": p} of `hyps` against the recorded `baseline`'s val translations.

    Raises:
        PipelineError: the baseline has no recorded translations.
    """
    path = HYPS_DIR / f"{baseline}.val.hyp.{lang}"
    if not path.is_file():
        raise PipelineError(f"{path}: no val translations of the baseline {baseline!r} (record it first)")
    cmp = paired_bootstrap(list(refs), path.read_text(encoding="utf-8").splitlines(), hyps)
    return {"baseline": baseline, "p_vs_baseline": round(cmp.p_value, 4)}


def default_recipe() -> dict:
    """The recipe params of params.yaml: a knob a record line predates counts at its value here."""
    return recipe(flatten(default_params().model_dump(mode="json")))


def changed(row: dict, baseline: dict | None) -> str:
    """The recipe params of `row` that differ from its baseline's ("" for the baseline itself). A
    knob one of them predates counts at today's default (new knobs default to the old behaviour)."""
    if baseline is None or baseline is row:
        return ""
    mine, theirs = default_recipe() | row["params"], default_recipe() | baseline["params"]
    keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    return ", ".join(f"{k.removeprefix('train.')}={mine.get(k)}" for k in keys)


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


def cells(row: dict, by_name: dict[str, dict]) -> list[str]:
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
    return [f"{v:.2f}" if isinstance(v, float) else ("–" if v in (None, "") else str(v)) for v in values]


def markdown(rows: list[dict]) -> str:
    """The study table, one row per recorded candidate in recording order."""
    by_name = {r["name"]: r for r in rows}
    return markdown_table([dict(zip(COLUMNS, cells(r, by_name), strict=True)) for r in rows], COLUMNS) + "\n"


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


def length_penalty_table(rows: list[dict]) -> str:
    """One line per α of each candidate `pipeline.ops.length_penalty` swept ("" when none was)."""
    swept = [r for r in rows if r.get("length_penalty")]
    if not swept:
        return ""
    columns = [
        "experiment",
        "beam",
        "α",
        "val BLEU",
        "val BLEU lc-tok",
        "length ratio",
        "p vs the choice below",
        "chosen",
    ]
    table = []
    for row in swept:
        fig = row["length_penalty"]
        for i, alpha in enumerate(fig["alphas"]):
            values = [
                row["name"],
                fig["beam_size"],
                alpha,
                fig["bleu"][i],
                fig["bleu_lc_tok"][i],
                fig["length_ratio"][i],
                fig["p_vs_choice"][i],
                "yes" if alpha == fig["chosen"] else "",
            ]
            table.append(dict(zip(columns, values, strict=True)))
    intro = (
        "Written by `python -m pipeline.ops.length_penalty NAME`: the candidate's model decoded with each "
        "GNMT α; from the smallest, a larger α replaces the choice so far only when its val BLEU is "
        "higher with p below `promotion.p_threshold` (paired bootstrap against that choice)."
    )
    return f"\n## Length penalty on val (decode only)\n\n{intro}\n\n{markdown_table(table, columns)}\n"


def render(rows: list[dict], out: Path = TABLE, figure: Path = CURVE_FIGURE) -> None:
    header = (
        "# Recipe study\n\nGenerated by `python -m pipeline.ops.experiments render` from "
        "`reports/experiments.jsonl` (val only; `changed` is against the row's baseline; p is "
        "sacreBLEU's paired bootstrap of val BLEU against the baseline; `final model` is the "
        "candidate chosen on greedy val BLEU).\n\n"
    )
    write_text(out, header + markdown(rows) + curve_table(rows) + length_penalty_table(rows))
    plot_curves(rows, figure)


def cli(argv: list[str]) -> None:
    p = argparse.ArgumentParser(
        prog="python -m pipeline.ops.experiments",
        description="The recipe study's committed record and its tables.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record a finished DVC experiment into reports/experiments.jsonl")
    rec.add_argument("name", help="the experiment's name (dvc exp run -n NAME)")
    rec.add_argument("--baseline", help="a recorded candidate to test against (paired bootstrap on val)")
    rec.add_argument("--note", help="one line on what the candidate tests")
    sub.add_parser("render", help="write reports/experiments.md from the record")
    args = p.parse_args(argv)
    if args.command == "record":
        row = record(args.name, args.baseline, args.note)
        print(f"experiments: recorded {row['name']} (val BLEU {row['val_bleu']}) -> {RECORD}, {TABLE}")
    else:
        rows = read_record()
        render(rows)
        print(f"experiments: {len(rows)} candidates -> {TABLE}")


if __name__ == "__main__":
    run_main(lambda: cli(sys.argv[1:]))
