"""Drawing for Lab 09's inference-memory section: which activations of a chain are alive, frame by frame.

`lifetime_html(lifetimes, frame)` draws a `labkit.memory.inference.Lifetimes` at one frame: a row per
mode (forward-only under no_grad, and training), a box per module output (its width grows with its
bytes), filled while the output exists, empty once it has been freed; the tracker's live activation
bytes at the end of each row. Pure: finished data in, an HTML string out.
"""
from __future__ import annotations

from labkit.viz.gpu_model import _rect, _svg, _text

ALIVE = {"inference": "#3182bd", "training": "#e45756"}
FREED = "#ffffff"


def lifetime_html(lifetimes, frame: int, title: str = "") -> str:
    """One frame (0-based) of `Lifetimes.frames` for both modes, side by side in rows."""
    n = len(lifetimes.frames["inference"])
    if not 0 <= frame < n:
        raise ValueError(f"lifetime_html: frame must be in 0..{n - 1}, got {frame}")
    unit = max(lifetimes.sizes)
    left, top, row_h, gap = 96, 44, 30, 4
    label = lifetimes.frames["inference"][frame][0]
    parts = [_text(0, 12, title, 12)] if title else []
    parts.append(_text(0, 30, f"step {frame + 1} of {n}: {label}", 11))
    x_end = left
    for r, mode in enumerate(("inference", "training")):
        _, alive, live = lifetimes.frames[mode][frame]
        y = top + r * (row_h + 10)
        parts.append(_text(0, y + 18, "forward only" if mode == "inference" else "training", 11))
        x = left
        for j, (size, on) in enumerate(zip(lifetimes.sizes, alive)):
            w = max(14, int(36 * size / unit))
            parts.append(_rect(x, y, w, row_h, ALIVE[mode] if on else FREED, "#636363"))
            parts.append(_text(x + w // 2, y + row_h + 9, f"a{j + 1}", 8, "middle"))
            x += w + gap
        parts.append(_text(x + 8, y + 18, f"{live:,} B live", 11))
        x_end = max(x_end, x + 110)
    return _svg(x_end, top + 2 * (row_h + 10) + 14, parts)
