"""Lab 03's drawing: one step of a tiled matmul loop as an SVG grid plus counters.

`step_html(steps, i, M, K, N, formula)` is a pure function of its arguments: it
draws A (M x K, bottom left), B (K x N, top right) and C (M x N, bottom right)
cell by cell, marks the tiles resident at step i (A blue, B orange, C tile
green; C tiles already finished pale green) and prints the running counters of
step i next to the closed-form totals. With ``learner=True`` it adds a learner's
counts in a "yours" column and the C cells their function got wrong in red.

The steps come from `labkit.matmul.traffic.trace` (the counted loop itself);
`labkit.matmul.lab` traces them (`tiled_frames`, `learner_html`) and wires the
Play + slider widget (`tiled_player`).
"""
from __future__ import annotations

from labkit.matmul.traffic import Step, Traffic

CELL = 16
COLORS = {"A": "#6baed6", "B": "#fd8d3c", "C": "#74c476", "done": "#e5f5e0", "grid": "#bbbbbb",
          "wrong": "#de2d26"}


def _rects(x0: int, y0: int, rows: int, cols: int, fill_of) -> list[str]:
    out = []
    for r in range(rows):
        for c in range(cols):
            out.append(f'<rect x="{x0 + c * CELL}" y="{y0 + r * CELL}" width="{CELL}" height="{CELL}" '
                       f'fill="{fill_of(r, c)}" stroke="{COLORS["grid"]}"/>')
    return out


def _inside(rc: tuple, r: int, c: int) -> bool:
    r0, r1, c0, c1 = rc
    return r0 <= r < r1 and c0 <= c < c1


def step_html(steps: list[Step], i: int, M: int, K: int, N: int, formula: Traffic, title: str = "",
              yours: Traffic | None = None, wrong=(), learner: bool = False) -> str:
    """HTML (inline SVG + a counter table) of step ``i`` of ``steps`` for an M x K by K x N matmul.

    ``formula`` holds the closed-form final counts, printed beside the running counts (elements).
    ``learner=True`` adds a third column, ``yours``: a learner's final counts ("?" where ``yours``
    is not a Traffic); ``wrong``: (row, col) cells of C drawn red.
    """
    if not 0 <= i < len(steps):
        raise ValueError(f"step {i} out of range: the loop has {len(steps)} steps (0..{len(steps) - 1})")
    s = steps[i]
    done = [p.c for p in steps[:i] if p.c != s.c]
    gap = CELL
    ax, ay = 0, K * CELL + gap            # A bottom left
    bx, by = K * CELL + gap, 0            # B top right
    cx, cy = bx, ay                       # C bottom right
    width, height = bx + N * CELL + 2, ay + M * CELL + 2
    white = "#ffffff"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    parts += _rects(ax, ay, M, K, lambda r, c: COLORS["A"] if _inside(s.a, r, c) else white)
    parts += _rects(bx, by, K, N, lambda r, c: COLORS["B"] if _inside(s.b, r, c) else white)
    bad = set(map(tuple, wrong))
    parts += _rects(cx, cy, M, N, lambda r, c: COLORS["wrong"] if (r, c) in bad
                    else COLORS["C"] if _inside(s.c, r, c)
                    else (COLORS["done"] if any(_inside(d, r, c) for d in done) else white))
    parts.append("</svg>")
    t = s.traffic
    loaded = {"AB": "A tile and B tile", "B": "B tile (A block still resident)", "A": "A tile"}.get(s.loaded, "nothing")
    y = yours if isinstance(yours, Traffic) else None
    mine = [y.a_reads, y.b_reads, y.c_writes, y.total] if y else ["?"] * 4
    lines = (("A reads", t.a_reads, formula.a_reads), ("B reads", t.b_reads, formula.b_reads),
             ("C writes", t.c_writes, formula.c_writes), ("total", t.total, formula.total))
    rows = "".join(f"<tr><td>{name}</td><td>{now}</td><td>{final}</td>"
                   + (f"<td><b>{mine[k]}</b></td>" if learner else "") + "</tr>"
                   for k, (name, now, final) in enumerate(lines))
    table = ("<table style='font-family:monospace'><tr><th></th><th>so far</th><th>formula (end)</th>"
             + ("<th>yours</th>" if learner else "") + f"</tr>{rows}</table>")
    head = f"<b>{title}</b><br>" if title else ""
    return (f"<div>{head}step {i + 1} / {len(steps)}: loaded {loaded}<br>"
            f"<div style='display:flex;gap:24px;align-items:flex-start'>{''.join(parts)}{table}</div></div>")
