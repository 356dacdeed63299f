"""Drawings for Lab 07: which rank holds which block of each weight and activation, step by step.

`megatron_steps(block)` lists the steps of a Megatron MLP or attention block, forward then
backward, as plain data: for each step, every array's layout ("replicated", "rows", "cols" split
over ranks, or "partial" sums) and the collective the step runs (or None). `tp_frame(steps, i, t)`
draws step i for t ranks; `tp_widget(block, t)` puts Play + slider over the steps.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

_RANK_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756"]
_REPLICATED = "#bbbbbb"

# array name -> (x, y, width, height) in the picture, and a label
_MLP_ARRAYS = {"X": (0, 0, 1.2, 2), "W1": (1.8, 0, 2.4, 1.2), "Y": (4.8, 0, 2.4, 2), "W2": (7.8, 0, 1.2, 2.4),
               "Z": (9.6, 0, 1.2, 2)}
_ATTN_ARRAYS = {"X": (0, 0, 1.2, 2), "Wqkv": (1.8, 0, 3.6, 1.2), "heads": (6.0, 0, 2.4, 2), "Wo": (9.0, 0, 1.2, 1.2),
                "Z": (10.8, 0, 1.2, 2)}
_LABELS = {"X": "X (b·s, h)", "W1": "fc Wᵀ (h, 4h)", "Y": "GELU(X·W1ᵀ) (b·s, 4h)", "W2": "proj Wᵀ (4h, h)",
           "Z": "output (b·s, h)", "Wqkv": "qkv Wᵀ (h, 3h)", "heads": "attention per head", "Wo": "out Wᵀ (h, h)"}


def megatron_steps(block: str = "mlp") -> list[dict]:
    """The steps of a Megatron ``block`` ("mlp" or "attention"): each {"title", "layout":
    {array: layout}, "collective": str or None, "active": [arrays the step touches]}."""
    if block not in ("mlp", "attention"):
        raise ValueError(f"megatron_steps: block must be 'mlp' or 'attention', got {block!r}")
    w1, y, w2 = ("W1", "Y", "W2") if block == "mlp" else ("Wqkv", "heads", "Wo")
    base = {"X": "replicated", w1: "cols" if block == "mlp" else "cols3", y: None, w2: "rows", "Z": None}
    steps = [
        ("forward: X is replicated; it enters through f (identity forward)", {}, None, ["X"]),
        (f"forward: each rank multiplies by its share of {w1}'s output features (column-parallel): its "
         + ("slice of the 4h features" if block == "mlp" else "heads' Q, K, V — nothing moves"),
         {y: "cols"}, None, [w1, y]),
        ("forward: " + ("GELU on each rank's slice, no communication" if block == "mlp" else
                        "attention inside each rank's heads, no communication"), {y: "cols"}, None, [y]),
        (f"forward: each rank multiplies its slice by its share of {w2}'s input features (row-parallel): "
         "partial sums",
         {y: "cols", "Z": "partial"}, None, [w2, "Z"]),
        ("forward: g all-reduces the partial sums: every rank has the whole output",
         {y: "cols", "Z": "replicated"}, "all-reduce (g) of b·s·h", ["Z"]),
        ("backward: dZ is replicated; g's backward is the identity", {y: "cols", "Z": "replicated"}, None, ["Z"]),
        (f"backward: each rank's d(slice) = dZ · (its share of {w2}); weight gradients stay local",
         {y: "cols", "Z": "replicated"}, None, [w2, y]),
        ("backward: each rank's dX is a partial sum; f's backward all-reduces it",
         {y: "cols", "Z": "replicated", "X": "partial"}, None, ["X"]),
        ("backward: after f's all-reduce every rank has the whole dX",
         {y: "cols", "Z": "replicated", "X": "replicated"}, "all-reduce (f) of b·s·h", ["X"]),
    ]
    return [{"title": t, "layout": {**base, **extra}, "collective": c, "active": a} for t, extra, c, a in steps]


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


def tp_widget(block: str = "mlp", t: int = 2):
    """Play + slider over the steps of a Megatron ``block`` split over ``t`` ranks."""
    from labkit.viz.player import player

    steps = megatron_steps(block)
    return player(lambda i: tp_frame(steps, i, t, block), len(steps), interval_ms=1200)
