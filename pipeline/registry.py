"""The final model as an MLflow model that translates raw English strings, its registration, and
the `candidate` → `champion` promotion.

`Translator` is an MLflow pyfunc: its artifacts are the checkpoint (`model.pt`) and the
SentencePiece model, its model config the beam-search settings (`DecodeConfig` fields); the
`pipeline` package travels with it as code, so `mlflow.pyfunc.load_model` and
`mlflow models predict/serve` need only this repository's requirements.

Aliases (MLflow model registry): every `decode` stage run registers a new version of
`mlflow.model_name` and points `candidate` at it; `score` tags that version with its scores
(`bleu_val`: beam search on val, ...); `promote` moves `champion` to the candidate only when the
candidate version's `bleu_val` beats the champion version's. Scores sit on versions, not runs,
because a decode-only change registers a new version of the same training run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException

from pipeline import tracking
from pipeline.errors import PipelineError

PACKAGE_DIR = Path(__file__).resolve().parent
SELECTION_METRIC = "bleu_val"  # model selection uses val only; test sets are for reporting
REQUIREMENTS = ["torch==2.13.0", "sentencepiece==0.2.3", "pydantic==2.14.4", "pyyaml==6.0.4", "numpy==2.4.6",
                "tqdm==4.70.1", "pandas==3.1.1"]  # fmt: skip


class Translator(mlflow.pyfunc.PythonModel):
    """English → German. Input: a DataFrame with an `en` column (else its first column), a list
    of strings, or one string. Output: a list of German strings, one per input, in order."""

    def load_context(self, context) -> None:
        from pipeline.checkpoint import load_model
        from pipeline.config import DecodeConfig
        from pipeline.tokenizer import Tokenizer

        self.tokenizer = Tokenizer.load(context.artifacts["spm"])
        self.model, _ = load_model(context.artifacts["checkpoint"], vocab_size=self.tokenizer.vocab_size)
        self.cfg = DecodeConfig(**(context.model_config or {}))

    def predict(self, context, model_input, params=None) -> list[str]:
        from pipeline.search import translate

        return translate(self.model, self.tokenizer, english_sentences(model_input), self.cfg)


def english_sentences(model_input) -> list[str]:
    """The sentences in a pyfunc input (DataFrame `en` column or first column, list, or str)."""
    if isinstance(model_input, pd.DataFrame):
        column = "en" if "en" in model_input.columns else model_input.columns[0]
        return [str(s) for s in model_input[column]]
    if isinstance(model_input, str):
        return [model_input]
    return [str(s) for s in model_input]


def log_translator(run_id: str, checkpoint: Path, spm_model: Path, decode_cfg: dict, model_name: str) -> str:
    """Log the translator pyfunc to run `run_id`, register it as a new version of `model_name`
    and point the `candidate` alias at it. Returns the version."""
    client = tracking.client()  # also sets the tracking URI for mlflow.start_run
    with mlflow.start_run(run_id=run_id):
        info = mlflow.pyfunc.log_model(
            name="translator",
            python_model=Translator(),
            artifacts={"checkpoint": str(checkpoint), "spm": str(spm_model)},
            model_config=decode_cfg,
            code_paths=[str(PACKAGE_DIR)],
            pip_requirements=REQUIREMENTS,
            registered_model_name=model_name,
        )
    version = str(info.registered_model_version)
    client.set_registered_model_alias(model_name, "candidate", version)
    return version


def version_by_alias(model_name: str, alias: str) -> ModelVersion | None:
    """The version of `model_name` that `alias` points at; None when there is none."""
    try:
        return tracking.client().get_model_version_by_alias(model_name, alias)
    except MlflowException:
        return None


def tag_candidate(model_name: str, run_id: str, scores: dict[str, float]) -> str | None:
    """Tag the `candidate` version of `model_name` with `scores` when it belongs to `run_id`
    (the version this pipeline's decode registered). Returns the version, or None."""
    version = version_by_alias(model_name, "candidate")
    if version is None or version.run_id != run_id:
        return None
    for key, value in scores.items():
        tracking.client().set_model_version_tag(model_name, version.version, key, f"{value:.4f}")
    return version.version


def version_score(version: ModelVersion, metric: str) -> float | None:
    """A registered version's `metric` tag (set by `score`), as a float; None when untagged."""
    value = version.tags.get(metric)
    return None if value is None else float(value)


@dataclass(frozen=True)
class Promotion:
    promoted: bool
    message: str


def promote(model_name: str, metric: str = SELECTION_METRIC) -> Promotion:
    """Move `champion` to the `candidate` version when its `metric` tag is strictly higher than
    the champion's (or there is no champion yet).

    Raises:
        PipelineError: no `candidate` version, or it has no `metric` tag (run `score` first).
    """
    candidate = version_by_alias(model_name, "candidate")
    if candidate is None:
        raise PipelineError(f"MLflow model {model_name!r}: no 'candidate' version (run decode first)")
    new = version_score(candidate, metric)
    if new is None:
        raise PipelineError(
            f"MLflow model {model_name!r} v{candidate.version}: no {metric!r} (run score first)"
        )
    champion = version_by_alias(model_name, "champion")
    if champion is not None:
        old = version_score(champion, metric)
        old = float("-inf") if old is None else old
        if new <= old:
            return Promotion(
                False,
                f"kept champion v{champion.version} ({metric} {old:.2f} >= v{candidate.version}'s {new:.2f})",
            )
        verdict = f"v{candidate.version} ({metric} {new:.2f}) beats v{champion.version} ({old:.2f})"
    else:
        verdict = f"v{candidate.version} ({metric} {new:.2f}) is the first champion"
    tracking.client().set_registered_model_alias(model_name, "champion", candidate.version)
    return Promotion(True, f"promoted: {verdict}")
