"""CPU threads chosen for the load: as many as there are cores other processes leave free.

`ThreadsForLoad` samples, every `every_seconds`, how many cores the rest of the machine kept busy (all CPU
time less this process's own, from psutil) and sets torch's intra-op threads to the cores left, rounded,
at least one and at most `max_threads` (the trainer passes its starting count, one per core by default).
Why, and what a changed thread count costs in reproducibility: docs/training.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import psutil
import torch


def machine_busy_seconds() -> float:
    """CPU seconds all processes have run (every core, since boot), idle and I/O wait left out."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def own_busy_seconds() -> float:
    """CPU seconds this process has run (user + system, all its threads)."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class ThreadsForLoad:
    """Set torch's intra-op threads to the cores other processes leave free, re-sampled every
    `every_seconds` of wall clock (`update()` is cheap between samples: one clock read).

    The clock and the two CPU-seconds readers are parameters so a test can play a load."""

    def __init__(
        self,
        max_threads: int | None = None,
        every_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        machine_seconds: Callable[[], float] = machine_busy_seconds,
        own_seconds: Callable[[], float] = own_busy_seconds,
    ) -> None:
        self.cores = available_cores()
        self.max_threads = max_threads or self.cores
        self.every_seconds = every_seconds
        self._clock, self._machine, self._own = clock, machine_seconds, own_seconds
        self._last = (clock(), machine_seconds(), own_seconds())
        self.others_busy_cores = 0.0  # at the last sample

    def threads_for(self, others_busy_cores: float) -> int:
        """The thread count for a machine whose other processes keep `others_busy_cores` busy."""
        return max(1, min(self.max_threads, round(self.cores - others_busy_cores)))

    def update(self) -> int | None:
        """Re-sample when `every_seconds` have passed; returns the new thread count when it
        changed (and sets it), else None."""
        now = self._clock()
        if now - self._last[0] < self.every_seconds:
            return None
        machine, own = self._machine(), self._own()
        wall, machine_0, own_0 = self._last
        self._last = (now, machine, own)
        self.others_busy_cores = max(0.0, (machine - machine_0) - (own - own_0)) / (now - wall)
        threads = self.threads_for(self.others_busy_cores)
        if threads == torch.get_num_threads():
            return None
        torch.set_num_threads(threads)
        return threads
