"""Lab 03 exercises: tiled matrix multiplication with load counting.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

Conventions (the same as labkit.matmul): A is M x K, B is K x N, C = A @ B is M x N.
Tile sizes need not divide the matrix sizes: the last tile along a dimension is
smaller, and you count only the elements really loaded. Traffic is counted in
elements with `labkit.matmul.Traffic(a_reads, b_reads, c_writes)`.
Section 11's CUDA exercises (the kernels tiled_matmul and block_sum, and blocks_per_sm) are at the end:
kernels in numba's CUDA dialect, run thread by thread by labkit.gpu_model.cuda_sim, which checks every
access (a race, a barrier not all threads reach, or an index out of range is an error). TILE = 8 is
tiled_matmul's tile (its blocks are TILE x TILE threads); block_sum is launched with 32, 64 or 128
threads per block, at most BLOCK = 128.
Grade with ``python -m labkit.grade --lab 03`` (or ``make grade LAB=03``).
"""
import numpy as np  # noqa: F401

from labkit.gpu_model.cuda_kernels import BLOCK, TILE  # noqa: F401
from labkit.gpu_model.cuda_sim import cuda  # noqa: F401
from labkit.matmul import Traffic, TwoLevelTraffic  # noqa: F401


def cache_tiled(A, B, b1, b2):
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
    raise NotImplementedError("hint: keep each row block of A for the whole sweep over B's column blocks; numpy slices clip the last tile for you, and .size counts what a tile really holds.")


def register_tiled(A, B, v1, v2, v3):
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
    raise NotImplementedError("hint: the C tile is an accumulator that stays put while the k loop streams tiles of A and B past it; it is written once, after the last k block.")


def tiled(A, B, b1, b2, v1, v2):
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
    raise NotImplementedError("hint: nest register tiles inside each cache block: two Traffic counters, one per level; a register tile never crosses its block's edge.")


def tiled_matmul(A, B, C, M, N, K):
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
    raise NotImplementedError("hint: the block stages one tile of A and one of B in shared memory (cuda.shared.array), every thread loading its share; a barrier (cuda.syncthreads) must separate writing a tile from reading it, and reading it from overwriting it.")


def block_sum(x, out, n):
    """CUDA kernel: out[0] += the sum of x[0:n] (out starts at 0; blocks of 32, 64 or 128 threads).

    x: (n,) float32 and out: (1,) float32 arrays in global memory. Block b's thread t loads
    x[b*blockDim.x + t] (0.0 past n) into a cuda.shared.array(BLOCK, np.float32), then the block
    adds its values as a tree: with stride = blockDim.x // 2, then half of it, down to 1, thread
    t < stride adds s[t + stride] to s[t], with a cuda.syncthreads() after every step (every thread
    of the block must reach each one). Thread 0 then adds s[0] to out[0] with
    cuda.atomic.add(out, 0, s[0]): exactly one atomic per block.
    """
    raise NotImplementedError("hint: a tree reduction in shared memory: each step halves the active threads; every thread of the block must reach every barrier (cuda.syncthreads); blocks combine with cuda.atomic.add.")


def blocks_per_sm(threads, regs_per_thread, smem_per_block, sm):
    """Resident blocks per SM, and the limit(s) that set it (the rules in this module's docstring).

    threads: threads per block (1..1024); regs_per_thread: registers per thread; smem_per_block:
    bytes of shared memory per block; sm: a dict of the SM's limits (ints): "max_warps",
    "max_blocks", "registers", "reg_alloc_unit", "reg_partitions", "smem_bytes",
    "smem_alloc_unit", "smem_reserved_per_block". With w = ceil(threads / 32) warps per block,
    each limit in blocks per SM:
        "warps":  max_warps // w
        "regs":   a warp takes all its registers (32 * regs_per_thread, rounded up to a multiple
                  of reg_alloc_unit) from one of the register file's reg_partitions equal parts;
                  the warps that fit, // w
        "smem":   smem_bytes // (smem_per_block rounded up to a multiple of smem_alloc_unit, plus
                  smem_reserved_per_block)
        "blocks": max_blocks
    Return (blocks, limiter): the smallest limit (0 if a block cannot fit), and the names of every
    limit equal to it, in the order above, joined by "+" (e.g. "warps+regs").
    """
    raise NotImplementedError("hint: compute the four limits separately, rounding each allocation up to its unit before dividing; registers are shared out per partition, so fit whole warps in one partition first.")
