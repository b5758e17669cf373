"""One process at a time: an exclusive, non-blocking `flock` on a lock file that records its
holder's pid. The system releases it when the holder exits, however it ends (SIGKILL included), so a
lock is never left stale; a process still running keeps it, orphaned or not.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.core.errors import PipelineError


@contextmanager
def exclusive(path: str | Path, what: str) -> Iterator[None]:
    """Hold the lock file `path` while the body runs; `what` names the work it guards in the error.

    Raises:
        PipelineError: another process (or another descriptor of this one) holds it: one line
            naming `what`, the holder's pid and the lock file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 20, 0).decode("ascii", "replace").strip() or "unknown"
            raise PipelineError(
                f"{what} is already running (pid {holder}, lock {path}); wait for it to end, or stop it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
