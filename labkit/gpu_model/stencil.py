"""The shared-memory stencil: global loads without tiling vs with a tile and its halo.

A 1-D stencil of radius r computes ``out[i] = Σ_k w[k] · x[i + k]`` for k = 0..2r over an input
that already carries its r-wide halo on both sides (n outputs need n + 2r inputs). Without
tiling each output reads its 2r + 1 inputs from global memory. With tiling, a block first
copies its T inputs plus the 2r halo inputs into shared memory once, then every output reads
its neighbours from there:

    global loads, no tiling:   n · (2r + 1)
    global loads, tiles of T:  n + 2r · ceil(n / T)      = (n / T) · (T + 2r) when T divides n
    shared loads, tiles of T:  n · (2r + 1)

The 2-D star ("5-point" for r = 1) stencil on an R × C output reads the centre and r points in
each of the four directions: 4r + 1 loads per output untiled; a T × T tile loads its T² points
plus four r-wide halo strips (no corners): R·C + 2r·(C·ceil(R/T) + R·ceil(C/T)) in all, which
is (R/T)(C/T)·(T² + 4rT) when T divides both.

The counts are *measured*: the implementations below run in plain Python/numpy on `Counted`
arrays that count every element read and written, and the tests compare them with the
formulas (`stencil1d_formula`, `stencil2d_formula`) and the outputs with numpy's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.checks import check_int

__all__ = ["Counted", "StencilCounts", "StencilRun", "stencil1d_naive", "stencil1d_tiled", "stencil1d_reference",
           "stencil1d_formula", "stencil2d_naive", "stencil2d_tiled", "stencil2d_reference", "stencil2d_formula"]


class Counted:
    """A numpy array whose element reads (``loads``) and writes (``stores``) are counted, in elements.

    ``a[idx]`` returns what numpy returns (a scalar or a copy-free view) and adds its size to
    ``loads``; ``a[idx] = v`` adds the number of elements written to ``stores``.
    """

    def __init__(self, data):
        self.data = np.asarray(data)
        self.loads = 0
        self.stores = 0

    @property
    def shape(self) -> tuple:
        return self.data.shape

    def __getitem__(self, idx):
        v = self.data[idx]
        self.loads += int(np.size(v))
        return v

    def __setitem__(self, idx, value):
        self.data[idx] = value
        self.stores += int(np.size(self.data[idx]))


@dataclass(frozen=True)
class StencilCounts:
    """Elements moved: ``global_loads``, ``shared_loads`` (0 without tiling), ``global_stores``."""
    global_loads: int
    shared_loads: int
    global_stores: int


@dataclass(frozen=True)
class StencilRun:
    """A stencil's output and the loads and stores counted while computing it."""
    out: np.ndarray
    counts: StencilCounts


def _weights(fn: str, weights) -> tuple[np.ndarray, int]:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size % 2 == 0:
        raise ValueError(f"{fn}: weights must be 1-D with an odd length 2r+1, got shape {w.shape}")
    return w, w.size // 2


def _input(fn: str, x, ndim: int, r: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != ndim or min(x.shape) <= 2 * r:
        raise ValueError(f"{fn}: x must be {ndim}-D with more than 2r={2 * r} points per axis "
                         f"(outputs plus halo), got shape {x.shape}")
    return x


# ---------------------------------------------------------------------------- 1-D
def stencil1d_reference(x, weights) -> np.ndarray:
    """numpy's answer: ``out[i] = Σ_k w[k] · x[i + k]`` (n = len(x) − 2r outputs)."""
    return np.correlate(np.asarray(x, np.float64), np.asarray(weights, np.float64), mode="valid")


def stencil1d_naive(x, weights) -> StencilRun:
    """Each output reads its 2r + 1 inputs straight from global memory (``x`` includes the halo)."""
    w, r = _weights("stencil1d_naive", weights)
    g = Counted(_input("stencil1d_naive", x, 1, r))
    n = g.shape[0] - 2 * r
    out = Counted(np.zeros(n))
    for i in range(n):
        acc = 0.0
        for k in range(2 * r + 1):
            acc += w[k] * g[i + k]
        out[i] = acc
    return StencilRun(out.data, StencilCounts(g.loads, 0, out.stores))


def stencil1d_tiled(x, weights, tile: int) -> StencilRun:
    """Each tile of ``tile`` outputs copies its inputs plus halo (tile + 2r loads) into a shared
    buffer once; its outputs then read their neighbours from the buffer."""
    fn = "stencil1d_tiled"
    w, r = _weights(fn, weights)
    g = Counted(_input(fn, x, 1, r))
    T = check_int(fn, "tile", tile, minimum=1)
    n = g.shape[0] - 2 * r
    out = Counted(np.zeros(n))
    shared_loads = 0
    for t0 in range(0, n, T):
        tn = min(T, n - t0)
        s = Counted(g[t0:t0 + tn + 2 * r])        # one cooperative load: tile + halo
        for i in range(tn):
            acc = 0.0
            for k in range(2 * r + 1):
                acc += w[k] * s[i + k]
            out[t0 + i] = acc
        shared_loads += s.loads
    return StencilRun(out.data, StencilCounts(g.loads, shared_loads, out.stores))


def stencil1d_formula(n: int, r: int, tile: int | None = None) -> StencilCounts:
    """Closed form for n outputs of radius r: untiled (``tile=None``) n·(2r+1) global loads;
    tiled n + 2r·ceil(n/T) global and n·(2r+1) shared loads. n stores either way."""
    fn = "stencil1d_formula"
    n, r = check_int(fn, "n", n, minimum=1), check_int(fn, "r", r, minimum=0)
    if tile is None:
        return StencilCounts(n * (2 * r + 1), 0, n)
    T = check_int(fn, "tile", tile, minimum=1)
    return StencilCounts(n + 2 * r * -(-n // T), n * (2 * r + 1), n)


# ---------------------------------------------------------------------------- 2-D star
def stencil2d_reference(x, weights) -> np.ndarray:
    """numpy's answer for the star stencil: Σ_k w[k]·x[i+r, j+k] + Σ_{k≠r} w[k]·x[i+k, j+r]
    (the centre weight w[r] counted once; w = [1, −4, 1] is the 5-point Laplacian)."""
    x = np.asarray(x, np.float64)
    w, r = _weights("stencil2d_reference", weights)
    R, C = x.shape[0] - 2 * r, x.shape[1] - 2 * r
    out = np.zeros((R, C))
    for k in range(2 * r + 1):
        out += w[k] * x[r:r + R, k:k + C]
        if k != r:
            out += w[k] * x[k:k + R, r:r + C]
    return out


def _star(src, w, r, i, j) -> float:
    """One output from ``src`` (Counted), centred at (i + r, j + r)."""
    acc = 0.0
    for k in range(2 * r + 1):
        acc += w[k] * src[i + r, j + k]
        if k != r:
            acc += w[k] * src[i + k, j + r]
    return acc


def stencil2d_naive(x, weights) -> StencilRun:
    """Each output reads its 4r + 1 inputs from global memory (``x`` includes an r-wide halo)."""
    w, r = _weights("stencil2d_naive", weights)
    g = Counted(_input("stencil2d_naive", x, 2, r))
    R, C = g.shape[0] - 2 * r, g.shape[1] - 2 * r
    out = Counted(np.zeros((R, C)))
    for i in range(R):
        for j in range(C):
            out[i, j] = _star(g, w, r, i, j)
    return StencilRun(out.data, StencilCounts(g.loads, 0, out.stores))


def stencil2d_tiled(x, weights, tile: int) -> StencilRun:
    """Each ``tile`` × ``tile`` block of outputs loads its interior and four r-wide halo strips
    (no corners: the star never reads them) into a shared buffer, then computes from it."""
    fn = "stencil2d_tiled"
    w, r = _weights(fn, weights)
    g = Counted(_input(fn, x, 2, r))
    T = check_int(fn, "tile", tile, minimum=1)
    R, C = g.shape[0] - 2 * r, g.shape[1] - 2 * r
    out = Counted(np.zeros((R, C)))
    shared_loads = 0
    for i0 in range(0, R, T):
        for j0 in range(0, C, T):
            th, tw = min(T, R - i0), min(T, C - j0)
            s = np.zeros((th + 2 * r, tw + 2 * r))                     # shared buffer; corners stay unused
            s[r:r + th, r:r + tw] = g[i0 + r:i0 + r + th, j0 + r:j0 + r + tw]     # interior
            s[:r, r:r + tw] = g[i0:i0 + r, j0 + r:j0 + r + tw]                   # top halo
            s[r + th:, r:r + tw] = g[i0 + r + th:i0 + 2 * r + th, j0 + r:j0 + r + tw]  # bottom halo
            s[r:r + th, :r] = g[i0 + r:i0 + r + th, j0:j0 + r]                   # left halo
            s[r:r + th, r + tw:] = g[i0 + r:i0 + r + th, j0 + r + tw:j0 + 2 * r + tw]  # right halo
            sh = Counted(s)
            for i in range(th):
                for j in range(tw):
                    out[i0 + i, j0 + j] = _star(sh, w, r, i, j)
            shared_loads += sh.loads
    return StencilRun(out.data, StencilCounts(g.loads, shared_loads, out.stores))


def stencil2d_formula(rows: int, cols: int, r: int, tile: int | None = None) -> StencilCounts:
    """Closed form for a rows × cols output, star radius r: untiled (4r+1)·rows·cols global loads;
    tiled rows·cols + 2r·(cols·ceil(rows/T) + rows·ceil(cols/T)) global, (4r+1)·rows·cols shared."""
    fn = "stencil2d_formula"
    R, C = check_int(fn, "rows", rows, minimum=1), check_int(fn, "cols", cols, minimum=1)
    r = check_int(fn, "r", r, minimum=0)
    if tile is None:
        return StencilCounts((4 * r + 1) * R * C, 0, R * C)
    T = check_int(fn, "tile", tile, minimum=1)
    return StencilCounts(R * C + 2 * r * (C * -(-R // T) + R * -(-C // T)), (4 * r + 1) * R * C, R * C)
