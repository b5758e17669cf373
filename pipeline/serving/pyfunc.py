"""The final model as an MLflow model that translates raw English strings, and its registration.

`TranslatorPyfunc` is an MLflow pyfunc: its artifacts are the checkpoint (`model.pt`) and the
SentencePiece model, its model config the beam-search settings (`DecodeConfig` fields); the
`pipeline` package travels with it as code, so `mlflow.pyfunc.load_model` and
`mlflow models predict/serve` need only this repository's requirements.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
import pandas as pd

from pipeline.core.config import DecodeConfig
from pipeline.serving.translator import MAX_SRC_PIECES, load_ct2_translator, load_translator, translate_lines
from pipeline.tracking import runs as tracking

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the `pipeline` package, logged as code
REQUIREMENTS = ["torch==2.13.0", "sentencepiece==0.2.3", "pydantic==2.14.4", "pyyaml==6.0.4", "numpy==2.4.6",
                "tqdm==4.70.1", "pandas==3.1.1", "pysbd==0.3.4", "sacremoses==0.2.0", "ctranslate2==4.8.5"]  # fmt: skip


class TranslatorPyfunc(mlflow.pyfunc.PythonModel):
    """English → the trained target language. Input: a DataFrame with an `en` column (else its first column), a list
    of strings, or one string. Output: a list of translations, one per input, in order. Loads
    and translates through `pipeline.serving.translator` (the decode stage's and `mt-translate`'s code):
    the checkpoint is checked against the tokenizer, and each input gets the shared processing.
    The model config is the `DecodeConfig` fields plus `max_len` (the trained source maximum). With a
    `ct2` artifact (`log_translator(..., ct2_dir=...)`) it decodes with CTranslate2 at the config's
    `compute_type` (default int8) instead of our search."""

    def load_context(self, context) -> None:
        config = dict(context.model_config or {})
        self.max_len = int(config.pop("max_len", MAX_SRC_PIECES))
        compute_type = config.pop("compute_type", "int8")
        if "ct2" in context.artifacts:  # a CTranslate2 export logged beside the checkpoint
            self.engine = load_ct2_translator(
                context.artifacts["ct2"], context.artifacts["spm"], compute_type
            )
        else:
            self.engine = load_translator(context.artifacts["checkpoint"], context.artifacts["spm"])
        self.cfg = DecodeConfig(**config)

    def predict(self, context, model_input, params=None) -> list[str]:
        lines = english_sentences(model_input)
        return translate_lines(self.engine, lines, self.cfg, max_pieces=self.max_len)


def english_sentences(model_input) -> list[str]:
    """The sentences in a pyfunc input (DataFrame `en` column or first column, list, or str)."""
    if isinstance(model_input, pd.DataFrame):
        column = "en" if "en" in model_input.columns else model_input.columns[0]
        return [str(s) for s in model_input[column]]
    if isinstance(model_input, str):
        return [model_input]
    return [str(s) for s in model_input]


def log_translator(
    run_id: str,
    checkpoint: Path,
    spm_model: Path,
    decode_cfg: dict,
    model_name: str,
    ct2_dir: Path | None = None,
) -> str:
    """Log the translator pyfunc to run `run_id`, register it as a new version of `model_name`
    and point the `candidate` alias (with `ct2_dir`: the `ctranslate2` alias) at it. `decode_cfg`: `DecodeConfig` fields, optionally plus
    `max_len` and `compute_type`; `ct2_dir`: a CTranslate2 export to decode with. Returns the version."""
    artifacts = {"checkpoint": str(checkpoint), "spm": str(spm_model)}
    if ct2_dir is not None:
        artifacts["ct2"] = str(ct2_dir)
    client = tracking.client()  # also sets the tracking URI for mlflow.start_run
    with mlflow.start_run(run_id=run_id):
        info = mlflow.pyfunc.log_model(
            name="translator",
            python_model=TranslatorPyfunc(),
            artifacts=artifacts,
            model_config=decode_cfg,
            code_paths=[str(PACKAGE_DIR)],
            pip_requirements=REQUIREMENTS,
            registered_model_name=model_name,
        )
    version = str(info.registered_model_version)
    client.set_registered_model_alias(model_name, "candidate" if ct2_dir is None else "ctranslate2", version)
    return version
