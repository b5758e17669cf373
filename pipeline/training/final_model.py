"""The end of a training run: the final model chosen on val among `best.pt`, averages of the kept step
checkpoints and the weight average, then saved; the run's summary numbers and facts, and which budget
ended it."""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Callable
from pathlib import Path

import torch

from pipeline.core.config import OptimConfig, TrainConfig
from pipeline.core.device import cpu_name
from pipeline.model.transformer import Transformer
from pipeline.training import checkpoint
from pipeline.training.checkpoint import MODEL_KEYS, build_model, load
from pipeline.training.ema import EMA
from pipeline.training.loop import Progress, RunContext, RunState
from pipeline.training.validation import Validation


def choose(out_dir: Path, kept: list[str], average_last: int, score: Callable[[Transformer], float]):
    """Choose the final weights on validation (`score`, higher is better; a tie goes to an average).

    Returns (the chosen `MODEL_KEYS` dict, {"source": its name, "candidates": {name: score}}).
    """
    states = candidates(out_dir, kept, average_last)
    scores = {name: score(build_model(state)) for name, state in states.items()}
    for name, value in scores.items():
        print(f"final-model candidate {name}: {value:.4g}")
    choice = max(scores, key=lambda name: (scores[name], name != "best"))
    return states[choice], {"source": choice, "candidates": scores}


def candidates(out_dir: Path, kept: list[str], average_last: int) -> dict[str, dict]:
    """The final-model candidates: `best.pt`, averages of the kept step checkpoints, and the EMA.

    The averages are of the last min(4, average_last) kept step checkpoints, and of all `average_last` of
    them when that is more than 4; the moving average of the weights (`ema`) is one when `last.pt` keeps
    one."""
    out = {"best": {k: v for k, v in load(out_dir / "best.pt").items() if k in MODEL_KEYS}}
    for n in sorted({min(4, average_last, len(kept)), min(average_last, len(kept))}):
        if n >= 2:
            out[f"average_last_{n}"] = average([out_dir / name for name in kept[-n:]])
    last = load(out_dir / "last.pt") if (out_dir / "last.pt").is_file() else {}
    if "ema" in last:
        out["ema"] = ema_weights(last)
    return out


def average(paths: list[Path]) -> dict:
    """Average the model weights of several checkpoints (Vaswani et al. 2017, §6.1).

    Returns the last checkpoint's `MODEL_KEYS` with `model` the element-wise mean (computed in
    float64; integer buffers from the last). Tied weights (one tensor under two names) stay tied.
    """
    states = [load(p) for p in paths]
    avg, done = {}, {}
    for key, value in states[-1]["model"].items():
        if value.data_ptr() in done:  # a tied weight: the same tensor under another name
            avg[key] = done[value.data_ptr()]
            continue
        if value.is_floating_point():
            avg[key] = sum(s["model"][key].double() for s in states).div(len(states)).to(value.dtype)
        else:
            avg[key] = value
        done[value.data_ptr()] = avg[key]
    return {**{k: states[-1][k] for k in MODEL_KEYS}, "model": avg}


def ema_weights(state: dict) -> dict:
    """The `MODEL_KEYS` dict of a `last.pt` state with its weight average as the weights."""
    model = build_model(state)
    ema = EMA(model, state["ema"]["decay"])
    ema.load_state_dict(state["ema"])
    return {**{k: state[k] for k in MODEL_KEYS}, "model": ema.averaged(model)}


def save_final_model(model: Transformer, state: RunState, validate: Validation, cfg: TrainConfig):
    """Rank 0 after training: choose the final weights on val (`choose`) and save them.

    Saved as `cfg.model_file` (with the tokenizer's fingerprint) and tracked, its SHA-256 tagged on the
    run (`summary.model_sha256`). Returns (metrics, facts) for the stage to write."""
    run, progress = state.run, state.progress
    weights, choice = choose(run.out_dir, progress.kept, cfg.optim.average_last, validate.score)
    checkpoint.save(cfg.model_file, weights, run.spm_sha256)
    run.tracker.log_artifact(Path(cfg.model_file), "model")
    metrics = summary(progress) | {
        "final_val_bleu": round(choice["candidates"][choice["source"]], 2),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    start = f"champion v{run.init_from['version']}" if run.init_from else "scratch"
    stop = stopped_by(progress, cfg.optim)
    sha256 = hashlib.sha256(Path(cfg.model_file).read_bytes()).hexdigest()  # how a student finds its teacher
    run.tracker.log_summary(
        metrics | {"final_model": choice["source"], "stopped_by": stop, "model_sha256": sha256}
    )
    print(
        f"train: {progress.step} steps in {metrics['minutes']} minutes from {start}, ended by {stop}; "
        f"final model {choice['source']} (val BLEU {metrics['final_val_bleu']:.2f})"
    )
    return metrics, run_facts(cfg, run, choice, stop)


def summary(progress: Progress) -> dict[str, float]:
    """The numbers of a finished run people compare (DVC metrics; MLflow tags `summary.<name>`)."""
    rows = progress.log
    return {
        "steps": progress.step,
        "epochs": progress.epoch,
        "minutes": round(progress.wall_seconds / 60, 2),
        "target_tokens": progress.target_tokens,
        "mean_tokens_per_s": round(sum(r["tokens_per_s"] for r in rows) / max(len(rows), 1), 1),
    }


def stopped_by(progress: Progress, cfg: OptimConfig) -> str:
    """Which budget ended a finished run: "max_steps", "patience" or "max_minutes" (the time cap)."""
    if progress.step >= cfg.max_steps:
        return "max_steps"
    return "patience" if progress.bad_validations >= cfg.patience else "max_minutes"


def run_facts(cfg: TrainConfig, run: RunContext, final: dict, stop: str) -> dict:
    """Where and how a run trained (not metrics): machine, versions, batch, what ended it, the
    final-model choice."""
    return {
        "stopped_by": stop,
        "device": str(run.device),
        "cpu": cpu_name(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "bf16": run.bf16,
        "processes": run.world.size,
        "max_tokens_per_step": cfg.optim.max_tokens * cfg.optim.accum_steps * run.world.size,  # padded
        "final_model": final,
        "init_from": run.init_from,  # None: from scratch; else {"alias", "version", "run_id"}
        "model": cfg.model.model_dump(),
        "optim": cfg.optim.model_dump(),
    }
