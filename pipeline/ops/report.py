"""The run's report: figures (PNG) and a Markdown page that renders on GitHub.

`build_report` takes the run's outputs as plain data (scores, training log, summary, a test split's
translations, the time-machine sentences) plus the model and tokenizer, draws the figures into a
folder and writes the Markdown, every file atomically. Figures use matplotlib's Agg backend and
fixed sizes (`FIGSIZE`, `ATTENTION_FIGSIZE` at `DPI`), so their pixel sizes never vary. The
Markdown links only to files that exist, by paths relative to its own folder.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from pipeline.core.config import DecodeConfig, Params  # noqa: E402
from pipeline.core.errors import DataError  # noqa: E402
from pipeline.core.io import atomic_path, write_text  # noqa: E402
from pipeline.core.metrics import score, sentence_chrf  # noqa: E402
from pipeline.data import translations as tr  # noqa: E402
from pipeline.data.languages import target  # noqa: E402
from pipeline.data.multi30k import LANG_NAMES, load_corpus  # noqa: E402
from pipeline.model.attention_maps import AttentionMap, attention_map  # noqa: E402
from pipeline.ops import robustness  # noqa: E402
from pipeline.ops.robustness import RobustnessResult  # noqa: E402
from pipeline.serving.ours import OursEngine  # noqa: E402
from pipeline.tracking.runs import git_commit, read_run_id  # noqa: E402, F401 (re-exported)

DPI = 100
FIGSIZE = (8.0, 4.5)  # inches: 800 x 450 px
ATTENTION_FIGSIZE = (12.0, 10.0)  # 1200 x 1000 px whatever the sentence or head count
LOG_COLUMNS = ("step", "train_loss", "val_loss", "val_bleu", "lr")
LENGTH_BUCKETS = (("≤10", 0, 10), ("11–15", 11, 15), ("16–20", 16, 20), (">20", 21, math.inf))
ATTENTION_SENTENCES = (0, 7, 11)  # time-machine sentences drawn as heatmaps (0-based)
SEED_CLAIM = {  # the seed document 000_*.txt, chapter 50 "Full Transformer from Scratch"
    "split": "val",
    "bleu": 33.5,
    "config": "d_model 256, 4 heads, 3 layers, d_ff 512",
    "how": "a constant printed by a chapter stub (`final validation BLEU ~ 33.5`) beside a "
    "pre-computed loss curve; no training code ran, tokenisation and decoding unstated",
}
UMLAUTS = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "Ä": "Ae", "Ö": "Oe", "Ü": "Ue", "ß": "ss"})


# --------------------------------------------------------------------------- inputs


def read_json(path: Path) -> dict:
    """A JSON object from `path`.

    Raises:
        DataError: missing or not JSON (run the stage that writes it).
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: not found (run the stage that writes it)") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None


def read_json_optional(path: Path | None) -> dict:
    """`read_json(path)`, or {} when `path` is None or absent (an older run without the file)."""
    return read_json(path) if path is not None and Path(path).is_file() else {}


def read_log(path: Path) -> list[dict[str, float]]:
    """The training log CSV as rows of floats (an empty cell is NaN).

    Raises:
        DataError: missing, empty, or without the columns `LOG_COLUMNS`.
    """
    if not Path(path).is_file():
        raise DataError(f"{path}: training log not found (run the train stage)")
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in LOG_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path}: missing columns {', '.join(missing)}")
        rows = [{k: float(v) if v not in ("", None) else math.nan for k, v in r.items()} for r in reader]
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


@dataclass(frozen=True)
class ReportInputs:
    """What the report shows, as plain data.

    `metrics`: `{split: {bleu, chrf, bleu_lc_tok}}`; `signatures`: the same keys holding sacreBLEU
    signatures (the score stage's facts file); `log`: training log rows; `summary`: the train
    stage's summary and facts merged (numbers, device facts, `model`/`optim` config);
    `robustness`: the robustness table's result and the upper-case BLEU pair (normal source,
    upper-cased source), or None; `time_machine_en` (as translated) / `time_machine_ours` /
    `time_machine_seed`: the seed's sentences, our translations (the decode stage's) and its German; `bucket_*`: one split's English, our German and the
    references; `links`: name -> file shown in the page's file list (only existing ones are linked);
    `tgt_lang`: the target language (the seed comparison and the time machine are German-only).
    """

    metrics: dict
    log: list[dict[str, float]]
    summary: dict
    time_machine_en: list[str]
    time_machine_ours: list[str]
    time_machine_seed: list[str]
    bucket_split: str
    bucket_en: list[str]
    bucket_hyps: list[str]
    bucket_refs: list[str]
    signatures: dict = field(default_factory=dict)
    robustness: tuple[RobustnessResult, tuple[float, float]] | None = None
    git_commit: str = "unknown"
    mlflow_run_id: str | None = None
    links: dict[str, Path] = field(default_factory=dict)
    tgt_lang: str = "de"


BUCKET_SPLIT = "test_2016_flickr"  # BLEU by length, and the upper-case BLEU of the robustness section


def load_inputs(files: dict[str, Path], params: Params) -> ReportInputs:
    """The report's inputs from the run's files (`stages.report.ARGS` names the keys), the corpus
    and `params`: what `decode` wrote (translations, the time machine's, the robustness figures),
    the scores, the training log. The train summary and train facts are merged (either may hold a
    key), over the params' `model`/`optim` config."""
    tgt, corpus = params.download.tgt_lang, load_corpus(params.download.out_dir)
    test, splits = corpus[BUCKET_SPLIT], [s for s in tr.EVAL_SPLITS if s in corpus]
    hyps = tr.read_lines(tr.translation_path(files["translations"], BUCKET_SPLIT, tgt))
    config = {"model": params.train.model.model_dump(), "optim": params.train.optim.model_dump()}
    en, seed_de = tr.read_time_machine(files["time_machine"])
    return ReportInputs(
        metrics=tr.read_scores(files["scores"]),
        signatures=read_json_optional(files["score_facts"]),
        log=read_log(files["train_log"]),
        summary={**config, **read_json(files["train_summary"]), **read_json_optional(files["train_facts"])},
        robustness=robustness.read_figures(files["robustness_json"], files["robustness_failures"]),
        time_machine_en=en,
        time_machine_ours=tr.read_lines(tr.translation_path(files["translations"], tr.TIME_MACHINE, tgt)),
        time_machine_seed=seed_de,
        bucket_split=BUCKET_SPLIT,
        bucket_en=test["en"],
        bucket_hyps=hyps,
        bucket_refs=test[tgt],
        git_commit=git_commit(),
        mlflow_run_id=read_run_id(files["mlflow_run_id"]),
        links={s: tr.scores_path(files["scores"], s) for s in splits}
        | {k: files[k] for k in ("score_facts", "train_log", "train_summary", "train_facts")}
        | {f"{s} translations": tr.translation_path(files["translations"], s, tgt) for s in splits},
        tgt_lang=tgt,
    )


# --------------------------------------------------------------------------- computations


@dataclass(frozen=True)
class Bucket:
    """One source-length bucket: its name, sentence count, sacreBLEU (None when empty), signature."""

    name: str
    count: int
    bleu: float | None
    signature: str | None


def bleu_by_length(en: Sequence[str], hyps: Sequence[str], refs: Sequence[str]) -> list[Bucket]:
    """Corpus BLEU on each `LENGTH_BUCKETS` subset, bucketed by English word count (whitespace split).

    Raises:
        DataError: the three lists differ in length.
    """
    if not len(en) == len(hyps) == len(refs):
        raise DataError(f"{len(en)} sources, {len(hyps)} hypotheses, {len(refs)} references")
    buckets = []
    for name, low, high in LENGTH_BUCKETS:
        rows = [i for i, s in enumerate(en) if low <= len(s.split()) <= high]
        if not rows:
            buckets.append(Bucket(name, 0, None, None))
            continue
        s = score([hyps[i] for i in rows], [refs[i] for i in rows])
        buckets.append(Bucket(name, len(rows), float(s["bleu"]), str(s["bleu_signature"])))
    return buckets


def seed_style(text: str) -> str:
    """Our German written as the seed writes it, for a fairer chrF: umlauts/ß as ae/oe/ue/ss and a
    space before final punctuation ("im Park." -> "im Park .")."""
    return re.sub(r"(?<! )([.,!?;:])", r" \1", text.translate(UMLAUTS))


@dataclass(frozen=True)
class TimeMachineRow:
    """One time-machine sentence: chrF of ours against the seed's, as is and in the seed's style."""

    en: str
    ours: str
    seed: str
    chrf: float
    chrf_seed_style: float


def time_machine_rows(en: Sequence[str], ours: Sequence[str], seed: Sequence[str]) -> list[TimeMachineRow]:
    """Sentence chrF of our German against the seed's (both as is, and ours in `seed_style`)."""
    return [
        TimeMachineRow(e, o, s, sentence_chrf(o, s), sentence_chrf(seed_style(o), s))
        for e, o, s in zip(en, ours, seed, strict=True)
    ]


# --------------------------------------------------------------------------- figures


def _save(fig: Figure, path: Path) -> Path:
    """Write `fig` as PNG at `DPI`, atomically (no bbox cropping: the size stays `figsize * DPI`)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})
    return path


def _line_figure(title: str, xs: list[float], series: dict[str, list[float]], ylabel: str) -> Figure:
    """One axes of line plots against step (markers, so a one-row log still shows)."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    for label, ys in series.items():
        ax.plot(xs, ys, marker="o", markersize=3, label=label)
    ax.set(title=title, xlabel="step", ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return fig


def plot_training_curves(log: list[dict[str, float]], fig_dir: Path) -> dict[str, Path]:
    """`loss.png` (train and val loss), `val_bleu.png`, `lr.png` against step; returns name -> path."""
    steps = [r["step"] for r in log]
    col = {c: [r[c] for r in log] for c in LOG_COLUMNS}
    figures = {
        "loss": _line_figure(
            "Loss per token (train: label-smoothed; val: plain cross-entropy)",
            steps,
            {"train": col["train_loss"], "val": col["val_loss"]},
            "nats",
        ),
        "val_bleu": _line_figure(
            "Validation BLEU (greedy, during training)", steps, {"val BLEU": col["val_bleu"]}, "BLEU"
        ),
        "lr": _line_figure("Learning rate (at each validation)", steps, {"lr": col["lr"]}, "lr"),
    }
    return {name: _save(fig, Path(fig_dir) / f"{name}.png") for name, fig in figures.items()}


def plot_buckets(buckets: list[Bucket], split: str, path: Path) -> Path:
    """Bar chart of BLEU per source-length bucket, each bar labelled with its sentence count."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    heights = [b.bleu or 0.0 for b in buckets]
    bars = ax.bar([b.name for b in buckets], heights, color="tab:blue")
    ax.bar_label(bars, labels=[f"{_num(b.bleu, 1)} (n={b.count})" for b in buckets])
    ax.set(title=f"BLEU by English source length ({split})", xlabel="source words", ylabel="BLEU")
    ax.set_ylim(0, max([*heights, 1.0]) * 1.15)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def plot_attention(amap: AttentionMap, title: str, path: Path) -> Path:
    """One heatmap per head (target pieces down, source pieces across), on one colour scale."""
    weights = amap.weights
    n_heads = weights.size(0)
    cols = math.ceil(math.sqrt(n_heads))
    rows = math.ceil(n_heads / cols)
    fig = Figure(figsize=ATTENTION_FIGSIZE, dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    vmax = float(weights.max()) or 1.0
    size = max(4, min(9, 240 // max(len(amap.src_pieces), len(amap.tgt_pieces), 1)))
    for h, ax in enumerate(axes):
        if h >= n_heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(weights[h].numpy(), cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto")
        ax.set_title(f"head {h + 1}")
        ax.set_xticks(range(len(amap.src_pieces)), amap.src_pieces, rotation=90, fontsize=size)
        ax.set_yticks(range(len(amap.tgt_pieces)), amap.tgt_pieces, fontsize=size)
    fig.colorbar(image, ax=axes.tolist(), shrink=0.6, label="attention weight")
    fig.suptitle(
        "\n".join(textwrap.shorten(line, width=120, placeholder=" …") for line in title.splitlines())
    )
    return _save(fig, path)


# --------------------------------------------------------------------------- Markdown


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _link(path: Path, base: Path, text: str | None = None, image: bool = False) -> str:
    """A Markdown link (or image) to `path` relative to `base`, or plain code text if it is missing."""
    rel = Path(os.path.relpath(path, base)).as_posix()
    if not Path(path).exists():
        return f"`{rel}` (missing)"
    return f"{'!' if image else ''}[{text or rel}]({rel})"


def _scores_section(metrics: dict, signatures: dict, decode: DecodeConfig) -> list[str]:
    lines = [
        "## Scores",
        "",
        f"Beam search (beam {decode.beam_size}, length penalty α = {decode.length_penalty}) against",
        "Multi30k's single reference. **BLEU**: sacreBLEU on detokenised cased text (its default 13a",
        "tokenisation). **BLEU lc-tok**: lowercased, Moses-normalised and Moses-tokenised text against",
        "the dataset's official tokenised references: the figure published Multi30k papers report",
        "(e.g. Wu et al. 2021: 41.02 on test_2016_flickr), so compare with papers on that column.",
        "",
        "| split | BLEU | BLEU lc-tok | chrF |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {s} | {_num(m.get('bleu'))} | {_num(m.get('bleu_lc_tok'))} | {_num(m.get('chrf'))} |"
        for s, m in metrics.items()
    ]
    lines.append("")
    names = {"bleu": "BLEU", "bleu_lc_tok": "BLEU lc-tok", "chrf": "chrF"}
    for key, name in names.items():
        found = {sig[key] for sig in signatures.values() if key in sig}
        if len(found) == 1:
            lines.append(f"- {name} signature: `{found.pop()}`")
        lines += [
            f"- {name} signature ({s}): `{sig[key]}`" for s, sig in signatures.items() if len(found) > 1
        ]
    return [*lines, ""]


def _robustness_section(result: tuple[RobustnessResult, tuple[float, float]]) -> list[str]:
    table, (normal, upper) = result
    lines = [
        "## Robustness",
        "",
        "Real input goes through sentence splitting, protected spans (numbers, URLs, e-mails,",
        "characters the tokenizer cannot represent: copied verbatim) and case normalisation",
        "(`pipeline/serving/textproc.py`).",
        "",
        f"- `tests/robustness.tsv`: **{table.passed} / {table.total}** inputs keep every property "
        "(sentence count, spans verbatim, no token repeated more than 3 times in a row, case restored).",
        f"- Upper-cased test_2016_flickr source against upper-cased references: BLEU **{_num(upper)}**, "
        f"against {_num(normal)} for the normal source (its output upper-cased).",
    ]
    lines += [f"  - failed: {_cell(text)} ({'; '.join(why)})" for text, why in table.failed[:10]]
    return [*lines, ""]


def _seed_section(metrics: dict, summary: dict, decode: DecodeConfig) -> list[str]:
    model = summary.get("model", {})
    ours_cfg = ", ".join(f"{k} {model[k]}" for k in ("d_model", "n_heads", "n_layers", "d_ff") if k in model)
    ours = metrics.get(SEED_CLAIM["split"], {}).get("bleu")
    return [
        "### Beside the seed chapter's claim",
        "",
        "| | ours | seed chapter (claimed) |",
        "|---|---:|---:|",
        f"| {SEED_CLAIM['split']} BLEU | {_num(ours)} | ~{SEED_CLAIM['bleu']} |",
        f"| config | {ours_cfg} | {SEED_CLAIM['config']} |",
        f"| how | sacreBLEU on detokenised text, beam {decode.beam_size}, α = {decode.length_penalty} "
        f"| {SEED_CLAIM['how']} |",
        "",
    ]


def _buckets_section(buckets: list[Bucket], split: str, chart: str) -> list[str]:
    lines = [
        f"## BLEU by source length ({split})",
        "",
        "Sentences bucketed by English word count; sacreBLEU on each bucket's subset.",
        "",
        "| source words | sentences | BLEU |",
        "|---|---:|---:|",
    ]
    lines += [f"| {b.name} | {b.count} | {_num(b.bleu)} |" for b in buckets]
    return [*lines, "", chart, ""]


def _time_machine_section(rows: list[TimeMachineRow]) -> list[str]:
    lines = [
        "## Time machine: the seed's 20 sentences",
        "",
        "The seed's English had its space before punctuation removed before translating (as the",
        "`decode` stage does). The seed's German is its own pre-computed output, space-tokenised with",
        "umlauts written ae/oe/ue: chrF is sentence-level chrF of ours against it, as is and with ours",
        "rewritten in the seed's style (ä→ae, ß→ss, a space before punctuation).",
        "",
        "| # | English | ours | seed's German | chrF | chrF (seed style) |",
        "|---:|---|---|---|---:|---:|",
    ]
    for i, r in enumerate(rows, start=1):
        cells = [_cell(r.en), _cell(r.ours), _cell(r.seed), _num(r.chrf, 1), _num(r.chrf_seed_style, 1)]
        lines.append(f"| {i} | " + " | ".join(cells) + " |")
    if rows:
        mean = sum(r.chrf for r in rows) / len(rows)
        mean_style = sum(r.chrf_seed_style for r in rows) / len(rows)
        lines.append(f"| | mean | | | {_num(mean, 1)} | {_num(mean_style, 1)} |")
    return [*lines, ""]


def _facts_section(inputs: ReportInputs, decode: DecodeConfig, files: list[str]) -> list[str]:
    s = inputs.summary
    seconds = s.get("wall_seconds", s.get("minutes", math.nan) * 60)
    hours = seconds / 3600
    facts = [
        ("parameters", f"{s.get('parameters', '–'):,}" if isinstance(s.get("parameters"), int) else "–"),
        ("model", ", ".join(f"{k}={v}" for k, v in s.get("model", {}).items())),
        ("optimisation", ", ".join(f"{k}={v}" for k, v in s.get("optim", {}).items())),
        ("decoding", ", ".join(f"{k}={v}" for k, v in decode.model_dump().items())),
        ("steps / epochs", f"{s.get('steps', '–')} / {s.get('epochs', '–')}"),
        ("training wall time", f"{_num(seconds, 0)} s ({_num(hours)} h)"),
        ("mean tokens/s", str(s.get("mean_tokens_per_s", "–"))),
        (
            "device",
            f"{s.get('device', '–')} ({s.get('cpu', '–')}), bf16 {s.get('bf16', '–')}, "
            f"{s.get('threads', '–')} threads",
        ),
        ("torch", str(s.get("torch", "–"))),
        ("final model", _cell(json.dumps(s["final_model"])) if "final_model" in s else "–"),
        ("git commit", f"`{inputs.git_commit}`"),
        ("MLflow run id", f"`{inputs.mlflow_run_id}`" if inputs.mlflow_run_id else "not tracked"),
    ]
    lines = ["## The run", "", "| | |", "|---|---|"]
    lines += [f"| {name} | {_cell(value)} |" for name, value in facts]
    if files:
        lines += ["", "Files: " + ", ".join(files) + "."]
    return [*lines, ""]


def render_markdown(
    inputs: ReportInputs,
    decode: DecodeConfig,
    report_dir: Path,
    curves: dict[str, Path],
    buckets: list[Bucket],
    bucket_chart: Path,
    tm_rows: list[TimeMachineRow],
    attention: list[tuple[str, Path]],
) -> str:
    """The report page; every path is linked relative to `report_dir` (the page's folder)."""
    base, german = Path(report_dir), target(inputs.tgt_lang).time_machine
    not_german = ["The seed's claim and its time-machine outputs are German: not compared in this run.", ""]
    lines = [
        f"# Results: English→{LANG_NAMES[inputs.tgt_lang]} Transformer on Multi30k",
        "",
        "Written by the `report` stage (`pipeline/ops/report.py`) from this run's outputs; do not edit by hand.",
        "",
        *_scores_section(inputs.metrics, inputs.signatures, decode),
        *(_robustness_section(inputs.robustness) if inputs.robustness else []),
        *(_seed_section(inputs.metrics, inputs.summary, decode) if german else not_german),
        "## Training curves",
        "",
        "From the training log (one point per validation; val BLEU there is greedy, on detokenised text).",
        "",
        *[line for name, path in curves.items() for line in (_link(path, base, name, image=True), "")],
        *_buckets_section(buckets, inputs.bucket_split, _link(bucket_chart, base, "BLEU by length", True)),
        *(_time_machine_section(tm_rows) if german else []),
        "## Cross-attention (last decoder layer, every head)",
        "",
        "Rows: the target piece each decoder position predicts (our translation, teacher-forced);",
        "columns: source pieces. `▁` marks a word start; `</s>` is eos.",
        "",
    ]
    for number, (sentence, path) in enumerate(attention, start=1):
        lines += [
            f"**{_cell(sentence)}**",
            "",
            _link(path, base, f"cross-attention {number}", image=True),
            "",
        ]
    files = [_link(path, base, name) for name, path in inputs.links.items() if Path(path).exists()]
    lines += _facts_section(inputs, decode, files)
    return "\n".join(lines)


# --------------------------------------------------------------------------- the whole report


def build_report(
    inputs: ReportInputs,
    engine: OursEngine,
    decode: DecodeConfig,
    report_md: Path,
    fig_dir: Path,
) -> list[Path]:
    """Draw every figure into `fig_dir` (the attention maps with `engine`'s model, on the decode
    stage's time-machine translations), write `report_md`.

    Returns the files written: the figures, then `report_md`.
    """
    report_md, fig_dir = Path(report_md), Path(fig_dir)
    curves = plot_training_curves(inputs.log, fig_dir)
    buckets = bleu_by_length(inputs.bucket_en, inputs.bucket_hyps, inputs.bucket_refs)
    bucket_chart = plot_buckets(buckets, inputs.bucket_split, fig_dir / "bleu_by_length.png")
    model, tok = engine.model, engine.tokenizer
    ours = inputs.time_machine_ours
    german = target(inputs.tgt_lang).time_machine  # the seed's outputs are German
    tm_rows = time_machine_rows(inputs.time_machine_en, ours, inputs.time_machine_seed) if german else []
    attention = []
    for i in (i for i in ATTENTION_SENTENCES if i < len(ours)):
        amap = attention_map(model, tok, inputs.time_machine_en[i], ours[i])
        path = plot_attention(
            amap, f"{inputs.time_machine_en[i]}\n→ {ours[i]}", fig_dir / f"attention_{i + 1:02d}.png"
        )
        attention.append((inputs.time_machine_en[i], path))
    text = render_markdown(
        inputs, decode, report_md.parent, curves, buckets, bucket_chart, tm_rows, attention
    )
    write_text(report_md, text)
    return [*curves.values(), bucket_chart, *(p for _, p in attention), report_md]
