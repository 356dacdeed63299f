"""Lab 04's drawing: what Triton programs touched, the program-id grid over the output and one
program's loads.

Pure functions of an :class:`labkit.kernels.record.AccessRecorder`:
- ``access_map`` -> a 2-D int array of cell codes (unit-tested);
- ``owner_map`` -> which program wrote each output cell;
- ``kernel_frame`` -> a matplotlib Figure (output coloured by program id,
  inputs with the chosen program's loads highlighted, masked-off lanes and
  out-of-bounds lanes marked). `labkit.kernels.lab.kernel_player` wires it to
  the course's Play + slider widget, one frame per program.
1-D tensors are drawn as rows of ``width`` elements (use the block size so
each row is one program's block; the padding after the end shows masked lanes).
Tensors with 2+ dimensions are drawn as (elements / last dim) x last dim; a
masked lane past the end of a row lands on the next row's cell there, so only
lanes masked past the end of the whole tensor show up as masked.
Legibility: each panel is drawn ``panel_ratio(rows, cols)`` as high as wide (a 3 x 50 tensor is a
band, not a strip), the figure is no taller than its panels need and at most MAX_WIDTH_IN wide, and
program ids are written into the output's cells only where ``label_size`` finds room (no overlap).
"""
from __future__ import annotations

import numpy as np

UNTOUCHED, OTHER, THIS, MASKED, OOB = 0, 1, 2, 3, 4
CODE_NAMES = {UNTOUCHED: "not accessed", OTHER: "other programs", THIS: "this program",
              MASKED: "masked-off lane", OOB: "out of bounds!"}
CODE_COLORS = ["#f2f2f2", "#c6dbef", "#2171b5", "#fdae6b", "#d7301f"]


def pid_tuple(rec, launch: int, pid) -> tuple:
    """Linear program id (x fastest) or a tuple -> (x, y, z) for that launch's grid."""
    if isinstance(pid, (tuple, list)):
        return tuple(pid) + (0,) * (3 - len(pid))
    gx, gy, _ = rec.launches[launch].grid
    return (pid % gx, (pid // gx) % gy, pid // (gx * gy))


def n_programs(rec, launch: int = 0) -> int:
    gx, gy, gz = rec.launches[launch].grid
    return gx * gy * gz


def _layout(numel: int, shape: tuple, width: int | None) -> tuple[int, int]:
    if width is None:
        width = shape[-1] if len(shape) >= 2 else numel
    return -(-numel // width), width


def access_map(rec, tensor: str, pid, kind: str | None = None, launch: int = 0,
               width: int | None = None, pad_rows: int = 0) -> np.ndarray:
    """Cell codes for ``tensor`` (rows x width; see CODE_NAMES) as seen by program ``pid``.

    Rows = ceil(numel / width) (+ ``pad_rows``); a masked or out-of-bounds lane
    that falls outside the grid is not drawn. THIS wins over OTHER; OOB over all.
    """
    info = rec.launches[launch].tensors[tensor]
    rows, w = _layout(info.numel, info.shape, width)
    rows += pad_rows
    flat = np.full(rows * w, UNTOUCHED, dtype=np.int8)
    me = pid_tuple(rec, launch, pid)
    size = flat.size

    def put(off, code):
        off = off[(off >= 0) & (off < size)]
        flat[off] = np.maximum(flat[off], code) if code != THIS else np.where(flat[off] == OOB, OOB, THIS)

    mine = rec.select(kind, tensor, me, launch)
    for a in rec.select(kind, tensor, None, launch):
        if a.pid != me:
            put(a.offsets, OTHER)
    for a in mine:
        put(a.offsets, THIS)
    for a in mine:
        off = a.masked_offsets[(a.masked_offsets >= 0) & (a.masked_offsets < size)]
        flat[off] = np.where(flat[off] == UNTOUCHED, MASKED, flat[off])
        put(a.oob_offsets, OOB)
    return flat.reshape(rows, w)


def owner_map(rec, tensor: str, launch: int = 0, width: int | None = None) -> np.ndarray:
    """Linear id of the program that stored each element (rows x width; -1 = nobody / padding)."""
    info = rec.launches[launch].tensors[tensor]
    rows, w = _layout(info.numel, info.shape, width)
    flat = np.full(rows * w, -1, dtype=np.int64)
    flat[:info.numel] = rec.owner(tensor, "store", launch)
    return flat.reshape(rows, w)


MAX_WIDTH_IN = 10.4       # figure width cap, inches (936 px at 90 dpi: fits a JupyterLab output)
MIN_LABEL_CELL_PT = 9.0   # cells smaller than this (points) get no program-id labels
MIN_RATIO, MAX_RATIO = 0.3, 1.0   # a panel's drawn height / width: wide tensors stay visible bands
FRAME_EXTRA_IN = 1.1      # inches above and below the panels: title and legend


def panel_ratio(rows: int, cols: int) -> float:
    """Drawn height / width of a rows x cols panel: rows/cols, clipped to [MIN_RATIO, MAX_RATIO]
    (a 3 x 50 softmax input is drawn 0.3 as high as wide, not as a 3-pixel strip)."""
    return float(min(max(rows / cols, MIN_RATIO), MAX_RATIO))


def label_size(shape: tuple, panel_w_in: float, ratio: float) -> float | None:
    """Font size (points) for one program id per cell, or None when cells are too small to hold one
    legibly (side < MIN_LABEL_CELL_PT points)."""
    rows, cols = shape
    cell_pt = min(panel_w_in * 72 / cols, panel_w_in * ratio * 72 / rows)
    return None if cell_pt < MIN_LABEL_CELL_PT else min(7.0, 0.55 * cell_pt)


def kernel_frame(rec, pid, out: str, inputs: tuple = (), launch: int = 0, width: int | None = None,
                 title: str | None = None):
    """Figure: output coloured by owning program (chosen program outlined), then each input's access map."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch, Rectangle

    me = pid_tuple(rec, launch, pid)
    ln = rec.launches[launch]
    pad = 1 if width is not None else 0
    panels = [out, *inputs]
    own = owner_map(rec, out, launch, width)
    maps = [access_map(rec, name, me, "load", launch, width, pad_rows=pad) for name in inputs]
    fig_w = min(3.2 * len(panels) + 0.8, MAX_WIDTH_IN)   # <= ~940 px at the players' 90 dpi
    panel_w = fig_w / len(panels)
    ratios = [panel_ratio(*m.shape) for m in (own, *maps)]
    fig_h = panel_w * max(ratios) + FRAME_EXTRA_IN            # panels + title + legend, no dead space
    fig, axes = plt.subplots(1, len(panels), figsize=(fig_w, fig_h), squeeze=False)
    axes = axes[0]
    # output: program ids, with idle (-1) cells white
    n = n_programs(rec, launch)
    cmap = plt.get_cmap("tab20", max(n, 1))
    rgb = np.ones(own.shape + (3,))
    rgb[own >= 0] = np.array([cmap(int(o) % 20)[:3] for o in own[own >= 0]]) if (own >= 0).any() else rgb[own >= 0]
    lin = me[0] + ln.grid[0] * (me[1] + ln.grid[1] * me[2])
    rgb[(own >= 0) & (own != lin)] = 0.35 * rgb[(own >= 0) & (own != lin)] + 0.65  # fade the others
    axes[0].imshow(rgb, interpolation="nearest", aspect=ratios[0] * own.shape[1] / own.shape[0])
    rows_, cols_ = np.nonzero(own == lin)
    if rows_.size:  # outline the chosen program's cells (their bounding box)
        r0, r1, c0, c1 = rows_.min(), rows_.max(), cols_.min(), cols_.max()
        axes[0].add_patch(Rectangle((c0 - 0.5, r0 - 0.5), c1 - c0 + 1, r1 - r0 + 1, fill=False, lw=2, ec="black"))
    if label_size(own.shape, panel_w, ratios[0]) is not None:   # ids only where they fit, never overlapping
        size = label_size(own.shape, panel_w, ratios[0])
        for (r, c), o in np.ndenumerate(own):
            if o >= 0:
                axes[0].text(c, r, str(o), ha="center", va="center", fontsize=size)
    axes[0].set_title(f"{out}: program id per element", fontsize=9)
    cm = ListedColormap(CODE_COLORS)
    for ax, name, amap, ratio in zip(axes[1:], inputs, maps, ratios[1:]):
        ax.imshow(amap, cmap=cm, vmin=0, vmax=len(CODE_COLORS) - 1, interpolation="nearest",
                  aspect=ratio * amap.shape[1] / amap.shape[0])
        ax.set_title(f"{name}: loads", fontsize=9)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.legend(handles=[Patch(color=CODE_COLORS[c], label=CODE_NAMES[c]) for c in CODE_NAMES],
               loc="lower center", ncol=5, fontsize=7, frameon=False)
    fig.suptitle(title or f"{ln.kernel}, grid {ln.grid[:2] if ln.grid[2] == 1 else ln.grid}: program {me[:2]}",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.3 / fig_h, 1, 1 - 0.3 / fig_h))   # legend below, title above
    return fig


def online_softmax_frame(row, trace: list, i: int):
    """Figure: the row as bars, blocks 0..i processed (blue), the running max m as a line,
    and a caption with m, the rescale factor exp(m_old - m_new) and the running sum s."""
    import matplotlib.pyplot as plt

    x = np.asarray(row, dtype=np.float64).ravel()
    st = trace[i]
    done = st["cols"][1]
    fig, ax = plt.subplots(figsize=(7, 2.6))
    colors = ["#2171b5" if j < done else "#d9d9d9" for j in range(x.size)]
    colors[st["cols"][0]:done] = ["#fd8d3c"] * (done - st["cols"][0])
    ax.bar(np.arange(x.size), x, color=colors, width=0.9)
    ax.axhline(st["m"], color="black", lw=1, ls="--")
    for t in trace:
        ax.axvline(t["cols"][0] - 0.5, color="#999999", lw=0.5)
    ax.set_xlim(-0.5, x.size - 0.5)
    ax.set_title(f"block {i} (orange) of {len(trace)}: m = {st['m']:.3f}, old sum x exp(m_old - m) = "
                 f"x {st['scale']:.3f}, s = {st['s']:.3f}", fontsize=9)
    ax.set_xlabel("column")
    fig.tight_layout()
    return fig
