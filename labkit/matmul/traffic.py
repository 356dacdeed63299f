"""Counted (instrumented) CPU matmuls: C = A @ B while counting element loads.

Conventions used everywhere in this module
------------------------------------------
- ``A`` is M x K, ``B`` is K x N, ``C = A @ B`` is M x N (any 2-D real arrays).
- Traffic is counted in **elements** (not bytes) moved from the *slower* memory
  level into the faster one: ``a_reads`` / ``b_reads`` for A and B, and
  ``c_writes`` for elements of C written back to the slower level.
- The loops are the textbook tiled loops, with tile sizes that
  need not divide the matrix: the last tile along a dimension is simply smaller,
  and only the elements really in a tile are counted.

Closed forms (``cdiv(x, b)`` = ceil(x / b)), all asserted by tests/test_matmul.py:

naive (registers <- memory, no reuse):       A: M*N*K            B: M*N*K
cache_tiled(b1, b2) (L1 <- DRAM):            A: M*K              B: cdiv(M, b1)*K*N
register_tiled(v1, v2, v3) (reg <- L1):      A: M*K*cdiv(N, v2)  B: cdiv(M, v1)*K*N
    v1 = rows of the C register tile (rows of A per load),
    v2 = columns of the C register tile (columns of B per load),
    v3 = k-width of each A/B register tile; it changes the register footprint
         (v1*v3 + v2*v3 + v1*v2) but NOT the traffic.
tiled(b1, b2, v1, v2) (both levels):
    DRAM -> L1: as cache_tiled(b1, b2)
    L1 -> reg:  A: M*K*J(N, b2, v2)          B: J(M, b1, v1)*K*N
    with J(n, b, v) = (n // b)*cdiv(b, v) + cdiv(n % b, v)  (register tiles per
    cache block, summed over the cache blocks along that dimension).
In every case C is written exactly once per element: c_writes = M*N.
With square n and tiles dividing n these reduce to the familiar forms:
naive 2n^3; cache n^2 + n^3/b1; register n^3/v2 + n^3/v1 (+ n^2 for C).
(A common slip writes the DRAM traffic of B in the combined scheme as n^2/b1; it
is n^3/b1, as in the cache-tiling section.)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from numbers import Integral

import numpy as np

__all__ = [
    "Traffic", "TwoLevelTraffic", "Step", "cdiv",
    "naive", "cache_tiled", "register_tiled", "tiled",
    "naive_formula", "cache_tiled_formula", "register_tiled_formula", "tiled_formula", "trace",
]


@dataclass
class Traffic:
    """Elements moved between two memory levels by one matmul.

    a_reads, b_reads: elements of A / B loaded from the slower level.
    c_writes: elements of C written back to the slower level.
    All counts are element counts; multiply by the itemsize for bytes.
    """

    a_reads: int = 0
    b_reads: int = 0
    c_writes: int = 0

    @property
    def total(self) -> int:
        """a_reads + b_reads + c_writes (elements)."""
        return self.a_reads + self.b_reads + self.c_writes

    def bytes(self, itemsize: int = 4) -> int:
        """Total traffic in bytes for elements of ``itemsize`` bytes (default float32)."""
        return self.total * itemsize

    def copy(self) -> "Traffic":
        return replace(self)


@dataclass
class TwoLevelTraffic:
    """Traffic of the combined loop at both levels: ``dram`` (L1 <- DRAM) and ``l1`` (registers <- L1)."""

    dram: Traffic
    l1: Traffic


@dataclass(frozen=True)
class Step:
    """One step of a tiled loop, for animations: what is resident and the counters so far.

    a, b, c: resident tile of A, B and the C tile being computed, each as
    (row0, row1, col0, col1) half-open ranges in that matrix's coordinates.
    loaded: which operands this step loaded from the slower level ("A", "B", "AB").
    traffic: running counters *after* this step.
    """

    a: tuple
    b: tuple
    c: tuple
    loaded: str
    traffic: Traffic


def cdiv(x: int, b: int) -> int:
    """ceil(x / b) for non-negative int x and positive int b."""
    return -(-x // b)


# ----------------------------------------------------------------------------- checks
def _as_matrix(name: str, X) -> np.ndarray:
    if hasattr(X, "detach") and hasattr(X, "numpy"):  # a torch tensor
        X = X.detach().cpu().numpy()
    if not isinstance(X, np.ndarray):
        raise TypeError(f"{name} must be a 2-D numpy array or torch tensor, got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (a matrix), got shape {X.shape}")
    if not (np.issubdtype(X.dtype, np.floating) or np.issubdtype(X.dtype, np.integer)):
        raise TypeError(f"{name} must hold real numbers, got dtype {X.dtype}")
    return X


def check_operands(A, B) -> tuple[np.ndarray, np.ndarray]:
    """Validate A (M x K) and B (K x N); return them as numpy arrays. Clear one-line errors."""
    A, B = _as_matrix("A", A), _as_matrix("B", B)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {A.shape[0]}x{A.shape[1]}, "
                         f"B is {B.shape[0]}x{B.shape[1]} (need A.shape[1] == B.shape[0])")
    return A, B


def check_tile(name: str, v) -> int:
    """A tile size must be a positive Python/numpy int (not bool, not float)."""
    if isinstance(v, bool) or not isinstance(v, Integral):
        raise TypeError(f"tile size {name} must be a positive int, got {v!r} ({type(v).__name__})")
    if v < 1:
        raise ValueError(f"tile size {name} must be >= 1, got {v}")
    return int(v)


def _out(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return np.zeros((A.shape[0], B.shape[1]), dtype=np.result_type(A.dtype, B.dtype, np.float64))


# ----------------------------------------------------------------------------- loops
def naive(A, B) -> tuple[np.ndarray, Traffic]:
    """Untiled C = A @ B: each C[i, j] loads row i of A and column j of B (K elements each).

    Returns (C, traffic) with traffic in elements: A: M*N*K, B: M*N*K, C: M*N.
    """
    A, B = check_operands(A, B)
    C, t = _out(A, B), Traffic()
    M, N = C.shape
    for i in range(M):
        for j in range(N):
            a, b = A[i, :], B[:, j]
            t.a_reads += a.size
            t.b_reads += b.size
            C[i, j] = a @ b
            t.c_writes += 1
    return C, t


# BEGIN SOLUTION  (labkit's loops, with traces for the animations: they count the answers of Lab 03)
def cache_tiled(A, B, b1: int, b2: int, trace: list | None = None) -> tuple[np.ndarray, Traffic]:
    """Cache-aware tiling (DRAM -> L1): keep a b1 x K row block of A resident, stream K x b2 blocks of B.

    Loop (with partial last tiles):
        for each row block i (b1 rows of A):      load A[i-block, :]      -> L1
            for each column block j (b2 cols of B): load B[:, j-block]   -> L1
                C[i-block, j-block] = a @ b         (written once)
    Returns (C, traffic): A: M*K, B: cdiv(M, b1)*K*N, C: M*N elements.
    ``trace``: if a list, one `Step` per (i, j) is appended (for animations).
    """
    A, B = check_operands(A, B)
    b1, b2 = check_tile("b1", b1), check_tile("b2", b2)
    C, t = _out(A, B), Traffic()
    M, K = A.shape
    N = B.shape[1]
    for i0 in range(0, M, b1):
        i1 = min(i0 + b1, M)
        a = A[i0:i1, :]                      # resident in L1 for the whole j loop
        t.a_reads += a.size
        for j0 in range(0, N, b2):
            j1 = min(j0 + b2, N)
            b = B[:, j0:j1]                  # streamed: reloaded for every row block
            t.b_reads += b.size
            C[i0:i1, j0:j1] = a @ b
            t.c_writes += (i1 - i0) * (j1 - j0)
            if trace is not None:
                trace.append(Step((i0, i1, 0, K), (0, K, j0, j1), (i0, i1, j0, j1),
                                  "AB" if j0 == 0 else "B", t.copy()))
    return C, t


def register_tiled(A, B, v1: int, v2: int, v3: int, trace: list | None = None) -> tuple[np.ndarray, Traffic]:
    """Register-aware tiling (L1 -> registers): a v1 x v2 tile of C stays in registers.

    Loop (with partial last tiles):
        for each v1-row block i, for each v2-column block j:
            c = 0                                   (v1 x v2 registers)
            for each v3-wide k block:  load a = A[i, k] (v1 x v3), b = B[k, j] (v3 x v2);  c += a @ b
            C[i, j] = c                             (written once)
    Returns (C, traffic): A: M*K*cdiv(N, v2), B: cdiv(M, v1)*K*N, C: M*N elements.
    v3 does not change the traffic. ``trace``: if a list, one `Step` per (i, j, k) is appended.
    """
    A, B = check_operands(A, B)
    v1, v2, v3 = check_tile("v1", v1), check_tile("v2", v2), check_tile("v3", v3)
    C, t = _out(A, B), Traffic()
    M, K = A.shape
    N = B.shape[1]
    for i0 in range(0, M, v1):
        i1 = min(i0 + v1, M)
        for j0 in range(0, N, v2):
            j1 = min(j0 + v2, N)
            c = np.zeros((i1 - i0, j1 - j0), dtype=C.dtype)
            for k0 in range(0, K, v3):
                k1 = min(k0 + v3, K)
                a, b = A[i0:i1, k0:k1], B[k0:k1, j0:j1]
                t.a_reads += a.size
                t.b_reads += b.size
                c += a @ b
                if k1 == K:                          # last k block: the C tile leaves the registers
                    C[i0:i1, j0:j1] = c
                    t.c_writes += c.size
                if trace is not None:
                    trace.append(Step((i0, i1, k0, k1), (k0, k1, j0, j1), (i0, i1, j0, j1), "AB", t.copy()))
            if K == 0:                               # empty inner dimension: C tile is zeros
                C[i0:i1, j0:j1] = c
                t.c_writes += c.size
    return C, t


def tiled(A, B, b1: int, b2: int, v1: int, v2: int) -> tuple[np.ndarray, TwoLevelTraffic]:
    """Cache and register tiling combined (cache blocks, register tiles inside them).

    DRAM -> L1: as `cache_tiled` (A row block b1 x K resident, K x b2 block of B streamed).
    L1 -> registers: inside each (b1, b2) block, v1 x v2 register tiles of C; for each k
    a v1-column of the A block and a v2-row of the B block are loaded (here all k at once,
    counted the same: rows*K and K*cols per register tile).
    Returns (C, TwoLevelTraffic(dram, l1)); see the module docstring for the closed forms.
    """
    A, B = check_operands(A, B)
    b1, b2 = check_tile("b1", b1), check_tile("b2", b2)
    v1, v2 = check_tile("v1", v1), check_tile("v2", v2)
    C = _out(A, B)
    dram, reg = Traffic(), Traffic()
    M, K = A.shape
    N = B.shape[1]
    for i0 in range(0, M, b1):
        i1 = min(i0 + b1, M)
        a = A[i0:i1, :]
        dram.a_reads += a.size
        for j0 in range(0, N, b2):
            j1 = min(j0 + b2, N)
            b = B[:, j0:j1]
            dram.b_reads += b.size
            for x0 in range(0, i1 - i0, v1):
                x1 = min(x0 + v1, i1 - i0)
                for y0 in range(0, j1 - j0, v2):
                    y1 = min(y0 + v2, j1 - j0)
                    ar, br = a[x0:x1, :], b[:, y0:y1]   # k = 0..K-1 of v1-columns / v2-rows
                    reg.a_reads += ar.size
                    reg.b_reads += br.size
                    C[i0 + x0:i0 + x1, j0 + y0:j0 + y1] = ar @ br
                    reg.c_writes += (x1 - x0) * (y1 - y0)
            dram.c_writes += (i1 - i0) * (j1 - j0)
    return C, TwoLevelTraffic(dram, reg)
# END SOLUTION


# ----------------------------------------------------------------------------- Lab 03's exercises
def _cache_tiled(A, B, b1, b2):
    """Cache-aware tiled matmul (DRAM -> L1) that counts the elements it loads.

    A: (M, K) and B: (K, N) float numpy arrays; b1, b2: positive int tile sizes.
    Loop to implement:
        for each block of b1 rows of A (the last may be shorter):
            load that whole b1 x K row block of A                  (count its elements in a_reads)
            for each block of b2 columns of B (the last may be narrower):
                load that K x b2 column block of B                 (count its elements in b_reads)
                write the b1 x b2 block of C = (A block) @ (B block) (count its elements in c_writes)
    Returns (C, traffic): C the (M, N) float64 product, traffic a labkit.matmul.Traffic.
    Raise ValueError if A.shape[1] != B.shape[0] or a tile size is < 1.
    """
    # BEGIN SOLUTION
    # HINT: keep each row block of A for the whole sweep over B's column blocks; numpy slices
    # HINT: clip the last tile for you, and .size counts what a tile really holds.
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A {A.shape}, B {B.shape}")
    if b1 < 1 or b2 < 1:
        raise ValueError(f"tile sizes must be >= 1, got b1={b1}, b2={b2}")
    M, N = A.shape[0], B.shape[1]
    C = np.zeros((M, N))
    t = Traffic()
    for i in range(0, M, b1):
        a = A[i:i + b1, :]
        t.a_reads += a.size
        for j in range(0, N, b2):
            b = B[:, j:j + b2]
            t.b_reads += b.size
            block = a @ b
            C[i:i + b1, j:j + b2] = block
            t.c_writes += block.size
    return C, t
    # END SOLUTION


def _register_tiled(A, B, v1, v2, v3):
    """Register-aware tiled matmul (L1 -> registers) that counts the elements it loads.

    A: (M, K) and B: (K, N) float numpy arrays; v1, v2, v3: positive int tile sizes.
    v1 = rows and v2 = columns of the C tile held in registers; v3 = width of each k step.
    Loop to implement:
        for each block of v1 rows and each block of v2 columns of C (last ones may be smaller):
            c = zeros (the register tile)
            for each block of v3 values of k (the last may be shorter):
                load a = the A tile (v1 x v3) and b = the B tile (v3 x v2)   (count both)
                c += a @ b
            write c into C                                                  (count c_writes)
    Returns (C, traffic): C the (M, N) float64 product, traffic a labkit.matmul.Traffic.
    Raise ValueError if A.shape[1] != B.shape[0] or a tile size is < 1.
    """
    # BEGIN SOLUTION
    # HINT: the C tile is an accumulator that stays put while the k loop streams tiles of A
    # HINT: and B past it; it is written once, after the last k block.
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A {A.shape}, B {B.shape}")
    if min(v1, v2, v3) < 1:
        raise ValueError(f"tile sizes must be >= 1, got v1={v1}, v2={v2}, v3={v3}")
    M, K = A.shape
    N = B.shape[1]
    C = np.zeros((M, N))
    t = Traffic()
    for i in range(0, M, v1):
        for j in range(0, N, v2):
            c = np.zeros((min(v1, M - i), min(v2, N - j)))
            for k in range(0, K, v3):
                a = A[i:i + v1, k:k + v3]
                b = B[k:k + v3, j:j + v2]
                t.a_reads += a.size
                t.b_reads += b.size
                c += a @ b
            C[i:i + v1, j:j + v2] = c
            t.c_writes += c.size
    return C, t
    # END SOLUTION


def _tiled(A, B, b1, b2, v1, v2):
    """Cache and register tiling combined, counting traffic at both levels.

    A: (M, K) and B: (K, N) float numpy arrays; b1, b2, v1, v2: positive int tile sizes.
    Loop to implement:
        for each b1-row block of A: load it into L1                      (dram.a_reads)
            for each b2-column block of B: load it into L1               (dram.b_reads)
                for each v1-row x v2-column register tile of this b1 x b2 block of C
                (tiles never cross the block edge; edge tiles may be smaller):
                    load its rows of the A block (v1 x K) and its columns of the B block
                    (K x v2) into registers                              (l1.a_reads, l1.b_reads)
                    write the tile of C                                  (l1.c_writes)
                the b1 x b2 block of C is now done                       (dram.c_writes)
    Returns (C, traffic): C the (M, N) float64 product; traffic a
    labkit.matmul.TwoLevelTraffic(dram=Traffic for DRAM -> L1, l1=Traffic for L1 -> registers).
    Raise ValueError if A.shape[1] != B.shape[0] or a tile size is < 1.
    """
    # BEGIN SOLUTION
    # HINT: nest register tiles inside each cache block: two Traffic counters, one per
    # HINT: level; a register tile never crosses its block's edge.
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A {A.shape}, B {B.shape}")
    if min(b1, b2, v1, v2) < 1:
        raise ValueError(f"tile sizes must be >= 1, got b1={b1}, b2={b2}, v1={v1}, v2={v2}")
    M, N = A.shape[0], B.shape[1]
    C = np.zeros((M, N))
    dram, l1 = Traffic(), Traffic()
    for i in range(0, M, b1):
        a = A[i:i + b1, :]
        dram.a_reads += a.size
        for j in range(0, N, b2):
            b = B[:, j:j + b2]
            dram.b_reads += b.size
            for x in range(0, a.shape[0], v1):
                for y in range(0, b.shape[1], v2):
                    ar, br = a[x:x + v1, :], b[:, y:y + v2]
                    l1.a_reads += ar.size
                    l1.b_reads += br.size
                    tile = ar @ br
                    C[i + x:i + x + tile.shape[0], j + y:j + y + tile.shape[1]] = tile
                    l1.c_writes += tile.size
            dram.c_writes += a.shape[0] * b.shape[1]
    return C, TwoLevelTraffic(dram, l1)
    # END SOLUTION


# ----------------------------------------------------------------------------- closed forms
def _dims(M, K, N):
    for name, v in (("M", M), ("K", K), ("N", N)):
        if isinstance(v, bool) or not isinstance(v, Integral) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    return int(M), int(K), int(N)


def naive_formula(M: int, K: int, N: int) -> Traffic:
    """Closed form of `naive`: A M*N*K, B M*N*K, C M*N (elements)."""
    M, K, N = _dims(M, K, N)
    return Traffic(M * N * K, M * N * K, M * N)


def cache_tiled_formula(M: int, K: int, N: int, b1: int, b2: int) -> Traffic:
    """Closed form of `cache_tiled`: A M*K, B cdiv(M, b1)*K*N, C M*N. b2 does not appear."""
    M, K, N = _dims(M, K, N)
    b1, b2 = check_tile("b1", b1), check_tile("b2", b2)
    return Traffic(M * K, cdiv(M, b1) * K * N, M * N)


def register_tiled_formula(M: int, K: int, N: int, v1: int, v2: int, v3: int = 1) -> Traffic:
    """Closed form of `register_tiled`: A M*K*cdiv(N, v2), B cdiv(M, v1)*K*N, C M*N. v3 does not appear."""
    M, K, N = _dims(M, K, N)
    v1, v2, _ = check_tile("v1", v1), check_tile("v2", v2), check_tile("v3", v3)
    return Traffic(M * K * cdiv(N, v2), cdiv(M, v1) * K * N, M * N)


def register_tiles_per_dim(n: int, b: int, v: int) -> int:
    """J(n, b, v): v-wide register tiles along a dimension of n split into b-wide cache blocks."""
    return (n // b) * cdiv(b, v) + cdiv(n % b, v)


def tiled_formula(M: int, K: int, N: int, b1: int, b2: int, v1: int, v2: int) -> TwoLevelTraffic:
    """Closed form of `tiled`: DRAM level as cache_tiled;
    L1 level A M*K*J(N, b2, v2), B J(M, b1, v1)*K*N (J = register_tiles_per_dim)."""
    M, K, N = _dims(M, K, N)
    v1, v2 = check_tile("v1", v1), check_tile("v2", v2)
    dram = cache_tiled_formula(M, K, N, b1, b2)
    J = register_tiles_per_dim
    l1 = Traffic(M * K * J(N, b2, v2), J(M, b1, v1) * K * N, M * N)
    return TwoLevelTraffic(dram, l1)


# ----------------------------------------------------------------------------- traces for animations
def trace(kind: str, M: int, K: int, N: int, **tiles) -> list[Step]:
    """Steps of the "cache" (tiles b1, b2) or "register" (tiles v1, v2, v3) loop on an M x K by K x N matmul.

    Runs the counted loop itself on zero matrices, so the animation's counters are the real counts.
    The tiles are keyword arguments: ``trace("cache", M, K, N, b1=.., b2=..)`` or
    ``trace("register", M, K, N, v1=.., v2=.., v3=..)`` (v3 optional, default 1).
    """
    required, optional = _TRACE_TILES.get(kind, (None, None)) if isinstance(kind, str) else (None, None)
    if required is None:
        raise ValueError(f"unknown loop {kind!r}; expected 'cache' or 'register'")
    missing = [t for t in required if t not in tiles]
    if missing:
        raise TypeError(f"trace({kind!r}, M, K, N, ...) needs the tile argument(s) {', '.join(missing)} "
                        f"(e.g. trace({kind!r}, M, K, N, {', '.join(f'{t}=2' for t in required)}))")
    unknown = [t for t in tiles if t not in required + optional]
    if unknown:
        raise TypeError(f"trace({kind!r}, ...) got unexpected tile argument(s) {', '.join(unknown)}; "
                        f"it takes {', '.join(required + optional)}")
    M, K, N = _dims(M, K, N)
    A, B = np.zeros((M, K)), np.zeros((K, N))
    steps: list[Step] = []
    if kind == "cache":
        cache_tiled(A, B, tiles["b1"], tiles["b2"], trace=steps)
    else:
        register_tiled(A, B, tiles["v1"], tiles["v2"], tiles.get("v3", 1), trace=steps)
    return steps


_TRACE_TILES = {"cache": (("b1", "b2"), ()), "register": (("v1", "v2"), ("v3",))}
