"""The `mt-translate` console script (and `python -m pipeline translate`): quiet on Ctrl-C from the
first instant.

Importing the translator takes seconds (torch), and a Ctrl-C then would print Python's traceback; so
the import runs under the same quiet exit 130 as the translation itself (`run_main`).
"""

from __future__ import annotations

from pipeline.core.errors import EXIT_SIGINT, run_main


def console() -> None:
    """Entry point of the `mt-translate` console script (`pipeline.ops.cli.main`).

    Raises:
        SystemExit: as `run_main` does; 130 on a Ctrl-C while importing, too.
    """
    try:
        from pipeline.ops.cli import main  # imports torch: seconds
    except KeyboardInterrupt:
        raise SystemExit(EXIT_SIGINT) from None
    run_main(main, stdout_pipe=True)
