"""The end of a training run: the final model chosen on val and saved, the run's summary numbers
and facts, and which budget ended it."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from pipeline.core.config import OptimConfig, TrainConfig
from pipeline.core.device import cpu_name
from pipeline.model.transformer import Transformer
from pipeline.training import checkpoint
from pipeline.training.loop import Progress, RunContext
from pipeline.training.validation import Validation


def save_final_model(
    model: Transformer, progress: Progress, validate: Validation, cfg: TrainConfig, run: RunContext
):
    """Rank 0 after training: choose the final weights on val (`checkpoint.final_model`) and save them.

    Saved as `cfg.model_file` (with the tokenizer's fingerprint) and tracked. Returns (metrics, facts)
    for the stage to write."""
    state, choice = checkpoint.final_model(run.out_dir, progress.kept, cfg.optim.average_last, validate.score)
    checkpoint.save(cfg.model_file, state, run.spm_sha256)
    run.tracker.log_artifact(Path(cfg.model_file), "model")
    metrics = summary(progress) | {
        "final_val_bleu": round(choice["candidates"][choice["source"]], 2),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    start = f"champion v{run.init_from['version']}" if run.init_from else "scratch"
    stop = stopped_by(progress, cfg.optim)
    run.tracker.log_summary(metrics | {"final_model": choice["source"], "stopped_by": stop})
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
    """Where and how a run trained (not metrics): machine, versions, batch, what ended it, final-model choice."""
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
