"""Drawing for Lab 05: primitive before/after tables and the ring all-reduce frames (HTML).

Pure functions of already-computed state (`labkit.collectives.simulate` traces,
`labkit.collectives.primitives` states), so they are unit-tested without a browser.
"""
from __future__ import annotations

import colorsys
import html

RANK_NAMES = "ABCDEFGH"


def _name(r: int) -> str:
    return RANK_NAMES[r] if r < len(RANK_NAMES) else f"R{r}"


def chunk_colour(chunk: int, n_contrib: int, world_size: int) -> str:
    """CSS colour of a chunk: a hue per chunk, darker as more ranks' data has been summed in (white = nothing)."""
    if n_contrib == 0:
        return "#ffffff"
    hue = (chunk / max(world_size, 1) + 0.05) % 1.0
    light = 0.92 - 0.5 * n_contrib / max(world_size, 1)
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.75)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def _cell(text: str, colour: str, bold_border: bool = False) -> str:
    border = "3px solid #000" if bold_border else "1px solid #999"
    return (f'<td style="background:{colour};border:{border};padding:3px 6px;text-align:center;'
            f'font-family:monospace;min-width:3em">{html.escape(text)}</td>')


def contrib_label(contrib, chunk: int | None = None) -> str:
    """'A+C' for contributions {0, 2} (rank letters); '·' for none; with a chunk index: 'A2+C2'."""
    if not contrib:
        return "·"
    suffix = "" if chunk is None else str(chunk)
    return "+".join(_name(r) + suffix for r in sorted(contrib))


def ring_frame(trace, i: int) -> str:
    """HTML of frame ``i`` of a ring trace: i = 0 is the start, i = k the buffers after round k.

    Rows are ranks, columns chunks; a cell shows which ranks' chunk has been
    summed in (colour darkens as it accumulates); cells written in round i have
    a thick border, and the round's transfers are listed under the table.
    """
    if not 0 <= i <= trace.n_steps:
        raise ValueError(f"ring_frame: frame must be in [0, {trace.n_steps}], got {i}")
    n = trace.world_size
    bufs = trace.buffers_at(i)
    step = trace.steps[i - 1] if i > 0 else None
    written = {(t.dst, t.chunk) for t in step.transfers} if step else set()
    title = (f"start: every rank holds its own {len(trace.bounds) - 1} chunks" if step is None
             else f"round {i}/{trace.n_steps}: {step.phase}")
    head = "".join(f'<th style="padding:3px 6px">chunk {c}<br><small>{trace.bounds[c + 1] - trace.bounds[c]} el</small></th>'
                   for c in range(len(trace.bounds) - 1))
    rows = []
    for r in range(n):
        cells = "".join(_cell(contrib_label(bufs[r][c]), chunk_colour(c, len(bufs[r][c]), n), (r, c) in written)
                        for c in range(len(bufs[r])))
        rows.append(f'<tr><th style="padding:3px 6px">rank {r}</th>{cells}</tr>')
    moves = ""
    if step:
        items = [f"rank {t.src} → rank {t.dst}: chunk {t.chunk} ({'add' if t.op == 'add' else 'store'}, {t.numel} el)"
                 for t in step.transfers]
        moves = "<div style='font-family:monospace;font-size:90%'>" + "<br>".join(map(html.escape, items)) + "</div>"
    return (f"<div><b>{html.escape(trace.algorithm)}, N={n}, L={trace.n_elements} — {html.escape(title)}</b>"
            f"<table style='border-collapse:collapse;margin:4px 0'><tr><th></th>{head}</tr>{''.join(rows)}</table>"
            f"{moves}</div>")


def result_frame(run) -> str:
    """HTML of a learner's final buffers (a `labkit.collectives.lab.YourRun`) in the ring frames' style.

    A cell shows the ranks whose data it holds ('?' when it is no clean sum); a cell that should
    hold something else has a red border and the simulator's answer under it; cells the
    collective leaves unspecified (a reduce-scatter's partial sums) are greyed.
    """
    n = run.world_size
    chunks = len(run.bounds) - 1
    head = "".join(f'<th style="padding:3px 6px">chunk {c}<br><small>{run.bounds[c + 1] - run.bounds[c]} el</small></th>'
                   for c in range(chunks))
    rows = []
    for r in range(n):
        tds = []
        for c in range(chunks):
            got, want = run.buffers[r][c], run.expected[r][c]
            label = "?" if got is None else contrib_label(got)
            colour = "#ffffff" if got is None else chunk_colour(c, len(got), n)
            if not run.matters[r][c]:
                tds.append(f'<td style="background:#eee;color:#999;border:1px solid #ccc;padding:3px 6px;'
                           f'text-align:center;font-family:monospace">{html.escape(label)}</td>')
            elif got == want:
                tds.append(_cell(label, colour))
            else:
                tds.append(f'<td style="background:{colour};border:3px solid #c00;padding:3px 6px;text-align:center;'
                           f'font-family:monospace">{html.escape(label)}<br><small>want '
                           f'{html.escape(contrib_label(want))}</small></td>')
        rows.append(f'<tr><th style="padding:3px 6px">rank {r}</th>{"".join(tds)}</tr>')
    root = f", root {run.root}" if run.algorithm.startswith("tree") else ""
    return (f"<div><b>your {html.escape(run.exercise)}, N={n}, L={run.n_elements}{root} — final buffers "
            f"(red: differs from the simulator; grey: unspecified)</b>"
            f"<table style='border-collapse:collapse;margin:4px 0'><tr><th></th>{head}</tr>{''.join(rows)}</table></div>")


def _state_table(state, n: int, show_blocks: bool) -> str:
    rows = []
    for r, cells in enumerate(state):
        tds = []
        for contrib in cells:
            blocks = {b for _, b in contrib}
            label = "+".join(f"{_name(q)}{b if show_blocks else ''}" for q, b in sorted(contrib)) if contrib else "·"
            colour = chunk_colour(min(blocks) if blocks else 0, len(contrib), n) if contrib else "#ffffff"
            tds.append(_cell(label, colour))
        rows.append(f'<tr><th style="padding:3px 6px">rank {r}</th>{"".join(tds)}</tr>')
    return f"<table style='border-collapse:collapse'>{''.join(rows)}</table>"


def primitive_html(name: str, before, after) -> str:
    """Side-by-side before → after tables of one primitive (states from `primitive_states`).

    Labels: 'B2' = rank B's block 2, 'A+B+C' = a sum, '·' = nothing there.
    """
    n = len(before)
    show_blocks = any(b > 0 for state in (before, after) for cells in state for cell in cells for _, b in cell)
    return (f"<div style='display:inline-block;margin:6px 18px 6px 0;vertical-align:top'><b>{html.escape(name)}</b>"
            f"<table><tr><td>{_state_table(before, n, show_blocks)}</td><td style='font-size:150%'>→</td>"
            f"<td>{_state_table(after, n, show_blocks)}</td></tr></table></div>")


def alpha_beta_figure(sizes, measured: dict, predicted: dict, title: str = ""):
    """Log-log plot of measured (markers) and α–β model (lines) time vs bytes, one colour per algorithm."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for k, alg in enumerate(measured):
        colour = f"C{k}"
        ax.loglog(sizes, measured[alg], "o", color=colour, label=f"{alg} (measured)")
        ax.loglog(sizes, predicted[alg], "-", color=colour, alpha=0.7, label=f"{alg} (α–β model)")
    ax.set_xlabel("buffer size S (bytes)")
    ax.set_ylabel("time (s)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
