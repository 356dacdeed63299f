"""Lab 10's drawing: which shards of the model states each rank holds, moment by moment.

``shards_figure(moment, stage, world, units)`` draws one `labkit.zero.timeline.Moment` of a step:
one row per rank; for each state (parameters, gradients, optimizer states) the units side by side,
each cut into N shard cells — dark where the rank holds its own shard, light where it holds the
others' too (a whole unit), empty where it holds nothing — with the bytes the rank holds and has
sent so far. `labkit.zero.lab` computes the moments (`shards_frame`) and wires the widget
(`shards_widget`).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from labkit.zero.timeline import NONE, STATES, WHOLE

COLOURS = {"parameters": "#4c78a8", "gradients": "#f58518", "optimizer": "#54a24b"}
LIGHT = {"parameters": "#aec7e8", "gradients": "#ffbb78", "optimizer": "#98df8a"}
STAGE_NAMES = {0: "stage 0 (DDP)", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP"}


def shards_figure(m, stage: int, world: int, units: int):
    """Moment ``m`` of one step at ``stage`` on ``world`` ranks, the model cut into ``units`` units;
    bytes in units of Ψ (mixed precision: 2 + 2 + 12 bytes per parameter)."""
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
