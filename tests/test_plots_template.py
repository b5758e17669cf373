"""`dvc plots show` renders offline: its page carries Vega inline and DVC is configured to use it."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from pipeline.core.params_file import load_params
from pipeline.ops.plots_template import page_html

ROOT = Path(__file__).resolve().parents[1]


def test_the_page_loads_no_script_from_the_network():
    page = page_html()
    assert "{plot_divs}" in page  # where DVC puts its plots
    assert "{scripts}" not in page  # DVC's CDN <script> tags have nowhere to go
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert "window.vegaEmbed=" in page and "window.vegaLite=" in page


def test_dvc_uses_the_page_the_stage_writes():
    config = configparser.ConfigParser()
    config.read(ROOT / ".dvc" / "config")
    template = (ROOT / ".dvc" / config["plots"]["html_template"]).resolve()
    assert template == (ROOT / load_params(ROOT / "params.yaml").report.plots_template).resolve()
