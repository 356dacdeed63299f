"""Thread-level simulator of four GPU matmul kernels, v1, v1.5, v2, v3 (`PSEUDOCODE` shows each).

Each kernel is executed thread by thread in pure Python/numpy on small square
N x N matrices (C = A @ B); every load a thread issues is counted, per thread,
by the memory space it comes from. Nothing here is timed: it is a traffic model.

Closed forms (elements), checked against the simulation by tests/test_matmul_gpu.py:

| kernel | threads     | work per thread                 | global reads  | shared reads |
|--------|-------------|----------------------------------|---------------|--------------|
| v1     | N^2         | row of A + column of B: 2N       | 2N^3          | 0            |
| v1.5   | N^2/V^2     | V rows of A (NV) + a column of B |               |              |
|        |             | for each of V^2 outputs (NV^2)   | N^3/V + N^3   | 0            |
| v2     | N^2/V^2     | per k: V of A and V of B: 2NV    | 2N^3/V        | 0            |
| v3     | N^2/V^2 in (N/L)^2 blocks of (L/V)^2 | block: L x N of A + N x L of B, fetched cooperatively | 2N^3/L | 2N^3/V |

v3 also writes every fetched element once into shared memory (shared writes = 2N^3/L).
Every kernel writes C once: global writes = N^2.

Indexing: thread (ty, tx) of block (by, bx) owns rows by*L + ty*V .. +V and
columns bx*L + tx*V .. +V of C (v3); for v1.5/v2 thread (ty, tx) owns rows
ty*V.. and columns tx*V... Versions of v3 often store A transposed in shared
memory; here A is row-major and sA[ki, i] = A[block_row0 + i, ko + ki], sB[ki, j] = B[ko + ki, block_col0 + j].

A bug seen in copies of v3 reads ``b`` from ``sA`` (``b[:] = sA[ki, ...]``): it must
read ``sB``. ``simulate_v3(..., b_from_sA=True)`` runs that code: the traffic
counts are identical (a traffic model cannot see the bug) but C is wrong.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral

import numpy as np

from labkit.matmul.traffic import check_tile

__all__ = ["GpuTraffic", "run_thread_model", "simulate_v1", "simulate_v15", "simulate_v2", "simulate_v3",
           "gpu_formula", "KERNELS", "PSEUDOCODE"]

KERNELS = ("v1", "v1.5", "v2", "v3")

# CUDA-like pseudo-code of each kernel, as the simulators below run it (square N x N, row-major;
# every index divides evenly). Each load from global memory (A[..], B[..]) or shared memory
# (sA[..], sB[..]) is one the simulator counts; tests/test_matmul_gpu.py checks the loads named here.
PSEUDOCODE = {
    "v1": """\
// v1: one thread per C element; grid of N x N threads
x, y = thread's row and column
c = 0
for k in 0..N-1:
    c += A[x, k] * B[k, y]          // 2 global loads per k: 2N per thread
C[x, y] = c""",
    "v1.5": """\
// v1.5: one thread per V x V tile of C; (N/V)^2 threads
for i in 0..V-1:
    a[:] = A[ty*V + i, :]           // a row of A: N loads, V times
    for j in 0..V-1:
        b[:] = B[:, tx*V + j]       // a column of B: N loads, V*V times
        c[i, j] = dot(a, b)
C[ty*V : ty*V+V, tx*V : tx*V+V] = c""",
    "v2": """\
// v2: one thread per V x V tile of C, as a sum of outer products
c[V][V] = 0                          // in registers
for k in 0..N-1:
    a[:] = A[ty*V : ty*V+V, k]      // V global loads
    b[:] = B[k, tx*V : tx*V+V]      // V global loads
    c += outer(a, b)                 // V*V multiply-adds on 2V loaded values
C[ty*V : ty*V+V, tx*V : tx*V+V] = c""",
    "v3": """\
// v3: a block of (L/V)^2 threads computes an L x L tile of C;
//     slabs of A and B, S wide, go through shared memory
__shared__ sA[S][L], sB[S][L]
c[V][V] = 0
for ko in 0..N-1 step S:
    __syncthreads()
    // cooperative fetch: the block's threads share the 2*L*S global loads
    sA[ki][i] = A[by*L + i, ko + ki]    for this thread's share of (ki, i)
    sB[ki][j] = B[ko + ki, bx*L + j]    for this thread's share of (ki, j)
    __syncthreads()
    for ki in 0..S-1:
        a[:] = sA[ki, ty*V : ty*V+V]    // V shared loads
        b[:] = sB[ki, tx*V : tx*V+V]    // V shared loads (from sB, not sA!)
        c += outer(a, b)
C[by*L + ty*V .., bx*L + tx*V ..] = c""",
}


@dataclass
class GpuTraffic:
    """Counted traffic of one simulated kernel launch (elements, not bytes).

    global_reads / global_writes: elements loaded from / stored to global memory (HBM).
    shared_reads / shared_writes: elements loaded from / stored to shared memory (SRAM).
    threads, blocks: launch size. per_thread_global: global reads of each thread (1-D int array).
    """

    global_reads: int = 0
    global_writes: int = 0
    shared_reads: int = 0
    shared_writes: int = 0
    threads: int = 0
    blocks: int = 0
    per_thread_global: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def counts(self) -> dict:
        """The four traffic counts as a dict (what `gpu_formula` predicts)."""
        return {"global_reads": self.global_reads, "global_writes": self.global_writes,
                "shared_reads": self.shared_reads, "shared_writes": self.shared_writes}


def _square(A, B) -> tuple[np.ndarray, np.ndarray, int]:
    for name, X in (("A", A), ("B", B)):
        if not isinstance(X, np.ndarray) or X.ndim != 2:
            raise TypeError(f"{name} must be a 2-D numpy array, got {type(X).__name__}"
                            f"{'' if not isinstance(X, np.ndarray) else ' of shape ' + str(X.shape)}")
    N = A.shape[0]
    if A.shape != (N, N) or B.shape != (N, N):
        raise ValueError(f"the GPU model takes square N x N matrices, got A {A.shape} and B {B.shape}")
    return A, B, N


def _divides(name_v: str, v: int, name_n: str, n: int) -> None:
    if n % v:
        raise ValueError(f"{name_v}={v} must divide {name_n}={n} (these kernels have no bounds checks)")


class _Thread:
    """Counts one thread's loads; `g` reads global memory, `s` reads shared memory."""

    def __init__(self, traffic: GpuTraffic):
        self.t, self.global_reads = traffic, 0

    def g(self, x: np.ndarray) -> np.ndarray:
        self.global_reads += x.size
        self.t.global_reads += x.size
        return x.copy()

    def s(self, x: np.ndarray) -> np.ndarray:
        self.t.shared_reads += x.size
        return x.copy()

    def store(self, C: np.ndarray, rows: slice, cols: slice, value) -> None:
        C[rows, cols] = value
        self.t.global_writes += np.size(value)


def simulate_v1(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, GpuTraffic]:
    """v1: one thread per C[x, y]; it loads row x of A and column y of B from global memory."""
    A, B, N = _square(A, B)
    C, t, per = np.zeros((N, N)), GpuTraffic(threads=N * N, blocks=1), []
    for x in range(N):
        for y in range(N):
            th = _Thread(t)
            a, b = th.g(A[x, :]), th.g(B[:, y])
            th.store(C, slice(x, x + 1), slice(y, y + 1), a @ b)
            per.append(th.global_reads)
    t.per_thread_global = np.array(per)
    return C, t


def simulate_v15(A: np.ndarray, B: np.ndarray, V: int) -> tuple[np.ndarray, GpuTraffic]:
    """v1.5: each thread computes a V x V tile; for each of its V rows it loads that row of A
    once, and for each of the V^2 outputs a full column of B."""
    A, B, N = _square(A, B)
    V = check_tile("V", V)
    _divides("V", V, "N", N)
    C, t, per = np.zeros((N, N)), GpuTraffic(threads=(N // V) ** 2, blocks=1), []
    for ty in range(N // V):
        for tx in range(N // V):
            th = _Thread(t)
            c = np.zeros((V, V))
            for x in range(V):
                a = th.g(A[ty * V + x, :])
                for y in range(V):
                    b = th.g(B[:, tx * V + y])
                    c[x, y] = a @ b
            th.store(C, slice(ty * V, ty * V + V), slice(tx * V, tx * V + V), c)
            per.append(th.global_reads)
    t.per_thread_global = np.array(per)
    return C, t


def simulate_v2(A: np.ndarray, B: np.ndarray, V: int) -> tuple[np.ndarray, GpuTraffic]:
    """v2 (outer-product form): each thread keeps a V x V tile of C; for every k it loads
    V elements of column k of A and V elements of row k of B and adds their outer product."""
    A, B, N = _square(A, B)
    V = check_tile("V", V)
    _divides("V", V, "N", N)
    C, t, per = np.zeros((N, N)), GpuTraffic(threads=(N // V) ** 2, blocks=1), []
    for ty in range(N // V):
        for tx in range(N // V):
            th = _Thread(t)
            rows, cols = slice(ty * V, ty * V + V), slice(tx * V, tx * V + V)
            c = np.zeros((V, V))
            for k in range(N):
                a, b = th.g(A[rows, k]), th.g(B[k, cols])
                c += np.outer(a, b)
            th.store(C, rows, cols, c)
            per.append(th.global_reads)
    t.per_thread_global = np.array(per)
    return C, t


def simulate_v3(A: np.ndarray, B: np.ndarray, V: int, L: int, S: int,
                b_from_sA: bool = False) -> tuple[np.ndarray, GpuTraffic]:
    """v3 (shared-memory tiling): a block of (L/V)^2 threads computes an L x L tile of C.

    For each k step of width S the block cooperatively fetches sA (the L x S slab of A)
    and sB (the S x L slab of B) from global into shared memory, element e of each slab
    being loaded by thread e mod (threads per block); then each thread, for each of the
    S values of ki, reads V elements from sA and V from sB and adds their outer product.
    ``b_from_sA=True`` reproduces a common bug (b read from sA instead of sB).
    """
    A, B, N = _square(A, B)
    V, L, S = check_tile("V", V), check_tile("L", L), check_tile("S", S)
    _divides("V", V, "L", L)
    _divides("L", L, "N", N)
    _divides("S", S, "N", N)
    T = (L // V) ** 2                          # threads per block
    nb = N // L
    C = np.zeros((N, N))
    t = GpuTraffic(threads=nb * nb * T, blocks=nb * nb)
    per = np.zeros(nb * nb * T, dtype=np.int64)
    owner = np.arange(L * S) % T               # which thread fetches each slab element
    for by in range(nb):
        for bx in range(nb):
            base = (by * nb + bx) * T
            r0, c0 = by * L, bx * L
            threads = [_Thread(t) for _ in range(T)]
            acc = [np.zeros((V, V)) for _ in range(T)]
            for ko in range(0, N, S):
                # __syncthreads(); cooperative fetch: thread tid loads the slab elements e with
                # e mod T == tid (e = ki*L + i) of both slabs into shared memory
                sA = np.full((S, L), np.nan)   # sA[ki, i] = A[r0 + i, ko + ki]
                sB = np.full((S, L), np.nan)   # sB[ki, j] = B[ko + ki, c0 + j]
                for tid, th in enumerate(threads):
                    ki, i = np.divmod(np.nonzero(owner == tid)[0], L)
                    sA[ki, i] = th.g(A[r0 + i, ko + ki])
                    sB[ki, i] = th.g(B[ko + ki, c0 + i])
                    t.shared_writes += 2 * ki.size
                # __syncthreads(); compute from shared memory
                for tid, th in enumerate(threads):
                    ty, tx = divmod(tid, L // V)
                    for ki in range(S):
                        a = th.s(sA[ki, ty * V:ty * V + V])
                        b = th.s((sA if b_from_sA else sB)[ki, tx * V:tx * V + V])
                        acc[tid] += np.outer(a, b)
            for tid, th in enumerate(threads):
                ty, tx = divmod(tid, L // V)
                th.store(C, slice(r0 + ty * V, r0 + ty * V + V), slice(c0 + tx * V, c0 + tx * V + V), acc[tid])
                per[base + tid] = th.global_reads
    t.per_thread_global = per
    return C, t


def _check_kernel(kernel) -> None:
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; expected one of {KERNELS}")


def run_thread_model(kernel: str, A: np.ndarray, B: np.ndarray, V: int = 2, L: int = 4, S: int = 2):
    """Run kernel "v1" | "v1.5" | "v2" | "v3" (V, L, S used where the kernel has them)."""
    _check_kernel(kernel)
    check_tile("V", V), check_tile("L", L), check_tile("S", S)
    if kernel == "v1":
        return simulate_v1(A, B)
    if kernel == "v1.5":
        return simulate_v15(A, B, V)
    if kernel == "v2":
        return simulate_v2(A, B, V)
    if kernel == "v3":
        return simulate_v3(A, B, V, L, S)
    raise ValueError(f"unknown kernel {kernel!r}; expected one of {KERNELS}")


def gpu_formula(kernel: str, N: int, V: int = 2, L: int = 4, S: int = 2) -> dict:
    """Closed-form traffic (elements) of a kernel on N x N matrices; same keys as `GpuTraffic.counts`.

    v1: 2N^3 global; v1.5: N^3/V + N^3; v2: 2N^3/V; v3: 2N^3/L global, 2N^3/V shared reads,
    2N^3/L shared writes. All write N^2 elements of C. (S does not appear in any count.)
    N must be an int >= 0 and V, L, S positive ints that divide as `run_thread_model` requires
    (V | N for v1.5/v2; V | L, L | N, S | N for v3); anything else raises a one-line error.
    """
    _check_kernel(kernel)
    if isinstance(N, bool) or not isinstance(N, Integral):
        raise TypeError(f"matrix size N must be an int >= 0, got {N!r} ({type(N).__name__})")
    if N < 0:
        raise ValueError(f"matrix size N must be >= 0, got {N}")
    N = int(N)
    V, L, S = check_tile("V", V), check_tile("L", L), check_tile("S", S)
    if kernel in ("v1.5", "v2"):
        _divides("V", V, "N", N)
    elif kernel == "v3":
        _divides("V", V, "L", L)
        _divides("L", L, "N", N)
        _divides("S", S, "N", N)
    n3 = N ** 3
    out = {"global_reads": 0, "global_writes": N * N, "shared_reads": 0, "shared_writes": 0}
    if kernel == "v1":
        out["global_reads"] = 2 * n3
    elif kernel == "v1.5":
        out["global_reads"] = n3 // V + n3
    elif kernel == "v2":
        out["global_reads"] = 2 * n3 // V
    else:
        out["global_reads"] = 2 * n3 // L
        out["shared_reads"] = 2 * n3 // V
        out["shared_writes"] = 2 * n3 // L
    return out
