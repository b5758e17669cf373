"""The results page: `page.md.j2` filled from `ReportInputs` and the figures drawn for it.

Every link is relative to the page's own folder and points only at files that exist, so the page
renders on GitHub and in any Markdown viewer.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import jinja2

from pipeline.core.config import DecodeConfig, Params
from pipeline.core.metrics import Bucket
from pipeline.data import time_machine as tm
from pipeline.data.languages import target
from pipeline.data.multi30k import LANG_NAMES
from pipeline.ops.report.inputs import ReportInputs
from pipeline.tracking.registry import VersionInfo

TEMPLATE = "page.md.j2"
TUTORIAL_CLAIM = {  # the tutorial, chapter 50 "Full Transformer from Scratch"
    "split": "val",
    "bleu": 33.5,
    "config": "d_model 256, 4 heads, 3 layers, d_ff 512",
    "how": "a constant printed by a chapter stub (`final validation BLEU ~ 33.5`) beside a "
    "pre-computed loss curve; no training code ran, tokenisation and decoding unstated",
}
SCORE_NAMES = {"bleu": "BLEU", "bleu_lc_tok": "BLEU lc-tok", "chrf": "chrF"}


def num(value: float | None, digits: int = 2) -> str:
    """`value` with `digits` decimals; "–" for None or NaN."""
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def cell(text: object) -> str:
    """`text` safe inside a Markdown table cell (pipes escaped, newlines as spaces)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def link(path: Path, base: Path, text: str | None = None, image: bool = False) -> str:
    """A Markdown link (or image) to `path` relative to `base`, or plain code text if it is missing."""
    rel = Path(os.path.relpath(path, base)).as_posix()
    if not Path(path).exists():
        return f"`{rel}` (missing)"
    return f"{'!' if image else ''}[{text or rel}]({rel})"


def signature_lines(signatures: dict) -> list[str]:
    """One line per score: its sacreBLEU signature, or one per split where the splits differ."""
    lines = []
    for key, name in SCORE_NAMES.items():
        found = {sig[key] for sig in signatures.values() if key in sig}
        if len(found) == 1:
            lines.append(f"{name} signature: `{found.pop()}`")
        elif found:
            lines += [f"{name} signature ({s}): `{sig[key]}`" for s, sig in signatures.items() if key in sig]
    return lines


def run_facts(inputs: ReportInputs, decode: DecodeConfig) -> list[tuple[str, str]]:
    """The run table's (name, value) rows: sizes, recipe, budget used, machine, provenance."""
    s = inputs.summary
    seconds = s.get("wall_seconds", s.get("minutes", math.nan) * 60)
    return [
        ("parameters", f"{s['parameters']:,}" if isinstance(s.get("parameters"), int) else "–"),
        ("model", ", ".join(f"{k}={v}" for k, v in s.get("model", {}).items())),
        ("optimisation", ", ".join(f"{k}={v}" for k, v in s.get("optim", {}).items())),
        ("decoding", ", ".join(f"{k}={v}" for k, v in decode.settings().items())),
        ("steps / epochs", f"{s.get('steps', '–')} / {s.get('epochs', '–')}"),
        ("training wall time", f"{num(seconds, 0)} s ({num(seconds / 3600)} h)"),
        ("mean tokens/s", str(s.get("mean_tokens_per_s", "–"))),
        (
            "device",
            f"{s.get('device', '–')} ({s.get('cpu', '–')}), bf16 {s.get('bf16', '–')}, "
            f"{s.get('threads', '–')} threads",
        ),
        ("torch", str(s.get("torch", "–"))),
        ("git commit", f"`{inputs.git_commit}`"),
        ("MLflow run id", f"`{inputs.mlflow_run_id}`" if inputs.mlflow_run_id else "not tracked"),
    ]


def candidate_words(name: str) -> str:
    """A final-model candidate's name (`pipeline.training.final_model.candidates`) in words."""
    if name.startswith("average_last_"):
        return f"the average of the last {name.removeprefix('average_last_')} step checkpoints"
    words = {"best": "`best.pt` (the best validation)", "ema": "the moving average of the weights"}
    return words.get(name, name)


def final_model_sentence(choice: dict | None) -> str:
    """The final-model choice of `train_facts.json` (`{"source": name, "candidates": {name: greedy
    val BLEU}}`) as a sentence; "–" when absent."""
    if not choice:
        return "–"
    source, scores = choice["source"], choice.get("candidates", {})
    text = f"{candidate_words(source)}, chosen on greedy val BLEU ({num(scores.get(source))})"
    others = [f"{candidate_words(name)} ({num(value)})" for name, value in scores.items() if name != source]
    return text + (" over " + " and ".join(others) if others else "")


def version_line(model_name: str, version: VersionInfo) -> str:
    """`model_name` vN, its aliases and what promotion made of it."""
    aliases = f"aliases {', '.join(f'`{a}`' for a in version.aliases)}" if version.aliases else "no alias"
    return f"`{model_name}` v{version.version} ({aliases}): {promotion_sentence(version)}"


def promotion_sentence(version: VersionInfo) -> str:
    """The last promotion decision on `version`, from its `promotion.*` and `rollback.*` tags."""
    t = version.tags
    if "rollback.replaced_by" in t:
        return f"rolled back on {t.get('rollback.time', '?')[:10]}: `champion` went back to v{t['rollback.replaced_by']}"
    decision, when = t.get("promotion.decision"), t.get("promotion.time", "?")[:10]
    if decision is None:
        return "not compared with the champion yet (the Prefect flow compares after the stages)"
    if "promotion.p_value" not in t and decision == "promoted":
        return f"promoted to champion on {when}, the first champion"
    if "promotion.p_value" not in t:
        return f"{decision} on {when}"
    ours, theirs = float(t["promotion.bleu_candidate"]), float(t["promotion.bleu_champion"])
    compared = (
        f"val BLEU {ours:.2f} against champion v{t['promotion.champion_version']}'s {theirs:.2f}, "
        f"paired bootstrap p = {t['promotion.p_value']}"
    )
    if decision == "promoted":
        return f"promoted to champion on {when}: {compared} < {t['promotion.p_threshold']}"
    return f"the champion was kept on {when}: {compared}"


def model_lines(inputs: ReportInputs, model_name: str) -> list[str]:
    """The page's lines on the registered model: each version of this run, and the champion when it
    is another run's; one line saying why there is none otherwise."""
    if not inputs.mlflow_run_id:
        return ["Not tracked: no MLflow run, no registered version."]
    if inputs.versions is None:
        return ["The registry was not read: tracking is off (`mlflow.enabled`)."]
    if not inputs.versions:
        return [f"MLflow run `{inputs.mlflow_run_id}` has no version of `{model_name}` in this database."]
    lines = [version_line(model_name, v) for v in inputs.versions]
    champion = inputs.champion
    if champion is None:
        lines.append("No version is `champion` yet.")
    elif champion.version not in {v.version for v in inputs.versions}:
        lines.append(f"The champion is v{champion.version}, another run's model.")
    return lines


def render(
    inputs: ReportInputs,
    params: Params,
    page_md: Path,
    *,
    buckets: list[Bucket],
    bucket_chart: Path,
    attention: list[tuple[str, Path]],
) -> str:
    """The page's Markdown; links are relative to `page_md`'s folder."""
    base, decode = Path(page_md).parent, params.decode
    german = target(inputs.tgt_lang).time_machine  # the tutorial's outputs are German
    model = inputs.summary.get("model", {})
    table = (
        tm.rows(inputs.time_machine_en, inputs.time_machine_ours, inputs.time_machine_tutorial)
        if german
        else []
    )
    result, (normal, upper) = inputs.robustness or (None, (None, None))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters |= {"num": num, "cell": cell}
    return env.get_template(TEMPLATE).render(
        language=LANG_NAMES[inputs.tgt_lang],
        decode=decode,
        metrics=inputs.metrics,
        signature_lines=signature_lines(inputs.signatures),
        robustness=result,
        robustness_tsv=decode.robustness_tsv,
        upper_bleu=upper,
        normal_bleu=normal,
        german=german,
        claim=TUTORIAL_CLAIM,
        claim_ours=inputs.metrics.get(TUTORIAL_CLAIM["split"], {}).get("bleu"),
        ours_config=", ".join(
            f"{k} {model[k]}" for k in ("d_model", "n_heads", "n_layers", "d_ff") if k in model
        ),
        train_log_link=link(Path(params.train.log_csv), base),
        bucket_split=inputs.bucket_split,
        buckets=buckets,
        bucket_chart=link(bucket_chart, base, "BLEU by length", image=True),
        time_machine_link=link(Path(decode.time_machine_md), base),
        time_machine_chrf=tm.mean_chrf(table),
        attention=[
            (s, link(p, base, f"cross-attention {i}", image=True)) for i, (s, p) in enumerate(attention, 1)
        ],
        facts=run_facts(inputs, decode),
        final_model=final_model_sentence(inputs.summary.get("final_model")),
        model_lines=model_lines(inputs, params.mlflow.model_name),
        files=[link(path, base, name) for name, path in inputs.links.items() if Path(path).exists()],
    )
