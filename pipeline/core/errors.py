"""Errors the pipeline reports to users as one line, and the runner that does so."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable


class PipelineError(Exception):
    """A user-facing failure: bad params, bad data, bad checkpoint. The message is one line."""


class ConfigError(PipelineError):
    """`params.yaml` is missing, malformed or has an invalid field."""


class DataError(PipelineError):
    """A corpus file is missing, corrupt, or fails validation."""


class CheckpointError(PipelineError):
    """A checkpoint is unreadable or does not fit the model / tokenizer."""


class Stopped(KeyboardInterrupt):
    """A run ended early on a signal (SIGTERM, Ctrl-C) after saving what continues it."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum


EXIT_SIGINT = 128 + signal.SIGINT  # 130: the shell's status for a command ended by Ctrl-C
EXIT_SIGPIPE = 128 + signal.SIGPIPE  # 141: the shell's status for a writer whose reader went away


def run_main(main: Callable[[], None], stdout_pipe: bool = False) -> None:
    """Run a stage's `main()`, mapping its errors and signals to one line and an exit status.

    A `PipelineError` becomes `error: <message>` on stderr and exit 1, Ctrl-C a quiet exit 130, and a
    run `Stopped` by a signal its one line and exit 128 + the signal. With `stdout_pipe` (a command whose
    output is meant for a pipe), a closed stdout (`... | head -1`) ends it quietly with exit 141; elsewhere
    a `BrokenPipeError` (a socket, say) is an error like any other.

    Raises:
        SystemExit: on a `PipelineError` (1), a closed stdout (141) or Ctrl-C (130); any other
            exception propagates.
    """
    try:
        main()
        if stdout_pipe:
            sys.stdout.flush()  # a reader that went away shows here at the latest, not at exit
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except BrokenPipeError:
        if not stdout_pipe:
            raise
        silence_stdout()
        raise SystemExit(EXIT_SIGPIPE) from None
    except Stopped as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(128 + exc.signum) from None
    except KeyboardInterrupt:
        raise SystemExit(EXIT_SIGINT) from None


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still buffered
    cannot fail a second time (a closed pipe, a full disk; Python's note on SIGPIPE in `signal`)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a real file (a test's capture): nothing will flush to a pipe
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
