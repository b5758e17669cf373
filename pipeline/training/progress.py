"""A training's progress: the running loss and throughput since the last validation, and the console
(a tqdm bar on a terminal, plain lines elsewhere)."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

from tqdm import tqdm


class Window:
    """Running train loss and throughput since the last validation."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss_sum, self.tokens, self.started = 0.0, 0, time.time()

    def add(self, loss_per_token: float, n_tokens: int) -> None:
        self.loss_sum += loss_per_token * n_tokens
        self.tokens += n_tokens

    def loss(self) -> float:
        return self.loss_sum / max(self.tokens, 1)

    def tokens_per_second(self) -> float:
        return self.tokens / max(time.time() - self.started, 1e-9)


class ConsoleProgress:
    """A training's progress on the console (rank 0 only: `enabled`).

    On a terminal: a tqdm bar whose percentage and ETA follow whichever budget ends the run first
    (`max_steps` or `max_minutes`). Elsewhere (a log file, CI, a Prefect worker): no carriage-return
    frames, one plain line every `every` steps. Validation rows go through `line`.
    """

    def __init__(self, max_steps: int, max_minutes: float, enabled: bool = True, every: int = 50) -> None:
        self.max_steps, self.max_seconds, self.every, self.enabled = (
            max_steps,
            max_minutes * 60,
            every,
            enabled,
        )
        self.bar = None
        if enabled and sys.stderr.isatty():
            fmt = "{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}"
            self.bar = tqdm(total=1000, desc="train", bar_format=fmt, mininterval=2, dynamic_ncols=True)

    def update(self, step: int, seconds: float, stats: Mapping[str, float]) -> None:
        """After optimizer step `step`, `seconds` into the run's budget; `stats` as name -> value."""
        if not self.enabled:
            return
        text = " ".join(f"{k}={v:.4g}" for k, v in stats.items())
        where = f"step {step}/{self.max_steps}, {seconds / 60:.1f}/{self.max_seconds / 60:g} min"
        if self.bar is None:
            if step % self.every == 0:
                print(f"train: {where}, {text}", flush=True)
            return
        done = max(step / self.max_steps, seconds / self.max_seconds)
        self.bar.update(max(0, min(1000, round(1000 * done)) - self.bar.n))
        self.bar.set_postfix_str(f"{where}, {text}", refresh=False)

    def line(self, text: str) -> None:
        """Print `text` on a line of its own (above the bar on a terminal)."""
        if self.enabled:
            tqdm.write(text) if self.bar is not None else print(text, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
