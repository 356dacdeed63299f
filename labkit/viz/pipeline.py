"""Drawings for lab 08: Gantt charts of pipeline schedules, in-flight memory, and the widget.

A timeline is ``dict[rank, list[(Action, start_s, end_s)]]`` (what the real
executor records) or a `SimResult` (what the simulator returns); both draw the
same way. ``pipeline_frame(...)`` is the widget's pure render function.
"""
from __future__ import annotations

import html
from fractions import Fraction


import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from labkit.pipeline.schedules import KINDS, schedule
from labkit.pipeline.simulate import SimResult, time_schedule

__all__ = ["as_timeline", "draw_gantt", "gantt", "compare_timelines", "pipeline_frame", "pipeline_widget",
           "frame_stats", "legend_entries"]

_F_COLORS = ["#4c78a8", "#72b7b2", "#9ecae9", "#2f4b7c"]
_B_COLORS = ["#f58518", "#e45756", "#ff9d98", "#b85d00"]
_W_COLORS = ["#54a24b", "#88d27a", "#2e6b28", "#b5e3a8"]


def as_timeline(tl) -> dict:
    """A SimResult or a recorded timeline, as dict[rank, list[(Action, start, end)]]."""
    if isinstance(tl, SimResult):
        return {r: [(iv.action, float(iv.start), float(iv.end)) for iv in ivs] for r, ivs in tl.timeline.items()}
    return {r: [(a, float(s), float(e)) for a, s, e in ivs] for r, ivs in tl.items()}


_KIND_NAMES = {"F": "F forward", "B": "B backward", "I": "I input grad", "W": "W weight grad"}


def _colour(kind: str, vstage: int) -> str:
    return (_F_COLORS if kind == "F" else _W_COLORS if kind == "W" else _B_COLORS)[vstage % 4]


def legend_entries(tl, num_ranks: int | None = None) -> list[tuple[str, str]]:
    """(label, colour) for each kind of action (F, B, I, W) and virtual stage drawn in ``tl``.

    The virtual stage of stage s is s // num_ranks (rank r holds stages r, r + p, ...); it is
    named only when a rank holds more than one stage.
    """
    tl = as_timeline(tl)
    R = num_ranks or len(tl)
    seen = {(a.kind, a.stage // R) for ivs in tl.values() for a, _, _ in ivs}
    several = len({v for _, v in seen}) > 1
    out = []
    for kind in "FBIW":
        for v in sorted(vs for k, vs in seen if k == kind):
            out.append((_KIND_NAMES[kind] + (f", virtual stage {v}" if several else ""), _colour(kind, v)))
    return out


def draw_gantt(ax, tl, title: str = "", num_ranks: int | None = None, time_unit: str = "time",
               legend: bool = True) -> None:
    """Draw one bar per action: row = rank (rank 0 on top), colour = kind (F, B, I, W) and virtual
    stage, number on the bar = microbatch; a legend outside the plot names the colours."""
    tl = as_timeline(tl)
    R = num_ranks or len(tl)
    makespan = max((e for ivs in tl.values() for _, _, e in ivs), default=1.0) or 1.0
    for r, ivs in tl.items():
        for a, s, e in ivs:
            color = _colour(a.kind, a.stage // R)
            ax.barh(r, e - s, left=s, height=0.8, color=color, edgecolor="white", linewidth=0.5)
            if (e - s) > makespan / 80:
                ax.text((s + e) / 2, r, str(a.microbatch), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(R))
    ax.set_yticklabels([f"rank {r}" for r in range(R)])
    ax.set_ylim(R - 0.5, -0.5)
    ax.set_xlim(0, makespan)
    ax.set_xlabel(time_unit)
    if title:
        ax.set_title(title, fontsize=10)
    if legend:
        entries = legend_entries(tl, R)
        ax.legend(handles=[Patch(color=c, label=lab) for lab, c in entries], fontsize=7,
                  title="number on a bar = microbatch", title_fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0, frameon=False)


def gantt(tl, title: str = "", time_unit: str = "time"):
    """A new Figure with one Gantt chart and its legend (blue = forward, orange = backward or its
    input-gradient part I, green = weight-gradient part W; shades = virtual stages)."""
    tl = as_timeline(tl)
    fig, ax = plt.subplots(figsize=(10.5, 0.5 * len(tl) + 1.4))
    draw_gantt(ax, tl, title, time_unit=time_unit)
    fig.tight_layout()
    return fig


def compare_timelines(measured, simulated, titles=("measured (real gloo ranks)", "simulated")):
    """Two Gantt charts, one above the other, each on its own time axis."""
    measured, simulated = as_timeline(measured), as_timeline(simulated)
    R = len(measured)
    fig, axes = plt.subplots(2, 1, figsize=(10.5, 1.0 * R + 2.2))
    draw_gantt(axes[0], measured, titles[0], time_unit="seconds")
    draw_gantt(axes[1], simulated, titles[1], time_unit="simulated time")
    fig.tight_layout()
    return fig


def frame_stats(kind: str, num_ranks: int, num_microbatches: int, virtual_stages: int = 1,
                imbalance: float = 0.0) -> tuple[SimResult, dict]:
    """Simulate the widget's configuration. Stage times: forward 1/v, backward 2/v per stage
    (a rank's whole share of the model costs 1 + 2 whatever v is; a split backward is I 1/v + W 1/v);
    the last stage is (1 + imbalance) times slower. Returns (result, numbers shown in the title)."""
    p, m, v = num_ranks, num_microbatches, virtual_stages
    sched = schedule(kind, p, m, v)
    S = p * v
    slow = [Fraction(1)] * (S - 1) + [1 + Fraction(imbalance).limit_denominator(1000)]
    res = time_schedule(sched, [Fraction(1, v) * x for x in slow], [Fraction(2, v) * x for x in slow])
    # uniform stages: (p-1)/(vm+p-1); zero bubble with I = W = F: the step is 3m + (p-1)/v, so
    # (p-1)/(3vm+p-1) (labkit.pipeline.lab.zero_bubble_makespan)
    zb = kind == "interleaved_zb"
    stats = {
        "bubble": float(res.bubble_fraction),
        "formula": (p - 1) / ((3 if zb else 1) * v * m + p - 1),
        "formula_text": "(p-1)/(3vm+p-1)" if zb else "(p-1)/(vm+p-1)",
        "peak_inflight_rank0": res.peak_inflight[0],
        "makespan": float(res.makespan),
    }
    return res, stats


def pipeline_frame(kind: str = "1f1b", num_ranks: int = 4, num_microbatches: int = 8, virtual_stages: int = 1,
                   imbalance: float = 0.0):
    """The widget's render function: Gantt chart + in-flight activations per rank, or an HTML error line.

    Pure: the same arguments give the same picture.
    """
    try:
        res, st = frame_stats(kind, num_ranks, num_microbatches, virtual_stages, imbalance)
    except (ValueError, TypeError) as e:
        return f"<p style='color:#b00'>cannot build this schedule: {html.escape(str(e))}</p>"
    R = num_ranks
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10.5, 0.45 * R + 3.6), gridspec_kw={"height_ratios": [R + 1, 3]},
                                  sharex=True)
    title = (f"{kind}  p={R} m={num_microbatches} v={virtual_stages} imbalance={imbalance:g}:  "
             f"bubble {st['bubble']:.3f} (uniform formula {st['formula_text']} = {st['formula']:.3f}),  "
             f"peak in flight on rank 0 = {st['peak_inflight_rank0']}")
    draw_gantt(ax, res, title)
    ax.set_xlabel("")
    for r, steps in res.inflight.items():
        xs = [float(t) for t, _ in steps] + [float(res.makespan)]
        ys = [c for _, c in steps] + [steps[-1][1]]
        ax2.step(xs, ys, where="post", label=f"rank {r}")
    ax2.set_ylabel("activation sets\nin flight")
    ax2.set_xlabel("time (1 = a forward through a rank's whole share of the model)")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0, frameon=False)
    fig.tight_layout()
    return fig


def pipeline_widget():
    """Controls (schedule kind, ranks, microbatches, virtual stages, imbalance) over `pipeline_frame`."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    wide = {"style": {"description_width": "initial"}}   # whole labels, not "microbatc..."
    return controlled(
        pipeline_frame,
        kind=W.Dropdown(options=list(KINDS), value="1f1b", description="schedule", **wide),
        num_ranks=W.IntSlider(value=4, min=2, max=8, description="ranks p", **wide),
        num_microbatches=W.IntSlider(value=8, min=1, max=24, description="microbatches m", **wide),
        virtual_stages=W.IntSlider(value=1, min=1, max=4, description="stages per rank v", **wide),
        imbalance=W.FloatSlider(value=0.0, min=0.0, max=2.0, step=0.25, description="last stage: extra ×",
                                **wide),
    )
