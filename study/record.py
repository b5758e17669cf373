"""Record a finished DVC experiment into the study: `python -m study.record NAME [--baseline BASE]
[--note TEXT] [--pipeline FILE]` appends its line to `reports/experiments.jsonl` (a recipe's
experiment with `--pipeline recipes/<name>/dvc.yaml`), keeps its val translations in
`reports/study/` and regenerates `reports/experiments.md`; `python -m study.record NAME --test` adds
the workspace's test scores to a row chosen on val (docs/study.md, "Recording a candidate" and
"Test sets for the chosen rows").
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

from pipeline.core.errors import PipelineError, run_main
from pipeline.core.git import git_commit
from pipeline.core.io import write_text
from pipeline.core.params_file import load_params
from pipeline.data.multi30k import load_corpus
from pipeline.data.translations import scores_path, translation_path
from pipeline.ops.promotion import paired_bootstrap
from study.curve import val_curve
from study.rows import (
    HYPS_DIR,
    PIPELINE_STAGES,
    RECORD,
    entry,
    exp_show,
    find_experiment,
    git_file,
    lock_overrides,
    read_record,
    read_scores_json,
    read_test_scores,
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


def record(name: str, baseline: str | None, note: str | None, pipeline: str = "dvc.yaml") -> dict:
    """Record experiment `name` (see the module docstring) of the pipeline file `pipeline` (the
    default's, or a recipe's: the row then holds what its stages' `-S` set, such as the student's
    paths and budget); returns its line.

    Raises:
        PipelineError: the experiment, its lock file's stages, its val translations or the
            baseline's are missing.
    """
    rev, base, data = find_experiment(exp_show(["--all-commits"]), name)
    lock_file = str(Path(pipeline).with_suffix(".lock"))
    overrides = lock_overrides(git_file(rev, lock_file), lock_file, PIPELINE_STAGES[pipeline])
    params = load_params(overrides=overrides)
    lang = params.download.tgt_lang
    facts = json.loads(git_file(rev, params.train.facts_json) or "{}")
    hyps = git_file(rev, str(translation_path(Path(params.decode.translations_dir), "val", lang)))
    if hyps is None:
        raise PipelineError(f"experiment {name!r} ({rev[:7]}): no val translations in its commit")
    val_json = str(scores_path(Path(params.score.scores_dir), "val"))
    summary_json = params.train.metrics_json
    row = entry(
        name, rev, base, data, facts, summary_json=summary_json, val_json=val_json, overrides=overrides
    ) | {
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


def tenth(value: float | None) -> float | None:
    """`value` to 0.1, as the score stage writes it (None stays None)."""
    return None if value is None else round(value, 1)


def check_same_model(row: dict, scores_dir: Path) -> None:
    """Check that `<scores_dir>/val.json` gives `row`'s recorded val BLEU and lc-tok (to 0.1), so
    test scores read beside it are of the row's model.

    Raises:
        PipelineError: the val scores are missing or differ (names the file).
    """
    path = scores_path(scores_dir, "val")
    val = read_scores_json(path)
    here = tuple(tenth(val.get(key)) for key in ("bleu", "bleu_lc_tok"))
    want = tuple(tenth(row.get(field)) for field in ("val_bleu", "val_bleu_lc_tok"))
    if here != want:
        raise PipelineError(
            f"{path}: val BLEU / lc-tok {here[0]} / {here[1]}, but {row['name']!r} records "
            f"{want[0]} / {want[1]}: these scores are of another model"
        )


def record_test(name: str, scores_dir: Path, source: str | None) -> dict:
    """Add the test splits' scores in `scores_dir` to the recorded row `name` as its `test`, with
    `test_source` (by default the files and the workspace's commit); returns the row.

    Raises:
        PipelineError: `name` is not recorded, or the scores are missing, broken or of another model.
    """
    rows = read_record()
    row = recorded(rows, name)
    if row is None:
        raise PipelineError(f"{RECORD}: no row {name!r} (record it first: python -m study.record {name})")
    check_same_model(row, scores_dir)
    test = read_test_scores(scores_dir)
    files = ", ".join(str(scores_path(scores_dir, split)) for split in test)
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    row |= {"test": test, "test_source": source or f"{files} at commit {git_commit()[:7]}, {today}"}
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
    p.add_argument(
        "--pipeline",
        choices=list(PIPELINE_STAGES),
        default="dvc.yaml",
        help="the pipeline file the experiment ran (default: dvc.yaml)",
    )
    p.add_argument(
        "--test", action="store_true", help="add the test scores to the recorded row (a row chosen on val)"
    )
    p.add_argument("--scores-dir", type=Path, help="with --test: where they are (default: score.scores_dir)")
    p.add_argument("--source", help="with --test: where they came from (default: the files and commit)")
    args = p.parse_args(argv)
    if args.test and (args.baseline or args.note or args.pipeline != "dvc.yaml"):
        p.error("--baseline, --note and --pipeline are for recording an experiment, not with --test")
    if not args.test and (args.scores_dir or args.source):
        p.error("--scores-dir and --source go with --test")
    if not args.test:
        row = record(args.name, args.baseline, args.note, args.pipeline)
        print(f"record: {row['name']} (val BLEU {row['val_bleu']}) -> {RECORD}, {TABLE}")
        return
    row = record_test(args.name, args.scores_dir or Path(load_params().score.scores_dir), args.source)
    print(f"record: {row['name']} test scores {row['test']} -> {RECORD}, {TABLE}")


if __name__ == "__main__":
    run_main(lambda: cli(sys.argv[1:]))
