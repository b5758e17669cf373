"""DVC stage `plots_template`: the page `dvc plots show` fills, renderable offline.

Usage: `python -m stages.plots_template` (path: `report.plots_template` in params.yaml, which
`.dvc/config`'s `plots.html_template` names). Writes the page `pipeline.ops.plots_template` builds.
"""

from __future__ import annotations

from pipeline.core.config import load_params
from pipeline.core.errors import run_main
from pipeline.core.io import write_text
from pipeline.ops.plots_template import page_html


def main() -> None:
    path = load_params().report.plots_template
    write_text(path, page_html())
    print(f"plots_template: wrote {path} (`dvc plots show` renders offline with it)")


if __name__ == "__main__":
    run_main(main)
