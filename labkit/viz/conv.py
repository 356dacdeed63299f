"""Drawing for Lab 07's convolution section: a halo exchange, then the window sliding down each stripe.

`halo_frames(H, W, world, kernel)` lists the frames (pure data): each rank's padded buffer as the
global row each buffer row holds (None: zero padding at the image's edge; "empty": a halo row not yet
received), the rows of the k × k window of the output row being computed, and the output rows done.
`halo_html(frame)` draws one: a column per rank, own rows in the rank's colour, received halo rows in
the sender's colour (paler), zero padding grey, the window outlined, finished output rows marked.
"""
from __future__ import annotations

from labkit.viz.gpu_model import _rect, _svg, _text

RANK = ("#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#d6616b")
PALE = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#bdbdbd", "#e7969c")
PAD, EMPTY = "#d9d9d9", "#ffffff"


def halo_frames(H: int, W: int, world: int, kernel: int) -> list[dict]:
    """Frames of the exchange and of the computation (module docstring); H divisible by world, odd kernel."""
    if H % world or kernel % 2 == 0 or H // world < kernel // 2:
        raise ValueError(f"halo_frames: need H ({H}) divisible by world ({world}), an odd kernel ({kernel}) "
                         f"and stripes of at least kernel // 2 rows")
    n, h = H // world, kernel // 2

    def buffers(received: bool):
        out = []
        for r in range(world):
            rows = []
            for j in range(-h, n + h):
                g = r * n + j
                if 0 <= j < n:
                    rows.append(g)
                elif not 0 <= g < H:
                    rows.append(None)                      # the image's edge: zero padding
                else:
                    rows.append(g if received else "empty")
            out.append(rows)
        return out

    frames = [{"label": f"{world} ranks hold {n} rows each; a {kernel}x{kernel} conv needs {h} more row(s) "
                        f"on each side", "buffers": buffers(False), "window": None, "done": 0, "W": W, "n": n,
               "h": h, "world": world}]
    frames.append({**frames[0], "label": "halo exchange: each rank sends its border rows to its neighbours",
                   "buffers": buffers(True)})
    for i in range(n):
        frames.append({**frames[1], "label": f"every rank computes its output row {i} from buffer rows "
                                             f"{i}..{i + 2 * h}", "window": (i, i + 2 * h), "done": i + 1})
    return frames


def halo_html(frame: dict, cell: int = 12) -> str:
    """One frame of `halo_frames` as SVG."""
    world, W, n, h = frame["world"], frame["W"], frame["n"], frame["h"]
    H = n * world
    col = W * cell + 56
    top = 40
    parts = [_text(0, 14, frame["label"], 11)]
    for r in range(world):
        x0 = r * col + 20
        parts.append(_text(x0, top - 6, f"rank {r}", 10))
        for j, g in enumerate(frame["buffers"][r]):
            own = h <= j < h + n
            fill = (RANK[r % len(RANK)] if own else EMPTY if g == "empty" else PAD if g is None
                    else PALE[(g // n) % len(PALE)])
            y = top + j * cell
            for c in range(W):
                parts.append(_rect(x0 + c * cell, y, cell, cell, fill, "#ffffff" if own else "#969696"))
            label = "" if g in (None, "empty") else str(g)
            parts.append(_text(x0 - 3, y + cell - 2, label, 8, "end"))
            if frame["done"] and own and j - h < frame["done"]:
                parts.append(_text(x0 + W * cell + 4, y + cell - 2, "out", 8))
        if frame["window"] is not None:
            a, b = frame["window"]
            parts.append(f'<rect x="{x0 - 1}" y="{top + a * cell - 1}" width="{W * cell + 2}" '
                         f'height="{(b - a + 1) * cell + 2}" fill="none" stroke="#000000" stroke-width="2"/>')
    parts.append(_text(0, top + (n + 2 * h) * cell + 16,
                       f"image rows 0..{H - 1}; grey: zero padding at the image's edge; pale: received rows", 9))
    return _svg(world * col + 20, top + (n + 2 * h) * cell + 24, parts)
