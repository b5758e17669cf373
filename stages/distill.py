"""DVC stage `distill`: the training set `prepare` reads, passed through (`distill.teacher` empty) or
with the teacher checkpoints' beam translations as targets (Kim & Rush 2016; `pipeline.ops.distill`:
together or one each, `distill.combine`), streamed a chunk at a time. `distill.facts_json` records the
teachers, their SHA-256 and the pair counts.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Sequence

from pipeline.core.device import pick_device
from pipeline.core.errors import run_main
from pipeline.core.io import write_json
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent
from pipeline.data.incoming import iter_merged, write_merged
from pipeline.data.tokenizer import model_file
from pipeline.ops.distill import distilled, sha256, teacher_files, teacher_groups
from pipeline.serving.translator import load_translator, translate_lines


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    params = stage_params(argv)
    cfg, tgt, merged = params.distill, params.download.tgt_lang, params.incoming.out_jsonl
    teachers, start = teacher_files(cfg), time.monotonic()
    groups, spm = teacher_groups(teachers, cfg.combine), model_file(params.tokenizer.out_dir)
    device = pick_device("auto") if groups else None
    translators = [
        functools.partial(
            translate_lines,
            load_translator(group[0], spm, device, ensemble=group[1:]),
            cfg=params.decode,
            progress=sys.stderr.isatty(),
            max_pieces=params.train.max_len,
            tgt_lang=tgt,
        )
        for group in groups
    ]
    counts: dict = {}
    pairs = distilled(lambda: iter_merged(merged, tgt), translators, cfg.keep_original, counts)
    pairs_out = write_merged(cfg.out_jsonl, pairs, tgt)
    facts = {
        "teacher": {str(path): sha256(path) for path in teachers},
        "keep_original": cfg.keep_original,
        "pairs_in": counts["pairs_in"],
        "pairs_out": pairs_out,
        "minutes": round((time.monotonic() - start) / 60, 2),
    }
    write_json(cfg.facts_json, facts)
    what = f"teacher {', '.join(map(str, teachers))}" if teachers else "no teacher: passed through"
    print(f"distill: {what}: {facts['pairs_in']} -> {pairs_out} pairs -> {cfg.out_jsonl}")


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
