"""The HTML page `dvc plots show` fills, with the Vega libraries inline, so it renders offline.

DVC's default page loads Vega, Vega-Lite and Vega-Embed from a CDN: without a network its charts
are blank. `.dvc/config` points `plots.html_template` at the page `page_html` builds, whose scripts
come from vl-convert's bundle (the same libraries, no network needed). DVC replaces `{plot_divs}`
with one `<div>` and one `vegaEmbed(...)` call per plot; the page has no `{scripts}` placeholder,
so DVC's CDN `<script>` tags are left out.
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
