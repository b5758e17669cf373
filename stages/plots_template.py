"""DVC stage `plots_template`: the page `dvc plots show` fills, renderable offline.

Usage: `python -m stages.plots_template` (path: `report.plots_template` in params.yaml, which
`.dvc/config`'s `plots.html_template` names). Writes the page `pipeline.ops.plots_template` builds.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pipeline.core.errors import run_main
from pipeline.core.io import write_text
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent
from pipeline.ops.plots_template import page_html


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    path = stage_params(argv).report.plots_template
    write_text(path, page_html())
    print(f"plots_template: wrote {path} (`dvc plots show` renders offline with it)")


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
