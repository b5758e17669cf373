"""Record a finished DVC experiment into the study: `python -m study.record NAME [--baseline BASE]
[--note TEXT]` appends its line to `reports/experiments.jsonl`, keeps its val translations in
`reports/study/` and regenerates `reports/experiments.md` (docs/study.md, "Recording a candidate").
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

from pipeline.core.errors import PipelineError, run_main
from pipeline.core.io import write_text
from pipeline.core.params_file import load_params
from pipeline.data.multi30k import load_corpus
from pipeline.data.translations import scores_path, translation_path
from pipeline.ops.promotion import paired_bootstrap
from study.curve import val_curve
from study.rows import (
    HYPS_DIR,
    RECORD,
    entry,
    exp_show,
    find_experiment,
    git_file,
    read_record,
    recorded,
    write_record,
)
from study.tables import TABLE, render


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


def cli(argv: list[str]) -> None:
    p = argparse.ArgumentParser(
        prog="python -m study.record", description="Record a finished DVC experiment into the study."
    )
    p.add_argument("name", help="the experiment's name (dvc exp run -n NAME)")
    p.add_argument("--baseline", help="a recorded candidate to test against (paired bootstrap on val)")
    p.add_argument("--note", help="one line on what the candidate tests")
    args = p.parse_args(argv)
    row = record(args.name, args.baseline, args.note)
    print(f"record: {row['name']} (val BLEU {row['val_bleu']}) -> {RECORD}, {TABLE}")


if __name__ == "__main__":
    run_main(lambda: cli(sys.argv[1:]))
