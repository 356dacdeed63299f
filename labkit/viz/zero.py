"""Drawings for Lab 10: which shards of the model states each rank holds, moment by moment.

``shards_figure(stage, world, i)`` draws moment ``i`` of `labkit.zero.timeline.step_moments`: one
row per rank; for each state (parameters, gradients, optimizer states) the units side by side,
each cut into N shard cells — dark where the rank holds its own shard, light where it holds the
others' too (a whole unit), empty where it holds nothing — with the bytes the rank holds and has
sent so far. ``shards_widget`` puts a stage menu and a moment slider over it.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from labkit.zero.timeline import NONE, SHARD, STATES, WHOLE, step_moments

COLOURS = {"parameters": "#4c78a8", "gradients": "#f58518", "optimizer": "#54a24b"}
LIGHT = {"parameters": "#aec7e8", "gradients": "#ffbb78", "optimizer": "#98df8a"}
STAGE_NAMES = {0: "stage 0 (DDP)", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP"}


def shards_figure(stage: int, world: int = 4, i: int = 0, units: int = 3):
    """Moment ``i`` (clamped to the last) of one step at ``stage``; bytes in units of Ψ (mixed
    precision: 2 + 2 + 12 bytes per parameter)."""
    moments = step_moments(stage, world, units, unit_numel=1.0 / units)
    m = moments[min(i, len(moments) - 1)]
    fig, ax = plt.subplots(figsize=(9, 0.55 * world + 1.3))
    col_w = units * world + 2
    for r in range(world):
        y = world - 1 - r
        ax.text(-0.5, y + 0.4, f"rank {r}", ha="right", va="center", fontsize=8)
        for c, state in enumerate(STATES):
            for u in range(units):
                for s in range(world):
                    x = c * col_w + u * world + s
                    h = m.held[state][u]
                    own = s == r
                    fill = (COLOURS[state] if own and h != NONE else
                            LIGHT[state] if h == WHOLE else "white")
                    ax.add_patch(Rectangle((x, y), 1, 0.8, facecolor=fill, edgecolor="#bbbbbb", lw=0.5))
                ax.add_patch(Rectangle((c * col_w + u * world, y), world, 0.8, fill=False, edgecolor="#555555",
                                       lw=0.8))
        ax.text(3 * col_w - 1, y + 0.4, f"{m.bytes_held:.2f}·Ψ B held", va="center", fontsize=8)
    for c, state in enumerate(STATES):
        ax.text(c * col_w + units * world / 2, world + 0.1, f"{state} ({units} units)", ha="center",
                fontsize=8, color=COLOURS[state])
    ax.set_xlim(-3, 3 * col_w + 8)
    ax.set_ylim(-0.4, world + 0.6)
    ax.axis("off")
    comm = f" — {m.comm}" if m.comm else ""
    ax.set_title(f"{STAGE_NAMES[stage]}, N = {world}: {m.label}{comm}; sent so far {m.bytes_sent:.2f}·Ψ B "
                 f"per rank", fontsize=9, loc="left")
    fig.tight_layout()
    return fig


def moment_count(stage: int, world: int = 4, units: int = 3) -> int:
    return len(step_moments(stage, world, units))


def shards_widget(world: int = 4, units: int = 3):
    """A stage menu and a moment slider over `shards_figure`."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    most = max(moment_count(s, world, units) for s in range(4))
    return controlled(lambda stage, moment: shards_figure(stage, world, moment - 1, units),
                      stage=W.Dropdown(options=[(STAGE_NAMES[s], s) for s in range(4)], value=3, description="stage"),
                      moment=W.IntSlider(value=1, min=1, max=most, description="moment"))
