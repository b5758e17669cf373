"""Errors the pipeline reports to users as one line, and the runner that does so."""

from __future__ import annotations

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


def run_main(main: Callable[[], None]) -> None:
    """Run a stage's `main()`; a `PipelineError` becomes `error: <message>` on stderr and exit 1."""
    try:
        main()
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
