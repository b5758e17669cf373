"""`python -m pipeline translate ...`: see pipeline/ops/cli.py."""

from __future__ import annotations

import sys

from pipeline.ops.console import console

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "translate":
        sys.exit("usage: python -m pipeline translate [SENTENCE ...] [--beam-size N] ... (see --help)")
    del sys.argv[1]
    console()
