"""Lab 03's one-liners: a learner's counted loop next to the closed forms, and the speed table.

    picture("cache_tiled")(fn)   runs fn on even and uneven cases; prints C's correctness and the
                                 counts next to the formulas; draws the last frame of the lab's
                                 animation for the first case with the learner's counts beside the
                                 lab's and the C cells their function got wrong in red ("tiled":
                                 the DRAM level, drawn with the cache loop)
    speed(res)                   the table of `labkit.matmul.blocked.measure`'s result: calls,
                                 time per call, and the extra time per call over one BLAS call
    tiled_player(kind, M, K, N, **tiles)   Play + slider over the traced loop (`tiled_frames`),
                                 drawn by `labkit.matmul.draw.step_html`

Matrices hold small integers (float64), so C == A @ B holds exactly in any summation order.
"""
from __future__ import annotations

import numpy as np

from labkit.matmul import traffic as T
from labkit.matmul.draw import step_html
from labkit.matmul.traffic import Traffic, cache_tiled_formula, register_tiled_formula, trace
from labkit.table import Table

CASES = {
    "cache_tiled": [((7, 5, 8), dict(b1=3, b2=3)), ((16, 16, 16), dict(b1=4, b2=4)),
                    ((10, 7, 9), dict(b1=4, b2=3)), ((1, 12, 9), dict(b1=4, b2=4))],
    "register_tiled": [((5, 4, 6), dict(v1=2, v2=3, v3=2)), ((16, 16, 16), dict(v1=4, v2=2, v3=8)),
                       ((10, 7, 9), dict(v1=3, v2=4, v3=2)), ((9, 12, 1), dict(v1=2, v2=2, v3=5))],
    "tiled": [((7, 3, 11), dict(b1=4, b2=6, v1=3, v2=4)), ((16, 16, 16), dict(b1=8, b2=8, v1=4, v2=2)),
              ((10, 7, 9), dict(b1=5, b2=4, v1=2, v2=3))],
}
FORMULA = {"cache_tiled": T.cache_tiled_formula, "register_tiled": T.register_tiled_formula,
           "tiled": T.tiled_formula}
ANIMATION = {"cache_tiled": "cache", "register_tiled": "register", "tiled": "cache"}


def operands(M: int, K: int, N: int, seed: int = 0):
    """Integer-valued float64 A (M x K) and B (K x N)."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-4, 5, size=(M, K)).astype(np.float64),
            rng.integers(-4, 5, size=(K, N)).astype(np.float64))


def _counts(t) -> str:
    if isinstance(t, T.TwoLevelTraffic):
        return f"{_counts(t.dram)} + {_counts(t.l1)}"
    return f"{t.a_reads}/{t.b_reads}/{t.c_writes}"


def _runs(exercise: str, fn) -> list:
    """[(shape, tiles, C, got, want, wrong cells)] for every case; wrong: cells of C != A @ B."""
    out = []
    for (M, K, N), tiles in CASES[exercise]:
        A, B = operands(M, K, N)
        C, got = fn(A, B, *tiles.values())
        want = FORMULA[exercise](M, K, N, *tiles.values())
        if isinstance(C, np.ndarray) and C.shape == (M, N):
            wrong = [tuple(map(int, rc)) for rc in np.argwhere(C != A @ B)]
        else:
            wrong = [(r, c) for r in range(M) for c in range(N)]
        out.append(((M, K, N), tiles, C, got, want, wrong))
    return out


def compare(exercise: str, fn, runs: list | None = None) -> Table:
    """The learner's loop on every case: is C right, and do the counts equal the closed form?"""
    rows = []
    for (M, K, N), tiles, C, got, want, wrong in (runs if runs is not None else _runs(exercise, fn)):
        shown = _counts(got) if isinstance(got, (T.Traffic, T.TwoLevelTraffic)) else repr(got)[:30]
        rows.append((f"{M}x{K}x{N} " + ",".join(map(str, tiles.values())), not wrong, shown,
                     _counts(want), got == want))
    what = "(DRAM + L1) " if exercise == "tiled" else ""
    return Table([f"MxKxN {','.join(CASES[exercise][0][1])}", "C == A@B", f"your A/B/C {what}counts",
                  "formula", "equal"], rows)


def first_case_html(exercise: str, fn, runs: list | None = None) -> str:
    """The lab's picture of the first case, with the learner's counts and wrong C cells (HTML)."""
    (M, K, N), tiles, C, got, want, wrong = (runs if runs is not None else _runs(exercise, fn))[0]
    kind = ANIMATION[exercise]
    if exercise == "tiled":                      # the DRAM level is the cache loop's
        got = got.dram if isinstance(got, T.TwoLevelTraffic) else None
        tiles = {"b1": tiles["b1"], "b2": tiles["b2"]}
    return learner_html(kind, M, K, N, got if isinstance(got, T.Traffic) else None, wrong, **tiles)


def picture(exercise: str):
    """``picture(fn)`` for `check_your_work` (see the module docstring)."""
    def draw(fn):
        runs = _runs(exercise, fn)
        table = compare(exercise, fn, runs)
        print(table)
        from IPython.display import HTML, display

        level = " (DRAM level)" if exercise == "tiled" else ""
        print(f"your loop on the first case{level}: 'yours' must equal the lab's counters; "
              "red = wrong C")
        display(HTML(first_case_html(exercise, fn, runs)))
        print(f"{exercise}: {sum(table.column('equal'))}/{len(table.rows)} cases count like the formula")
        return table
    return draw


def speed(res: dict) -> Table:
    """`blocked.measure`'s result as a table; one row per tile, BLAS in the title.

    calls = cdiv(n, tile)^3 block products; us/call = seconds / calls; "extra us/call" =
    (seconds - BLAS seconds) / calls: what each call costs beyond doing the same FLOPs in one
    BLAS call (negative when the blocked version is the faster one).
    """
    n = res["n"]
    rows = []
    for tile, s, gf, ratio in res["rows"]:
        calls = -(-n // tile) ** 3
        rows.append((tile, calls, s * 1e3, s / calls * 1e6, (s - res["blas_s"]) / calls * 1e6, gf, ratio))
    title = (f"n = {n}, {res['threads']} thread(s); one torch.matmul (BLAS): "
             f"{res['blas_s'] * 1e3:.2f} ms = {res['blas_gflops']:.1f} GFLOP/s")
    return Table(["tile", "calls", "ms", "us/call", "extra us/call", "GFLOP/s", "x BLAS"], rows,
                 formats={"ms": ".2f", "us/call": ".1f", "extra us/call": ".1f", "GFLOP/s": ".1f",
                          "x BLAS": ".2f"}, title=title)


def tiled_frames(kind: str, M: int, K: int, N: int, **tiles):
    """(render, n_frames, formula) for the "cache" or "register" loop: render(i) -> HTML of step i."""
    steps = trace(kind, M, K, N, **tiles)
    if kind == "cache":
        formula = cache_tiled_formula(M, K, N, tiles["b1"], tiles["b2"])
        title = f"cache tiling b1={tiles['b1']}, b2={tiles['b2']}: A {M}*{K}, B ceil({M}/{tiles['b1']})*{K}*{N}"
    else:
        formula = register_tiled_formula(M, K, N, tiles["v1"], tiles["v2"], tiles.get("v3", 1))
        title = (f"register tiling v1={tiles['v1']}, v2={tiles['v2']}, v3={tiles.get('v3', 1)}: "
                 f"A {M}*{K}*ceil({N}/{tiles['v2']}), B ceil({M}/{tiles['v1']})*{K}*{N}")

    def render(i: int) -> str:
        return step_html(steps, i, M, K, N, formula, title)

    return render, len(steps), formula


def learner_html(kind: str, M: int, K: int, N: int, yours: Traffic | None, wrong=(), **tiles) -> str:
    """The last step of the "cache" or "register" loop, with a learner's counts and wrong C cells.

    ``yours``: the Traffic their function returned (None if it returned something else);
    ``wrong``: the (row, col) cells of their C that differ from A @ B (drawn red).
    """
    steps = trace(kind, M, K, N, **tiles)
    _, n, formula = tiled_frames(kind, M, K, N, **tiles)
    level = {"cache": "DRAM -> L1", "register": "L1 -> registers"}[kind]
    title = (f"your loop on {M}x{K}x{N}, " + ", ".join(f"{k}={v}" for k, v in tiles.items())
             + f" ({level} counts): {len(set(map(tuple, wrong)))} wrong C cells (red)")
    return step_html(steps, n - 1, M, K, N, formula, title, yours=yours, wrong=wrong, learner=True)


def tiled_player(kind: str, M: int, K: int, N: int, interval_ms: int = 700, **tiles):
    """Play + slider widget stepping through the tiled loop (see `tiled_frames`)."""
    from labkit.viz.player import player

    render, n, _ = tiled_frames(kind, M, K, N, **tiles)
    return player(render, n, interval_ms=interval_ms)
