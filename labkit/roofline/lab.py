"""Lab 01's "check your work" pictures: a learner's formula next to labkit's, on the lab's roofline.

    picture("matmul_intensity")(fn)   table of cases + the learner's matmuls drawn on a roofline

The pictures use a fixed example machine (100 GFLOP/s, 10 GB/s: ridge 10 FLOP/B) so that what
they print does not depend on this computer's timings.
"""
from __future__ import annotations

from labkit.roofline import model as M
from labkit.table import Table

PEAK, BW = 100e9, 10e9   # the example machine of the pictures: FLOP/s, bytes/s

CASES = {
    "matmul_intensity": [(1, 4096, 4096, 2), (16, 4096, 4096, 2), (512, 4096, 4096, 2), (64, 64, 64, 4),
                         (1024, 1024, 1024, 4), (4096, 4096, 1, 4)],
    "chain_intensity": [(1, False, 4), (1, True, 4), (3, False, 4), (3, True, 4), (8, True, 2), (8, False, 2)],
    "attainable_flops": [(0.25, PEAK, BW), (8.0, PEAK, BW), (10.0, PEAK, BW), (64.0, PEAK, BW), (0.0, PEAK, BW)],
    "mfu_hfu": [(7e9, 2 ** 20, 100.0, 989e12, False), (7e9, 2 ** 20, 100.0, 989e12, True),
                (1e6, 1000, 1.0, 1e10, True)],
}


def reference(exercise: str, case):
    """labkit's answer for one case (the same form as the exercise returns)."""
    if exercise == "matmul_intensity":
        return M.matmul(*case).intensity
    if exercise == "chain_intensity":
        k, fused, b = case
        arrays = k + 2 if fused else 3 * k
        return M.OpCost("chain", k, arrays * b).intensity
    if exercise == "attainable_flops":
        return M.attainable_flops(*case)
    n, tokens, seconds, peak, recompute = case
    return M.mfu(n, tokens, seconds, peak), M.hfu(n, tokens, seconds, peak, recompute)


def _close(a, b) -> bool:
    if isinstance(b, tuple):
        return isinstance(a, (tuple, list)) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    try:
        return abs(float(a) - b) <= 1e-9 * max(1.0, abs(b))   # float rounding only
    except (TypeError, ValueError):
        return False


def _fmt(v) -> str:
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(_fmt(x) for x in v) + ")"
    if isinstance(v, bool):
        return str(v)
    return f"{v:.6g}" if isinstance(v, (int, float)) else repr(v)[:20]


def compare(exercise: str, fn) -> Table:
    """The learner's ``fn`` against labkit on every case of ``exercise`` (equal to 1e-9, relative)."""
    rows = []
    for case in CASES[exercise]:
        yours, want = fn(*case), reference(exercise, case)
        rows.append((", ".join(_fmt(c) for c in case), _fmt(yours), _fmt(want), _close(yours, want)))
    return Table(["arguments", "yours", "labkit", "equal"], rows)


def picture(exercise: str):
    """``picture(fn)`` for `check_your_work`: the comparison table; for matmul_intensity and
    attainable_flops also a roofline of the example machine with the learner's numbers on it."""
    def draw(fn):
        table = compare(exercise, fn)
        print(table)
        if exercise in ("matmul_intensity", "attainable_flops"):
            from IPython.display import HTML, display

            from labkit.viz.player import figure_to_html
            from labkit.viz.roofline import roofline_figure

            if exercise == "matmul_intensity":   # each matmul at the speed the roof allows
                pts = [(f"{m}x{k}x{n}", fn(m, k, n, b), M.attainable_flops(fn(m, k, n, b), PEAK, BW))
                       for m, k, n, b in CASES[exercise]]
            else:                                # the learner's roof, sampled
                pts = [(f"I={i:g}", i, fn(i, PEAK, BW)) for i, _, _ in CASES[exercise] if i > 0]
            fig = roofline_figure(PEAK, BW, points=pts, title=f"your {exercise} on a 100 GFLOP/s, 10 GB/s roof")
            display(HTML(figure_to_html(fig)))
        print(f"{exercise}: {sum(table.column('equal'))}/{len(table.rows)} cases equal labkit's")
        return table
    return draw
