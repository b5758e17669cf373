"""Stopping a training cleanly: SIGTERM and Ctrl-C end it at the next step boundary (a trainer whose
parent dies is sent SIGTERM: `pipeline.core.signals.die_with_parent`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.core.errors import Stopped

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """Whether a stop signal arrived; `signal` names the first one (None: none)."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __bool__(self) -> bool:
        return self.signal is not None

    def stopped(self, step: int) -> Stopped:
        """The exception that ends the run, saying where it stopped."""
        name = signal.Signals(self.signal).name
        return Stopped(
            self.signal,
            f"train: stopped by {name} after step {step}; last.pt saved, the next run continues it",
        )


@contextmanager
def stop_at_step_boundary() -> Iterator[StopRequest]:
    """Within the block, SIGTERM and SIGINT set the yielded request instead of interrupting.

    A second one interrupts at once, as without this. Outside the main thread, where Python cannot
    install handlers, the request never fires and signals act as before."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def note(signum: int, frame) -> None:
        request.signal = signum
        for s in SIGNALS:  # the second signal is not caught: an impatient user still gets out
            signal.signal(s, previous.get(s, signal.SIG_DFL))

    previous: dict[int, object] = {}
    for s in SIGNALS:
        previous[s] = signal.signal(s, note)
    try:
        yield request
    finally:
        for s in SIGNALS:
            signal.signal(s, previous[s])
