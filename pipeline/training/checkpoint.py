"""Checkpoints: save, safe load and resume (the final-model choice: `pipeline.training.final_model`).

A checkpoint is a dict of plain types and tensors, written atomically with `torch.save` and read with
`torch.load(weights_only=True)`. Weights (`best.pt`, `step<N>.pt`, `model.pt`) hold `MODEL_KEYS`; a
SentencePiece run's also hold `spm_sha256`, checked on load; `last.pt` adds `optimizer`, `rng`,
`progress`, `identity` and its `fingerprint`. The keys in full: docs/training.md.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import re
from pathlib import Path

import numpy as np
import torch
from pydantic import ValidationError

from pipeline.core.config import ModelConfig
from pipeline.core.errors import CheckpointError
from pipeline.core.io import atomic_path
from pipeline.core.lock import exclusive
from pipeline.core.params_file import flatten
from pipeline.data.tokenizer import BOS_ID, EOS_ID, model_sha256
from pipeline.model.transformer import Transformer
from pipeline.training.distributed import World
from pipeline.training.ema import EMA

TRAINER_LOCK = ".trainer.lock"  # in the checkpoint folder (.dvcignore keeps it out of the output's hash)
MODEL_KEYS = ("model", "model_cfg", "vocab_size", "pad_id", "bos_id", "eos_id")
TOKENIZER_KEY = "spm_sha256"  # optional: the SHA-256 of the spm.model the weights were trained with
# Model config keys added after checkpoints were first written, each with the value that rebuilds the
# model an older checkpoint was trained as (before `act_dropout`, the FFN's ReLU used `dropout`).
ADDED_MODEL_KEYS = {"act_dropout": None}


def save(path: str | Path, state: dict, spm_sha256: str | None = None) -> Path:
    """Write `state` to `path` atomically (temp file + rename): a crash never leaves it half-written.
    `spm_sha256` (`pipeline.data.tokenizer.model_sha256`), when given, is recorded with it."""
    with atomic_path(path) as tmp:
        torch.save(state | ({TOKENIZER_KEY: spm_sha256} if spm_sha256 else {}), tmp)
    return Path(path)


def load(path: str | Path) -> dict:
    """Read a checkpoint onto the CPU, refusing anything but tensors and plain types.

    Raises:
        CheckpointError: missing, truncated/corrupt, holding other objects (code), or lacking
            the model keys.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # weights_only met something else than tensors/plain data
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        if found:  # a class or function: unpickling would call it
            raise CheckpointError(
                f"{path}: refused: loading it could run code (it names {found.group(1)})"
            ) from None
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint (not a pickle of tensors)") from None
    except Exception as exc:  # torch raises many types for a corrupt zip/pickle
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({type(exc).__name__})") from None
    if not isinstance(state, dict) or any(k not in state for k in MODEL_KEYS):
        raise CheckpointError(f"{path}: not a model checkpoint (needs keys {', '.join(MODEL_KEYS)})")
    return state


def weights(model: Transformer) -> dict:
    """The `MODEL_KEYS` dict of `model` (the weights and what rebuilds it)."""
    return {
        "model": model.state_dict(),
        "model_cfg": model.cfg.model_dump(),
        "vocab_size": model.vocab_size,
        "pad_id": model.pad_id,
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
    }


def build_model(state: dict, path: str | Path = "<checkpoint>") -> Transformer:
    """Rebuild the `Transformer` a checkpoint describes and load its weights (eval mode, CPU); a key
    its config predates takes its `ADDED_MODEL_KEYS` value.

    Raises:
        CheckpointError: the config is invalid or the weights belong to another architecture.
    """
    try:
        cfg = ModelConfig.model_validate(ADDED_MODEL_KEYS | state["model_cfg"])
    except ValidationError as exc:
        raise CheckpointError(f"{path}: invalid model_cfg ({exc.errors()[0]['msg']})") from None
    model = Transformer(cfg, state["vocab_size"], state["pad_id"])
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        first = str(exc).splitlines()[1].strip() if "\n" in str(exc) else str(exc)
        raise CheckpointError(f"{path}: weights do not fit the model config ({first})") from None
    return model.eval()


def load_model(
    path: str | Path, vocab_size: int | None = None, spm_model: str | Path | None = None
) -> tuple[Transformer, dict]:
    """Load a model checkpoint; when `vocab_size` is given it must match the checkpoint's, and when
    `spm_model` is given it must be the tokenizer the checkpoint records (`check_tokenizer`).

    Returns the model (eval mode, CPU) and the checkpoint dict.

    Raises:
        CheckpointError: see `load` and `build_model`, or a vocabulary or tokenizer mismatch.
    """
    state = load(path)
    if vocab_size is not None and state["vocab_size"] != vocab_size:
        raise CheckpointError(
            f"{path}: vocabulary size {state['vocab_size']} does not match the tokenizer's {vocab_size}"
        )
    if spm_model is not None:
        check_tokenizer(state, path, spm_model)
    return build_model(state, path), state


def check_tokenizer(state: dict, path: str | Path, spm_model: str | Path) -> None:
    """Check that the checkpoint `state` (read from `path`) was trained with the SentencePiece model
    `spm_model`; a checkpoint that records no tokenizer (written before the record) passes.

    Raises:
        CheckpointError: the checkpoint records another tokenizer (one line naming both files), or
            `spm_model` cannot be read.
    """
    recorded = state.get(TOKENIZER_KEY)
    if recorded is None:
        return
    actual = model_sha256(spm_model)
    if actual != recorded:
        raise CheckpointError(
            f"{path}: trained with another tokenizer than {spm_model} "
            f"(spm.model SHA-256 {recorded[:12]}…, this file {actual[:12]}…)"
        )


# ---------------------------------------------------------------- continuing a run


def fingerprint(identity: dict) -> str:
    """SHA-256 of a run's identity (a JSON-able dict): equal fingerprints, same trajectory."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def rng_state() -> dict:
    """The python, numpy and torch RNG states as tensors and plain types (weights_only-safe)."""
    version, mt, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(mt), gauss],
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, mt, gauss = state["python"]
    random.setstate((version, tuple(mt), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def training_state(
    model: Transformer,
    optimizer: torch.optim.Optimizer,
    progress: dict,
    identity: dict,
    ema: EMA | None = None,
) -> dict:
    """What `last.pt` holds: the weights plus everything that continues the run exactly (and the
    weight average, when the run keeps one)."""
    return {
        **weights(model),
        **({"ema": ema.state_dict()} if ema is not None else {}),
        "optimizer": optimizer.state_dict(),
        "rng": rng_state(),
        "progress": progress,
        "identity": identity,
        "fingerprint": fingerprint(identity),
    }


def resume(
    path: Path,
    identity: dict,
    model: Transformer,
    optimizer: torch.optim.Optimizer,
    world: World,
    *,
    ema: EMA | None = None,
):
    """Restore model, optimizer and RNG from `path` (`last.pt`) when rank 0 finds it written by a
    run of the same `identity`; returns its progress dict, or None for a fresh start.

    When `path` belongs to another identity (say, a new lr), rank 0 says which values changed in
    one line and starts afresh; that run's checkpoints stay until this run writes its own first ones
    (`save` overwrites `best.pt` and `last.pt`, `keep_newest` removes its step files), so a run that
    fails before its first validation loses nothing, and none is averaged into this run's model. On
    resume every rank reads `path` (the folder must be on storage every node sees) and then holds
    rank 0's weights and optimizer state. `ema` takes the saved weight average when there is one
    (else it starts from the resumed weights).

    Raises:
        CheckpointError: `path` is unreadable, or another rank cannot read it.
    """
    state = None
    if world.is_main and path.is_file():
        try:
            state = load(path)
        except CheckpointError as exc:
            raise CheckpointError(f"{exc}; delete it to start training afresh") from None
    same = state is not None and state.get("fingerprint") == fingerprint(identity)
    if not world.rank0_says(same):
        if state is not None:
            print(
                f"{path}: {_what_changed(state.get('identity', {}), identity)}; starting afresh "
                "(its checkpoints stay until this run writes its first)"
            )
        return None
    if not world.is_main:
        state = _load_on_every_rank(path, world)
    elif world.size > 1:
        world.sum(1.0)  # rank 0 read it: its part of `_load_on_every_rank`'s check
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    if ema is not None:
        if "ema" in state:
            ema.load_state_dict(state["ema"])
        else:  # a run that kept no average: it starts from the resumed weights
            ema.reset(model)
    world.broadcast([*model.state_dict().values(), *_optimizer_tensors(optimizer)])
    print(f"resuming from {path} at step {state['progress']['step']}")
    return state["progress"]


def _load_on_every_rank(path: Path, world: World) -> dict:
    try:
        state, error = load(path), ""
    except CheckpointError as exc:
        state, error = None, str(exc)
    if world.sum(0.0 if error else 1.0) < world.size:
        raise CheckpointError(
            error + f" (rank {world.rank}; every node needs the checkpoint folder)"
            if error
            else f"{path}: another rank cannot read it; see that rank's error"
        )
    return state


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]


def _what_changed(old: dict, new: dict) -> str:
    if not old:
        return "written by an older version"
    before, after = flatten(old), flatten(new)
    changed = [
        f"{k} {before.get(k)} -> {after.get(k)}"
        for k in sorted(before.keys() | after.keys())
        if before.get(k) != after.get(k)
    ]
    return "written with other settings: " + ", ".join(changed)


def trainer_lock(out_dir: Path):
    """The checkpoint folder's trainer lock (`pipeline.core.lock.exclusive` on `TRAINER_LOCK`): one
    training per folder, so an orphaned trainer and a new one never write the same checkpoints.

    Raises:
        PipelineError: another trainer (even one whose `dvc repro` was killed) holds it.
    """
    return exclusive(Path(out_dir) / TRAINER_LOCK, f"{out_dir}: a training")


def keep_newest(out_dir: Path, kept: list[str], n: int) -> list[str]:
    """Delete every step checkpoint in `out_dir` but the newest `n` of `kept` (oldest first), those
    a run started afresh left behind included; returns the ones kept."""
    keep = kept[-n:]
    for path in out_dir.glob("step*.pt"):
        if path.name not in keep:
            path.unlink(missing_ok=True)
    return keep
