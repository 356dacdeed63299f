"""Lab 02's drawing: a strided view on its flat storage (HTML).

``storage_html(view)`` is a pure function: the storage as a row of cells, the
cells the view reaches highlighted and labelled with how many view elements
map there (stride 0 maps several), then the view as a grid whose cells show
the storage position each element comes from.
"""
from __future__ import annotations

import html
from collections import Counter

from labkit.strides.view import StridedView

_CELL = ("display:inline-block;width:2.2em;height:2.2em;line-height:2.2em;text-align:center;"
         "border:1px solid #999;margin:1px;font:12px monospace;")
_HIT = "background:#f6b26b;"
_MISS = "background:#eee;color:#999;"


def hits(view: StridedView) -> Counter:
    """Storage position -> number of view elements that read it."""
    return Counter(view.storage_indices())


def storage_html(view: StridedView, title: str = "") -> str:
    """HTML: the storage row (hit cells class="hit", data-pos=i, data-count=n) and the view grid."""
    count = hits(view)
    cells = []
    for i in range(len(view.storage)):
        n = count.get(i, 0)
        style = _CELL + (_HIT if n else _MISS)
        badge = f"<sup>x{n}</sup>" if n > 1 else ""
        cells.append(f'<span class="{"hit" if n else "miss"}" data-pos="{i}" data-count="{n}" '
                     f'style="{style}" title="storage[{i}]">{i}{badge}</span>')
    head = (f"<b>{html.escape(title)}</b><br>" if title else "")
    meta = (f"offset={view.offset} shape={view.shape} strides={view.strides} "
            f"contiguous={view.is_contiguous()}")
    rows = []
    if view.ndim == 2:
        for r in range(view.shape[0]):
            rows.append("".join(f'<span style="{_CELL}{_HIT}">{view.storage_index((r, c))}</span>'
                                for c in range(view.shape[1])))
    else:
        rows.append("".join(f'<span style="{_CELL}{_HIT}">{k}</span>' for k in view.storage_indices()))
    return (f'<div class="strided-view">{head}<code>{html.escape(meta)}</code>'
            f'<div>storage:</div><div>{"".join(cells)}</div>'
            f'<div>view (each cell shows the storage position it reads):</div>'
            f'<div>{"<br>".join(rows)}</div></div>')
