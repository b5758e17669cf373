"""The results page's figures: BLEU by source length and cross-attention heatmaps (PNG).

Figures are `matplotlib.figure.Figure` objects saved directly (no pyplot, so no global backend):
fixed sizes (`FIGSIZE`, `ATTENTION_FIGSIZE` at `DPI`), so their pixel sizes never vary, each written
atomically.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from matplotlib.figure import Figure

from pipeline.core.io import atomic_path
from pipeline.core.metrics import Bucket
from pipeline.model.attention_maps import AttentionMap, attention_map
from pipeline.serving.torch_engine import TorchEngine

DPI = 100
FIGSIZE = (8.0, 4.5)  # inches: 800 x 450 px
ATTENTION_FIGSIZE = (12.0, 10.0)  # 1200 x 1000 px whatever the sentence or head count
ATTENTION_SENTENCES = (0, 7, 11)  # time-machine sentences drawn as heatmaps (0-based)


def save(fig: Figure, path: Path) -> Path:
    """Write `fig` as PNG at `DPI`, atomically (no bbox cropping: the size stays `figsize * DPI`)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})
    return path


def plot_buckets(buckets: list[Bucket], split: str, path: Path) -> Path:
    """Bar chart of BLEU per source-length bucket, each bar labelled with its sentence count."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    heights = [b.bleu or 0.0 for b in buckets]
    bars = ax.bar([b.name for b in buckets], heights, color="tab:blue")
    labels = ["–" if b.bleu is None else f"{b.bleu:.1f}" for b in buckets]
    ax.bar_label(bars, labels=[f"{label} (n={b.count})" for label, b in zip(labels, buckets, strict=True)])
    ax.set(title=f"BLEU by English source length ({split})", xlabel="source words", ylabel="BLEU")
    ax.set_ylim(0, max([*heights, 1.0]) * 1.15)
    ax.grid(True, axis="y", alpha=0.3)
    return save(fig, path)


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
    return save(fig, path)


def plot_attention_maps(
    engine: TorchEngine, en: list[str], ours: list[str], fig_dir: Path
) -> list[tuple[str, Path]]:
    """The last decoder layer's cross-attention for the `ATTENTION_SENTENCES` of the time machine,
    re-run with `engine`'s model on our translations `ours`; returns (English sentence, PNG) pairs."""
    drawn = []
    for i in (i for i in ATTENTION_SENTENCES if i < len(ours)):
        amap = attention_map(engine.model, engine.tokenizer, en[i], ours[i])
        path = plot_attention(amap, f"{en[i]}\n→ {ours[i]}", Path(fig_dir) / f"attention_{i + 1:02d}.png")
        drawn.append((en[i], path))
    return drawn
