"""`python -m pipeline translate` (console script `mt-translate`): English in, the target language
(German by default) out, one output line per input line, from the arguments or stdin
(docs/input-processing.md), read and written as UTF-8 whatever the locale. Defaults are the
pipeline's files in this checkout; paths given as flags are relative to the working directory.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from importlib import metadata
from itertools import islice
from pathlib import Path

import torch
from tqdm import tqdm

from pipeline.core.config import DecodeConfig, Params
from pipeline.core.device import pick_device
from pipeline.core.errors import CheckpointError, ConfigError, PipelineError, silence_stdout
from pipeline.core.git import repo_root
from pipeline.core.params_file import FieldError, default_params, load_params, with_updates
from pipeline.data.tokenizer import model_file
from pipeline.serving.engine import Engine
from pipeline.serving.translator import (
    load_ct2_translator,
    load_translator,
    translate_lines,
    translate_lines_n_best,
)

REPO = repo_root()
DEFAULT_PARAMS = REPO / "params.yaml"
DEFAULT_CT2 = REPO / "models/ct2"
BATCH_LINES = 256  # lines per batch when stdin is not a terminal


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mt-translate",
        description="Translate English into the trained target language (params.yaml download.tgt_lang). "
        "Sentences, stdin and stdout are UTF-8 whatever the locale.",
    )
    p.add_argument("sentences", nargs="*", help="sentences to translate (default: read stdin, one per line)")
    p.add_argument(
        "--checkpoint", type=Path, default=None, help="model checkpoint (default: from params.yaml)"
    )
    p.add_argument(
        "--ensemble",
        type=Path,
        action="append",
        default=None,
        metavar="CHECKPOINT",
        help="another checkpoint decoded with --checkpoint, log-probs averaged; one flag per checkpoint "
        "(--ensemble a.pt --ensemble b.pt; default: decode.ensemble)",
    )
    p.add_argument("--spm", type=Path, default=None, help="SentencePiece model (default: from params.yaml)")
    p.add_argument("--params", type=Path, default=DEFAULT_PARAMS, help="params file for the defaults")
    p.add_argument("--beam-size", type=int, default=None, help="beam size (1 = greedy)")
    p.add_argument("--length-penalty", type=float, default=None, help="GNMT length penalty alpha")
    p.add_argument("--max-len-a", type=float, default=None, help="max output pieces = a * source pieces + b")
    p.add_argument("--max-len-b", type=int, default=None, help="see --max-len-a")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per decoding batch")
    p.add_argument(
        "--n-best",
        type=int,
        default=None,
        help="print the K best per input: K lines '<input line>\\t<rank>\\t<score>\\t<translation>'",
    )
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where the engine runs")
    p.add_argument(
        "--engine",
        choices=["torch", "ctranslate2"],
        default="torch",
        help="our PyTorch beam search, or a CTranslate2 export (python -m pipeline.ops.export ctranslate2)",
    )
    p.add_argument(
        "--ct2-dir", type=Path, default=DEFAULT_CT2, help="the CTranslate2 export (--engine ctranslate2)"
    )
    p.add_argument("--compute-type", default="int8", help="CTranslate2 compute type: int8, float32, ...")
    p.add_argument(
        "--attention",
        type=Path,
        default=None,
        help="save the cross-attention PNG of the first line of fewer than train.max_len pieces",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    return p


def version() -> str:
    """This package's version (its metadata when installed, else pyproject's)."""
    try:
        return metadata.version("mt-pipeline")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def defaults(params_path: Path) -> Params:
    """The repository's params.yaml when present, else the one shipped with the package; a --params file
    given explicitly must exist.

    Raises:
        ConfigError: an explicitly given --params file does not exist.
    """
    if params_path.exists():
        return load_params(params_path)
    if params_path != DEFAULT_PARAMS:
        raise ConfigError(f"--params {params_path}: no such file")
    return default_params()


DECODE_FLAGS = ("beam_size", "length_penalty", "max_len_a", "max_len_b", "batch_size")


def decode_config(base: DecodeConfig, args: argparse.Namespace) -> DecodeConfig:
    """params' decode section with the flags of `DECODE_FLAGS` given on the command line,
    validated like params.yaml.

    Raises:
        ConfigError: a flag's value is out of range (named as the flag).
    """
    updates = {k: getattr(args, k) for k in DECODE_FLAGS if getattr(args, k) is not None}
    try:
        return with_updates(base, updates)
    except FieldError as err:
        raise ConfigError(f"--{err.field.replace('_', '-')}: {err.reason}") from None


def check_beam_fits(beam_size: int, vocab_size: int, args: argparse.Namespace) -> None:
    """A beam search keeps `beam_size` distinct next pieces, and never pad or bos.

    Raises:
        ConfigError: the beam is wider than the vocabulary less pad and bos (named as --beam-size,
            or as the params field when the flag is not given).
    """
    if beam_size > vocab_size - 2:
        where = "--beam-size" if args.beam_size is not None else f"{args.params}: decode.beam_size"
        raise ConfigError(
            f"{where}: beam size {beam_size} exceeds the vocabulary size {vocab_size} less pad and bos"
        )


def input_batches(sentences: list[str]) -> Iterator[list[str]]:
    """The arguments as one batch; else stdin: one line per batch from a terminal (answered as
    typed), `BATCH_LINES` lines per batch from a file or pipe."""
    if sentences:
        yield [utf8_line(n, utf8_argument(text), "argument") for n, text in enumerate(sentences, start=1)]
        return
    stdin = surrogate_stdin()
    lines = (utf8_line(n, line.rstrip("\n")) for n, line in enumerate(stdin, start=1))
    size = 1 if stdin.isatty() else BATCH_LINES
    while batch := list(islice(lines, size)):
        yield batch


def surrogate_stdin():
    """stdin read as UTF-8 whatever the locale; `\\n`, `\\r\\n` and a lone `\\r` end a line.

    Undecodable bytes are handed on as surrogates (whatever PYTHONIOENCODING's error handler), so
    `utf8_line` reports them with their line number."""
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(encoding="utf-8", errors="surrogateescape", newline=None)
    return sys.stdin


def utf8_argument(text: str) -> str:
    """A command-line argument read as UTF-8 whatever the locale: Python decoded its bytes with the
    locale's encoding, so they are encoded back and decoded again (undecodable bytes as surrogates)."""
    try:
        return os.fsencode(text).decode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # text the locale cannot encode did not come from its bytes
        return text


def utf8_line(number: int, line: str, source: str = "stdin line") -> str:
    """`line` itself when it is text (undecodable bytes of stdin and of the arguments arrive as
    surrogates).

    Raises:
        ConfigError: the line held bytes that are not UTF-8 (`<source> <number>: not UTF-8 text`).
    """
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{source} {number}: not UTF-8 text") from None
    return line


def spm_path(args: argparse.Namespace, params: Params) -> Path:
    """--spm, else params' tokenizer.out_dir (relative to the params file's folder)."""
    return args.spm or model_file(args.params.resolve().parent / params.tokenizer.out_dir)


def checkpoint_path(args: argparse.Namespace, params: Params) -> Path:
    """--checkpoint, else params' train.model_file (relative to the params file's folder)."""
    return args.checkpoint or args.params.resolve().parent / params.train.model_file


def run_device(args: argparse.Namespace) -> torch.device:
    """--device resolved once for the run.

    Raises:
        ConfigError: --device cuda where PyTorch sees no CUDA device.
    """
    device = pick_device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: this PyTorch sees no CUDA device")
    return device


def outputs(
    engine: Engine,
    batch: list[str],
    first_line: int,
    cfg: DecodeConfig,
    *,
    n_best: int | None,
    max_len: int,
    tgt_lang: str,
) -> Iterable[str]:
    """The output of each line of `batch` into `tgt_lang`, input line numbers counted from `first_line`.

    Each is its translation or, with `n_best` K, K lines `<line>\t<rank>\t<score>\t<translation>`
    (rank from 1, best first; score: the length-normalised log-probability).
    """
    if n_best is None:
        return translate_lines(engine, batch, cfg, max_pieces=max_len, tgt_lang=tgt_lang)
    nbest = translate_lines_n_best(engine, batch, cfg, n_best, max_pieces=max_len, tgt_lang=tgt_lang)
    return (
        "\n".join(f"{number}\t{rank}\t{score:.4f}\t{text}" for rank, (text, score) in enumerate(entries, 1))
        for number, entries in enumerate(nbest, start=first_line)
    )


def load(args: argparse.Namespace, params: Params, device: torch.device) -> Engine:
    """Our checkpoint, or with --engine ctranslate2 the CTranslate2 export (no --attention), on `device`."""
    spm = spm_path(args, params)
    if args.engine == "torch":
        checkpoint = checkpoint_path(args, params)
        if args.checkpoint is None and not checkpoint.exists():
            raise CheckpointError(
                f"{checkpoint}: no trained model yet: run `dvc repro` to train it, or `dvc pull` to fetch it"
            )
        ensemble = params.decode.ensemble if args.ensemble is None else args.ensemble
        if ensemble and args.attention is not None:
            raise ConfigError("--attention draws one model's attention: it cannot be used with an ensemble")
        return load_translator(checkpoint, spm, device, ensemble=ensemble)
    if args.ensemble:
        raise ConfigError("--ensemble needs --engine torch (our beam search averages the models)")
    if args.attention is not None:
        raise ConfigError(
            "--engine ctranslate2: --attention needs --engine torch (it draws our model's attention)"
        )
    try:
        return load_ct2_translator(args.ct2_dir, spm, args.compute_type, device.type)
    except ValueError as exc:  # CTranslate2's message for an unknown compute type
        raise ConfigError(f"--compute-type {args.compute_type}: {exc}") from None


def drawable(engine: Engine, line: str, max_len: int) -> bool:
    """Whether --attention can draw `line` in one piece: not blank, and fewer than `max_len`
    pieces (the model's source maximum, eos included), so its attention map stays small."""
    return bool(line.strip()) and len(engine.tokenizer.encode(line)) < max_len


def check_attention_path(path: Path) -> None:
    """--attention must name a new or regular file that can be written, in an existing folder
    (checked before translating, by opening it for appending; a file made to check is removed).

    Raises:
        ConfigError: the folder does not exist, the path is a folder or not a regular file, or
            it cannot be written (no permission, a read-only or virtual file system, a name too long).
    """
    if not path.parent.is_dir():
        raise ConfigError(f"--attention {path}: the folder {path.parent} does not exist")
    try:
        if path.is_dir():
            raise ConfigError(f"--attention {path}: is a folder, not a PNG file name")
        if path.exists() and not path.is_file():
            raise ConfigError(f"--attention {path}: not a regular file")
        existed = path.exists()
        with path.open("ab"):
            pass
    except OSError as err:
        raise ConfigError(f"--attention {path}: cannot be written ({err.strerror})") from None
    if not existed:
        path.unlink()


def run(args: argparse.Namespace) -> Iterator[str]:
    """Yield the output for each input line (one translated line; K lines with --n-best)."""
    if args.attention is not None:
        check_attention_path(args.attention)
    params = defaults(args.params)
    cfg = decode_config(params.decode, args)
    if args.n_best is not None and not 1 <= args.n_best <= cfg.beam_size:
        raise ConfigError(f"--n-best: must be between 1 and the beam size {cfg.beam_size}")
    engine = load(args, params, run_device(args))
    check_beam_fits(cfg.beam_size, engine.tokenizer.vocab_size, args)
    max_len = params.train.max_len
    first: tuple[str, str] | None = None
    number = 1
    for batch in input_batches(args.sentences):
        translated = outputs(
            engine, batch, number, cfg, n_best=args.n_best, max_len=max_len, tgt_lang=params.download.tgt_lang
        )
        number += len(batch)
        for line, output in zip(batch, translated, strict=True):
            if args.attention is not None and first is None and drawable(engine, line, max_len):
                first = (line, output if args.n_best is None else output.split("\n")[0].split("\t", 3)[3])
            yield output
    if args.attention is not None:
        if first is None:
            raise PipelineError(f"--attention: no non-empty line of fewer than {max_len} pieces to draw")
        from pipeline.model.attention_maps import attention_map
        from pipeline.ops.report.figures import plot_attention

        amap = attention_map(engine.model, engine.tokenizer, *first)
        plot_attention(amap, f"{first[0]}\n{first[1]}", args.attention)


def progress_bar(args: argparse.Namespace) -> tqdm:
    """A count of translated lines on stderr, shown only when stdin is read, stdout is not a terminal
    and stderr is one (`mt-translate < big.en > big.de`): elsewhere it would mix with the text."""
    shown = not args.sentences and not sys.stdin.isatty() and not sys.stdout.isatty() and sys.stderr.isatty()
    return tqdm(desc="mt-translate", unit=" lines", disable=not shown, file=sys.stderr)


def write_line(text: str) -> None:
    """Print `text` and a newline to stdout at once.

    Raises:
        PipelineError: stdout cannot be written (a full disk); stdout is then discarded, so nothing
            more is written to it at exit.
        BrokenPipeError: its reader went away (`run_main` ends quietly).
    """
    try:
        print(text, flush=True)
    except BrokenPipeError:
        raise
    except OSError as err:
        silence_stdout()
        raise PipelineError(f"standard output: cannot be written ({err.strerror or err})") from None


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")  # the model's text, whatever the locale
    with progress_bar(args) as bar:
        for output in run(args):
            write_line(output)
            bar.update()
