"""DVC stage `report`: the run's results page and its figures.

Usage: `python -m stages.report` (paths: `report.*` in params.yaml; its inputs are the paths of the
`decode`, `score` and `train` sections). The train facts, score signatures and MLflow run id may be
absent. Writes `report.page_md` (`pipeline.ops.report.page`) and the PNGs in `report.figures_dir`
(`pipeline.ops.report.figures`): BLEU by source length and the time machine's cross-attention maps.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import datasets

from pipeline.core.device import pick_device
from pipeline.core.errors import run_main
from pipeline.core.io import write_text
from pipeline.core.metrics import bleu_by_length
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent
from pipeline.data.multi30k import skipped_splits
from pipeline.data.tokenizer import model_file
from pipeline.ops.report import figures, page
from pipeline.ops.report.inputs import load_inputs
from pipeline.serving.translator import load_translator


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    datasets.disable_progress_bars()
    params = stage_params(argv)
    page_md, fig_dir = Path(params.report.page_md), Path(params.report.figures_dir)
    engine = load_translator(
        Path(params.train.model_file), model_file(params.tokenizer.out_dir), pick_device("auto")
    )
    inputs = load_inputs(params)
    buckets = bleu_by_length(inputs.bucket_en, inputs.bucket_hyps, inputs.bucket_refs)
    chart = figures.plot_buckets(buckets, inputs.bucket_split, fig_dir / "bleu_by_length.png")
    attention = figures.plot_attention_maps(engine, inputs.time_machine_en, inputs.time_machine_ours, fig_dir)
    write_text(
        page_md,
        page.render(inputs, params, page_md, buckets=buckets, bucket_chart=chart, attention=attention),
    )
    for message in skipped_splits(params.download.tgt_lang):
        print(f"report: {message}")
    print(f"report: {1 + len(attention)} figures in {fig_dir}, page {page_md}")


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
