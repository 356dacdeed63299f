"""Drawings for Lab 12: a job's life under failures, and how a recovery line is found.

``job_timeline_frame(...)`` draws one seeded run of `labkit.checkpoint.interval.simulate_timeline`:
a bar of useful work, checkpoints, lost work and restarts with the failures marked, over a plot of
the job's progress (it falls back to the last checkpoint at each failure); the title carries the
run's wall time and waste and the Young/Daly intervals. ``job_timeline_widget()`` puts sliders for
the interval and the MTBF over it. ``recovery_line_frame(...)`` draws a message trace as a
space-time diagram (a line per process, checkpoints as bars, messages as arrows) with the
recovery line after a number of forced rollbacks, orphans in red; ``recovery_player(...)`` steps
through the rollbacks.
"""
from __future__ import annotations

import matplotlib.pyplot as plt

from labkit.checkpoint.domino import orphans, recovery_line
from labkit.checkpoint.interval import (HOUR_S, daly_interval, expected_wall_time, simulate_timeline,
                                        young_interval)

COLORS = {"work": "#4c78a8", "checkpoint": "#54a24b", "lost": "#e45756", "restart": "#f58518"}
MAX_DRAWN_FAILURES = 2000          # beyond this many expected failures a frame shows a note instead
LABELS = {"work": "useful work", "checkpoint": "checkpoint", "lost": "lost work", "restart": "restart"}


def job_timeline_frame(interval_s: float, mtbf_s: float, checkpoint_s: float = 300.0, restart_s: float = 600.0,
                       work_s: float = 24 * HOUR_S, seed: int = 0):
    """One seeded run of the job (all arguments in seconds) as a Figure: the timeline bar (hours)
    and the saved/in-progress work against wall time. When more than ``MAX_DRAWN_FAILURES``
    failures are expected, a one-line note with the closed-form wall time instead."""
    expected = expected_wall_time(work_s, interval_s, checkpoint_s, restart_s, mtbf_s)
    h = 1.0 / HOUR_S
    if expected.failures > MAX_DRAWN_FAILURES:      # a run would take too long to simulate and to see
        fig, ax = plt.subplots(figsize=(9, 1.2))
        ax.axis("off")
        ax.text(0, 0.5, f"τ = {interval_s / 60:.0f} min, MTBF {mtbf_s * h:.1f} h: about {expected.failures:.3g} "
                f"failures expected (wall time {expected.wall_s * h:.3g} h for {work_s * h:.3g} h of work);\n"
                f"the job hardly progresses. Shorten the interval or raise the MTBF.", fontsize=9, va="center")
        return fig
    tl = simulate_timeline(work_s, interval_s, checkpoint_s, restart_s, mtbf_s, seed=seed)
    fig, (bar, prog) = plt.subplots(2, 1, figsize=(9, 3.6), sharex=True, gridspec_kw={"height_ratios": [1, 3]})
    for kind, color in COLORS.items():              # one collection per kind: fast for thousands of events
        spans = [(ev.start_s * h, (ev.end_s - ev.start_s) * h) for ev in tl.events if ev.kind == kind]
        bar.broken_barh(spans, (-0.4, 0.8), facecolors=color, linewidth=0, label=kind)
    fails = [ev.start_s * h for ev in tl.events if ev.kind == "failure"]
    bar.plot(fails, [0.55] * len(fails), "v", color="black", ms=5)
    bar.set_yticks([])
    bar.set_ylim(-0.6, 0.9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in LABELS]
    handles.append(plt.Line2D([], [], marker="v", color="black", ls="none", ms=5))
    bar.legend(handles, [*LABELS.values(), "failure"], loc="lower left", bbox_to_anchor=(0, 1.0), ncol=5,
               fontsize=7, frameon=False)
    # progress: work done so far counting the segment in progress; it drops to the last checkpoint
    xs, ys, saved = [0.0], [0.0], 0.0
    for ev in tl.events:
        if ev.kind == "work":
            xs += [ev.start_s * h, ev.end_s * h]
            ys += [saved, saved + ev.end_s - ev.start_s]
        elif ev.kind == "checkpoint":
            saved = ys[-1]
            xs += [ev.end_s * h]
            ys += [saved]
        elif ev.kind == "lost":
            xs += [ev.start_s * h, ev.end_s * h, ev.end_s * h]
            ys += [saved, saved + ev.end_s - ev.start_s, saved]
        elif ev.kind == "restart":
            xs += [ev.end_s * h]
            ys += [saved]
    prog.plot(xs, [y * h for y in ys], color=COLORS["work"], lw=1.2, label="work done (this run)")
    prog.plot([0, work_s * h], [0, work_s * h], color="grey", ls=":", lw=1, label="no failures, no checkpoints")
    prog.set_xlabel("wall time (h)")
    prog.set_ylabel("work (h)")
    prog.legend(loc="upper left", fontsize=7, frameon=False)
    young, daly = young_interval(checkpoint_s, mtbf_s), daly_interval(checkpoint_s, mtbf_s)
    fig.suptitle(f"τ = {interval_s / 60:.0f} min, MTBF {mtbf_s * h:.1f} h: this run {tl.wall_s * h:.1f} h, "
                 f"waste {100 * tl.waste_fraction:.0f} %, {tl.failures} failures "
                 f"(expected {expected.wall_s * h:.1f} h, {100 * expected.waste_fraction:.0f} %)\n"
                 f"Young τ = {young / 60:.0f} min, Daly τ = {daly / 60:.0f} min "
                 f"(C = {checkpoint_s / 60:g} min, R = {restart_s / 60:g} min)", fontsize=9, x=0.01, ha="left")
    fig.tight_layout()
    return fig


def job_timeline_widget(checkpoint_s: float = 300.0, restart_s: float = 600.0, work_s: float = 24 * HOUR_S,
                        seed: int = 0):
    """Sliders: the checkpoint interval (minutes) and the MTBF (hours) over `job_timeline_frame`."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    return controlled(lambda interval_min, mtbf_h: job_timeline_frame(interval_min * 60, mtbf_h * HOUR_S, checkpoint_s,
                                                                      restart_s, work_s, seed),
                      interval_min=W.IntSlider(value=60, min=5, max=360, step=5, description="interval τ (min)"),
                      mtbf_h=W.FloatSlider(value=6.0, min=0.5, max=48.0, step=0.5, description="MTBF (h)"))


def recovery_line_frame(messages, checkpoints, failed_process: int, failure_s: float, steps: int | None = None,
                        title: str = ""):
    """Space-time diagram of a trace (seconds), with the cut after the first ``steps`` rollbacks
    (all of them if None): the cut as a dashed line, lost work shaded, orphans of that cut in red."""
    line = recovery_line(messages, checkpoints, failed_process, failure_s)
    n = len(checkpoints)
    done = line.steps if steps is None else line.steps[:max(1, steps)]
    cut = [failure_s] * n
    for s in done:
        cut[s.process] = s.to_s
    live = [m for m in messages if m.send_s < failure_s]
    bad = set(orphans(live, cut))
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.7 * n))
    for p in range(n):
        ax.plot([0, failure_s], [p, p], color="black", lw=1)
        ax.fill_between([cut[p], failure_s], p - 0.12, p + 0.12, color=COLORS["lost"], alpha=0.25, lw=0)
        ts = [0.0] + [t for t in checkpoints[p] if t < failure_s]
        ax.plot(ts, [p] * len(ts), ls="none", marker="|", ms=16, mew=4, color=COLORS["checkpoint"])
    ax.plot([failure_s], [failed_process], "X", color="black", ms=9)
    for m in live:
        color = COLORS["lost"] if m in bad else "#555555"
        ax.annotate("", xy=(min(m.recv_s, failure_s), m.receiver), xytext=(m.send_s, m.sender),
                    arrowprops={"arrowstyle": "->", "color": color, "lw": 1.6 if m in bad else 0.8})
    ax.plot(cut, range(n), color="black", ls="--", lw=1.4, marker="o", ms=4, zorder=5)
    ax.set_yticks(range(n), [f"P{p}" for p in range(n)])
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(-0.3, failure_s + 0.3)
    ax.set_xlabel("time (s)")
    state = "consistent: a recovery line" if not bad else f"{len(bad)} orphan message(s), in red"
    ax.set_title(f"{title + ': ' if title else ''}after {len(done)} rollback(s), lost "
                 f"{sum(failure_s - c for c in cut):g} s; {state}", fontsize=9, loc="left")
    fig.tight_layout()
    return fig


def recovery_player(messages, checkpoints, failed_process: int, failure_s: float, title: str = ""):
    """Play through the rollbacks of `recovery_line`, one frame per rollback."""
    from labkit.viz.player import player

    line = recovery_line(messages, checkpoints, failed_process, failure_s)
    return player(lambda i: recovery_line_frame(messages, checkpoints, failed_process, failure_s, i + 1, title),
                  len(line.steps), description="rollback")


TIER_COLORS = {"memory": "#54a24b", "peer": "#f58518", "disk": "#4c78a8"}


def tiers_figure(peers, per_node: int, failure: str | None = None, node: int = 0):
    """Nodes as boxes, ranks as circles, an arrow from each rank to the rank that keeps its
    in-memory copy (red when it stays on its own node). With ``failure`` ("process", "node" or
    "job", on ``node``): the lost nodes' memory shaded, and each rank coloured by the tier it
    recovers from (`hierarchical.recovery_tiers`)."""
    from matplotlib.patches import FancyArrowPatch, Rectangle

    from labkit.checkpoint.hierarchical import recovery_tiers

    world = len(peers)
    nodes = world // per_node
    tiers = recovery_tiers(peers, per_node, failure, node) if failure else None
    lost = set() if failure in (None, "process") else ({node} if failure == "node" else set(range(nodes)))
    fig, ax = plt.subplots(figsize=(min(2.2 * nodes + 1, 11), 2.6))
    xy = {}
    for n in range(nodes):
        ax.add_patch(Rectangle((n * 2.2, 0), 1.9, 1.6, facecolor="#f4cccc" if n in lost else "#eeeeee",
                               edgecolor="#888888"))
        ax.text(n * 2.2 + 0.95, 1.72, f"node {n}" + (" (memory lost)" if n in lost else ""), ha="center",
                fontsize=7)
        for j in range(per_node):
            r = n * per_node + j
            xy[r] = (n * 2.2 + 0.95 + (j - (per_node - 1) / 2) * 1.7 / max(per_node, 1), 0.8)
    for r, (x, y) in xy.items():
        colour = TIER_COLORS[tiers[r]] if tiers else "white"
        ax.add_patch(plt.Circle((x, y), 0.22, facecolor=colour, edgecolor="black", zorder=3))
        ax.text(x, y, str(r), ha="center", va="center", fontsize=8, zorder=4)
    for r, p in enumerate(peers):
        same = p // per_node == r // per_node
        (x0, y0), (x1, y1) = xy[r], xy[p]
        if r == p:
            ax.text(x0, y0 - 0.42, "own copy!", ha="center", fontsize=6, color="#e45756")
            continue
        ax.add_patch(FancyArrowPatch((x0, y0 - 0.22), (x1, y1 - 0.22), connectionstyle="arc3,rad=0.35",
                                     arrowstyle="-|>", mutation_scale=8, lw=0.8,
                                     color="#e45756" if same else "#555555", zorder=2))
    if tiers:
        from matplotlib.lines import Line2D

        ax.legend(handles=[Line2D([], [], marker="o", ls="", markerfacecolor=c, markeredgecolor="black",
                                  label=f"recovers from {t}") for t, c in TIER_COLORS.items()],
                  loc="lower left", ncol=3, fontsize=7, frameon=False, bbox_to_anchor=(0, -0.25))
    ax.set_xlim(-0.2, nodes * 2.2)
    ax.set_ylim(-0.4, 2.0)
    ax.set_aspect("equal")
    ax.axis("off")
    title = "arrows: where each rank's in-memory copy is kept"
    if failure:
        title += f"; {failure} failure" + (f" on node {node}" if failure == "node" else "")
    ax.set_title(title, fontsize=8, loc="left")
    fig.tight_layout()
    return fig


def tiers_widget(peers, per_node: int):
    """A failure-kind dropdown and a node slider over `tiers_figure`."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    nodes = len(peers) // per_node
    return controlled(lambda failure, node: tiers_figure(peers, per_node, failure, node),
                      failure=W.Dropdown(options=["process", "node", "job"], value="node", description="failure"),
                      node=W.IntSlider(value=0, min=0, max=nodes - 1, description="node"))
