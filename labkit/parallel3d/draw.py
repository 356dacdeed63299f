"""Lab 11's drawings: where a 3D-parallel plan's ranks sit, what its step is made of, and the
real 2×2×2 run's timeline.

``cluster_figure(layout)`` draws nodes as rows of GPU cells, each cell coloured by the index of
its group ("tp", "dp" or "pp") and labelled with its (dp, tp, pp) coordinates, as
`labkit.parallel3d.lab.cluster_layout` lays them out from the grid. ``plan_figure(prediction,
layout)`` adds the predicted step breakdown and memory per GPU of a finished `labkit.planner`
prediction (the planner's search and its widget are `labkit.planner.lab.plan_frame` /
`plan_widget`). ``timeline_figure(tl)`` draws a `labkit.parallel3d.Timeline3D`: one row per rank.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

PART_COLOURS = {"gemm": "#4c78a8", "elementwise": "#9ecae9", "tp": "#f58518", "pp": "#54a24b", "bubble": "#bab0ac",
                "dp": "#e45756", "optimizer": "#b279a2", "compute": "#4c78a8"}
GiB = 1 << 30


def draw_cluster(ax, layout: dict) -> None:
    """Nodes as rows of GPU cells, coloured by group: ``layout`` as `labkit.parallel3d.lab.cluster_layout`
    makes it (the grid, the ranks shown, each one's group index and (dp, tp, pp) coordinates, and
    the most nodes a group spans)."""
    dp, tp, pp, gpus_per_node = layout["dp"], layout["tp"], layout["pp"], layout["gpus_per_node"]
    world, shown, spans, colour_by = dp * tp * pp, layout["shown"], layout["spans"], layout["colour_by"]
    cmap = plt.get_cmap("tab20")
    rows = -(-shown // gpus_per_node)
    for r in range(shown):
        node, slot = divmod(r, gpus_per_node)
        y = rows - 1 - node
        ax.add_patch(Rectangle((slot, y), 0.92, 0.8, facecolor=cmap(layout["group"][r] % 20), edgecolor="#333333",
                               lw=0.6))
        d, t, p = layout["coords"][r]
        ax.text(slot + 0.46, y + 0.52, str(r), ha="center", va="center", fontsize=7, weight="bold")
        ax.text(slot + 0.46, y + 0.2, f"{d},{t},{p}", ha="center", va="center", fontsize=5.5)
    for node in range(rows):
        y = rows - 1 - node
        ax.add_patch(Rectangle((-0.08, y - 0.08), gpus_per_node + 0.08, 0.96, fill=False, edgecolor="#777777",
                               lw=1, linestyle="--"))
        ax.text(-0.3, y + 0.4, f"node {node}", ha="right", va="center", fontsize=7)
    more = f"; ranks 0–{shown - 1} of {world} shown" if shown < world else ""
    ax.set_title(f"dp={dp} tp={tp} pp={pp}, colour = {colour_by} group (each on ≤ {spans} node"
                 f"{'s' if spans > 1 else ''})\nlabel: rank and (dp, tp, pp){more}", fontsize=8, loc="left")
    ax.set_xlim(-1.6, gpus_per_node + 0.2)
    ax.set_ylim(-0.3, rows)
    ax.axis("off")


def cluster_figure(layout: dict):
    """`draw_cluster` alone, in a figure sized to its nodes."""
    rows = -(-layout["shown"] // layout["gpus_per_node"])
    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * layout["gpus_per_node"] + 1.5), 0.55 * rows + 0.8))
    draw_cluster(ax, layout)
    fig.tight_layout()
    return fig


def plan_figure(prediction, layout: dict, title: str = ""):
    """A plan's cluster picture (``layout``: `labkit.parallel3d.lab.cluster_layout` of its grid), its
    predicted step (seconds per part) and its memory per GPU."""
    p = prediction.plan
    rows = -(-layout["shown"] // layout["gpus_per_node"])
    fig, (ax0, ax1, ax2) = plt.subplots(3, 1, figsize=(9, 0.5 * rows + 3.2),
                                        gridspec_kw={"height_ratios": [max(rows, 1), 0.9, 0.9]})
    draw_cluster(ax0, layout)
    left = 0.0
    for name, seconds in prediction.parts.items():
        ax1.barh(0, seconds, left=left, color=PART_COLOURS[name], label=f"{name} {seconds:.3g} s")
        left += seconds
    fig.suptitle(title or f"{p}: {prediction.tflops_per_gpu:.0f} TFLOP/s per GPU, MFU {prediction.mfu:.0%}",
                 fontsize=9, x=0.01, ha="left")
    ax1.set_xlabel("seconds per iteration", fontsize=7)
    mem = prediction.memory
    ax2.barh(0, mem.model_states / GiB, color="#72b7b2", label=f"model states {mem.model_states / GiB:.1f}")
    ax2.barh(0, mem.activations / GiB, left=mem.model_states / GiB, color="#b279a2",
             label=f"activations {mem.activations / GiB:.1f}")
    ax2.barh(0, mem.other / GiB, left=(mem.model_states + mem.activations) / GiB, color="#d8b5a5",
             label=f"other {mem.other / GiB:.1f}")
    ax2.axvline(prediction.memory_limit / GiB, color="black", lw=1)
    ax2.set_xlim(0, prediction.memory_limit / GiB * 1.05)
    ax2.set_xlabel(f"GiB on the fullest GPU (the line: {prediction.memory_limit / GiB:.0f} GiB usable)", fontsize=7)
    for ax in (ax1, ax2):
        ax.set_yticks([])
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=6.5, ncol=5, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def timeline_colour(label: str) -> str:
    if label.startswith("F"):
        return "#4c78a8"
    if label.startswith("B"):
        return "#9ecae9"
    return {"dp all-reduce": PART_COLOURS["dp"], "embedding all-reduce": "#ff9da6"}.get(label, "#bab0ac")


def timeline_figure(tl, time_unit: str = "ms"):
    """One row per rank of a `labkit.parallel3d.Timeline3D`: F and B of each micro-batch, then the
    data-parallel and embedding all-reduces and the optimizer step."""
    scale = {"ms": 1e3, "s": 1.0}[time_unit]
    ranks = sorted(tl.timeline)
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(ranks) + 1.2))
    for row, r in enumerate(ranks):
        y = len(ranks) - 1 - row
        for label, start, end in tl.timeline[r]:
            ax.barh(y, (end - start) * scale, left=start * scale, color=timeline_colour(label),
                    edgecolor="white", lw=0.3)
            if label[0] in "FB" and (end - start) * scale > 0.03 * tl.step_time_s * scale:
                ax.text((start + end) / 2 * scale, y, label.split("@")[0], ha="center", va="center", fontsize=6)
        c = tl.coords[r]
        ax.text(-0.01 * tl.step_time_s * scale, y, f"rank {r} (dp {c[0]}, tp {c[1]}, pp {c[2]})", ha="right",
                va="center", fontsize=7)
    handles = [Rectangle((0, 0), 1, 1, color=timeline_colour(k)) for k in ("F", "B", "dp all-reduce",
                                                                          "embedding all-reduce", "optimizer")]
    ax.legend(handles, ["forward", "backward", "dp all-reduce", "embedding all-reduce", "optimizer"],
              fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    ax.set_yticks([])
    ax.set_xlabel(time_unit, fontsize=8)
    ax.set_title(f"one step on {len(ranks)} gloo ranks: {tl.step_time_s * 1e3:.0f} ms", fontsize=9, loc="left")
    fig.tight_layout()
    return fig


def note_figure(text: str):
    """A one-line figure holding ``text`` (where a plan would be drawn and none exists)."""
    fig, ax = plt.subplots(figsize=(9, 0.8))
    ax.text(0, 0.5, text, fontsize=9, va="center")
    ax.axis("off")
    return fig
