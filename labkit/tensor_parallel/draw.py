"""Lab 07's drawings: which rank holds which block of each weight and activation, step by step,
and a convolution's halo exchange. Each takes finished data; `labkit.tensor_parallel.lab` lists
the steps (`megatron_steps`) and the frames (`halo_frames`) and wires the players.

`tp_frame(steps, i, t)` draws step i of a Megatron block for t ranks: every array's layout
("replicated", "rows", "cols" split over ranks, or "partial" sums) and the collective the step runs.

`halo_html(frame)` draws one frame of a convolution split by rows: a column per rank, own rows in
the rank's colour, received halo rows in the sender's colour (paler), zero padding grey, the window
outlined, finished output rows marked.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from labkit.viz.svg import rect, svg, text

_RANK_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756"]
_REPLICATED = "#bbbbbb"

# array name -> (x, y, width, height) in the picture, and a label
_MLP_ARRAYS = {"X": (0, 0, 1.2, 2), "W1": (1.8, 0, 2.4, 1.2), "Y": (4.8, 0, 2.4, 2), "W2": (7.8, 0, 1.2, 2.4),
               "Z": (9.6, 0, 1.2, 2)}
_ATTN_ARRAYS = {"X": (0, 0, 1.2, 2), "Wqkv": (1.8, 0, 3.6, 1.2), "heads": (6.0, 0, 2.4, 2), "Wo": (9.0, 0, 1.2, 1.2),
                "Z": (10.8, 0, 1.2, 2)}
_LABELS = {"X": "X (b·s, h)", "W1": "fc Wᵀ (h, 4h)", "Y": "GELU(X·W1ᵀ) (b·s, 4h)", "W2": "proj Wᵀ (4h, h)",
           "Z": "output (b·s, h)", "Wqkv": "qkv Wᵀ (h, 3h)", "heads": "attention per head", "Wo": "out Wᵀ (h, h)"}


def _draw_array(ax, x, y, w, h, layout, t, active):
    if layout is None:
        ax.add_patch(Rectangle((x, y), w, h, fill=False, ls=":", ec="#999999"))
    elif layout == "replicated":
        ax.add_patch(Rectangle((x, y), w, h, color=_REPLICATED))
    elif layout == "partial":                                 # t whole-size partial results, like cards
        for r in range(t):
            ax.add_patch(Rectangle((x + 0.1 * r, y - 0.1 * r), w, h, fc=_RANK_COLORS[r % 4], alpha=0.5,
                                   hatch="//", ec="white"))
    elif layout == "cols3":                                   # [q | k | v], each split by heads
        for part in range(3):
            for r in range(t):
                ax.add_patch(Rectangle((x + part * w / 3 + r * w / (3 * t), y), w / (3 * t), h,
                                       color=_RANK_COLORS[r % 4]))
            ax.text(x + (part + 0.5) * w / 3, y + h + 0.05, "qkv"[part], ha="center", fontsize=7)
    else:
        for r in range(t):
            if layout == "rows":
                ax.add_patch(Rectangle((x, y + h - (r + 1) * h / t), w, h / t, color=_RANK_COLORS[r % 4]))
            else:
                ax.add_patch(Rectangle((x + r * w / t, y), w / t, h, color=_RANK_COLORS[r % 4]))
    ax.add_patch(Rectangle((x, y), w, h, fill=False, lw=2.5 if active else 0.8, ec="black"))


def tp_frame(steps: list[dict], i: int, t: int = 2, block: str = "mlp"):
    """Step ``i`` of ``steps`` for ``t`` ranks: colours = ranks, grey = replicated, hatched cards =
    each rank's partial sum of the whole array, dotted = not computed yet; bold outline = what this
    step touches."""
    step = steps[i]
    arrays = _MLP_ARRAYS if block == "mlp" else _ATTN_ARRAYS
    fig, ax = plt.subplots(figsize=(10, 2.6))
    for name, (x, y, w, h) in arrays.items():
        _draw_array(ax, x, y, w, h, step["layout"][name], t, name in step["active"])
        ax.text(x + w / 2, y - 0.25, _LABELS[name], ha="center", va="top", fontsize=7)
    ax.set_xlim(-0.3, max(x + w for x, _, w, _ in arrays.values()) + 0.3)
    ax.set_ylim(-0.8, 2.7)
    ax.axis("off")
    ax.set_title(f"step {i + 1}/{len(steps)}: {step['title']}", fontsize=8, loc="left")
    if step["collective"]:
        ax.text(0, 2.55, f"collective: {step['collective']}", fontsize=8, color="#b00000")
    legend = [Rectangle((0, 0), 1, 1, color=_RANK_COLORS[r % 4]) for r in range(t)] + \
             [Rectangle((0, 0), 1, 1, color=_REPLICATED)]
    fig.legend(legend, [f"rank {r}" for r in range(t)] + ["replicated (every rank)"], fontsize=7,
               ncol=t + 1, loc="lower center", frameon=False)
    return fig


RANK = ("#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#d6616b")
PALE = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#bdbdbd", "#e7969c")
PAD, EMPTY = "#d9d9d9", "#ffffff"


def halo_html(frame: dict, cell: int = 12) -> str:
    """One frame of `halo_frames` as SVG."""
    world, W, n, h = frame["world"], frame["W"], frame["n"], frame["h"]
    H = n * world
    col = W * cell + 56
    top = 40
    parts = [text(0, 14, frame["label"], 11)]
    for r in range(world):
        x0 = r * col + 20
        parts.append(text(x0, top - 6, f"rank {r}", 10))
        for j, g in enumerate(frame["buffers"][r]):
            own = h <= j < h + n
            fill = (RANK[r % len(RANK)] if own else EMPTY if g == "empty" else PAD if g is None
                    else PALE[(g // n) % len(PALE)])
            y = top + j * cell
            for c in range(W):
                parts.append(rect(x0 + c * cell, y, cell, cell, fill, "#ffffff" if own else "#969696"))
            label = "" if g in (None, "empty") else str(g)
            parts.append(text(x0 - 3, y + cell - 2, label, 8, "end"))
            if frame["done"] and own and j - h < frame["done"]:
                parts.append(text(x0 + W * cell + 4, y + cell - 2, "out", 8))
        if frame["window"] is not None:
            a, b = frame["window"]
            parts.append(f'<rect x="{x0 - 1}" y="{top + a * cell - 1}" width="{W * cell + 2}" '
                         f'height="{(b - a + 1) * cell + 2}" fill="none" stroke="#000000" stroke-width="2"/>')
    parts.append(text(0, top + (n + 2 * h) * cell + 16,
                       f"image rows 0..{H - 1}; grey: zero padding at the image's edge; pale: received rows", 9))
    return svg(world * col + 20, top + (n + 2 * h) * cell + 24, parts)
