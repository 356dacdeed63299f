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
"""
import numpy as np
import pytest

from labkit.grading.generate import references
from labkit.grading.static import Policy

POLICY = Policy(
    labkit_allowed=frozenset({"labkit.matmul.Traffic", "labkit.matmul.TwoLevelTraffic", "labkit.matmul.cdiv",
                              "labkit.matmul.traffic.Traffic", "labkit.matmul.traffic.TwoLevelTraffic",
                              "labkit.matmul.traffic.cdiv"}),
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
