"""CTranslate2 export check on the trained model: same translations and BLEU as our beam search?

What it checks and what it writes: docs/checks.md, `checks.ct2_check`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from bench.common import CPU, report, timed_result
from checks.common import parser, speed_and_bleu, trained
from pipeline.core.errors import run_main
from pipeline.serving.ct2 import ct2_translate, export_ctranslate2, load_ct2
from pipeline.serving.torch_engine import translate


def main() -> None:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("models/ct2"), help="where the export goes")
    args = p.parse_args()
    run = trained(args.split)
    cfg, threads, tok = run.params.decode, torch.get_num_threads(), run.engine.tokenizer
    export_ctranslate2(run.engine.model, tok, args.out)
    ours, seconds = timed_result(lambda: translate(run.engine.model, tok, run.en, cfg))
    rows = {"ours": (ours, seconds)}
    for compute_type in ("float32", "int8"):
        engine = load_ct2(args.out, compute_type, threads)
        rows[f"ct2_{compute_type}"] = timed_result(lambda e=engine: ct2_translate(e, tok, run.en, cfg))
    figures = {
        "split": args.split,
        "beam_size": cfg.beam_size,
        "length_penalty": cfg.length_penalty,
        "threads": threads,
    }
    for name, (hyps, secs) in rows.items():
        same = sum(h == o for h, o in zip(hyps, ours, strict=True)) / len(ours)
        figures[name] = speed_and_bleu(hyps, secs, run.refs) | {"same_as_ours": round(same, 4)}
    report("checks.ct2_check", sys.argv[1:], "reports", {"ct2": figures}, CPU)


if __name__ == "__main__":
    run_main(main)
