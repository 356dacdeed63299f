"""labkit.gpu_model.cuda_sim / cuda_kernels / occupancy / cuda_lab and labkit.viz.cuda: the simulator
runs every thread in a fixed order and catches races, barrier divergence and bad indices; the kernels
equal numpy and count like their closed forms; numba's own CUDA simulator agrees; occupancy and waves
follow their rules."""
import math
import re

import numpy as np
import pytest

from labkit.gpu_model import cuda_kernels as K
from labkit.gpu_model import cuda_lab as L
from labkit.gpu_model import occupancy as O
from labkit.gpu_model.cuda_sim import (BarrierDivergence, KernelError, OutOfBounds, RaceError, cuda, launch,
                                       with_cuda)
from labkit.viz import cuda as V

rng = np.random.default_rng(0)


def ints(*shape):
    return rng.integers(-4, 5, shape).astype(np.float32)


# ---------------------------------------------------------------------------- the simulator
def _coords(block_of, thread_of, tx, ty, n):
    i = cuda.grid(1)
    if i < n:
        block_of[i] = cuda.blockIdx.x
        thread_of[i] = cuda.threadIdx.x
        tx[i] = cuda.blockDim.x
        ty[i] = cuda.gridDim.x * 1000 + cuda.gridsize(1)


def test_every_thread_runs_with_its_own_coordinates():
    n, threads = 37, 8
    arrs = [np.full(n, -1, np.int64) for _ in range(4)]
    run = launch(_coords, K.cdiv(n, threads), threads, (*arrs, n))
    i = np.arange(n)
    assert (arrs[0] == i // threads).all() and (arrs[1] == i % threads).all()
    assert (arrs[2] == threads).all() and (arrs[3] == 5 * 1000 + 40).all()
    assert run.threads == 40 and run.global_stores == 4 * n and run.global_loads == 0


def _order(log, counter):
    t = cuda.threadIdx.x + cuda.threadIdx.y * cuda.blockDim.x
    k = cuda.atomic.add(counter, 0, 1)
    log[k] = t
    cuda.syncthreads()
    k = cuda.atomic.add(counter, 0, 1)
    log[k] = 100 + t


def test_threads_run_in_linear_order_phase_by_phase():
    log, counter = np.zeros(12, np.int64), np.zeros(1, np.int64)
    run = launch(_order, 1, (3, 2), (log, counter), trace_block=0)
    assert log.tolist() == [0, 1, 2, 3, 4, 5, 100, 101, 102, 103, 104, 105]
    assert run.phases == 2 and run.atomics == 12
    assert [(s.thread, s.phase, s.status) for s in run.trace] == \
        [(t, 0, "barrier") for t in range(6)] + [(t, 1, "done") for t in range(6)]


def test_launch_checks_its_arguments():
    with pytest.raises(ValueError, match="at most 1024 threads"):
        launch(K.vector_add, 1, (32, 33), (np.zeros(1), np.zeros(1), np.zeros(1), 1))
    with pytest.raises(TypeError, match="takes 4 arguments, 2 were given"):
        launch(K.vector_add, 1, 1, (np.zeros(1), 1))
    with pytest.raises(TypeError, match="numpy array or a number"):
        launch(K.vector_add, 1, 1, ([1.0], np.zeros(1), np.zeros(1), 1))
    with pytest.raises(KernelError, match="only inside a kernel"):
        cuda.threadIdx


def _slice(a, out, n):
    out[0] = a[0:2]


def _own_write_then_read(a, n):
    t = cuda.threadIdx.x
    a[t] = t
    a[t] = a[t] + 1                      # a thread may read its own write


def _neighbour_read(a, n):
    t = cuda.threadIdx.x
    a[t] = t
    if t > 0:
        a[t] = a[t] + a[t - 1]           # reads thread t-1's write with no barrier


def _cross_block(a, n):
    i = cuda.grid(1)
    if i < n:
        a[i % 4] = i                     # blocks never synchronise


def _atomics(a, n):
    cuda.atomic.add(a, 0, 1)


def _atomic_and_plain(a, n):
    cuda.atomic.add(a, 0, 1)
    if cuda.threadIdx.x == 3:
        a[0] = 0


def test_races_are_errors_naming_both_threads():
    a = np.zeros(8, np.float32)
    launch(_own_write_then_read, 1, 8, (a, 8))
    assert a.tolist() == list(range(1, 9))
    with pytest.raises(RaceError, match=r"global array a\[0\]: thread \(0, 0, 0\) of block \(0, 0, 0\) wrote it "
                                        r"and thread \(1, 0, 0\) of block \(0, 0, 0\) reads it"):
        launch(_neighbour_read, 1, 8, (np.zeros(8, np.float32), 8))
    with pytest.raises(RaceError, match=r"block \(1, 0, 0\)"):
        launch(_cross_block, 2, 4, (np.zeros(8, np.float32), 8))
    a = np.zeros(1, np.int64)
    run = launch(_atomics, 3, 32, (a, 1))
    assert a[0] == 96 and run.atomics == 96
    with pytest.raises(RaceError):
        launch(_atomic_and_plain, 1, 8, (np.zeros(1, np.int64), 1))
    with pytest.raises(KernelError, match="no slices"):
        launch(_slice, 1, 1, (np.zeros(4), np.zeros(1), 1))


def test_the_buggy_kernels_fail_each_with_its_own_error():
    table = L.bug_table()
    got = {r[0]: (r[1], r[2]) for r in table.rows}
    assert got["matmul_one_barrier"][0] == "RaceError" and "sA[" in got["matmul_one_barrier"][1]
    assert got["sum_barrier_in_branch"][0] == "BarrierDivergence"
    assert "threads 0..31 wait" in got["sum_barrier_in_branch"][1]
    assert "threads 32..63 never reach" in got["sum_barrier_in_branch"][1]
    assert got["sum_stride_off_by_one"][0] == "RaceError" and "s[32]" in got["sum_stride_off_by_one"][1]
    assert got["add_unguarded"][0] == "OutOfBounds" and "a[100]" in got["add_unguarded"][1]
    assert isinstance(BarrierDivergence("x"), KernelError) and isinstance(OutOfBounds("x"), KernelError)


def _two_sites(a, n):
    t = cuda.threadIdx.x
    if t < 2:
        cuda.syncthreads()
    else:
        cuda.syncthreads()
    a[t] = 1


def test_barriers_at_different_lines_diverge():
    with pytest.raises(BarrierDivergence, match=r"threads 0\.\.1 wait at syncthreads\(\) .* threads 2\.\.3 at another"):
        launch(_two_sites, 1, 4, (np.zeros(4), 4))


def _raises(a, n):
    if cuda.threadIdx.x == 5:
        a[0] = 1 / 0


def test_an_exception_in_a_thread_names_the_thread():
    with pytest.raises(KernelError, match=r"thread \(5, 0, 0\) of block \(0, 0, 0\): ZeroDivisionError"):
        launch(_raises, (2,), (8,), (np.zeros(1), 1))


# ---------------------------------------------------------------------------- the kernels
@pytest.mark.parametrize("n,threads", [(1, 32), (100, 32), (129, 64), (256, 256)])
def test_vector_add(n, threads):
    a, b = ints(n), ints(n)
    out, run = K.launch_vector_add(a, b, threads)
    assert np.array_equal(out, a + b)
    assert (run.global_loads, run.global_stores, run.threads) == (2 * n, n, K.cdiv(n, threads) * threads)


@pytest.mark.parametrize("M,Kd,N", [(8, 8, 8), (16, 16, 16), (13, 7, 19), (1, 9, 1), (24, 20, 16)])
def test_tiled_matmul_equals_numpy_and_loads_each_tile_once(M, Kd, N):
    A, B = ints(M, Kd), ints(Kd, N)
    C, run = K.launch_matmul(A, B)
    assert np.array_equal(C, A @ B)
    la, lb = L.matmul_loads(M, Kd, N)
    assert run.by_array[("global", "A")]["loads"] == la and run.by_array[("global", "B")]["loads"] == lb
    steps = K.cdiv(Kd, K.TILE)
    assert run.shared_loads == 2 * K.TILE * run.threads * steps        # TILE products of two operands
    assert run.shared_stores == 2 * run.threads * steps
    assert run.phases == 2 * steps + 1 and run.shared_bytes == 2 * K.TILE ** 2 * 4
    if M % K.TILE == N % K.TILE == Kd % K.TILE == 0:                  # 2MNK / TILE when the tiles fit
        assert run.global_loads == 2 * M * N * Kd // K.TILE


@pytest.mark.parametrize("n,threads", [(1, 32), (64, 64), (1000, 64), (777, 128), (300, 16)])
def test_reductions(n, threads):
    x = ints(n)
    s, run = K.launch_sum(x, threads)
    assert s == float(x.sum()) and run.atomics == K.cdiv(n, threads)
    assert run.phases == int(math.log2(threads)) + 2                 # one barrier per tree level, plus the first
    s2, runs = K.launch_sum_two_pass(x, threads)
    assert s2 == float(x.sum()) and all(r.atomics == 0 for r in runs)
    assert len(runs) == max(1, math.ceil(math.log(n, threads))) if n > 1 else len(runs) == 1


def test_kernels_table_rows_equal_their_formulas():
    t = L.kernels_table()
    assert all(len(line) <= 100 for line in str(t).splitlines())
    for r in t.rows:
        assert r[2] is True and r[3] == r[4] and r[5] == r[6], r


def test_who_runs_what():
    t = L.who_runs_what(10, 4)
    assert [r[1:3] for r in t.rows] == [[i // 4, i % 4] for i in range(10)]
    assert "3 blocks, 12 threads, 2 idle" in t.title


@pytest.mark.slow
def test_numba_cuda_simulator_agrees_exactly():
    """numba's own simulator (NUMBA_ENABLE_CUDASIM=1) runs the same kernel source: same outputs."""
    pytest.importorskip("numba_cuda", reason="numba-cuda is a dependency: make setup installs it")
    got = __import__("labkit.gpu_model.cuda_gpu", fromlist=["x"]).numba_simulator_outputs()
    assert set(got) == {"vector_add", "matmul_tiled", "block_sum"}
    for name, (theirs, ours) in got.items():
        assert theirs.shape == ours.shape and np.array_equal(theirs, ours), name


def test_with_cuda_swaps_only_the_cuda_global():
    marker = object()
    f = with_cuda(K.vector_add, marker)
    assert f.__globals__["cuda"] is marker and K.vector_add.__globals__["cuda"] is cuda
    assert f.__code__ is K.vector_add.__code__


def test_gpu_run_says_why_not_without_a_gpu():
    from labkit.gpu_model.cuda_gpu import gpu_run
    from labkit.gpu_model.host_device import NeedsCuda

    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the GPU tier runs gpu_run")
    r = gpu_run()
    assert isinstance(r, NeedsCuda) and "\n" not in str(r) and "CUDA GPU" in str(r)


def test_gpu_run_says_why_in_one_line_when_cuda_is_claimed_but_cannot_run(monkeypatch):
    """A CUDA device that torch reports but numba or torch cannot use (no driver, no libNVVM, a CPU
    wheel of torch): the GPU cell still prints one line naming the failure instead of a traceback."""
    import torch

    from labkit.gpu_model.cuda_gpu import gpu_run
    from labkit.gpu_model.host_device import NeedsCuda
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the GPU tier runs gpu_run")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    r = gpu_run(n=1 << 10, mm=64, iters=1)
    assert isinstance(r, NeedsCuda) and "\n" not in str(r) and "could not compile or run" in str(r)


# ---------------------------------------------------------------------------- occupancy and waves
def brute_blocks(threads, regs, smem, sm):
    """The largest b for which b blocks fit every limit, by placing warps one at a time into the
    register file's partitions (each warp wholly in one) and counting bytes (no closed form)."""
    w = math.ceil(threads / 32)
    per_warp = math.ceil(32 * regs / sm.reg_alloc_unit) * sm.reg_alloc_unit
    free = [sm.registers // sm.reg_partitions] * sm.reg_partitions
    smem_block = math.ceil(smem / sm.smem_alloc_unit) * sm.smem_alloc_unit + sm.smem_reserved_per_block
    b = 0
    while b + 1 <= sm.max_blocks and (b + 1) * w <= sm.max_warps and (b + 1) * smem_block <= sm.smem_bytes:
        trial = list(free)
        for _ in range(w):                       # each warp into the partition with the most room
            i = max(range(len(trial)), key=trial.__getitem__)
            if trial[i] < per_warp:
                return b
            trial[i] -= per_warp
        free, b = trial, b + 1
    return b


@pytest.mark.parametrize("sm", [O.A100, O.H100], ids=lambda s: s.name)
def test_occupancy_equals_the_largest_count_that_fits(sm):
    r = np.random.default_rng(1)
    checked = 0
    for _ in range(300):
        threads, regs, smem = int(r.integers(1, 1025)), int(r.integers(1, 256)), int(r.integers(0, 60000))
        want = brute_blocks(threads, regs, smem, sm)
        if want == 0:
            with pytest.raises(ValueError, match="does not fit"):
                O.occupancy(threads, regs, smem, sm)
            continue
        o = O.occupancy(threads, regs, smem, sm)
        assert o.blocks == want == min(o.blocks_by.values())
        assert o.fraction == o.blocks * math.ceil(threads / 32) / sm.max_warps <= 1
        checked += 1
    assert checked > 100          # about half of random blocks fit at all (threads x registers <= 65,536)


@pytest.mark.parametrize("blocks,sms,per", [(40, 8, 2), (16, 8, 2), (17, 8, 2), (1, 132, 8)])
def test_schedule_deals_every_block_once_in_waves(blocks, sms, per):
    s = O.schedule(blocks, per, sms)
    assert s.waves == O.waves(blocks, per, sms).waves == math.ceil(blocks / (sms * per))
    dealt = sorted(b for w in s.slots for sm in w for b in sm)
    assert dealt == list(range(blocks))
    assert all(len(sm) <= per for w in s.slots for sm in w)
    assert s.last_wave_fill == (blocks - (s.waves - 1) * sms * per) / (sms * per)


# ---------------------------------------------------------------------------- drawing and widgets
def test_block_step_html_follows_the_trace():
    x = np.arange(8, dtype=np.float32)
    _, run = K.launch_sum(x, threads=8, trace_block=0)
    assert len(run.trace) == 8 * 5                  # 5 phases per thread: 4 barriers (load + 3 tree levels)
    first, last = V.block_step_html(run.trace, 8, 0), V.block_step_html(run.trace, 8, len(run.trace))
    assert first != last and "returned" in last and ">28<" in last           # s[0] = 0 + 1 + ... + 7
    assert re.findall(r'<rect[^>]*stroke-width="3"', V.block_step_html(run.trace, 8, 3))
    with pytest.raises(ValueError, match="step must be in"):
        V.block_step_html(run.trace, 8, len(run.trace) + 1)


def test_waves_html_marks_done_running_and_waiting():
    s = O.schedule(40, 2, 8)
    h0, h2 = V.waves_html(s, 0), V.waves_html(s, 2)
    assert h0.count(V.RUN) - 1 == 16 + 16 and h2.count(V.DONE) - 1 == 32    # the grid strip + the slots
    assert "wave 3 of 3" in h2
    with pytest.raises(ValueError):
        V.waves_html(s, 3)


def test_players_build():
    from labkit.viz.player import PRECOMPUTE_MAX

    w = L.block_player(16)
    assert w.children[0].children[1].max == 16 * 6 + 1 > PRECOMPUTE_MAX
    w = L.waves_player(40, 8, 2)
    assert w.children[0].children[1].max == 3


def test_cuda_vs_triton_same_traffic_formula_both_exact():
    t = L.cuda_vs_triton(21, 18, 35)
    col = {r[0]: r[1:] for r in t.rows}
    assert col["C == A @ B"] == [True, True]
    assert col["global loads of A and B, counted"] == col["M*K*cdiv(N,T) + K*N*cdiv(M,T)"] == \
        [sum(L.matmul_loads(21, 18, 35, 8)), sum(L.matmul_loads(21, 18, 35, 16))]
    assert col["barriers in the source"] == [2, 0] and col["shared arrays in the source"] == [2, 0]
    assert col["launched"][1] == f"{K.cdiv(21, 16) * K.cdiv(35, 16)} programs"
    assert all(len(line) <= 100 for line in str(t).splitlines())


def test_pictures_run_the_learners_function():
    import solutions.lab03_matmul as S

    for ex in ("tiled_matmul", "block_sum", "blocks_per_sm"):
        L.picture(ex)(getattr(S, ex))
    with pytest.raises(NotImplementedError):
        import exercises.lab03_matmul as E
        L.picture("tiled_matmul")(E.tiled_matmul)
