"""Lab 03's "check your work" pictures: a learner's counted loop next to the closed forms.

    picture("cache_tiled")(fn)   runs fn on even and uneven cases; prints C's correctness and the
                                 counts next to the formulas; draws the last frame of the lab's
                                 animation for the first case, whose counters the learner's must equal

Matrices hold small integers (float64), so C == A @ B holds exactly in any summation order.
"""
from __future__ import annotations

import numpy as np

from labkit.matmul import traffic as T
from labkit.table import Table

CASES = {
    "cache_tiled": [((7, 5, 8), dict(b1=3, b2=3)), ((16, 16, 16), dict(b1=4, b2=4)),
                    ((10, 7, 9), dict(b1=4, b2=3)), ((1, 12, 9), dict(b1=4, b2=4))],
    "register_tiled": [((5, 4, 6), dict(v1=2, v2=3, v3=2)), ((16, 16, 16), dict(v1=4, v2=2, v3=8)),
                       ((10, 7, 9), dict(v1=3, v2=4, v3=2)), ((9, 12, 1), dict(v1=2, v2=2, v3=5))],
    "tiled": [((16, 16, 16), dict(b1=8, b2=8, v1=4, v2=2)), ((10, 7, 9), dict(b1=5, b2=4, v1=2, v2=3)),
              ((7, 3, 11), dict(b1=4, b2=6, v1=3, v2=4))],
}
FORMULA = {"cache_tiled": T.cache_tiled_formula, "register_tiled": T.register_tiled_formula,
           "tiled": T.tiled_formula}
ANIMATION = {"cache_tiled": "cache", "register_tiled": "register"}


def operands(M: int, K: int, N: int, seed: int = 0):
    """Integer-valued float64 A (M x K) and B (K x N)."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-4, 5, size=(M, K)).astype(np.float64),
            rng.integers(-4, 5, size=(K, N)).astype(np.float64))


def _counts(t) -> str:
    if isinstance(t, T.TwoLevelTraffic):
        return f"{_counts(t.dram)} + {_counts(t.l1)}"
    return f"{t.a_reads}/{t.b_reads}/{t.c_writes}"


def compare(exercise: str, fn) -> Table:
    """The learner's loop on every case: is C right, and do the counts equal the closed form?"""
    rows = []
    for (M, K, N), tiles in CASES[exercise]:
        A, B = operands(M, K, N)
        C, got = fn(A, B, *tiles.values())
        want = FORMULA[exercise](M, K, N, *tiles.values())
        right = isinstance(C, np.ndarray) and C.shape == (M, N) and bool((C == A @ B).all())
        shown = _counts(got) if isinstance(got, (T.Traffic, T.TwoLevelTraffic)) else repr(got)[:30]
        rows.append((f"{M}x{K}x{N} " + ",".join(map(str, tiles.values())), right, shown,
                     _counts(want), got == want))
    what = "(DRAM + L1) " if exercise == "tiled" else ""
    return Table([f"MxKxN {','.join(CASES[exercise][0][1])}", "C == A@B", f"your A/B/C {what}counts",
                  "formula", "equal"], rows)


def picture(exercise: str):
    """``picture(fn)`` for `check_your_work` (see the module docstring)."""
    def draw(fn):
        table = compare(exercise, fn)
        print(table)
        if exercise in ANIMATION:
            from IPython.display import HTML, display

            from labkit.viz.matmul import tiled_frames

            (M, K, N), tiles = CASES[exercise][0]
            render, n, _ = tiled_frames(ANIMATION[exercise], M, K, N, **tiles)
            print(f"the lab's loop on the first case, last step — your counts must equal its counters:")
            display(HTML(render(n - 1)))
        print(f"{exercise}: {sum(table.column('equal'))}/{len(table.rows)} cases count like the formula")
        return table
    return draw
