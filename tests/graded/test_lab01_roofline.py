"""Graded tests for Lab 01 (exercises/lab01_roofline.py). Expected values are worked out by hand here.

Floating-point comparisons use rel=1e-12: the learner may divide in a different
order than the reference (e.g. k / arrays / bytes), which changes only the last bits.
"""
import numpy as np
import pytest

from labkit.grading.generate import references
from labkit.grading.static import Policy

REL = 1e-12
POLICY = Policy(references=references("lab01_roofline"))


def draws(seed, n=20):
    """n random argument sets from the grading seed (so no table of answers can be written in advance).

    Every graded test checks some of these, so a table of answers to the fixed cases earns nothing."""
    return np.random.default_rng(seed).integers(1, 5000, size=(n, 4)).tolist()


@pytest.mark.graded(points=2, exercise="matmul_intensity")
def test_matmul_intensity_square_and_rectangular(impl, seed):
    assert impl.matmul_intensity(64, 64, 64) == pytest.approx(2 * 64 ** 3 / (3 * 64 ** 2 * 4), rel=REL)
    assert impl.matmul_intensity(3, 5, 7) == pytest.approx(2 * 105 / ((15 + 35 + 21) * 4), rel=REL)
    assert impl.matmul_intensity(3, 5, 7, dtype_bytes=2) == pytest.approx(2 * 105 / ((15 + 35 + 21) * 2), rel=REL)
    random_matmul_intensity(impl, seed, 3)  # never only public inputs


def random_matmul_intensity(impl, seed, n=20):
    for M, K, N, b in draws(seed, n):
        b = 1 + b % 8
        want = 2 * M * K * N / ((M * K + K * N + M * N) * b)
        assert impl.matmul_intensity(M, K, N, dtype_bytes=b) == pytest.approx(want, rel=REL), (M, K, N, b)


@pytest.mark.graded(points=1, exercise="matmul_intensity")
def test_matmul_intensity_random_shapes(impl, seed):
    random_matmul_intensity(impl, seed)


@pytest.mark.graded(points=2, exercise="matmul_intensity")
def test_matmul_intensity_thin_shapes(impl, seed):
    # 1 x n times n x n (vector-matrix): 2n^2 FLOPs over (n + n^2 + n) elements
    n = 1000
    assert impl.matmul_intensity(1, n, n) == pytest.approx(2 * n * n / ((n + n * n + n) * 4), rel=REL)
    # n x 1 times 1 x n (outer product): output dominates traffic
    assert impl.matmul_intensity(n, 1, n) == pytest.approx(2 * n * n / ((n + n + n * n) * 4), rel=REL)
    # dot product 1 x n times n x 1
    assert impl.matmul_intensity(1, n, 1) == pytest.approx(2 * n / ((2 * n + 1) * 4), rel=REL)
    random_matmul_intensity(impl, seed, 3)  # never only public inputs


@pytest.mark.graded(points=2, exercise="chain_intensity")
def test_chain_intensity_unfused(impl, seed):
    assert impl.chain_intensity(1, fused=False) == pytest.approx(1 / 12, rel=REL)
    assert impl.chain_intensity(3, fused=False) == pytest.approx(3 / 36, rel=REL)
    assert impl.chain_intensity(5, fused=False, dtype_bytes=2) == pytest.approx(5 / 30, rel=REL)
    random_chain_intensity(impl, seed, 3)  # never only public inputs


@pytest.mark.graded(points=2, exercise="chain_intensity")
def test_chain_intensity_fused(impl, seed):
    # one op: fusing changes nothing (read 2, write 1 either way)
    assert impl.chain_intensity(1, fused=True) == pytest.approx(1 / 12, rel=REL)
    # the seed's e = d + (a + b) * c: 3 FLOPs over 5 arrays
    assert impl.chain_intensity(3, fused=True) == pytest.approx(3 / 20, rel=REL)
    assert impl.chain_intensity(7, fused=True, dtype_bytes=2) == pytest.approx(7 / 18, rel=REL)
    random_chain_intensity(impl, seed, 3)  # never only public inputs


def random_chain_intensity(impl, seed, n=20):
    for k, _, _, b in draws(seed, n):
        k, b = 1 + k % 40, 1 + b % 8
        assert impl.chain_intensity(k, fused=False, dtype_bytes=b) == pytest.approx(1 / (3 * b), rel=REL), (k, b)
        assert impl.chain_intensity(k, fused=True, dtype_bytes=b) == pytest.approx(k / ((k + 2) * b), rel=REL), (k, b)


@pytest.mark.graded(points=1, exercise="chain_intensity")
def test_chain_intensity_random_lengths(impl, seed):
    random_chain_intensity(impl, seed)


@pytest.mark.graded(points=2, exercise="attainable_flops")
def test_attainable_flops(impl, seed):
    peak, bw = 200e9, 25e9  # ridge at 8 FLOP/B
    assert impl.attainable_flops(0.25, peak, bw) == pytest.approx(6.25e9, rel=REL)
    assert impl.attainable_flops(8.0, peak, bw) == pytest.approx(200e9, rel=REL)
    assert impl.attainable_flops(7.0, peak, bw) == pytest.approx(175e9, rel=REL)
    assert impl.attainable_flops(1000.0, peak, bw) == pytest.approx(200e9, rel=REL)
    assert impl.attainable_flops(0.0, peak, bw) == 0
    random_attainable_flops(impl, seed, 3)  # never only public inputs


def random_attainable_flops(impl, seed, n=20):
    for a, p, w, _ in draws(seed, n):
        intensity, peak, bw = a / 97, p * 1e9, w * 1e8
        want = min(peak, intensity * bw)
        assert impl.attainable_flops(intensity, peak, bw) == pytest.approx(want, rel=REL), (intensity, peak, bw)


@pytest.mark.graded(points=1, exercise="attainable_flops")
def test_attainable_flops_random(impl, seed):
    random_attainable_flops(impl, seed)


@pytest.mark.graded(points=1, exercise="mfu_hfu")
def test_mfu_equals_hfu_without_recompute(impl, seed):
    mfu, hfu = impl.mfu_hfu(1e9, 2e6, 60.0, 1e15, recompute_forward=False)
    assert mfu == pytest.approx(6 * 1e9 * 2e6 / 60 / 1e15, rel=REL)
    assert hfu == pytest.approx(mfu, rel=REL)
    random_mfu_hfu(impl, seed, 3)  # never only public inputs


@pytest.mark.graded(points=2, exercise="mfu_hfu")
def test_mfu_is_three_quarters_of_hfu_with_recompute(impl, seed):
    mfu, hfu = impl.mfu_hfu(7e9, 4096 * 8, 2.0, 312e12, recompute_forward=True)
    assert mfu == pytest.approx(6 * 7e9 * 4096 * 8 / 2.0 / 312e12, rel=REL)
    assert hfu == pytest.approx(8 * 7e9 * 4096 * 8 / 2.0 / 312e12, rel=REL)
    assert mfu == pytest.approx(0.75 * hfu, rel=REL)
    random_mfu_hfu(impl, seed, 3)  # never only public inputs


def random_mfu_hfu(impl, seed, count=20):
    for n, t, s, p in draws(seed, count):
        params, tokens, secs, peak = n * 1e6, t * 1e3, s / 10, p * 1e12
        for recompute in (False, True):
            mfu, hfu = impl.mfu_hfu(params, tokens, secs, peak, recompute_forward=recompute)
            assert mfu == pytest.approx(6 * params * tokens / secs / peak, rel=REL)
            assert hfu == pytest.approx((8 if recompute else 6) * params * tokens / secs / peak, rel=REL)


@pytest.mark.graded(points=1, exercise="mfu_hfu")
def test_mfu_hfu_random(impl, seed):
    random_mfu_hfu(impl, seed)
