"""Inline-SVG building blocks shared by the topics' HTML drawings (pure: arguments in, a string out)."""
from __future__ import annotations

import html

GRID = "#ffffff"      # the default stroke: white lines between cells


def svg(width: int, height: int, parts: list[str]) -> str:
    """An <svg> of ``width`` x ``height`` pixels holding ``parts``, scaled down to fit its output area."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'style="max-width:100%;height:auto" viewBox="0 0 {width} {height}">' + "".join(parts) + "</svg>")


def rect(x: int, y: int, w: int, h: int, fill: str, stroke: str = GRID) -> str:
    return f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" stroke="{stroke}" stroke-width="0.5"/>'


def text(x: int, y: int, s: str, size: int = 10, anchor: str = "start") -> str:
    """``s`` (escaped) in sans-serif at (x, y)."""
    return (f'<text x="{x}" y="{y}" font-size="{size}" font-family="sans-serif" '
            f'text-anchor="{anchor}">{html.escape(s)}</text>')
