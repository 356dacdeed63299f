"""Drawings for Lab 06: a DDP step's backward and bucket all-reduces, and parameter-server timelines.

``overlap_figure(result)`` draws an `OverlapResult` (simulated) or the events a real step recorded;
``overlap_widget(...)`` puts a bucket-cap slider over the simulator; ``ssp_figure`` draws the
workers' iterations under ASP / SSP(s) / BSP with the staleness histogram; ``ssp_widget`` puts a
staleness slider over it; ``ps_figure`` draws real parameter-server runs (loss and staleness).
"""
from __future__ import annotations

from collections import Counter

import matplotlib.pyplot as plt

from labkit.data_parallel.overlap import OverlapResult, simulate_overlap
from labkit.data_parallel.ssp import ssp_start_times, ssp_staleness

_COMPUTE, _COMM, _FWD = "#4c78a8", "#f58518", "#9ecae9"
_STRIPES = ["#f58518", "#e45756"]


def overlap_figure(result: OverlapResult, title: str = "", ms: bool = True):
    """One step: forward, backward (ticks where gradients become ready) and each bucket's all-reduce
    on the communication channel; the exposed communication is written in the title."""
    scale = 1e3 if ms else 1.0
    fig, ax = plt.subplots(figsize=(9, 2.2))
    f = result.t_fwd * scale
    ax.barh(1, f, left=0, color=_FWD, edgecolor="white", label="forward")
    ax.barh(1, result.t_bwd * scale, left=f, color=_COMPUTE, edgecolor="white", label="backward")
    for k, s in enumerate(result.spans):
        ax.barh(0, (s.end - s.start) * scale, left=f + s.start * scale, color=_STRIPES[k % 2],
                edgecolor="white", label="bucket all-reduce" if k == 0 else None)
        ax.plot([f + s.ready * scale] * 2, [0.6, 1.4], color="black", lw=0.6)
    ax.set_yticks([0, 1], ["comm", "compute"])
    ax.set_xlabel("ms" if ms else "s")
    ax.set_xlim(0, result.step * scale * 1.02 or 1)
    ax.legend(loc="upper right", fontsize=7, ncol=3, frameon=False, bbox_to_anchor=(1, 1.35))
    ax.set_title(f"{title}  step {result.step * scale:.1f}, exposed comm {result.exposed * scale:.1f} "
                 f"{'ms' if ms else 's'}".strip(), fontsize=9, loc="left")
    fig.tight_layout()
    return fig


def measured_overlap(events, t_fwd: float, t_bwd: float) -> OverlapResult:
    """A real step's CommEvents (as `step_timing.StepTimes.events`: (bucket, bytes, ready, start,
    end) in seconds from backward's start) as an OverlapResult, to draw like the simulator's."""
    from labkit.data_parallel.overlap import BucketSpan

    spans = tuple(BucketSpan(b, (), n, r, s, e) for b, n, r, s, e in sorted(events, key=lambda e: e[3]))
    end = max([t_bwd] + [s.end for s in spans])
    return OverlapResult(spans, t_fwd, t_bwd, t_fwd + end, end - t_bwd)


def overlap_frame(ready_s, nbytes, world, alpha, beta, t_fwd, cap_kib: float):
    """The widget's pure render: the simulated step for a bucket cap of ``cap_kib`` KiB (0 = one
    bucket per parameter)."""
    cap = None if cap_kib == 0 else cap_kib * 1024
    r = simulate_overlap(ready_s, nbytes, cap, world, alpha, beta, t_fwd)
    label = "per-parameter" if cap is None else f"cap {cap_kib:g} KiB"
    return overlap_figure(r, f"{label}: {len(r.spans)} all-reduces,")


def overlap_widget(ready_s, nbytes, world, alpha, beta, t_fwd, caps_kib=(0, 16, 64, 256, 1024, 4096, 16384)):
    """Slider over bucket caps (KiB) driving `overlap_frame`."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    return controlled(lambda cap_kib: overlap_frame(ready_s, nbytes, world, alpha, beta, t_fwd, cap_kib),
                      cap_kib=W.SelectionSlider(options=list(caps_kib), value=caps_kib[3],
                                                description="bucket cap (KiB, 0 = per parameter)"))


def _gantt(ax, durations, staleness, title, start_times=ssp_start_times):
    start = start_times(durations, staleness)
    for k, row in enumerate(durations):
        for c, d in enumerate(row):
            ax.barh(k, d, left=start[k][c], color=_STRIPES[c % 2] if k else _COMPUTE, edgecolor="white")
    ax.set_yticks(range(len(durations)), [f"worker {k + 1}" for k in range(len(durations))], fontsize=7)
    ax.invert_yaxis()
    span = max(start[k][-1] + durations[k][-1] for k in range(len(durations)))
    ax.set_title(f"{title}: done at {span:g}", fontsize=8, loc="left")


def ssp_figure(durations, staleness: int, start_times=ssp_start_times):
    """ASP, SSP(staleness) and BSP timelines of the same workers (start times from ``start_times``,
    labkit's clock rule unless a learner's is given), and SSP's staleness histogram."""
    fig, axes = plt.subplots(1, 4, figsize=(12, 2.4), gridspec_kw={"width_ratios": [3, 3, 3, 2]})
    for ax, (s, name) in zip(axes, [(None, "ASP"), (staleness, f"SSP s={staleness}"), (0, "BSP")]):
        _gantt(ax, durations, s, name, start_times)
        ax.set_xlabel("time", fontsize=7)
    hist = Counter(ssp_staleness(durations, staleness))
    axes[3].bar(list(hist), list(hist.values()), color=_COMM)
    axes[3].set_title(f"SSP s={staleness}: staleness", fontsize=8, loc="left")
    axes[3].set_xlabel("updates between read and apply", fontsize=7)
    fig.tight_layout()
    return fig


def ssp_widget(durations, max_staleness: int = 6):
    """Staleness slider over `ssp_figure`."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    return controlled(lambda s: ssp_figure(durations, s),
                      s=W.IntSlider(value=1, min=0, max=max_staleness, description="SSP staleness bound s"))


def ps_figure(results: dict):
    """Real parameter-server runs {name: PSResult}: loss per update, and staleness histograms."""
    fig, axes = plt.subplots(1, 1 + len(results), figsize=(3.2 * (1 + len(results)), 2.6))
    for name, r in results.items():
        axes[0].plot(r.loss, label=f"{name} ({r.seconds:.2f} s)")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("updates applied", fontsize=7)
    axes[0].set_title("loss (full data)", fontsize=8, loc="left")
    axes[0].legend(fontsize=6)
    for ax, (name, r) in zip(axes[1:], results.items()):
        hist = Counter(r.staleness)
        ax.bar(list(hist), list(hist.values()), color=_COMM)
        ax.set_title(f"{name}: staleness", fontsize=8, loc="left")
        ax.set_xlabel("updates between read and apply", fontsize=7)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ convergence (Lab 06, section 7)

_RULE_COLOURS = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#b279a2", "#9d755d"]


def convergence_figure(runs: dict, highlight: str | None = None, title: str = ""):
    """Runs {label: convergence.Run}: loss against gradients applied (left) and against time
    (right), log scale; ``highlight`` drawn in colour and thick, the others thin (all in colour
    when None)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.0))
    for k, (label, r) in enumerate(runs.items()):
        on = highlight is None or label == highlight
        style = dict(color=_RULE_COLOURS[k % len(_RULE_COLOURS)] if on else "#bbbbbb", lw=2.0 if on else 0.8,
                     label=label, zorder=3 if on else 1)
        axes[0].plot([0] + r.gradients_applied(), r.loss, **style)
        axes[1].plot([0.0] + list(r.times), r.loss, **style)
    for ax, xlabel in zip(axes, ("gradients applied", "time (units of one iteration)")):
        ax.set_yscale("log")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("loss (full data)", fontsize=8)
    axes[0].legend(fontsize=7, ncol=2)
    if title:
        fig.suptitle(title, fontsize=9, x=0.01, ha="left")
    fig.tight_layout()
    return fig


def convergence_widget(runs: dict):
    """Runs {(lr, label): Run}: a learning-rate dropdown and a rule slider over
    `convergence_figure` (the chosen rule in colour, the others of that learning rate in grey)."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    lrs = sorted({lr for lr, _ in runs})
    labels = list(dict.fromkeys(label for _, label in runs))

    def frame(lr, rule):
        mine = {label: r for (l, label), r in runs.items() if l == lr}
        return convergence_figure(mine, rule, f"lr {lr} per gradient: {rule}")

    return controlled(frame, lr=W.Dropdown(options=lrs, value=lrs[0], description="learning rate"),
                      rule=W.SelectionSlider(options=labels, value=labels[0], description="rule"))


def batch_size_figure(batches, steps, lrs, s_min: float, b_simple: float, lr_limit: float):
    """Steps to the target against the batch (log-log) with perfect scaling from the smallest
    batch, S_min, and the curve S_min·(1 + B_simple/B); beside it the best learning rate against
    the batch, the linear rule from the smallest batch, and the stability limit ``lr_limit``."""
    import numpy as np

    b = np.array(batches, dtype=float)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.2))
    ax.plot(b, steps, "o", color=_COMPUTE, label="measured")
    ax.plot(b, steps[0] * b[0] / b, "--", color="#999999", lw=1, label="perfect scaling")
    grid = np.geomspace(b[0], b[-1], 100)
    ax.plot(grid, s_min * (1 + b_simple / grid), color=_COMM, label="S_min(1 + B_simple/B)")
    ax.axhline(s_min, color="#999999", lw=0.8, ls=":")
    ax.axvline(b_simple, color=_COMM, lw=0.8, ls=":")
    ax.text(b_simple * 1.1, max(steps) * 0.8, f"B_simple = {b_simple:.0f}", fontsize=7, color=_COMM)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size B", fontsize=8)
    ax.set_ylabel("steps to the target", fontsize=8)
    ax.set_ylim(min(steps) / 2, max(steps) * 1.5)
    ax.legend(fontsize=7)
    bx.plot(b, lrs, "o-", color=_COMPUTE, label="best learning rate")
    bx.plot(b, lrs[0] * b / b[0], "--", color="#999999", lw=1, label="linear rule")
    bx.axhline(lr_limit, color="#e45756", lw=1, label=f"2/λ_max = {lr_limit:g}")
    bx.set_xscale("log", base=2)
    bx.set_yscale("log")
    bx.set_ylim(min(lrs) / 2, lr_limit * 4)
    bx.set_xlabel("batch size B", fontsize=8)
    bx.legend(fontsize=7)
    for a in (ax, bx):
        a.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def adascale_figure(runs: dict, ceiling: float):
    """AdaScale runs {scale: ScaledRun}: the gain at every step, with the ceiling 1 + B_simple/b0."""
    fig, ax = plt.subplots(figsize=(6, 2.8))
    for k, (scale, r) in enumerate(sorted(runs.items())):
        ax.plot(range(1, len(r.gains) + 1), r.gains, color=_RULE_COLOURS[k % len(_RULE_COLOURS)],
                label=f"S = {scale}")
    ax.axhline(ceiling, color="#999999", ls=":", lw=1, label=f"1 + B_simple/b0 = {ceiling:.1f}")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel("gain r (lr = r·lr0)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
