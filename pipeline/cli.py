"""`python -m pipeline translate` (console script `mt-translate`): English in, German out.

Sentences come from the arguments, or from stdin one per line (streamed: each line is
translated and printed as it arrives). An empty input line gives an empty output line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import ValidationError

from pipeline.checkpoint import load_model
from pipeline.config import DecodeConfig, Params, load_params
from pipeline.device import pick_device
from pipeline.errors import ConfigError, PipelineError, run_main
from pipeline.search import translate
from pipeline.tokenizer import Tokenizer

DEFAULT_CHECKPOINT = Path("models/transformer/model.pt")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mt-translate", description="Translate English to German.")
    p.add_argument("sentences", nargs="*", help="sentences to translate (default: read stdin, one per line)")
    p.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT, help="model checkpoint (.pt)")
    p.add_argument("--spm", type=Path, default=None, help="SentencePiece model (default: from params.yaml)")
    p.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file for the defaults")
    p.add_argument("--beam-size", type=int, default=None, help="beam size (1 = greedy)")
    p.add_argument("--length-penalty", type=float, default=None, help="GNMT length penalty alpha")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument(
        "--attention", type=Path, default=None, help="save the first sentence's cross-attention PNG"
    )
    return p


def defaults(params_path: Path) -> Params:
    """params.yaml when present (run from the repo), else the built-in defaults."""
    return load_params(params_path) if params_path.exists() else Params()


def decode_config(base: DecodeConfig, beam_size: int | None, length_penalty: float | None) -> DecodeConfig:
    """Apply the command-line overrides, validated like params.yaml."""
    updates = {
        k: v for k, v in {"beam_size": beam_size, "length_penalty": length_penalty}.items() if v is not None
    }
    try:
        return DecodeConfig.model_validate({**base.model_dump(), **updates})
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-")
        raise ConfigError(f"{flag}: {err['msg']}") from None


def input_lines(sentences: list[str]) -> Iterable[str]:
    return sentences if sentences else (line.rstrip("\n") for line in sys.stdin)


def run(args: argparse.Namespace) -> Iterator[str]:
    """Yield one German line per input line."""
    params = defaults(args.params)
    cfg = decode_config(params.decode, args.beam_size, args.length_penalty)
    tokenizer = Tokenizer.load(args.spm or Path(params.tokenizer.out_dir) / "spm.model")
    model, _ = load_model(args.checkpoint, vocab_size=tokenizer.vocab_size)
    device = pick_device(args.device)
    first: tuple[str, str] | None = None
    for line in input_lines(args.sentences):
        german = translate(model, tokenizer, [line], cfg, device)[0]
        if first is None and line.strip():
            first = (line, german)
        yield german
    if args.attention is not None:
        if first is None:
            raise PipelineError("--attention: no non-empty sentence to draw")
        from pipeline.attention_maps import attention_map
        from pipeline.report import plot_attention

        amap = attention_map(model, tokenizer, *first)
        plot_attention(amap, f"{first[0]}\n{first[1]}", args.attention)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    for german in run(args):
        print(german, flush=True)


def console() -> None:
    """Entry point of the `mt-translate` console script."""
    run_main(main)
