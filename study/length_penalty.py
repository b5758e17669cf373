"""Re-tune the length penalty of a recorded study candidate on val, without retraining:
`python -m study.length_penalty NAME [--alphas ...]` decodes val with each GNMT α (Wu et al.
2016, section 7) and steps up to a larger α only when paired bootstrap says it is better
(docs/study.md, "Re-tuning the length penalty").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from pipeline.core.config import DecodeConfig, Params
from pipeline.core.device import pick_device
from pipeline.core.errors import PipelineError, run_main
from pipeline.core.metrics import bleu_and_length_ratio, bleu_lc_tok
from pipeline.core.params_file import load_params
from pipeline.data.multi30k import load_corpus
from pipeline.data.tokenizer import model_file
from pipeline.ops.promotion import paired_bootstrap
from pipeline.serving.translator import load_translator, translate_lines
from study.rows import RECORD, read_record, recorded, write_record
from study.tables import TABLE, render

ALPHAS = (1.0, 1.2, 1.4, 1.6, 1.8)


def step_up(
    hyps: dict[float, list[str]], refs: list[str], lang: str, p_threshold: float, n_samples: int
) -> dict:
    """Score each α's val translations and choose α by stepping up.

    From the smallest α, each larger one replaces the choice so far when its val BLEU is higher
    with paired-bootstrap p below `p_threshold` against that choice (against the choice, not the
    neighbour, so a fine grid of small steps can still add up to a significant gain).

    Returns `{"alphas", "bleu", "bleu_lc_tok", "length_ratio", "p_vs_choice", "chosen"}`: lists in
    increasing α; `p_vs_choice[i]` is α i against the choice among the smaller α (None for the
    smallest).

    Raises:
        PipelineError: fewer than two α, or translations and references differ in length.
    """
    alphas = sorted(hyps)
    if len(alphas) < 2:
        raise PipelineError(f"length penalty: give at least two alphas, got {alphas}")
    out = {"alphas": alphas, "bleu": [], "bleu_lc_tok": [], "length_ratio": [], "p_vs_choice": [None]}
    for a in alphas:
        bleu, ratio = bleu_and_length_ratio(hyps[a], refs)
        out["bleu"].append(round(bleu, 2))
        out["bleu_lc_tok"].append(round(bleu_lc_tok(hyps[a], refs, lang)[0], 2))
        out["length_ratio"].append(round(ratio, 3))
    chosen = 0
    for i in range(1, len(alphas)):
        cmp = paired_bootstrap(refs, hyps[alphas[chosen]], hyps[alphas[i]], n_samples)
        out["p_vs_choice"].append(round(cmp.p_value, 4))
        if cmp.candidate_wins(p_threshold):
            chosen = i
    out["chosen"] = alphas[chosen]
    return out


def experiment_model(name: str, params: Params, out: Path) -> tuple[Path, Path]:
    """Copy experiment `name`'s `model.pt` and tokenizer folder into `out` (DVC cache, or its
    remote); returns (checkpoint, SentencePiece model).

    Raises:
        PipelineError: DVC cannot find the experiment or its files.
    """
    from dvc.api import DVCFileSystem

    model = Path(params.train.model_file)
    try:
        fs = DVCFileSystem(".", rev=name)
        fs.get(params.tokenizer.out_dir, str(out / "spm"), recursive=True)
        fs.get_file(model.as_posix(), str(out / "model.pt"))
    except Exception as err:  # dvc raises its own and fsspec's errors here
        raise PipelineError(f"experiment {name!r}: cannot read {model} from DVC: {err}") from err
    return out / "model.pt", model_file(out / "spm")


def decode_config(row: dict, params: Params) -> DecodeConfig:
    """The decode params the experiment ran with (its record's `decode.*`, else today's)."""
    recorded = {k.removeprefix("decode."): v for k, v in row["params"].items() if k.startswith("decode.")}
    return params.decode.model_copy(update=recorded)


def sweep(name: str, alphas: list[float]) -> dict:
    """Decode val with each α for recorded candidate `name`, choose α, record it; returns the figures.

    Raises:
        PipelineError: `name` is not recorded, or its files cannot be read.
    """
    rows = read_record()
    row = recorded(rows, name)
    if row is None:
        raise PipelineError(f"{RECORD}: no candidate {name!r} (record it first)")
    params = load_params()
    lang = params.download.tgt_lang
    val = load_corpus(params.download.out_dir)["val"]
    cfg = decode_config(row, params)
    with tempfile.TemporaryDirectory() as tmp:
        model, spm = experiment_model(name, params, Path(tmp))
        engine = load_translator(model, spm, pick_device("auto"))
        hyps = {}
        for a in alphas:
            hyps[a] = translate_lines(
                engine,
                val["en"],
                cfg.model_copy(update={"length_penalty": a}),
                max_pieces=params.train.max_len,
            )
            print(f"length_penalty: {name}: alpha {a} decoded")
    figures = step_up(hyps, val[lang], lang, params.promotion.p_threshold, params.promotion.n_samples)
    row["length_penalty"] = figures | {"beam_size": cfg.beam_size}
    write_record(rows)
    render(rows)
    return row["length_penalty"]


def cli(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m study.length_penalty", description=__doc__.split(":\n")[0])
    p.add_argument("name", help="a recorded candidate (python -m study.record NAME)")
    p.add_argument("--alphas", default=",".join(map(str, ALPHAS)), help="comma-separated GNMT alphas (>= 0)")
    args = p.parse_args(argv)
    try:
        alphas = sorted({float(a) for a in args.alphas.split(",")})
    except ValueError:
        raise PipelineError(f"--alphas: not a comma-separated list of numbers: {args.alphas!r}") from None
    if alphas[0] < 0:
        raise PipelineError(f"--alphas: a length penalty must be >= 0, got {alphas[0]}")
    fig = sweep(args.name, alphas)
    for i, a in enumerate(fig["alphas"]):
        print(
            f"alpha {a}: val BLEU {fig['bleu'][i]} lc-tok {fig['bleu_lc_tok'][i]} "
            f"length ratio {fig['length_ratio'][i]} p vs the choice below {fig['p_vs_choice'][i]}"
        )
    print(f"length_penalty: {args.name}: chosen alpha {fig['chosen']} -> {RECORD}, {TABLE}")


if __name__ == "__main__":
    run_main(lambda: cli(sys.argv[1:]))
