"""The `mt-translate` console script (and `python -m pipeline translate`): quiet on Ctrl-C from the
first instant.

Importing the translator takes a second or two (torch), and a Ctrl-C then would print Python's
traceback, or be swallowed by library code that catches everything. So while it imports, Ctrl-C ends
the process at once with exit 130; after that, `run_main` gives the same quiet exit.
"""

from __future__ import annotations

import os
import signal

from pipeline.core.errors import EXIT_SIGINT, run_main


def _exit_at_once(signum: int, frame: object) -> None:
    os._exit(EXIT_SIGINT)  # nothing written yet: no output to flush


def console() -> None:
    """Entry point of the `mt-translate` console script (`pipeline.ops.cli.main`).

    Raises:
        SystemExit: as `run_main` does (130 on Ctrl-C).
    """
    guarded = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not when ignored
    if guarded:
        signal.signal(signal.SIGINT, _exit_at_once)
    from pipeline.ops.cli import main  # imports torch: a second or two

    if guarded:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    run_main(main, stdout_pipe=True)
