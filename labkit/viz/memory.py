"""Drawings for Lab 09: a training step's memory, op by op, stacked by category.

``timeline_figure(timeline)`` draws a `labkit.memory.lab.Timeline` (parameters, gradients,
optimizer states and activations after every op; forward / backward / step shaded; the peak
marked). ``checkpoint_frame(timelines, i, ymax)`` is one frame of
`labkit.memory.lab.checkpoint_widget`, which steps through segment lengths k of activation
checkpointing (timelines precomputed there): watch the activation hill flatten and the peak move.
"""
from __future__ import annotations

import matplotlib.pyplot as plt

from labkit.memory.tracker import CATEGORIES

COLOURS = {"parameters": "#4c78a8", "gradients": "#f58518", "optimizer": "#54a24b", "activations": "#e45756"}
PHASES = {"forward": "#f2f2f2", "backward": "#e6e6e6", "step": "#d9d9d9"}


def timeline_figure(timeline, title: str = "", ymax: float | None = None):
    """Stacked bytes by category after every op of one step (KiB), the peak as a dashed line."""
    samples = [s for s in timeline.samples if s.by_category is not None and s.phase != "start"]
    fig, ax = plt.subplots(figsize=(8.5, 3.0))
    xs = list(range(len(samples)))
    start = 0
    for k in range(1, len(samples) + 1):                      # shade each phase's run of ops
        if k == len(samples) or samples[k].phase != samples[start].phase:
            ax.axvspan(start - 0.5, k - 0.5, color=PHASES.get(samples[start].phase, "white"), lw=0)
            ax.text((start + k - 1) / 2, 1.0, samples[start].phase, transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=8)
            start = k
    ax.stackplot(xs, *[[s.by_category[c] / 1024 for s in samples] for c in CATEGORIES],
                 labels=list(CATEGORIES), colors=[COLOURS[c] for c in CATEGORIES], alpha=0.9)
    peak = timeline.peak / 1024
    ax.axhline(peak, color="black", ls="--", lw=0.8)
    ax.text(len(samples) - 1, peak, f"peak {peak:.1f} KiB", ha="right", va="bottom", fontsize=8)
    ax.set_xlim(-0.5, len(samples) - 0.5)
    ax.set_ylim(0, ymax or peak * 1.25)
    ax.set_xlabel("op")
    ax.set_ylabel("KiB live")
    ax.legend(loc="upper left", fontsize=7, ncol=4, frameon=False)
    ax.set_title(title, fontsize=9, loc="left", pad=14)
    fig.tight_layout()
    return fig


def checkpoint_label(timeline) -> str:
    k = "no checkpointing" if timeline.segment is None else f"segments of k = {timeline.segment}"
    acts = max(s.by_category["activations"] for s in timeline.samples if s.by_category)
    closed = f"; activation peak {acts} B" + ("" if timeline.closed_form is None else
                                               f" (closed form {timeline.closed_form} B)")
    return f"{timeline.n_layers} layers, {k}{closed}"


def checkpoint_frame(timelines, i: int, ymax: float):
    """The widget's pure render: frame ``i`` of the precomputed timelines, on a common y scale."""
    return timeline_figure(timelines[i], checkpoint_label(timelines[i]), ymax)


def wall_figure(rows, envelope, year: int):
    """The memory wall up to ``year``: each model's state bytes (``rows``: `labkit.memory.wall.WallRow`s)
    as a labelled dot, the largest device memory by year (``envelope``: (year, GB) pairs) as a step
    line, both in GB on a log scale; the title names the latest model and the devices it fills."""
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    env = [(y, gb) for y, gb in envelope if y <= year]
    env = env + [(year + 1, env[-1][1])] if env else env      # the last year's step, drawn to its end
    ax.step([y for y, _ in env], [gb for _, gb in env], where="post", color=COLOURS["parameters"], lw=2,
            label="largest device memory (GB)")
    shown = [r for r in rows if r.model.year <= year]
    ax.scatter([r.model.year for r in shown], [r.state_bytes / 1e9 for r in shown], color=COLOURS["activations"],
               zorder=3, label="model states, 16 B/parameter (GB)")
    for r in shown:                               # a label next to last year's similar one goes below
        crowded = any(q.model.year == r.model.year - 1 and 2 / 3 < q.state_bytes / r.state_bytes < 1.5
                      for q in shown)
        ax.annotate(r.model.name, (r.model.year, r.state_bytes / 1e9), fontsize=7,
                    xytext=(4, -10 if crowded else 2), textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xlim(min(y for y, _ in envelope) - 0.5, max(y for y, _ in envelope) + 1.5)
    ax.set_ylim(3, 2e4)
    ax.set_xlabel("year")
    ax.set_ylabel("GB")
    ax.legend(loc="lower right", fontsize=7, frameon=False)
    if shown:
        last = max(shown, key=lambda r: (r.model.year, r.state_bytes))
        ax.set_title(f"{year}: {last.model.name}'s states fill {last.devices} x {last.device.name} "
                     f"({last.device.gb:g} GB)", fontsize=9, loc="left")
    fig.tight_layout()
    return fig
