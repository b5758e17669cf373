"""A check on the trained model: files at batch speed, and what the input processing costs.

What it checks and what it writes: docs/checks.md, `checks.input_check`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import CPU, report, timed_result
from checks.common import parser, speed_and_bleu, trained
from pipeline.core.errors import run_main
from pipeline.serving.torch_engine import translate
from pipeline.serving.translator import translate_lines


def mt_translate(lines: list[str]) -> list[str]:
    """`mt-translate < file` run from a scratch directory: one output line per input line."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.en"
        src.write_text("\n".join(lines) + "\n", encoding="utf-8")
        with src.open() as stdin:
            out = subprocess.run(
                [shutil.which("mt-translate")],
                stdin=stdin,
                cwd=tmp,
                capture_output=True,
                text=True,
                check=True,
            )
    return out.stdout.splitlines()


def main() -> None:
    args = parser(__doc__.split("\n")[0]).parse_args()
    run = trained(args.split)
    cfg, en = run.params.decode, run.en
    rows = {
        "decode_stage": timed_result(
            lambda: translate_lines(run.engine, en, cfg, max_pieces=run.params.train.max_len)
        ),
        "bare_beam": timed_result(lambda: translate(run.engine.model, run.engine.tokenizer, en, cfg)),
        "mt_translate_file": timed_result(lambda: mt_translate(en)),
    }
    figures = {"split": args.split, "sentences": len(en), "beam_size": cfg.beam_size}
    figures |= {name: speed_and_bleu(hyps, secs, run.refs) for name, (hyps, secs) in rows.items()}
    figures["mt_translate_vs_decode_stage"] = round(
        figures["mt_translate_file"]["sent_s"] / figures["decode_stage"]["sent_s"], 3
    )
    figures["processing_bleu_change"] = round(
        figures["decode_stage"]["bleu"] - figures["bare_beam"]["bleu"], 2
    )
    figures["mt_translate_same_lines"] = rows["mt_translate_file"][0] == rows["decode_stage"][0]
    report("checks.input_check", sys.argv[1:], "reports", {"input": figures}, CPU)


if __name__ == "__main__":
    run_main(main)
