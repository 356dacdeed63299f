"""Graded tests for Lab 03 (tiled matmul with load counting).

Expected traffic is written out here from the loop definitions (cdiv = ceil division):
cache_tiled:    A M*K,               B cdiv(M, b1)*K*N,   C M*N
register_tiled: A M*K*cdiv(N, v2),   B cdiv(M, v1)*K*N,   C M*N
tiled:          returns (C, TwoLevelTraffic(dram, l1)); dram as cache_tiled;
                l1: A M*K*J(N, b2, v2), B J(M, b1, v1)*K*N, C M*N, where
                J(n, b, v) = sum over the b-wide blocks of n of cdiv(block width, v).
Each parametrised case is worth one point. Sizes are chosen to break plausible slips:
tiles that do not divide the matrix (a floor instead of a ceil, dropped edge tiles,
full-tile counting at the edge), rectangular shapes (M and N swapped), 1 x n and
n x 1 operands, K = 1, tiles larger than the matrix, register tiles that would
straddle a cache block.

Section 11's kernels (tiled_matmul, block_sum) run in the worker under labkit's CUDA simulator
(labkit.grading.harness.lab03_cuda_kernel), which executes every thread and turns a race, a
barrier that not every thread reaches and an out-of-range index into an error: such a kernel
scores 0 for that case even where a GPU would often print the right numbers. Outputs are
integer-valued float32, so sums are exact in any order and compared with ==. blocks_per_sm is
compared with the occupancy rules on random cases and on cases where each limit decides.
"""
import numpy as np
import pytest

from labkit.grading.generate import references
from labkit.grading.static import Policy

POLICY = Policy(
    labkit_allowed=frozenset({"labkit.matmul.Traffic", "labkit.matmul.TwoLevelTraffic", "labkit.matmul.cdiv",
                              "labkit.matmul.traffic.Traffic", "labkit.matmul.traffic.TwoLevelTraffic",
                              "labkit.matmul.traffic.cdiv", "labkit.gpu_model.cuda_sim.cuda",
                              "labkit.gpu_model.cuda_kernels.TILE", "labkit.gpu_model.cuda_kernels.BLOCK"}),
    references=references("lab03_matmul"))


def random_cases(seed, n=12):
    """n random (M, K, N, t1, t2, t3, t4) with sizes 1..12 and tiles 1..6, from the grading seed."""
    rng = np.random.default_rng(seed)
    return [tuple(int(x) for x in rng.integers(1, 13, 3)) + tuple(int(x) for x in rng.integers(1, 7, 4))
            for _ in range(n)]


def cdiv(x, b):
    return -(-x // b)


def J(n, b, v):
    return sum(cdiv(min(b, n - s), v) for s in range(0, n, b))


def operands(M, K, N, seed):
    rng = np.random.default_rng(seed)
    # integer-valued float64: every partial sum is exact, so C must equal A @ B exactly
    return (rng.integers(-4, 5, (M, K)).astype(np.float64), rng.integers(-4, 5, (K, N)).astype(np.float64))


def counts(t):
    for name in ("a_reads", "b_reads", "c_writes"):
        assert hasattr(t, name), f"traffic must have .{name} (use labkit.matmul.Traffic); got {t!r}"
    return (int(t.a_reads), int(t.b_reads), int(t.c_writes))


def levels(t):
    assert hasattr(t, "dram") and hasattr(t, "l1"), \
        f"traffic must have .dram and .l1 (use labkit.matmul.TwoLevelTraffic); got {t!r}"
    return t.dram, t.l1


def check_product(C, A, B):
    assert np.shape(C) == (A.shape[0], B.shape[1]), f"C has shape {np.shape(C)}, expected {(A.shape[0], B.shape[1])}"
    np.testing.assert_array_equal(C, A @ B, err_msg="C != A @ B")


def unpack2(result):
    assert isinstance(result, tuple) and len(result) == 2, "return (C, traffic)"
    return result


# ------------------------------------------------------------------ cache_tiled
@pytest.mark.graded(points=1, exercise="cache_tiled")
@pytest.mark.parametrize("n,b1,b2", [(8, 2, 4), (8, 4, 2), (12, 3, 6)])
def test_cache_tiled_square(impl, seed, n, b1, b2):
    A, B = operands(n, n, n, seed=seed + n + b1)
    C, t = unpack2(impl.cache_tiled(A, B, b1, b2))
    check_product(C, A, B)
    assert counts(t) == (n * n, n ** 3 // b1, n * n), "expected n^2 reads of A and n^3/b1 of B"
    random_cache_tiled(impl, seed, 2)  # never only public inputs


@pytest.mark.graded(points=1, exercise="cache_tiled")
@pytest.mark.parametrize("M,K,N,b1,b2", [(7, 5, 9, 3, 4), (10, 6, 7, 4, 3), (9, 4, 10, 2, 3), (3, 2, 2, 5, 5),
                                         (11, 3, 5, 4, 2)])
def test_cache_tiled_uneven(impl, seed, M, K, N, b1, b2):
    A, B = operands(M, K, N, seed=seed + M * N)
    C, t = unpack2(impl.cache_tiled(A, B, b1, b2))
    check_product(C, A, B)
    assert counts(t) == (M * K, cdiv(M, b1) * K * N, M * N)
    random_cache_tiled(impl, seed, 2)  # never only public inputs


@pytest.mark.graded(points=1, exercise="cache_tiled")
@pytest.mark.parametrize("M,K,N,b1,b2", [(1, 6, 5, 2, 3), (6, 5, 1, 4, 2), (5, 1, 7, 2, 3), (1, 1, 1, 3, 3),
                                         (7, 1, 1, 3, 2)])
def test_cache_tiled_vectors(impl, seed, M, K, N, b1, b2):
    A, B = operands(M, K, N, seed=seed + K + 7)
    C, t = unpack2(impl.cache_tiled(A, B, b1, b2))
    check_product(C, A, B)
    assert counts(t) == (M * K, cdiv(M, b1) * K * N, M * N)
    random_cache_tiled(impl, seed, 2)  # never only public inputs


def random_cache_tiled(impl, seed, n=12):
    for i, (M, K, N, b1, b2, _, _) in enumerate(random_cases(seed, n)):
        A, B = operands(M, K, N, seed=seed + i)
        C, t = unpack2(impl.cache_tiled(A, B, b1, b2))
        check_product(C, A, B)
        assert counts(t) == (M * K, cdiv(M, b1) * K * N, M * N), (M, K, N, b1, b2)


@pytest.mark.graded(points=2, exercise="cache_tiled")
def test_cache_tiled_random(impl, seed):
    random_cache_tiled(impl, seed)


@pytest.mark.graded(points=1, exercise="cache_tiled")
def test_cache_tiled_bad_input(impl, seed):
    with pytest.raises(ValueError):
        impl.cache_tiled(np.ones((2, 3)), np.ones((2, 3)), 1, 1)
    with pytest.raises(ValueError):
        impl.cache_tiled(np.ones((2, 2)), np.ones((2, 2)), 0, 1)
    random_cache_tiled(impl, seed, 2)  # never only public inputs


# ------------------------------------------------------------------ register_tiled
@pytest.mark.graded(points=1, exercise="register_tiled")
@pytest.mark.parametrize("n,v1,v2,v3", [(8, 2, 4, 2), (8, 4, 2, 8), (12, 6, 3, 4)])
def test_register_tiled_square(impl, seed, n, v1, v2, v3):
    A, B = operands(n, n, n, seed=seed + n + v2)
    C, t = unpack2(impl.register_tiled(A, B, v1, v2, v3))
    check_product(C, A, B)
    assert counts(t) == (n ** 3 // v2, n ** 3 // v1, n * n), "expected n^3/v2 reads of A and n^3/v1 of B"
    random_register_tiled(impl, seed, 2)  # never only public inputs


@pytest.mark.graded(points=1, exercise="register_tiled")
@pytest.mark.parametrize("M,K,N,v1,v2,v3", [(7, 5, 9, 3, 4, 2), (10, 7, 6, 4, 3, 3), (9, 4, 10, 2, 3, 5),
                                            (3, 2, 2, 5, 5, 5), (5, 11, 8, 2, 3, 4)])
def test_register_tiled_uneven(impl, seed, M, K, N, v1, v2, v3):
    A, B = operands(M, K, N, seed=seed + M + N + K)
    C, t = unpack2(impl.register_tiled(A, B, v1, v2, v3))
    check_product(C, A, B)
    assert counts(t) == (M * K * cdiv(N, v2), cdiv(M, v1) * K * N, M * N)
    random_register_tiled(impl, seed, 2)  # never only public inputs


@pytest.mark.graded(points=1, exercise="register_tiled")
@pytest.mark.parametrize("M,K,N,v1,v2,v3", [(1, 6, 5, 2, 3, 4), (6, 5, 1, 4, 2, 2), (5, 1, 7, 2, 3, 2),
                                            (1, 1, 1, 2, 2, 2), (1, 7, 1, 1, 1, 3)])
def test_register_tiled_vectors(impl, seed, M, K, N, v1, v2, v3):
    A, B = operands(M, K, N, seed=seed + 3 * K)
    C, t = unpack2(impl.register_tiled(A, B, v1, v2, v3))
    check_product(C, A, B)
    assert counts(t) == (M * K * cdiv(N, v2), cdiv(M, v1) * K * N, M * N)
    random_register_tiled(impl, seed, 2)  # never only public inputs


def random_register_tiled(impl, seed, n=12):
    for i, (M, K, N, v1, v2, v3, _) in enumerate(random_cases(seed, n)):
        A, B = operands(M, K, N, seed=seed + i)
        C, t = unpack2(impl.register_tiled(A, B, v1, v2, v3))
        check_product(C, A, B)
        assert counts(t) == (M * K * cdiv(N, v2), cdiv(M, v1) * K * N, M * N), (M, K, N, v1, v2, v3)


@pytest.mark.graded(points=2, exercise="register_tiled")
def test_register_tiled_random(impl, seed):
    random_register_tiled(impl, seed)


@pytest.mark.graded(points=1, exercise="register_tiled")
def test_register_tiled_bad_input(impl, seed):
    with pytest.raises(ValueError):
        impl.register_tiled(np.ones((2, 3)), np.ones((2, 3)), 1, 1, 1)
    with pytest.raises(ValueError):
        impl.register_tiled(np.ones((2, 2)), np.ones((2, 2)), 1, 1, 0)
    random_register_tiled(impl, seed, 2)  # never only public inputs


# ------------------------------------------------------------------ tiled (both levels)
@pytest.mark.graded(points=1, exercise="tiled")
@pytest.mark.parametrize("n,b1,b2,v1,v2", [(8, 4, 4, 2, 2), (12, 6, 4, 3, 2)])
def test_tiled_square(impl, seed, n, b1, b2, v1, v2):
    A, B = operands(n, n, n, seed=seed + 5)
    C, t = unpack2(impl.tiled(A, B, b1, b2, v1, v2))
    dram, l1 = levels(t)
    check_product(C, A, B)
    assert counts(dram) == (n * n, n ** 3 // b1, n * n), "DRAM -> L1: n^2 of A, n^3/b1 of B"
    assert counts(l1) == (n ** 3 // v2, n ** 3 // v1, n * n), "L1 -> registers: n^3/v2 of A, n^3/v1 of B"
    random_tiled(impl, seed, 2)  # never only public inputs


@pytest.mark.graded(points=1, exercise="tiled")
@pytest.mark.parametrize("M,K,N,b1,b2,v1,v2", [(7, 5, 9, 5, 4, 2, 3), (10, 3, 7, 4, 6, 3, 4), (1, 6, 5, 2, 3, 2, 2),
                                               (6, 5, 1, 4, 2, 3, 2), (9, 2, 9, 6, 6, 4, 4)])
def test_tiled_uneven(impl, seed, M, K, N, b1, b2, v1, v2):
    A, B = operands(M, K, N, seed=seed + M + 2 * N)
    C, t = unpack2(impl.tiled(A, B, b1, b2, v1, v2))
    dram, l1 = levels(t)
    check_product(C, A, B)
    assert counts(dram) == (M * K, cdiv(M, b1) * K * N, M * N)
    assert counts(l1) == (M * K * J(N, b2, v2), J(M, b1, v1) * K * N, M * N)
    random_tiled(impl, seed, 2)  # never only public inputs


def random_tiled(impl, seed, n=12):
    for i, (M, K, N, b1, b2, v1, v2) in enumerate(random_cases(seed, n)):
        A, B = operands(M, K, N, seed=seed + i)
        C, t = unpack2(impl.tiled(A, B, b1, b2, v1, v2))
        dram, l1 = levels(t)
        check_product(C, A, B)
        assert counts(dram) == (M * K, cdiv(M, b1) * K * N, M * N), (M, K, N, b1, b2, v1, v2)
        assert counts(l1) == (M * K * J(N, b2, v2), J(M, b1, v1) * K * N, M * N), (M, K, N, b1, b2, v1, v2)


@pytest.mark.graded(points=2, exercise="tiled")
def test_tiled_random(impl, seed):
    random_tiled(impl, seed)


# ------------------------------------------------------------------ section 11: CUDA kernels
def run_kernel(impl, kernel, grid, block, args):
    seen = impl.harness("lab03_cuda_kernel", kernel, list(grid), list(block), args)
    if seen["error"]:
        pytest.fail(seen["error"], pytrace=False)
    return seen


def check_tiled_matmul(impl, M, K, N, seed):
    A, B = (x.astype(np.float32) for x in operands(M, K, N, seed=seed))
    C = np.full((M, N), np.nan, np.float32)
    seen = run_kernel(impl, "tiled_matmul", (cdiv(N, 8), cdiv(M, 8)), (8, 8), [A, B, C, M, N, K])
    C = seen["arrays"][2]
    np.testing.assert_array_equal(C, A @ B, err_msg=f"C != A @ B for M, K, N = {M}, {K}, {N}")
    want = M * K * cdiv(N, 8) + K * N * cdiv(M, 8)
    assert seen["global_loads"] == want, \
        f"{seen['global_loads']} global loads, expected {want}: load each tile element once into shared memory"


@pytest.mark.graded(points=2, exercise="tiled_matmul")
@pytest.mark.parametrize("M,K,N", [(16, 16, 16), (13, 10, 19), (1, 20, 9)])
def test_tiled_matmul(impl, seed, M, K, N):
    check_tiled_matmul(impl, M, K, N, seed + M + N)


@pytest.mark.graded(points=2, exercise="tiled_matmul")
def test_tiled_matmul_random(impl, seed):
    rng = np.random.default_rng(seed)
    for i in range(2):
        M, K, N = (int(v) for v in rng.integers(1, 21, 3))
        check_tiled_matmul(impl, M, K, N, seed + i)


def check_block_sum(impl, n, threads, seed):
    x = np.random.default_rng(seed).integers(-4, 5, n).astype(np.float32)
    out = np.zeros(1, np.float32)
    seen = run_kernel(impl, "block_sum", (cdiv(n, threads),), (threads,), [x, out, n])
    assert float(seen["arrays"][1][0]) == float(x.sum()), f"sum {seen['arrays'][1][0]}, expected {x.sum()}"
    assert seen["atomics"] == cdiv(n, threads), \
        f"{seen['atomics']} atomic adds for {cdiv(n, threads)} blocks: one per block (thread 0)"


@pytest.mark.graded(points=2, exercise="block_sum")
@pytest.mark.parametrize("n,threads", [(64, 64), (300, 32), (200, 128), (5, 64)])
def test_block_sum(impl, seed, n, threads):
    check_block_sum(impl, n, threads, seed + n)


@pytest.mark.graded(points=2, exercise="block_sum")
def test_block_sum_random(impl, seed):
    rng = np.random.default_rng(seed)
    check_block_sum(impl, int(rng.integers(1, 500)), int(rng.choice([32, 64, 128])), seed)


SM90 = {"max_warps": 64, "max_blocks": 32, "registers": 65536, "reg_alloc_unit": 256, "reg_partitions": 4,
        "smem_bytes": 228 * 1024, "smem_alloc_unit": 128, "smem_reserved_per_block": 1024}


def occupancy_reference(threads, regs, smem, sm):
    """labkit's occupancy() on these limits (a block that cannot fit: 0 blocks, limited by registers)."""
    from labkit.gpu_model.occupancy import SMLimits, occupancy

    limits = SMLimits("test", smem_per_block=max(smem, 1), **sm)
    try:
        o = occupancy(threads, regs, smem, limits)
    except ValueError:
        return 0, "regs"
    names = {"warps": "warps", "regs": "regs", "smem": "smem", "blocks": "blocks"}
    return o.blocks, "+".join(names[k] for k in o.limiter.split("+"))


def check_blocks(impl, cases, sm):
    for threads, regs, smem in cases:
        got = impl.blocks_per_sm(threads, regs, smem, sm)
        assert tuple(got) == occupancy_reference(threads, regs, smem, sm), \
            f"blocks_per_sm({threads}, {regs}, {smem}) = {tuple(got)}, expected " \
            f"{occupancy_reference(threads, regs, smem, sm)}"


@pytest.mark.graded(points=1, exercise="blocks_per_sm")
@pytest.mark.parametrize("case,limiter", [((256, 32, 0), "warps+regs"), ((32, 16, 0), "blocks"),
                                          ((256, 72, 0), "regs"), ((96, 40, 0), "regs"),
                                          ((128, 32, 40000), "smem"), ((20, 24, 100), "blocks")])
def test_blocks_per_sm_each_limit(impl, case, limiter):
    assert occupancy_reference(*case, SM90)[1] == limiter
    check_blocks(impl, [case], SM90)


@pytest.mark.graded(points=2, exercise="blocks_per_sm")
def test_blocks_per_sm_random(impl, seed):
    rng = np.random.default_rng(seed)
    sm80 = {**SM90, "smem_bytes": 164 * 1024}
    cases = [(int(rng.integers(1, 1025)), int(rng.integers(1, 256)), int(rng.integers(0, 100_000)))
             for _ in range(20)]
    check_blocks(impl, cases, SM90)
    check_blocks(impl, cases, sm80)
