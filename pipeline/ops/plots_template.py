"""The HTML page `dvc plots show` fills, with Vega, Vega-Lite and Vega-Embed inline (vl-convert's
bundle) instead of DVC's CDN links, so its charts render offline; `.dvc/config` points
`plots.html_template` at it.
"""

from __future__ import annotations

import vl_convert

VEGA_LITE_VERSION = "5.21"  # the major version of the specs DVC writes (vega-lite/v5.json)

PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>Training curves (dvc plots show)</title>
    <script>
{bundle}
    </script>
    <style>
        body { font-family: sans-serif; }
        table { border-spacing: 15px; }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def page_html() -> str:
    """DVC's HTML template with Vega-Embed, Vega-Lite and Vega inline (about 1 MB)."""
    bundle = vl_convert.javascript_bundle(vl_version=VEGA_LITE_VERSION)
    return PAGE.replace("{bundle}", bundle)
