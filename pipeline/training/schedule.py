"""Learning-rate schedules: the learning rate of optimizer step `step` (1-based).

- `inverse_sqrt`: a linear learning-rate warm-up to `peak_lr` over `warmup_steps`, then `peak ·
  √(warmup / step)` (Vaswani et al. 2017, §5.3, scaled to peak at the warm-up's end; no `max_steps`).
- `linear` / `cosine`: the same warm-up, then a linear or half-cosine decay that reaches zero one step
  after `max_steps` (Li, Yumer & Ramanan 2020; Geiping & Goldstein 2022). See docs/training.md.
"""

from __future__ import annotations

import math

SCHEDULES = ("inverse_sqrt", "linear", "cosine")


def inverse_sqrt_lr(step: int, peak_lr: float, warmup_steps: int) -> float:
    """peak · min(step / warmup, √(warmup / step)): §5.3's schedule, scaled to peak at `warmup_steps`."""
    step = max(step, 1)
    return peak_lr * min(step / warmup_steps, math.sqrt(warmup_steps / step))


def decaying_lr(step: int, peak_lr: float, warmup_steps: int, max_steps: int, shape: str) -> float:
    """A learning-rate warm-up to `peak_lr`, then `shape` ("linear" or "cosine") decay to 0 at
    `max_steps + 1`.

    Raises:
        ValueError: an unknown `shape`.
    """
    step = max(step, 1)
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    done = min(1.0, (step - warmup_steps) / max(1, max_steps + 1 - warmup_steps))  # 0..1 of the decay
    if shape == "linear":
        return peak_lr * (1.0 - done)
    if shape == "cosine":
        return peak_lr * 0.5 * (1.0 + math.cos(math.pi * done))
    raise ValueError(f"unknown schedule {shape!r} (one of {', '.join(SCHEDULES)})")


def learning_rate(step: int, schedule: str, peak_lr: float, warmup_steps: int, max_steps: int) -> float:
    """The learning rate of step `step` under `schedule` (one of `SCHEDULES`)."""
    if schedule == "inverse_sqrt":
        return inverse_sqrt_lr(step, peak_lr, warmup_steps)
    return decaying_lr(step, peak_lr, warmup_steps, max_steps, schedule)
