"""The study's record: one JSON line per candidate in `reports/experiments.jsonl` (val; test sets for
the rows chosen on val), built from DVC's experiment records, and the recipe params that tell two
candidates apart."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

from pipeline.core.config import DecodeConfig
from pipeline.core.errors import PipelineError
from pipeline.core.io import write_text
from pipeline.core.params_file import default_params, flatten
from pipeline.data.translations import EVAL_SPLITS, scores_path

RECORD = Path("reports/experiments.jsonl")
HYPS_DIR = Path("reports/study")  # each recorded candidate's val translations
SUMMARY_FIELDS = ("steps", "epochs", "minutes", "target_tokens")  # from `train.metrics_json`
VAL_FIELDS = {"val_bleu": "bleu", "val_bleu_lc_tok": "bleu_lc_tok"}  # from the score stage's val.json
TEST_SPLITS = tuple(s for s in EVAL_SPLITS if s != "val")
TEST_FIELDS = ("bleu", "bleu_lc_tok", "chrf")  # per test split, from the score stage's <split>.json
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


# The stages whose commands made a recorded model and its scores, per pipeline file. A recipe runs
# the stage scripts with its own paths, seeds and budgets set by `-S` (docs/recipes.md).
PIPELINE_STAGES = {
    "dvc.yaml": ("train", "decode", "score"),
    "recipes/distill/dvc.yaml": ("student", "decode", "score"),
}


def lock_overrides(lock_text: str | None, lock_file: str, stages: tuple[str, ...]) -> list[str]:
    """The `-S section.key=value` overrides in the commands `lock_file` (text `lock_text`) records
    for `stages`, in stage order.

    Raises:
        PipelineError: the lock file is missing, records no such stage, or a command cannot be
            split into words (names the file and stage).
    """
    if lock_text is None:
        raise PipelineError(f"{lock_file}: not in the experiment's commit")
    recorded_stages = (yaml.safe_load(lock_text) or {}).get("stages", {})
    overrides = []
    for stage in stages:
        if stage not in recorded_stages:
            raise PipelineError(f"{lock_file}: no stage {stage!r} in the experiment's commit")
        cmd = recorded_stages[stage]["cmd"]
        try:
            words = shlex.split(cmd if isinstance(cmd, str) else " ".join(cmd))
        except ValueError as err:
            raise PipelineError(
                f"{lock_file}: stage {stage!r}: its command cannot be split ({err})"
            ) from None
        overrides += set_values(words)
    return overrides


def set_values(words: list[str]) -> list[str]:
    """The values of a command line's `-S`/`--set` options, in each form argparse takes
    (`-S k=v`, `--set k=v`, `-Sk=v`, `--set=k=v`)."""
    values = []
    for flag, following in zip(words, [*words[1:], None], strict=True):
        if flag in ("-S", "--set") and following is not None:
            values.append(following)
        elif flag.startswith("--set="):
            values.append(flag.removeprefix("--set="))
        elif flag.startswith("-S") and len(flag) > 2:
            values.append(flag.removeprefix("-S"))
    return values


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


def recipe(params: dict) -> dict:
    """The params that can change a candidate's model (not paths, budgets' caps or devices)."""
    return {k: v for k, v in sorted(params.items()) if k.startswith(RECIPE_PREFIXES) and k not in BOOKKEEPING}


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


def entry(
    name: str,
    rev: str,
    base: str,
    data: dict,
    facts: dict,
    *,
    summary_json: str,
    val_json: str,
    overrides: Sequence[str] = (),
) -> dict:
    """The record line of one finished experiment (`summary_json`: its `train.metrics_json`;
    `val_json`: its val scores, `<score.scores_dir>/val.json`; `overrides`: the `section.key=value`
    its stages' commands set over params.yaml, see `lock_overrides`)."""
    params = flatten(data.get("params", {}).get("params.yaml", {}).get("data", {}))
    for text in overrides:
        key, _, value = text.partition("=")
        params[key] = yaml.safe_load(value)
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


def read_scores_json(path: Path) -> dict:
    """The score stage's `<split>.json` at `path` ({} for a split the target language lacks).

    Raises:
        PipelineError: the file is missing or not a JSON object of numbers (names the file).
    """
    if not path.is_file():
        raise PipelineError(f"{path}: no scores (run the score stage)")
    try:
        scores = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        raise PipelineError(f"{path}: not JSON") from None
    if not isinstance(scores, dict) or not all(isinstance(v, int | float) for v in scores.values()):
        raise PipelineError(f"{path}: not a JSON object of scores")
    return scores


def read_test_scores(scores_dir: Path) -> dict[str, dict[str, float]]:
    """`{split: {bleu, bleu_lc_tok, chrf}}` of each test split in `scores_dir` (the score stage's
    `<split>.json`; a split the target language lacks is left out).

    Raises:
        PipelineError: a file is missing, broken or lacks a field (names file and field), or there
            is no test split at all.
    """
    out = {}
    for split in TEST_SPLITS:
        path = scores_path(scores_dir, split)
        scores = read_scores_json(path)
        missing = [field for field in TEST_FIELDS if field not in scores]
        if scores and missing:
            raise PipelineError(f"{path}: no {missing[0]!r} field")
        if scores:
            out[split] = {field: scores[field] for field in TEST_FIELDS}
    if not out:
        raise PipelineError(f"{scores_dir}: every test split's scores are empty")
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
    """Write `rows` as the record, one sorted-key JSON line each, atomically."""
    write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
