"""DVC stage `distill`: the training set `prepare` reads, passed through (`distill.teacher` empty) or
with the teacher checkpoints' beam translations as targets (Kim & Rush 2016; `pipeline.ops.distill`).
`distill.facts_json` records the teachers, their SHA-256 and the pair counts.
"""

from __future__ import annotations

import sys
import time

from pipeline.core.config import load_params
from pipeline.core.device import pick_device
from pipeline.core.errors import run_main
from pipeline.core.io import write_json
from pipeline.data.incoming import read_merged, write_merged
from pipeline.data.tokenizer import model_file
from pipeline.ops.distill import distilled_pairs, sha256, teacher_files
from pipeline.serving.translator import load_translator, translate_lines


def main() -> None:
    params = load_params()
    cfg, tgt = params.distill, params.download.tgt_lang
    en, ref = read_merged(params.incoming.out_jsonl, tgt)
    pairs, teachers, start = list(zip(en, ref, strict=True)), teacher_files(cfg), time.monotonic()
    if teachers:
        engine = load_translator(
            teachers[0], model_file(params.tokenizer.out_dir), pick_device("auto"), ensemble=teachers[1:]
        )
        hyps = translate_lines(
            engine,
            en,
            params.decode,
            progress=sys.stderr.isatty(),
            max_pieces=params.train.max_len,
            tgt_lang=tgt,
        )
        pairs = distilled_pairs(pairs, hyps, cfg.keep_original)
    write_merged(cfg.out_jsonl, pairs, tgt)
    facts = {
        "teacher": {path.name: sha256(path) for path in teachers},
        "keep_original": cfg.keep_original,
        "pairs_in": len(en),
        "pairs_out": len(pairs),
        "minutes": round((time.monotonic() - start) / 60, 2),
    }
    write_json(cfg.facts_json, facts)
    what = f"teacher {', '.join(p.name for p in teachers)}" if teachers else "no teacher: passed through"
    print(f"distill: {what}: {len(en)} -> {len(pairs)} pairs -> {cfg.out_jsonl}")


if __name__ == "__main__":
    run_main(main)
