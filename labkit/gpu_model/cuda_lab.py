"""Notebook 03's CUDA section: tables and widgets over `cuda_sim`, `cuda_kernels` and `occupancy`.

Each function returns finished data (a `labkit.table.Table`) or a widget over pure drawing
functions (`labkit.viz.cuda`); tests/test_gpu_model_cuda.py checks every number against the
kernels' outputs and the closed forms.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from labkit.checks import check_int
from labkit.gpu_model import cuda_kernels as K
from labkit.gpu_model import occupancy as O
from labkit.gpu_model.cuda_sim import KernelError, cuda, launch
from labkit.table import Table

__all__ = ["picture", "who_runs_what", "kernels_table", "matmul_loads", "block_player", "waves_player",
           "bug_table", "reverse_block", "reverse_block_no_barrier", "launch_reverse", "matmul_one_barrier", "sum_barrier_in_branch", "add_unguarded", "sum_stride_off_by_one"]


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


def block_player(n: int = 16, seed: int = 0, kernel=K.block_sum):
    """A Play + slider widget over ``kernel`` (`block_sum`'s signature) on one block of n threads, step
    by step (`block_step_html`)."""
    from labkit.viz.cuda import block_step_html
    from labkit.viz.player import player

    n = check_int("block_player", "n", n, minimum=2, maximum=64)
    x = np.random.default_rng(seed).integers(0, 10, n).astype(np.float32)
    _, run = K.launch_sum(x, threads=n, kernel=kernel, trace_block=0)
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

    sched = O.schedule(blocks, blocks_per_sm, sms)
    return player(lambda w: waves_html(sched, w, f"{blocks} blocks on {sms} SMs x {blocks_per_sm} slots: "
                                                 f"{sched.waves} waves, last {sched.last_wave_fill:.0%} full"),
                  sched.waves, interval_ms=900, description="wave")


# ---------------------------------------------------------------------------- shared memory and a barrier
def reverse_block(x, out):
    s = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    s[t] = x[i]                               # each thread writes one element ...
    cuda.syncthreads()                        # ... and waits until every thread of the block has
    out[i] = s[cuda.blockDim.x - 1 - t]       # so that it may read another thread's element


def reverse_block_no_barrier(x, out):
    s = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    s[t] = x[i]
    out[i] = s[cuda.blockDim.x - 1 - t]       # thread 0 reads s[last] before its owner wrote it


def launch_reverse(x: np.ndarray, threads: int, kernel=reverse_block):
    """(out, run): each block of ``threads`` elements of x reversed by ``kernel`` (len(x) a multiple)."""
    threads = check_int("launch_reverse", "threads", threads, minimum=1, maximum=64)
    if x.size % threads:
        raise ValueError(f"launch_reverse: len(x) = {x.size} must be a multiple of threads = {threads}")
    out = np.zeros_like(x)
    return out, launch(kernel, x.size // threads, threads, (x, out))


# ---------------------------------------------------------------------------- bugs
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
    cases = [("reverse_block_no_barrier", lambda: launch_reverse(a[:64], 32, reverse_block_no_barrier)),
             ("matmul_one_barrier", lambda: K.launch_matmul(A, B, kernel=matmul_one_barrier)),
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
    return Table(["kernel", "error", "message"], rows, title="the simulator's verdict on five buggy kernels")


# ---------------------------------------------------------------------------- check your work
def picture(exercise: str):
    """``picture(fn)`` for `labkit.grading.check.check_your_work`: the learner's kernel or function run
    through this section's own table or widget (a stub raises NotImplementedError, which the cell
    reports in one friendly line)."""
    from IPython.display import display

    def tiled(fn):
        A, B = (np.random.default_rng(1).integers(-4, 5, s).astype(np.float32) for s in ((13, 10), (10, 19)))
        try:
            C, run = K.launch_matmul(A, B, kernel=fn)
        except KernelError as e:
            print(f"your tiled_matmul: {type(e).__name__}: {e}"[:300])
            return
        la, lb = matmul_loads(13, 10, 19)
        print(Table(["case", "C == A @ B", "global loads", "formula", "shared loads", "barriers"],
                    [["13x10 @ 10x19", bool(np.array_equal(C, A @ B)), run.global_loads, la + lb, run.shared_loads,
                      run.phases - 1]], title="your tiled_matmul in the simulator"))

    def block(fn):
        try:
            w = block_player(16, kernel=fn)
        except KernelError as e:
            print(f"your block_sum: {type(e).__name__}: {e}"[:300])
            return
        display(w)

    def blocks(fn):
        rows = []
        sm = {k: getattr(O.H100, k) for k in ("max_warps", "max_blocks", "registers", "reg_alloc_unit", "reg_partitions",
                                              "smem_bytes", "smem_alloc_unit", "smem_reserved_per_block")}
        for threads, regs, smem in ((256, 32, 0), (256, 64, 0), (128, 32, 48 * 1024), (32, 16, 0), (96, 40, 0)):
            o = O.occupancy(threads, regs, smem, O.H100)
            got = tuple(fn(threads, regs, smem, sm))
            rows.append([threads, regs, smem, got[0], got[1], o.blocks, o.limiter, got == (o.blocks, o.limiter)])
        print(Table(["threads", "regs", "smem B", "yours", "your limiter", "lab's", "lab's limiter", "same"], rows,
                    title="blocks per SM on an H100 (cc 9.0)"))

    return {"tiled_matmul": tiled, "block_sum": block, "blocks_per_sm": blocks}[exercise]


# ---------------------------------------------------------------------------- Lab 04: what Triton does for you
def _calls(fn, names: set) -> Counter:
    """How often each dotted call in ``names`` (e.g. "cuda.syncthreads") appears in ``fn``'s source."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn))))
    seen = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in names:
                seen[name] += 1
    return seen


def cuda_vs_triton(M: int = 37, K_: int = 29, N: int = 45, seed: int = 0) -> Table:
    """The same tiled matmul as Lab 03's CUDA kernel (`cuda_kernels.matmul_tiled`, 8 x 8 tiles, run by the
    simulator) and Lab 04's Triton kernel (`labkit.kernels.matmul.matmul_kernel`, 16 x 16 x 16 tiles, run
    by the interpreter under the access recorder): what each launches, what its source has to say
    (barriers, shared arrays, bounds checks, loads), the global loads counted for A and B next to the
    common formula M·K·cdiv(N, T) + K·N·cdiv(M, T), and whether C equals A @ B."""
    import torch

    from labkit.kernels import record
    from labkit.kernels.matmul import matmul, matmul_kernel

    rng = np.random.default_rng(seed)
    A = rng.integers(-4, 5, (M, K_)).astype(np.float32)
    B = rng.integers(-4, 5, (K_, N)).astype(np.float32)
    C, run = K.launch_matmul(A, B)
    cu = _calls(K.matmul_tiled, {"cuda.syncthreads", "cuda.shared.array"})
    bt = 16
    with record() as rec:
        Ct = matmul(torch.from_numpy(A), torch.from_numpy(B),
                    config={"BLOCK_M": bt, "BLOCK_N": bt, "BLOCK_K": bt, "GROUP_M": 2}).numpy()
    tr = _calls(matmul_kernel, {"tl.load", "tl.store", "tl.dot", "tl.program_id", "tl.arange"})
    t_loads = sum(a.offsets.size for a in rec.accesses if a.kind == "load" and a.tensor in ("a_ptr", "b_ptr"))
    cuda_f, triton_f = sum(matmul_loads(M, K_, N, K.TILE)), sum(matmul_loads(M, K_, N, bt))
    programs = len({a.pid for a in rec.accesses})
    rows = [["unit of work", "thread: 1 element of C", f"program: {bt}x{bt} tile of C"],
            ["launched", f"{run.threads} threads, {run.grid.x * run.grid.y} blocks", f"{programs} programs"],
            ["barriers in the source", cu["cuda.syncthreads"], 0],
            ["shared arrays in the source", cu["cuda.shared.array"], 0],
            ["bounds", "if ... < M per element", "mask= per tile load/store"],
            ["loads in the source", "1 element of A, 1 of B", f"{tr['tl.load']} tl.load of whole tiles"],
            ["global loads of A and B, counted", run.global_loads, t_loads],
            ["M*K*cdiv(N,T) + K*N*cdiv(M,T)", cuda_f, triton_f],
            ["C == A @ B", bool(np.array_equal(C, A @ B)), bool(np.array_equal(Ct, A @ B))]]
    return Table(["", f"CUDA (T = {K.TILE})", f"Triton (T = {bt})"], rows,
                 title=f"C = A @ B, M, K, N = {M}, {K_}, {N}, integer-valued float32")
