"""The results page: `page.md.j2` filled from `ReportInputs` and the figures drawn for it.

Every link is relative to the page's own folder and points only at files that exist, so the page
renders on GitHub and in any Markdown viewer.
"""

from __future__ import annotations

import json
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
    choice = s.get("final_model")
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
        ),  # fmt: skip
        ("torch", str(s.get("torch", "–"))),
        ("final model", json.dumps(choice) if choice is not None else "–"),
        ("git commit", f"`{inputs.git_commit}`"),
        ("MLflow run id", f"`{inputs.mlflow_run_id}`" if inputs.mlflow_run_id else "not tracked"),
    ]


def render(
    inputs: ReportInputs,
    params: Params,
    page_md: Path,
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
        files=[link(path, base, name) for name, path in inputs.links.items() if Path(path).exists()],
    )
