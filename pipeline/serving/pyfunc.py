"""The final model as an MLflow model that translates raw English strings, and its registration.

`TranslatorPyfunc` is an MLflow pyfunc: its artifacts are the checkpoint (`model.pt`) and the
SentencePiece model, its model config the beam-search settings (`DecodeConfig` fields); the
`pipeline` package travels with it as code, so `mlflow.pyfunc.load_model` and
`mlflow models predict/serve` need only this repository's requirements.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import mlflow
import pandas as pd

from pipeline.core.config import DecodeConfig
from pipeline.core.errors import PipelineError
from pipeline.serving.translator import MAX_SRC_PIECES, load_ct2_translator, load_translator, translate_lines
from pipeline.tracking import runs as tracking
from pipeline.tracking.runs import repo_root

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the `pipeline` package, logged as code
PYFUNC_PACKAGES = ("torch", "sentencepiece", "pydantic", "pyyaml", "numpy", "tqdm", "pandas", "sentencex",
                   "sacremoses", "ctranslate2")  # fmt: skip  # what loading and translating import


def installed(name: str) -> str:
    """The installed version of `name` without a local label (torch's `2.13.0+cpu` -> `2.13.0`)."""
    return metadata.version(name).split("+")[0]


def requirements(requirements_txt: Path | None = None) -> list[str]:
    """The pip requirements of the logged model: `PYFUNC_PACKAGES` pinned as in the repository's
    `requirements.txt` (the project's reproducible pin set), or, without that file (an installed
    package), at the versions installed here.

    Raises:
        PipelineError: a package of `PYFUNC_PACKAGES` has no `==` pin in the file.
    """
    path = requirements_txt or repo_root() / "requirements.txt"
    if not path.is_file():
        return [f"{name}=={installed(name)}" for name in PYFUNC_PACKAGES]
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    missing = [name for name in PYFUNC_PACKAGES if name not in pins]
    if missing:
        raise PipelineError(f"{path}: no == pin for {', '.join(missing)} (the pyfunc's requirements)")
    return [f"{name}=={pins[name]}" for name in PYFUNC_PACKAGES]


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
            pip_requirements=requirements(),
            registered_model_name=model_name,
        )
    version = str(info.registered_model_version)
    client.set_registered_model_alias(model_name, "candidate" if ct2_dir is None else "ctranslate2", version)
    return version
