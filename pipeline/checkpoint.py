"""Checkpoints: atomic save, validated load, and averaging.

A checkpoint is a dict saved with `torch.save`. Every checkpoint carries what rebuilds
its model: `model_cfg` (a `ModelConfig` dump), `vocab_size`, `pad_id`, `bos_id`, `eos_id`
and `model` (the state dict). Training checkpoints add `optimizer`, `scheduler`, `rng`,
`step`, `epoch`, `batch_in_epoch` and the trainer's bookkeeping.
"""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import ValidationError

from pipeline.config import ModelConfig
from pipeline.errors import CheckpointError
from pipeline.io import atomic_path
from pipeline.model import Transformer

MODEL_KEYS = ("model", "model_cfg", "vocab_size", "pad_id", "bos_id", "eos_id")


def save(path: str | Path, state: dict) -> None:
    """Write `state` to `path` atomically (temp file + rename): a crash never leaves it half-written."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load(path: str | Path) -> dict:
    """Read a checkpoint onto the CPU.

    Raises:
        CheckpointError: missing, truncated/corrupt, or lacking the model keys.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises many types for a corrupt zip/pickle
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({type(exc).__name__})") from None
    if not isinstance(state, dict) or any(k not in state for k in MODEL_KEYS):
        raise CheckpointError(f"{path}: not a model checkpoint (needs keys {', '.join(MODEL_KEYS)})")
    return state


def build_model(state: dict, path: str | Path = "<checkpoint>") -> Transformer:
    """Rebuild the `Transformer` a checkpoint describes and load its weights (eval mode).

    Raises:
        CheckpointError: the config is invalid or the weights belong to another architecture.
    """
    try:
        cfg = ModelConfig.model_validate(state["model_cfg"])
    except ValidationError as exc:
        raise CheckpointError(f"{path}: invalid model_cfg ({exc.errors()[0]['msg']})") from None
    model = Transformer(cfg, state["vocab_size"], state["pad_id"])
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        first = str(exc).splitlines()[1].strip() if "\n" in str(exc) else str(exc)
        raise CheckpointError(f"{path}: weights do not fit the model config ({first})") from None
    return model.eval()


def load_model(path: str | Path, vocab_size: int | None = None) -> tuple[Transformer, dict]:
    """Load a model checkpoint; when `vocab_size` is given it must match the checkpoint's.

    Returns the model (eval mode, CPU) and the checkpoint dict.

    Raises:
        CheckpointError: see `load` and `build_model`, or a vocabulary mismatch.
    """
    state = load(path)
    if vocab_size is not None and state["vocab_size"] != vocab_size:
        raise CheckpointError(
            f"{path}: vocabulary size {state['vocab_size']} does not match the tokenizer's {vocab_size}"
        )
    return build_model(state, path), state


def average(paths: list[Path]) -> dict:
    """Average the model weights of several checkpoints (Vaswani et al. 2017, §6.1).

    Returns the last checkpoint's dict with `model` replaced by the element-wise mean.
    """
    states = [load(p) for p in paths]
    avg = {}
    for key, value in states[-1]["model"].items():
        if value.is_floating_point():
            avg[key] = sum(s["model"][key].double() for s in states).div(len(states)).to(value.dtype)
        else:
            avg[key] = value
    return {**{k: states[-1][k] for k in MODEL_KEYS}, "model": avg, "averaged": [str(p) for p in paths]}
