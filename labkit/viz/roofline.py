"""Roofline drawings: the measured roof, measured ops as points, and the explorer widget.

Pure functions return matplotlib Figures; ``explorer`` wires sliders to
``explorer_figure`` through ``labkit.viz.player.controlled``.
"""
from __future__ import annotations

from typing import Sequence

from labkit.roofline import model as M

OPS = ("add", "chain unfused", "chain fused", "matmul", "softmax", "any intensity")


def op_cost(op: str, log2_n: int, dtype_bytes: int = 4) -> M.OpCost:
    """The cost model of ``op`` at size n = 2**log2_n (matmul: n x n x n; softmax: n rows of 1024)."""
    n = 2 ** log2_n
    if op == "add":
        return M.elementwise_add(n, dtype_bytes)
    if op == "chain unfused":
        return M.elementwise_chain(n, fused=False, dtype_bytes=dtype_bytes)
    if op == "chain fused":
        return M.elementwise_chain(n, fused=True, dtype_bytes=dtype_bytes)
    if op == "matmul":
        return M.matmul(n, n, n, dtype_bytes)
    if op == "softmax":
        return M.softmax(n, 1024, dtype_bytes)
    raise ValueError(f"op must be one of {OPS[:-1]}, got {op!r}")


def explorer_state(op: str, log2_n: int, log2_intensity: float, peak_flops: float, bandwidth: float) -> dict:
    """Where the explorer's point sits: intensity (FLOP/B), attainable FLOP/s and the bound.

    ``op == "any intensity"`` uses 2**log2_intensity directly; otherwise the op's model at n = 2**log2_n.
    """
    if op == "any intensity":
        name, intensity = f"I = 2^{log2_intensity:g}", 2.0 ** log2_intensity
    else:
        cost = op_cost(op, log2_n)
        name, intensity = cost.name, cost.intensity
    return {"name": name, "intensity": intensity,
            "attainable": M.attainable_flops(intensity, peak_flops, bandwidth),
            "bound": M.bound(intensity, peak_flops, bandwidth)}


def roofline_figure(peak_flops: float, bandwidth: float, points: Sequence[tuple[str, float, float]] = (),
                    highlight: tuple[str, float] | None = None, title: str = "roofline",
                    i_range: tuple[float, float] = (2 ** -6, 2 ** 10)):
    """Log-log roofline: min(peak, I*bw) over ``i_range`` (FLOP/byte), in GFLOP/s.

    ``points``: (label, intensity FLOP/B, achieved FLOP/s) drawn as dots.
    ``highlight``: (label, intensity) drawn as a star ON the roof (the attainable value).
    Axes: lines[0] is the roof; the highlight is the last line.
    """
    import matplotlib.pyplot as plt

    lo, hi = i_range
    xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    ridge = M.ridge_intensity(peak_flops, bandwidth)
    if lo < ridge < hi:
        xs = sorted(xs + [ridge])
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.loglog(xs, [M.attainable_flops(x, peak_flops, bandwidth) / 1e9 for x in xs], "k-", lw=2,
              label=f"roof: {peak_flops / 1e9:.3g} GFLOP/s, {bandwidth / 1e9:.3g} GB/s")
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.2g} FLOP/B", (ridge, peak_flops / 1e9), textcoords="offset points",
                xytext=(4, -14), fontsize=8, color="grey")
    for label, intensity, achieved in points:
        ax.loglog([intensity], [achieved / 1e9], "o", ms=7, label=f"{label}: {achieved / 1e9:.3g} GFLOP/s")
    if highlight is not None:
        label, intensity = highlight
        y = M.attainable_flops(intensity, peak_flops, bandwidth)
        ax.loglog([intensity], [y / 1e9], "r*", ms=16,
                  label=f"{label}: I={intensity:.3g} FLOP/B -> {y / 1e9:.3g} GFLOP/s "
                        f"({M.bound(intensity, peak_flops, bandwidth)}-bound)")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    return fig


def explorer_figure(op: str, log2_n: int, log2_intensity: float, peak_flops: float, bandwidth: float):
    """The explorer's frame: the roof plus the chosen op's point (see ``explorer_state``)."""
    s = explorer_state(op, log2_n, log2_intensity, peak_flops, bandwidth)
    return roofline_figure(peak_flops, bandwidth, highlight=(s["name"], s["intensity"]),
                           title=f"{s['name']}: {s['bound']}-bound")


def explorer(peak_flops: float, bandwidth: float):
    """Widget: op dropdown, size slider (log2 n) and intensity slider (for "any intensity")."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    def render(op, log2_n, log2_intensity):
        return explorer_figure(op, log2_n, log2_intensity, peak_flops, bandwidth)

    return controlled(render,
                      op=W.Dropdown(options=OPS, value="matmul", description="op"),
                      log2_n=W.IntSlider(value=6, min=1, max=14, description="log2 n"),
                      log2_intensity=W.FloatSlider(value=0.0, min=-6.0, max=10.0, step=0.5,
                                                   description="log2 I"))


