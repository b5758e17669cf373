"""Export the trained model to CTranslate2 (`pipeline.serving.ct2`), optionally registering the
export as an MLflow model.

    python -m pipeline.ops.export ctranslate2 [--checkpoint CKPT] [--spm SPM] [--out models/ct2] [--register]

CKPT and SPM default to params.yaml's `train.model_file` and tokenizer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.core.config import Params
from pipeline.core.errors import ConfigError, run_main
from pipeline.core.params_file import load_params
from pipeline.core.run_id import read_run_id
from pipeline.data.tokenizer import model_file
from pipeline.serving.ct2 import export_ctranslate2
from pipeline.serving.pyfunc import log_translator
from pipeline.serving.translator import load_translator


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m pipeline.ops.export", description=__doc__.split("\n\n")[0].replace("\n", " ")
    )
    sub = p.add_subparsers(dest="engine", required=True)
    ct2 = sub.add_parser("ctranslate2", help="write a CTranslate2 model directory")
    ct2.add_argument("--checkpoint", type=Path, help="the model (default: params.yaml's train.model_file)")
    ct2.add_argument("--spm", type=Path, help="the SentencePiece model (default: params.yaml's tokenizer)")
    ct2.add_argument("--out", default="models/ct2", help="output directory (replaced)")
    ct2.add_argument(
        "--register",
        action="store_true",
        help="log it as an MLflow model of the train run (alias `ctranslate2`, int8)",
    )
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    # params.yaml is read only when needed: with --checkpoint and --spm, an export needs none
    params = load_params() if args.register or args.checkpoint is None or args.spm is None else None
    if args.register and params.decode.ensemble:  # before minutes of exporting, not after
        raise ConfigError("decode.ensemble: --register logs one model, the candidate decodes an ensemble")
    args.checkpoint = args.checkpoint or Path(params.train.model_file)
    args.spm = args.spm or model_file(params.tokenizer.out_dir)
    loaded = load_translator(args.checkpoint, args.spm)  # checked against the tokenizer
    out = export_ctranslate2(loaded.model, loaded.tokenizer, args.out)
    print(f"export: wrote {out} (CTranslate2, fp32; choose int8 with compute_type when loading)")
    if args.register:
        register(params, args.checkpoint, args.spm, out)


def register(params: Params, checkpoint: Path, spm: Path, ct2_dir: Path) -> None:
    """Log the CTranslate2 export as a pyfunc version of the train stage's MLflow run (`params`:
    params.yaml's).

    Raises:
        ConfigError: the train stage recorded no MLflow run id.
    """
    run_id = read_run_id(Path(params.train.run_id_file))
    if not run_id:
        raise ConfigError(f"{params.train.run_id_file}: no MLflow run id (is mlflow.enabled true?)")
    config = params.decode.settings() | {"max_len": params.train.max_len, "compute_type": "int8"}
    config |= params.serve.model_dump()  # the request limits, as decode logs them
    version = log_translator(run_id, checkpoint, spm, config, params.mlflow.model_name, ct2_dir=ct2_dir)
    print(f"export: MLflow model {params.mlflow.model_name} v{version} (alias ctranslate2)")


if __name__ == "__main__":
    run_main(main)
