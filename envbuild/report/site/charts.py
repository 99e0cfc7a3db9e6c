"""Small SVG trend charts per backend, drawn by pygal: smoke duration, image size, pass/fail per nightly run.

The SVGs are shown through <img> and carry no script (pygal's tooltips, fetched from the web, are off).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from envbuild.core.errors import EnvbuildError

PASS_COLOUR, FAIL_COLOUR, LINE_COLOUR = "#1a7f37", "#cf222e", "#0969da"


def _pygal() -> Any:
    try:
        import pygal
        from pygal.style import Style
    except ImportError:
        raise EnvbuildError("envbuild site draws its charts with pygal, which is not installed: "
                            "pip install 'envbuild[site]'") from None
    return pygal, Style


def _config(Style: Any, colours: tuple[str, ...], **more: Any) -> dict[str, Any]:
    style = Style(background="white", plot_background="white", foreground="#1f2328", foreground_strong="#1f2328",
                  foreground_subtle="#57606a", colors=colours, font_family="system-ui, sans-serif",
                  label_font_size=11, major_label_font_size=11, title_font_size=13, legend_font_size=11,
                  no_data_font_size=16)
    return dict(style=style, width=440, height=220, js=[], disable_xml_declaration=False, x_label_rotation=30,
                truncate_label=-1, margin=8, no_data_text="no smoke result in these runs", show_dots=True, dots_size=3, print_values=False, **more)


def _without_script(svg: bytes) -> bytes:
    """pygal always embeds its config as a <script>: dropped, the chart is static."""
    ET.register_namespace("", "http://www.w3.org/2000/svg")
    ET.register_namespace("xlink", "http://www.w3.org/1999/xlink")
    root = ET.fromstring(svg)
    for parent in list(root.iter()):
        for child in list(parent):
            if str(child.tag).endswith("}script") or child.tag == "script":
                parent.remove(child)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def draw(row: dict[str, Any], folder: Path) -> dict[str, dict[str, str]]:
    """Write the backend's three charts; their file names (relative to the site) and alternative texts."""
    pygal, Style = _pygal()
    series = row["history"]
    labels = [s["date"][:10] for s in series]
    out: dict[str, dict[str, str]] = {}

    def save(key: str, chart: Any, alt: str) -> None:
        chart.x_labels = labels
        name = f"{row['slug']}-{key}.svg"
        (folder / name).write_bytes(_without_script(chart.render()))
        out[key] = {"src": f"charts/{name}", "alt": alt}

    seconds = [float(s["seconds"]) if isinstance(s["seconds"], (int, float)) else None for s in series]
    chart = pygal.Line(**_config(Style, (LINE_COLOUR,), show_legend=False, title="smoke duration (s)", allow_interruptions=True))
    chart.add("seconds", seconds)
    shown = [f"{x:.0f}" for x in seconds if x is not None]
    save("duration", chart, f"Smoke duration over {len(series)} runs: {', '.join(shown) or 'no data'} seconds")

    sizes = [s["size"] / 1e9 if isinstance(s["size"], (int, float)) and s["size"] else None for s in series]
    chart = pygal.Line(**_config(Style, (LINE_COLOUR,), show_legend=False, title="image size (GB)", allow_interruptions=True))
    chart.add("GB", sizes)
    shown = [f"{x:.2f}" for x in sizes if x is not None]
    save("size", chart, f"Image size over {len(series)} runs: {', '.join(shown) or 'no data'} GB")

    # Pass and fail as two series with their words in the legend: readable without telling the colours apart.
    chart = pygal.Bar(**_config(Style, (PASS_COLOUR, FAIL_COLOUR), show_legend=True, legend_at_bottom=True,
                                title="smoke result per run", show_y_labels=False, range=(0, 1)))
    chart.add("\u2713 pass", [1 if s["result"] == "pass" else None for s in series])
    chart.add("\u2717 fail", [1 if s["result"] == "fail" else None for s in series])
    words = [f"{s['date'][:10]} {s['result']}" for s in series]
    save("results", chart, f"Smoke result per run: {'; '.join(words) or 'no runs'}")
    return out
