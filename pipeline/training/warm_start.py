"""Warm start (`train.init_from: champion`): a training run that begins from the weights of the
registered model's `champion` version (`mlflow.model_name`) instead of a random initialisation.

Checked against the champion's files (logged by `pipeline.serving.pyfunc.log_translator`): the model
config fields that shape the weights or the attention (`ARCHITECTURE`), the vocabulary size and the SHA-256
of `spm.model`. A mismatch, or no champion, is a one-line `CheckpointError`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import yaml

from pipeline.core.errors import CheckpointError, ConfigError
from pipeline.model.transformer import Transformer
from pipeline.training import checkpoint

ALIAS = "champion"
ARCHITECTURE = ("d_model", "n_heads", "n_layers", "d_ff", "pre_norm", "tie_embeddings")  # not dropout


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_compatible(state: dict, champion_spm_sha256: str, model: Transformer, spm_model: Path, who: str):
    """Raise when the champion's checkpoint `state` (and its tokenizer's SHA-256) cannot start
    `model` (trained with `spm_model`). `who` names the champion in the message, e.g. "champion v3".

    Raises:
        CheckpointError: another architecture, vocabulary size or tokenizer (one line).
    """
    theirs, ours = state["model_cfg"], model.cfg.model_dump()
    for name in ARCHITECTURE:
        if theirs.get(name) != ours[name]:
            raise CheckpointError(
                f"train.init_from: {who} was trained with {name} {theirs.get(name)}, "
                f"this run has {ours[name]} (train.model.{name})"
            )
    if state["vocab_size"] != model.vocab_size or champion_spm_sha256 != sha256(spm_model):
        raise CheckpointError(
            f"train.init_from: {who} was trained with another tokenizer (vocabulary {state['vocab_size']}, "
            f"spm.model {champion_spm_sha256[:12]}…), this run has vocabulary {model.vocab_size}, "
            f"{spm_model} {sha256(spm_model)[:12]}…"
        )


def champion_files(model_name: str) -> tuple[dict, str, dict]:
    """Download the `champion` version of `model_name`: (its checkpoint dict, its spm.model's
    SHA-256, {"alias", "version", "run_id"}).

    Raises:
        CheckpointError: no champion, or its files cannot be read (one line).
    """
    from pipeline.tracking.registry import version_by_alias

    version = version_by_alias(model_name, ALIAS)
    if version is None:
        raise CheckpointError(
            f"train.init_from: MLflow model {model_name!r} has no 'champion' version "
            "(promote one with `python -m pipeline.ops.flow run`, or set init_from: null)"
        )
    who = f"champion v{version.version} of {model_name!r}"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            files = _download(model_name, version.version, tmp)
            state, spm_sha256 = checkpoint.load(files["checkpoint"]), sha256(files["spm"])
        except CheckpointError as exc:
            raise CheckpointError(f"train.init_from: {who}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - MLflow, YAML or file errors: one line either way
            raise CheckpointError(
                f"train.init_from: {who}: cannot read its files ({type(exc).__name__})"
            ) from None
    return state, spm_sha256, {"alias": ALIAS, "version": str(version.version), "run_id": version.run_id}


def _download(model_name: str, version: str, dst: str) -> dict[str, Path]:
    """The version's checkpoint and tokenizer files, downloaded into `dst` ({"checkpoint", "spm"}:
    the artifact names `log_translator` gives them, looked up in the model's MLmodel file)."""
    import mlflow

    from pipeline.tracking import store

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # two files: bars only clutter
    root = store.client().get_model_version_download_uri(model_name, version)

    def fetch(path: str) -> Path:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=f"{root}/{path}", dst_path=dst))

    artifacts = yaml.safe_load(fetch("MLmodel").read_text())["flavors"]["python_function"]["artifacts"]
    return {name: fetch(artifacts[name]["path"]) for name in ("checkpoint", "spm")}


def warm_start(model: Transformer, model_name: str, spm_model: Path) -> dict:
    """Load the weights of `model_name`'s champion into `model` (after `check_compatible`).
    Returns {"alias": "champion", "version", "run_id"}: part of the run's identity and facts.

    Raises:
        CheckpointError: no champion, unreadable files, or another architecture or tokenizer.
    """
    state, spm_sha256, source = champion_files(model_name)
    check_compatible(state, spm_sha256, model, spm_model, f"champion v{source['version']} of {model_name!r}")
    model.load_state_dict(state["model"])
    return source


def initial_weights(params, model, spm_model: Path, verbose: bool) -> dict | None:
    """`train.init_from: champion`: load the champion's weights into `model` and return where they
    came from ({"alias", "version", "run_id"}); None (from scratch) leaves the fresh initialisation.

    Raises:
        ConfigError: init_from is set while MLflow is disabled (the champion lives in its registry).
        CheckpointError: no champion, or another architecture or tokenizer (`pipeline.training.warm_start`).
    """
    if params.train.init_from is None:
        return None
    if not params.mlflow.enabled:
        raise ConfigError("params.yaml: train.init_from: champion needs mlflow.enabled: true")
    source = warm_start(model, params.mlflow.model_name, spm_model)
    if verbose:
        print(
            f"train: warm start from champion v{source['version']} of {params.mlflow.model_name!r} "
            f"(run {source['run_id']}): fine-tuning its weights, not a fresh initialisation"
        )
    return source
