"""Three CUDA kernels in numba's dialect: vector add, a shared-memory tiled matmul, a block reduction.

Each is one Python function that `labkit.gpu_model.cuda_sim.launch` runs thread by thread on a
CPU and ``numba.cuda.jit`` compiles on a GPU (`labkit.gpu_model.cuda_gpu`); the CUDA C they stand
for is in `CUDA_C`. The ``launch_*`` helpers pick the launch configuration and run them here:

- `vector_add`: one thread per element, ``i = blockIdx.x·blockDim.x + threadIdx.x``, guarded by
  ``i < n`` (the grid is rounded up to whole blocks).
- `matmul_tiled`: a TILE × TILE block computes a TILE × TILE tile of C = A·B; per step of the k
  loop it copies one tile of A and one of B into shared memory (each thread one element of each),
  waits (``syncthreads``), multiplies from shared memory, and waits again before the next copy
  overwrites the tiles. Global loads: 2·M·N·K / TILE when TILE divides the sizes (each thread
  loads 2·K/TILE elements... times TILE² threads per block); shared loads 2·M·N·K.
- `block_sum`: each block sums its blockDim.x elements in shared memory by a tree (stride halves
  each step, a barrier after each), then thread 0 adds the block's sum to ``out[0]`` with an
  atomic; `block_partials` writes each block's sum instead, and a second launch of it over the
  partial sums finishes the job (no atomics: the same order every run).
"""
from __future__ import annotations

import numpy as np

from labkit.checks import check_int
from labkit.gpu_model.cuda_sim import cuda, launch

__all__ = ["TILE", "BLOCK", "vector_add", "matmul_tiled", "block_sum", "block_partials", "launch_vector_add",
           "launch_matmul", "launch_sum", "launch_sum_two_pass", "cdiv", "CUDA_C", "sample_inputs"]

TILE = 8          # matmul_tiled: threads per block = TILE x TILE, shared tiles TILE x TILE
BLOCK = 128       # block_sum / block_partials: the most threads per block (the shared array's size)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def vector_add(a, b, out, n):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:                        # the last block may stick out past n
        out[i] = a[i] + b[i]


def matmul_tiled(A, B, C, M, N, K):
    """CUDA kernel: C = A @ B through shared-memory tiles (launched with TILE x TILE blocks).

    A: (M, K), B: (K, N), C: (M, N) float32 arrays in global memory; M, N, K ints. The grid is
    (cdiv(N, TILE), cdiv(M, TILE)) blocks of (TILE, TILE) threads; thread (threadIdx.x, threadIdx.y)
    of block (blockIdx.x, blockIdx.y) computes C[blockIdx.y*TILE + threadIdx.y, blockIdx.x*TILE +
    threadIdx.x] when that element exists. For each TILE-wide step of k the block copies one TILE x
    TILE tile of A and one of B into cuda.shared.array((TILE, TILE), np.float32) arrays (each thread
    one element of each, 0.0 where the tile sticks out of the matrix), and every thread then adds
    its TILE products from shared memory. Each element of A and B inside the matrices is loaded
    from global memory once per block that needs it: M*K*cdiv(N, TILE) + K*N*cdiv(M, TILE) loads.
    No two threads may touch one shared element without a cuda.syncthreads() between them.
    """
    # BEGIN SOLUTION
    # HINT: the block stages one tile of A and one of B in shared memory (cuda.shared.array), every
    # HINT: thread loading its share; a barrier (cuda.syncthreads) must separate writing a tile from
    # HINT: reading it, and reading it from overwriting it.
    sA = cuda.shared.array((TILE, TILE), np.float32)
    sB = cuda.shared.array((TILE, TILE), np.float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty     # the element of C this thread computes
    col = cuda.blockIdx.x * TILE + tx
    acc = 0.0
    for t in range((K + TILE - 1) // TILE):
        k = t * TILE + tx                 # each thread copies one element of A's tile ...
        sA[ty, tx] = A[row, k] if row < M and k < K else 0.0
        k = t * TILE + ty                 # ... and one of B's (zeros past the edges)
        sB[ty, tx] = B[k, col] if k < K and col < N else 0.0
        cuda.syncthreads()                # the tiles are complete
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
        cuda.syncthreads()                # everyone is done with them before they are overwritten
    if row < M and col < N:
        C[row, col] = acc
    # END SOLUTION


def block_sum(x, out, n):
    """CUDA kernel: out[0] += the sum of x[0:n] (out starts at 0; blocks of 32, 64 or 128 threads).

    x: (n,) float32 and out: (1,) float32 arrays in global memory. Block b's thread t loads
    x[b*blockDim.x + t] (0.0 past n) into a cuda.shared.array(BLOCK, np.float32), then the block
    adds its values as a tree: with stride = blockDim.x // 2, then half of it, down to 1, thread
    t < stride adds s[t + stride] to s[t], with a cuda.syncthreads() after every step (every thread
    of the block must reach each one). Thread 0 then adds s[0] to out[0] with
    cuda.atomic.add(out, 0, s[0]): exactly one atomic per block.
    """
    # BEGIN SOLUTION
    # HINT: a tree reduction in shared memory: each step halves the active threads; every thread of
    # HINT: the block must reach every barrier (cuda.syncthreads); blocks combine with
    # HINT: cuda.atomic.add.
    s = cuda.shared.array(BLOCK, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    s[t] = x[i] if i < n else 0.0
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:                    # a tree: 64 -> 32 -> ... -> 1 partial sums
        if t < stride:
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        cuda.atomic.add(out, 0, s[0])    # blocks finish in any order: one indivisible add each
    # END SOLUTION


# BEGIN SOLUTION (lab03_matmul: block_sum without atomics)
def block_partials(x, partial, n):
    s = cuda.shared.array(BLOCK, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    s[t] = x[i] if i < n else 0.0
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = s[0]  # one slot per block: no atomics needed
# END SOLUTION


# ---------------------------------------------------------------------------- launch configurations
def launch_vector_add(a: np.ndarray, b: np.ndarray, threads: int = 32, kernel=vector_add):
    """(out, run): ``a + b`` by `vector_add` on cdiv(n, threads) blocks of ``threads``."""
    threads = check_int("launch_vector_add", "threads", threads, minimum=1, maximum=1024)
    out = np.zeros_like(a)
    run = launch(kernel, cdiv(a.size, threads), threads, (a, b, out, a.size))
    return out, run


def launch_matmul(A: np.ndarray, B: np.ndarray, kernel=matmul_tiled, tile: int = TILE, **kw):
    """(C, run): A (M×K) @ B (K×N) by ``kernel`` on a (cdiv(N, tile), cdiv(M, tile)) grid of tile×tile
    blocks (``kernel`` uses ``tile`` as its TILE); float32."""
    (M, K), N = A.shape, B.shape[1]
    if B.shape[0] != K:
        raise ValueError(f"launch_matmul: inner dimensions differ: A {A.shape}, B {B.shape}")
    C = np.zeros((M, N), np.float32)
    run = launch(kernel, (cdiv(N, tile), cdiv(M, tile)), (tile, tile),
                 (A.astype(np.float32), B.astype(np.float32), C, M, N, K), **kw)
    return C, run


def launch_sum(x: np.ndarray, threads: int = 64, kernel=block_sum, **kw):
    """(sum, run): x's sum by ``kernel`` (tree in each block, then an atomic) on cdiv(n, threads) blocks."""
    threads = check_int("launch_sum", "threads", threads, minimum=1, maximum=BLOCK)
    out = np.zeros(1, np.float32)
    run = launch(kernel, cdiv(x.size, threads), threads, (x.astype(np.float32), out, x.size), **kw)
    return float(out[0]), run


def launch_sum_two_pass(x: np.ndarray, threads: int = 64):
    """(sum, [run1, run2, ...]): `block_partials` over x, then over the partial sums, until one is left."""
    threads = check_int("launch_sum_two_pass", "threads", threads, minimum=1, maximum=BLOCK)
    vals, runs = x.astype(np.float32), []
    while True:
        blocks = cdiv(vals.size, threads)
        partial = np.zeros(blocks, np.float32)
        runs.append(launch(block_partials, blocks, threads, (vals, partial, vals.size)))
        vals = partial
        if blocks == 1:
            return float(vals[0]), runs


CUDA_C = {
    "vector_add": """\
__global__ void vector_add(const float *a, const float *b, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
// host: vector_add<<<(n + 255) / 256, 256>>>(a, b, out, n);""",
    "matmul_tiled": """\
#define TILE 8
__global__ void matmul_tiled(const float *A, const float *B, float *C, int M, int N, int K) {
    __shared__ float sA[TILE][TILE], sB[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + tx, kb = t * TILE + ty;
        sA[ty][tx] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
        sB[ty][tx] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < TILE; ++kk) acc += sA[ty][kk] * sB[kk][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
// host: dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
//       matmul_tiled<<<grid, block>>>(A, B, C, M, N, K);""",
    "block_sum": """\
__global__ void block_sum(const float *x, float *out, int n) {
    __shared__ float s[128];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, s[0]);
}""",
}


def sample_inputs(case: dict):
    """(a, b, A, B, x): seeded integer-valued float32 inputs for ``case`` = {"n", "mm": (M, K, N),
    "sum_n", "seed"} (integers: every sum is exact in any order, so outputs compare with ==)."""
    rng = np.random.default_rng(check_int("sample_inputs", "seed", case["seed"], minimum=0))
    n, (M, Kd, N), sn = case["n"], case["mm"], case["sum_n"]
    ints = lambda *shape: rng.integers(-4, 5, shape).astype(np.float32)  # noqa: E731
    return ints(n), ints(n), ints(M, Kd), ints(Kd, N), ints(sn)
