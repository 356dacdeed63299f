"""Lab 01's drawing: a roof (measured or datasheet) with ops as points, as a matplotlib Figure.

The explorer widget that moves a point along it (`labkit.roofline.lab.explorer`) computes where
the point sits and hands the finished numbers to `roofline_figure`.
"""
from __future__ import annotations

from typing import Sequence

from labkit.roofline import model as M


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
