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
