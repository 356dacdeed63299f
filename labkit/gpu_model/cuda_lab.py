"""Notebook 03's CUDA section: tables and widgets over `cuda_sim`, `cuda_kernels` and `occupancy`.

Each function returns finished data (a `labkit.table.Table`) or a widget over pure drawing
functions (`labkit.viz.cuda`); tests/test_gpu_model_cuda.py checks every number against the
kernels' outputs and the closed forms.
"""
from __future__ import annotations

import numpy as np

from labkit.checks import check_int
from labkit.gpu_model import cuda_kernels as K
from labkit.gpu_model import occupancy as O
from labkit.gpu_model.cuda_sim import KernelError, cuda, launch
from labkit.table import Table

__all__ = ["who_runs_what", "kernels_table", "matmul_loads", "occupancy_table", "block_player", "waves_player",
           "bug_table", "matmul_one_barrier", "sum_barrier_in_branch", "add_unguarded", "sum_stride_off_by_one"]


def _who(block_of, thread_of, n):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        block_of[i] = cuda.blockIdx.x
        thread_of[i] = cuda.threadIdx.x


def who_runs_what(n: int, threads: int) -> Table:
    """Element i of an n-vector: the (blockIdx.x, threadIdx.x) that handled it, from a launch of
    cdiv(n, threads) blocks writing their own coordinates."""
    n = check_int("who_runs_what", "n", n, minimum=1, maximum=4096)
    threads = check_int("who_runs_what", "threads", threads, minimum=1, maximum=1024)
    block_of, thread_of = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    run = launch(_who, K.cdiv(n, threads), threads, (block_of, thread_of, n))
    rows = [[i, int(block_of[i]), int(thread_of[i]), int(block_of[i]) * threads + int(thread_of[i])] for i in range(n)]
    return Table(["element i", "blockIdx.x", "threadIdx.x", "blockIdx.x*blockDim.x+threadIdx.x"], rows,
                 title=f"n = {n}, blockDim.x = {threads}: {K.cdiv(n, threads)} blocks, {run.threads} threads, "
                       f"{run.threads - n} idle")


def matmul_loads(M: int, K_: int, N: int, tile: int = K.TILE) -> tuple[int, int]:
    """Closed form of `matmul_tiled`'s global loads: (of A, of B) = (M·K·cdiv(N, T), K·N·cdiv(M, T)):
    every in-range element of A is loaded once per column of blocks, of B once per row of blocks."""
    return M * K_ * K.cdiv(N, tile), K_ * N * K.cdiv(M, tile)


def kernels_table(n: int = 100, mm=(24, 20, 16), sum_n: int = 1000, seed: int = 0) -> Table:
    """The three kernels (and the two-launch sum) on seeded integer-valued inputs: launch shape,
    threads, output equal to numpy's, and counted accesses next to their closed forms."""
    a, b, A, B, x = K.sample_inputs({"n": n, "mm": tuple(mm), "sum_n": sum_n, "seed": seed})
    M, Kd, N = mm
    rows = []
    out, r = K.launch_vector_add(a, b)
    rows.append(["vector_add", f"{r.grid.x}x{r.block.x}", bool(np.array_equal(out, a + b)),
                 r.global_loads, 2 * n, r.shared_loads, 0, r.phases - 1, r.atomics])
    C, r = K.launch_matmul(A, B)
    la, lb = matmul_loads(M, Kd, N)
    rows.append(["matmul_tiled", f"({r.grid.x},{r.grid.y})x({K.TILE},{K.TILE})",
                 bool(np.array_equal(C, A @ B)), r.global_loads, la + lb, r.shared_loads,
                 2 * K.TILE * r.threads * K.cdiv(Kd, K.TILE), r.phases - 1, r.atomics])
    s, r = K.launch_sum(x)
    steps = int(np.log2(64))
    rows.append(["block_sum", f"{r.grid.x}x{r.block.x}", s == float(x.sum()),
                 r.global_loads, sum_n, r.shared_loads, r.grid.x * (2 * (64 - 1) + 1), r.phases - 1, r.atomics])
    s2, runs = K.launch_sum_two_pass(x)
    rows.append(["block_partials", "+".join(f"{q.grid.x}x{q.block.x}" for q in runs), s2 == float(x.sum()), sum(q.global_loads for q in runs),
                 sum_n + runs[0].grid.x, sum(q.shared_loads for q in runs),
                 sum(q.grid.x * (2 * (64 - 1) + 1) for q in runs), runs[0].phases - 1, sum(q.atomics for q in runs)])
    assert steps == 6
    return Table(["kernel", "launch", "== numpy", "global", "formula", "shared", "formula ",
                  "barriers", "atomics"], rows,
                 title=f"vector n={n}; matmul M,K,N={M},{Kd},{N}, TILE={K.TILE}; sum of {sum_n}, 64-thread "
                       f"blocks; element loads")


def occupancy_table(cases=((256, 32, 0), (256, 64, 0), (256, 128, 0), (128, 32, 48 * 1024), (1024, 32, 0),
                           (32, 32, 0), (256, 255, 0)), sm: O.SM = O.H100) -> Table:
    """`occupancy` for (threads, registers per thread, shared bytes per block) ``cases`` on ``sm``."""
    rows = []
    for threads, regs, smem in cases:
        o = O.occupancy(threads, regs, smem, sm)
        lim = o.limits
        rows.append([threads, regs, smem // 1024, lim["threads"], lim["blocks"], lim["registers"],
                     lim["shared memory"], o.blocks, o.limiter, o.occupancy])
    return Table(["threads", "regs", "smem KiB", "by thr", "by blk", "by reg", "by smem", "blocks",
                  "limiter", "occupancy"], rows, {"occupancy": ".0%"},
                 f"{sm.name} (cc {sm.cc}): {sm.max_warps} warps, {sm.max_blocks} blocks, {sm.regs_per_sm} registers, "
                 f"{sm.smem_per_sm // 1024} KiB shared/SM; blocks: resident per SM")


def block_player(n: int = 16, seed: int = 0):
    """A Play + slider widget over `block_sum`'s one block of n threads, step by step (`block_step_html`)."""
    from labkit.viz.cuda import block_step_html
    from labkit.viz.player import player

    n = check_int("block_player", "n", n, minimum=2, maximum=64)
    x = np.random.default_rng(seed).integers(0, 10, n).astype(np.float32)
    _, run = K.launch_sum(x, threads=n, trace_block=0)
    frames = len(run.trace) + 1

    def render(i):
        what = "start" if i == 0 else f"step {i}: thread {run.trace[i - 1].thread} ran to " + \
            ("its next barrier" if run.trace[i - 1].status == "barrier" else "its end")
        return block_step_html(run.trace, n, i, f"block_sum, one block of {n} threads — {what}")
    return player(render, frames, interval_ms=400)


def waves_player(blocks: int = 40, sms: int = 8, blocks_per_sm: int = 2):
    """A Play + slider widget over the waves of ``blocks`` blocks on ``sms`` SMs (`waves_html`)."""
    from labkit.viz.cuda import waves_html
    from labkit.viz.player import player

    sched = O.schedule(blocks, sms, blocks_per_sm)
    return player(lambda w: waves_html(sched, w, f"{blocks} blocks on {sms} SMs x {blocks_per_sm} slots: "
                                                 f"{sched.waves} waves, last {sched.last_wave_fill:.0%} full"),
                  sched.waves, interval_ms=900, description="wave")


# ---------------------------------------------------------------------------- three bugs
def matmul_one_barrier(A, B, C, M, N, K):
    sA = cuda.shared.array((8, 8), np.float32)
    sB = cuda.shared.array((8, 8), np.float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * 8 + ty
    col = cuda.blockIdx.x * 8 + tx
    acc = 0.0
    for t in range((K + 8 - 1) // 8):
        k = t * 8 + tx
        sA[ty, tx] = A[row, k] if row < M and k < K else 0.0
        k = t * 8 + ty
        sB[ty, tx] = B[k, col] if k < K and col < N else 0.0
        cuda.syncthreads()
        for kk in range(8):
            acc += sA[ty, kk] * sB[kk, tx]
        # (the second syncthreads() is missing)
    if row < M and col < N:
        C[row, col] = acc


def sum_barrier_in_branch(x, out, n):
    s = cuda.shared.array(128, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    s[t] = x[i] if i < n else 0.0
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
            cuda.syncthreads()           # only the threads with t < stride get here
        stride //= 2
    if t == 0:
        cuda.atomic.add(out, 0, s[0])


def sum_stride_off_by_one(x, out, n):
    s = cuda.shared.array(128, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    s[t] = x[i] if i < n else 0.0
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t <= stride:                  # one thread too many
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        cuda.atomic.add(out, 0, s[0])


def add_unguarded(a, b, out, n):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    out[i] = a[i] + b[i]                 # no `if i < n`


def bug_table(seed: int = 0) -> Table:
    """Each buggy kernel run by the simulator: the error it raises (its first words, type first)."""
    a, b, A, B, x = K.sample_inputs({"n": 100, "mm": (16, 16, 16), "sum_n": 256, "seed": seed})
    cases = [("matmul_one_barrier", lambda: K.launch_matmul(A, B, kernel=matmul_one_barrier)),
             ("sum_barrier_in_branch", lambda: K.launch_sum(x, kernel=sum_barrier_in_branch)),
             ("sum_stride_off_by_one", lambda: K.launch_sum(x, kernel=sum_stride_off_by_one)),
             ("add_unguarded", lambda: K.launch_vector_add(a, b, kernel=add_unguarded))]
    rows = []
    for name, call in cases:
        try:
            call()
            rows.append([name, "none", "(ran without an error)"])
        except KernelError as e:
            rows.append([name, type(e).__name__, str(e)])
    return Table(["kernel", "error", "message"], rows, title="the simulator's verdict on four buggy kernels")
