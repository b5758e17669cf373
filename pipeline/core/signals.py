"""A stage process ends with its parent: when DVC (or the flow) dies, Linux sends the stage SIGTERM
instead of leaving it running orphaned; and SIGTERM raised as an exception, where a stage must clean up
what it was writing before it ends."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.core.errors import Stopped

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Ask Linux to send `signum` to this process when its parent exits (prctl PR_SET_PDEATHSIG).
    Returns False where that is not available (not Linux) or the parent is already gone."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        return False
    return os.getppid() == parent  # it may have died before the request took effect


@contextmanager
def sigterm_raises(message: str) -> Iterator[None]:
    """Within the block, SIGTERM raises `Stopped(SIGTERM, message)`, as Ctrl-C raises KeyboardInterrupt,
    so `finally` clauses (a temp folder removed) run before the process ends. Main thread only."""

    def stop(signum: int, frame) -> None:
        raise Stopped(signum, message)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
