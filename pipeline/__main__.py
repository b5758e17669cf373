"""`python -m pipeline translate ...`: see pipeline/ops/cli.py."""

from __future__ import annotations

import sys

from pipeline.ops.console import console

if __name__ == "__main__":
    usage = "usage: python -m pipeline translate [SENTENCE ...] [--beam-size N] ... (python -m pipeline translate --help)"
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(usage)
        sys.exit(0)
    if len(sys.argv) < 2 or sys.argv[1] != "translate":
        sys.exit(usage)
    del sys.argv[1]
    console()
