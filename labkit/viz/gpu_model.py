"""Drawing for Lab 03's GPU execution model: a warp's lanes × slots, and a warp's lanes on memory.

`warp_slots_html(labels, masks, title)` draws one warp's run as a grid: one column per issued
slot, one row per lane; a cell is coloured by the instruction issued in that slot when the lane
is active and grey when it is masked off (`labkit.gpu_model.lab.lane_masks` computes both).
The coloured share of the grid is the active-lane efficiency.

`segments_html(addresses, title)` draws the 128-byte segments one warp's access touches, one row
per segment (32 four-byte words): the words the lanes read are dark, the rest of each 32-byte
sector that moves anyway is pale. Rows = transactions; dark + pale = bytes moved.

`side_by_side(*parts)` lays HTML pictures out in a row that wraps to fit the output area. All
functions are pure (arguments in, an HTML string out).
"""
from __future__ import annotations

import html

import numpy as np

CELL = 6
PALETTE = ("#3182bd", "#fd8d3c", "#31a354", "#756bb1", "#e6550d", "#636363")
IDLE = "#e0e0e0"
PALE = "#c6dbef"
READ = "#08519c"
EMPTY = "#ffffff"
GRID = "#ffffff"


def _svg(width: int, height: int, parts: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'style="max-width:100%;height:auto" viewBox="0 0 {width} {height}">' + "".join(parts) + "</svg>")


def _rect(x: int, y: int, w: int, h: int, fill: str, stroke: str = GRID) -> str:
    return f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" stroke="{stroke}" stroke-width="0.5"/>'


def _text(x: int, y: int, s: str, size: int = 10, anchor: str = "start") -> str:
    return (f'<text x="{x}" y="{y}" font-size="{size}" font-family="sans-serif" '
            f'text-anchor="{anchor}">{html.escape(s)}</text>')


def warp_slots_html(labels, masks, title: str = "", cell: int = CELL) -> str:
    """One warp's slots (columns) × lanes (rows): colour of the issued Op where the lane is
    active, grey where it is masked off. ``labels``: Op name per slot; ``masks``: a (slots, lanes)
    bool array. A legend names each Op's colour."""
    masks = np.asarray(masks, dtype=bool)
    labels = list(labels)
    if masks.ndim != 2 or masks.shape[0] != len(labels):
        raise ValueError(f"warp_slots_html: masks must have shape (slots={len(labels)}, lanes), got {masks.shape}")
    slots, lanes = masks.shape
    cw = max(cell, min(3 * cell, 240 // max(slots, 1)))       # a short run gets wider columns
    names = list(dict.fromkeys(labels))
    colour = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    top, left = 30, 34
    width = max(left + slots * cw + 4, 220)
    height = top + lanes * cell + 18
    parts = [_text(0, 11, title, 11)] if title else []
    x = 0
    for n in names + ["masked off"]:                         # legend
        parts.append(_rect(x, 17, 9, 9, colour.get(n, IDLE)))
        parts.append(_text(x + 12, 25, n, 10))
        x += 16 + 7 * len(n)
    for r in range(lanes):
        for k in range(slots):
            parts.append(_rect(left + k * cw, top + r * cell, cw, cell,
                               colour[labels[k]] if masks[k, r] else IDLE))
    parts.append(_text(left - 4, top + cell, "lane 0", 9, "end"))
    parts.append(_text(left - 4, top + lanes * cell, f"{lanes - 1}", 9, "end"))
    parts.append(_text(left, top + lanes * cell + 13, f"slots 0..{slots - 1} →", 9))
    return _svg(width, height, parts)


def segments_html(addresses, title: str = "", segment_bytes: int = 128, sector_bytes: int = 32,
                  word_bytes: int = 4, cell: int = CELL) -> str:
    """The segments one warp's byte ``addresses`` (None = inactive lane) touch, one row each
    (segment_bytes / word_bytes words): words read dark, the rest of touched sectors pale."""
    active = [int(a) for a in addresses if a is not None]
    words = segment_bytes // word_bytes
    per_sector = sector_bytes // word_bytes
    segs = sorted({a // segment_bytes for a in active})
    read = {(a // segment_bytes, (a % segment_bytes) // word_bytes) for a in active}
    sectors = {(a // segment_bytes, (a % segment_bytes) // sector_bytes) for a in active}
    top, left = 30, 4
    width = max(left + words * cell + 4, 200)
    height = top + max(len(segs), 1) * cell + 4
    parts = [_text(0, 11, title, 11)] if title else []
    x = 0
    for fill, name in ((READ, "read"), (PALE, "moved, unused")):      # legend
        parts += [_rect(x, 17, 9, 9, fill, "#bdbdbd"), _text(x + 12, 25, name, 10)]
        x += 16 + 7 * len(name)
    for r, s in enumerate(segs):
        for w in range(words):
            fill = READ if (s, w) in read else PALE if (s, w // per_sector) in sectors else EMPTY
            parts.append(_rect(left + w * cell, top + r * cell, cell, cell, fill, "#bdbdbd"))
    return _svg(width, height, parts)


def side_by_side(*parts: str) -> str:
    """HTML pictures in one row that wraps when the output area is narrow."""
    cells = "".join(f'<div style="margin:0 14px 8px 0">{p}</div>' for p in parts)
    return f'<div style="display:flex;flex-wrap:wrap;align-items:flex-start;max-width:100%">{cells}</div>'
