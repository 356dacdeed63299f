"""Lab 12: algorithm-based fault tolerance for matmul (Huang–Abraham checksums).

What the scheme can do: locate and repair one corrupted element; detect (not repair) two in
different rows and columns. What it cannot: see four errors of ±δ on a rectangle's corners, or
errors at the rounding level. Each is asserted below.
"""
from fractions import Fraction

import numpy as np
import pytest
import torch

from labkit.checkpoint import abft as F


def _pair(seed, m=None, k=None, n=None, scale=1.0):
    rng = np.random.default_rng(seed)
    m, k, n = (m or int(rng.integers(1, 40)), k or int(rng.integers(1, 40)), n or int(rng.integers(1, 40)))
    return (torch.from_numpy(rng.standard_normal((m, k)) * scale),
            torch.from_numpy(rng.standard_normal((k, n)) * scale), rng)


def test_full_checksum_product_layout():
    A, B, _ = _pair(0, 7, 5, 9)
    p = F.abft_matmul(A, B)
    assert p.full.shape == (8, 10) and p.full.dtype == torch.float64
    C = A @ B
    assert torch.allclose(p.C, C, rtol=0, atol=1e-12)
    assert torch.allclose(p.full[:-1, -1], C.sum(1), rtol=0, atol=1e-12)     # C e
    assert torch.allclose(p.full[-1, :-1], C.sum(0), rtol=0, atol=1e-12)     # eᵀ C
    assert torch.allclose(p.full[-1, -1], C.sum(), rtol=0, atol=1e-12)       # eᵀ C e
    # integers: every sum is exact, so the checksums agree bit for bit
    Ai = torch.arange(12.).reshape(3, 4)
    Bi = torch.arange(8.).reshape(4, 2) - 3
    q = F.abft_matmul(Ai, Bi)
    assert torch.equal(q.full[:-1, -1], q.C.sum(1)) and torch.equal(q.full[-1, :-1], q.C.sum(0))
    assert torch.equal(q.C, (Ai @ Bi).double())


def test_a_random_single_error_is_located_and_corrected():
    for seed in range(60):
        A, B, rng = _pair(seed)
        p = F.abft_matmul(A, B)
        clean = p.C.clone()
        m, n = clean.shape
        i, j = int(rng.integers(m)), int(rng.integers(n))
        delta = float(rng.choice([-1, 1]) * 10.0 ** rng.uniform(-6, 6))
        bad = F.inject(p, i, j, delta)
        assert F.detect(bad) == (i, j)
        fixed = F.correct(bad)
        # every other element is untouched; the repaired one is back to within rounding
        mask = torch.ones_like(clean, dtype=torch.bool)
        mask[i, j] = False
        assert torch.equal(fixed[mask], clean[mask])
        assert abs(float(fixed[i, j] - clean[i, j])) <= float(p.row_tol[i])
        assert F.detect(p) is None                                  # inject made a copy


def test_an_error_in_a_checksum_cell_leaves_c_intact():
    A, B, _ = _pair(3, 6, 4, 5)
    p = F.abft_matmul(A, B)
    for i, j in [(2, 5), (6, 1), (6, 5)]:                           # checksum column, row, corner
        bad = F.inject(p, i, j, 1.0)
        assert F.detect(bad) == (i, j)
        assert torch.equal(F.correct(bad), p.C)


def test_no_false_positive_on_clean_products():
    for seed in range(200):
        A, B, rng = _pair(seed)
        # wide dynamic range (rows and columns scaled by up to 1e±8) and cancellation (B's columns
        # centred so products sum to about zero) are where a careless tolerance raises alarms
        A = A * torch.from_numpy(10.0 ** rng.uniform(-8, 8, (A.shape[0], 1)))
        B = (B - B.mean(0, keepdim=True)) * torch.from_numpy(10.0 ** rng.uniform(-8, 8, (1, B.shape[1])))
        assert F.syndrome(F.abft_matmul(A, B)).clean, seed


def test_the_tolerance_is_near_rounding_not_vacuous():
    A, B, _ = _pair(1, 64, 64, 64)
    p = F.abft_matmul(A, B)
    typical = float(p.C.abs().mean())                               # about 6.4 for 64 N(0,1) terms
    assert float(p.row_tol[:-1].max()) < 1e-10 * typical and float(p.col_tol[:-1].max()) < 1e-10 * typical
    # an error ten times a row's tolerance is located; the same error added without ABFT is
    # invisible to anything but a recomputation
    for i, j in [(0, 0), (17, 40), (63, 63)]:
        assert F.detect(F.inject(p, i, j, 10 * float(max(p.row_tol[i], p.col_tol[j])))) == (i, j)


def test_two_errors_in_different_rows_and_columns_are_detected_not_corrected():
    A, B, _ = _pair(2, 10, 8, 12)
    p = F.abft_matmul(A, B)
    bad = F.inject(F.inject(p, 1, 2, 0.5), 7, 9, -3.0)
    s = F.syndrome(bad)
    assert s.bad_rows == (1, 7) and s.bad_cols == (2, 9) and s.location is None
    with pytest.raises(F.UncorrectableError, match="rows \\[1, 7\\] and columns \\[2, 9\\]"):
        F.detect(bad)
    with pytest.raises(F.UncorrectableError):
        F.correct(bad)
    # two in one row: one bad row, two bad columns: still detected, still not located
    same_row = F.inject(F.inject(p, 4, 0, 1.0), 4, 5, 2.0)
    assert F.syndrome(same_row).bad_cols == (0, 5)
    with pytest.raises(F.UncorrectableError):
        F.detect(same_row)


def test_four_errors_on_a_rectangle_go_unseen():
    """The scheme's blind spot: +δ, −δ, −δ, +δ on (i1, j1), (i1, j2), (i2, j1), (i2, j2) leave every
    row and column sum unchanged."""
    A, B, _ = _pair(4, 6, 6, 6)
    p = F.abft_matmul(A, B)
    bad = p
    for (i, j), d in zip([(1, 1), (1, 4), (3, 1), (3, 4)], [1.0, -1.0, -1.0, 1.0]):
        bad = F.inject(bad, i, j, d)
    assert F.detect(bad) is None
    assert float((F.correct(bad) - p.C).abs().max()) == pytest.approx(1.0)


def test_bit_flips():
    A, B, _ = _pair(5, 16, 16, 16)
    p = F.abft_matmul(A, B)
    i, j = 3, 11
    # the exponent bits, the sign and the top mantissa bits: located, repaired to rounding
    # (bit 62 moves the value by ~300 orders of magnitude: the repair must not subtract the residual)
    for bit in list(range(30, 64)):
        bad = F.flip_bit(p, i, j, bit)
        assert F.detect(bad) == (i, j), bit
        assert abs(float(F.correct(bad)[i, j] - p.C[i, j])) <= float(p.row_tol[i]), bit
    big = abs(float(F.flip_bit(p, i, j, 62).full[i, j]))          # exponent's top bit: ~1e-308 or ~1e308
    assert big < 1e-300 or big > 1e300
    # the lowest mantissa bits change the value by ~1e-16 relative: indistinguishable from rounding
    for bit in range(0, 4):
        bad = F.flip_bit(p, i, j, bit)
        assert not torch.equal(bad.full, p.full)
        assert F.detect(bad) is None


def test_flops_counted_by_torch():
    A, B, _ = _pair(6, 5, 7, 3)
    assert F.counted_flops(torch.mm, A, B) == F.matmul_flops(5, 7, 3) == 2 * 5 * 7 * 3
    assert F.counted_flops(F.abft_matmul, A, B) == F.abft_flops(5, 7, 3) == 2 * 6 * 7 * 4
    for n in (1, 2, 16, 100, 1024):
        overhead = Fraction(F.abft_flops(n, n, n), F.matmul_flops(n, n, n)) - 1
        assert overhead == Fraction(2 * n + 1, n * n)
    t = F.flops_table((16, 64))
    assert t.column("counted ABFT") == t.column("2(n+1)^2 n") == [2 * 17 * 17 * 16, 2 * 65 * 65 * 64]
    assert [round(x, 3) for x in t.column("overhead %")] == [12.891, 3.149]
    assert max(len(line) for line in str(t).splitlines()) <= 100


@pytest.mark.parametrize("call,exc,words", [
    (lambda: F.abft_matmul(torch.ones(2, 3), torch.ones(2, 3)), ValueError, "abft_matmul: A is (2, 3)"),
    (lambda: F.abft_matmul(torch.ones(3), torch.ones(3, 1)), ValueError, "abft_matmul: A must be"),
    (lambda: F.abft_matmul(torch.ones(1, 1), torch.tensor([[float("nan")]])), ValueError, "abft_matmul: B"),
    (lambda: F.inject(F.abft_matmul(torch.ones(2, 2), torch.ones(2, 2)), 3, 0, 1.0), ValueError, "inject: i"),
    (lambda: F.flip_bit(F.abft_matmul(torch.ones(2, 2), torch.ones(2, 2)), 0, 0, 64), ValueError, "flip_bit: bit"),
    (lambda: F.matmul_flops(2, 0, 2), ValueError, "matmul_flops: k"),
])
def test_bad_arguments_raise_one_line_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value) and "\n" not in str(info.value)
