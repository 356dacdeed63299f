"""Drawings for Lab 11: where a 3D-parallel plan's ranks sit, what its step is made of, and the
real 2×2×2 run's timeline.

``cluster_figure(dp, tp, pp, gpus_per_node, colour_by)`` draws nodes as rows of GPU cells, each
cell coloured by the index of its ``colour_by`` group ("tp", "dp" or "pp") and labelled with its
(dp, tp, pp) coordinates (rank order of `labkit.planner.grid`). ``plan_figure(prediction, ...)``
adds the predicted step breakdown and memory per GPU of a `labkit.planner.Prediction`;
``plan_widget`` puts model, GPU count, batch and colouring controls over the planner's best plan.
``timeline_figure(tl)`` draws a `labkit.parallel3d.Timeline3D`: one row per rank.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from labkit.parallel3d.grid import KINDS, coords, groups, nodes_spanned

MAX_DRAWN = 64                      # GPUs drawn at most; bigger plans show their first ranks
PART_COLOURS = {"gemm": "#4c78a8", "elementwise": "#9ecae9", "tp": "#f58518", "pp": "#54a24b", "bubble": "#bab0ac",
                "dp": "#e45756", "optimizer": "#b279a2", "compute": "#4c78a8"}
GiB = 1 << 30


def _group_index(dp: int, tp: int, pp: int, colour_by: str) -> dict[int, int]:
    """rank -> index of its ``colour_by`` group."""
    return {r: i for i, g in enumerate(groups(dp, tp, pp)[colour_by]) for r in g}


def draw_cluster(ax, dp: int, tp: int, pp: int, gpus_per_node: int, colour_by: str = "tp") -> None:
    """Nodes as rows of ``gpus_per_node`` cells (at most MAX_DRAWN GPUs), coloured by group."""
    if colour_by not in KINDS:
        raise ValueError(f"cluster_figure: colour_by must be one of {', '.join(KINDS)}, got {colour_by!r}")
    world = dp * tp * pp
    shown = min(world, MAX_DRAWN - MAX_DRAWN % gpus_per_node or gpus_per_node)
    index = _group_index(dp, tp, pp, colour_by)
    cmap = plt.get_cmap("tab20")
    rows = -(-shown // gpus_per_node)
    for r in range(shown):
        node, slot = divmod(r, gpus_per_node)
        y = rows - 1 - node
        ax.add_patch(Rectangle((slot, y), 0.92, 0.8, facecolor=cmap(index[r] % 20), edgecolor="#333333", lw=0.6))
        d, t, p = coords(r, dp, tp, pp)
        ax.text(slot + 0.46, y + 0.52, str(r), ha="center", va="center", fontsize=7, weight="bold")
        ax.text(slot + 0.46, y + 0.2, f"{d},{t},{p}", ha="center", va="center", fontsize=5.5)
    for node in range(rows):
        y = rows - 1 - node
        ax.add_patch(Rectangle((-0.08, y - 0.08), gpus_per_node + 0.08, 0.96, fill=False, edgecolor="#777777",
                               lw=1, linestyle="--"))
        ax.text(-0.3, y + 0.4, f"node {node}", ha="right", va="center", fontsize=7)
    spans = max(nodes_spanned(g, gpus_per_node) for g in groups(dp, tp, pp)[colour_by])
    more = f"; ranks 0–{shown - 1} of {world} shown" if shown < world else ""
    ax.set_title(f"dp={dp} tp={tp} pp={pp}, colour = {colour_by} group (each on ≤ {spans} node"
                 f"{'s' if spans > 1 else ''})\nlabel: rank and (dp, tp, pp){more}", fontsize=8, loc="left")
    ax.set_xlim(-1.6, gpus_per_node + 0.2)
    ax.set_ylim(-0.3, rows)
    ax.axis("off")


def cluster_figure(dp: int, tp: int, pp: int, gpus_per_node: int, colour_by: str = "tp"):
    rows = -(-min(dp * tp * pp, MAX_DRAWN) // gpus_per_node)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * gpus_per_node + 1.5), 0.55 * rows + 0.8))
    draw_cluster(ax, dp, tp, pp, gpus_per_node, colour_by)
    fig.tight_layout()
    return fig


def plan_figure(prediction, gpus_per_node: int, colour_by: str = "tp", title: str = ""):
    """The plan's cluster picture, its predicted step (seconds per part) and its memory per GPU."""
    p = prediction.plan
    rows = -(-min(p.gpus, MAX_DRAWN) // gpus_per_node)
    fig, (ax0, ax1, ax2) = plt.subplots(3, 1, figsize=(9, 0.5 * rows + 3.2),
                                        gridspec_kw={"height_ratios": [max(rows, 1), 0.9, 0.9]})
    draw_cluster(ax0, p.dp, p.tp, p.pp, gpus_per_node, colour_by)
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


def plan_frame(params_billion: str = "39.1", gpus: int = 512, global_batch: int = 1536, colour_by: str = "tp"):
    """The planner's best plan for a Table 1 model (Narayanan et al. 2021) on ``gpus`` A100-80GB
    (8 per node), drawn with `plan_figure`; a one-line figure when no plan fits."""
    from labkit.planner.cost import selene
    from labkit.planner.published import MEGATRON_2021_TABLE1
    from labkit.planner.search import search

    run = next(r for r in MEGATRON_2021_TABLE1 if f"{r.params_billion:g}" == params_billion)
    cluster = selene(gpus)
    result = search(run.model, cluster, global_batch)
    if not result.plans:
        fig, ax = plt.subplots(figsize=(9, 0.8))
        reason = result.rejected[0].reason if result.rejected else "no candidate plan"
        ax.text(0, 0.5, f"{params_billion}B on {gpus} GPUs, batch {global_batch}: no plan fits ({reason})",
                fontsize=9, va="center")
        ax.axis("off")
        return fig
    return plan_figure(result.best, cluster.gpus_per_node, colour_by,
                       title=f"{params_billion}B on {gpus} GPUs, batch {global_batch}: {result.best}")


def plan_widget():
    """Model, GPU count, batch and colouring controls over `plan_frame`."""
    import ipywidgets as W

    from labkit.planner.published import MEGATRON_2021_TABLE1
    from labkit.viz.player import controlled

    return controlled(plan_frame,
                      params_billion=W.Dropdown(options=[f"{r.params_billion:g}" for r in MEGATRON_2021_TABLE1],
                                                value="39.1", description="model (B params)"),
                      gpus=W.Dropdown(options=[32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096], value=512,
                                      description="GPUs"),
                      global_batch=W.Dropdown(options=[128, 512, 1024, 1536, 2048, 3072], value=1536,
                                              description="global batch"),
                      colour_by=W.Dropdown(options=list(KINDS), value="tp", description="colour by"))
