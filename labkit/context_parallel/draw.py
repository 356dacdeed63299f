"""Lab 14's drawing: ring attention's blocks, step by step.

``ring_figure(schedule, i)`` draws step i of a `labkit.context_parallel.schedule.ring_schedule`
as the S × S matrix of attention scores (queries down, keys across): the tiles each rank
computes in this step in its colour, those it computed in earlier steps pale, tiles the causal
mask lets it skip hatched, and — above — which key/value block each rank holds now and where it
goes next. `labkit.context_parallel.lab.ring_player(world, seq)` schedules a causal ring with
contiguous chunks, then with zig-zag chunks, and plays the steps.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

RANK_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d"]
PALE = 0.25


def ring_figure(schedule: list, i: int, title: str = ""):
    """Step ``i`` (clamped) of ``schedule``: the score matrix by tile, and the blocks in flight."""
    i = max(0, min(i, len(schedule) - 1))
    world = len(schedule[0].source)
    seq = max(qs.stop for step in schedule for tiles in step.tiles for qs, _, _ in tiles)
    fig, ax = plt.subplots(figsize=(6.2, 6.6))
    done = [0] * world
    for step in schedule[:i + 1]:
        for r in range(world):
            for qs, ks, kind in step.tiles[r]:
                now = step.index == i
                if kind == "skip":
                    if now:
                        ax.add_patch(Rectangle((ks.start, qs.start), ks.length, qs.length, facecolor="white",
                                               edgecolor=RANK_COLORS[r], hatch="//", lw=0.8))
                    continue
                done[r] += qs.length * ks.length
                ax.add_patch(Rectangle((ks.start, qs.start), ks.length, qs.length, facecolor=RANK_COLORS[r],
                                       alpha=1.0 if now else PALE, edgecolor="black", lw=0.6))
                if now and kind == "diagonal":
                    ax.plot([ks.start, ks.stop], [qs.start, qs.stop], color="white", lw=1.2)
    for r in range(world):                                      # which rank owns which query rows
        for qs in sorted({qs for qs, _, _ in schedule[0].tiles[r]}, key=lambda sp: sp.start):
            ax.text(-0.4, (qs.start + qs.stop) / 2, f"q{r}", ha="right", va="center", fontsize=8,
                    color=RANK_COLORS[r])
    step = schedule[i]
    for r in range(world):                                      # the k/v block each rank holds, above
        src = step.source[r]
        for ks in sorted({ks for _, ks, _ in step.tiles[r]}, key=lambda sp: sp.start):
            y = -1.2 - 2.0 * (r + 1) / (world + 1)
            ax.add_patch(Rectangle((ks.start, y), ks.length, 1.6 / (world + 1), facecolor=RANK_COLORS[src],
                                   edgecolor="black", lw=0.5))
        ax.text(-0.4, y + 0.8 / (world + 1), f"r{r} holds k/v{src}", ha="right", va="center", fontsize=6,
                color=RANK_COLORS[r])
    if i < len(schedule) - 1 and world > 1:
        ax.add_patch(FancyArrowPatch((seq * 0.15, -3.3), (seq * 0.85, -3.3), arrowstyle="->", mutation_scale=12))
        ax.text(seq / 2, -3.6, "each rank passes its k/v block to rank r + 1 while it computes", ha="center",
                fontsize=7)
    ax.set_xlim(-1.5, seq + 0.2)
    ax.set_ylim(seq + 0.2, -4.0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("keys (global position) →", fontsize=8)
    work = ", ".join(f"r{r}: {d}" for r, d in enumerate(done))
    ax.set_title(f"{title}step {i + 1} of {len(schedule)}: k/v blocks held (top), tiles computed now "
                 f"(dark)\nscore entries computed so far per rank — {work}", fontsize=8, loc="left")
    fig.tight_layout()
    return fig
