"""labkit.gpu_model.stencil: counted global loads equal n(2r+1) untiled and n + 2r·ceil(n/T) tiled."""
import numpy as np
import pytest

from labkit.gpu_model import stencil as S


@pytest.mark.parametrize("n,r,T", [(64, 1, 16), (100, 2, 32), (50, 3, 7), (40, 0, 8), (9, 1, 64)])
def test_1d_counts_and_outputs(n, r, T):
    rng = np.random.default_rng(n + r)
    x, w = rng.standard_normal(n + 2 * r), rng.standard_normal(2 * r + 1)
    ref = S.stencil1d_reference(x, w)
    naive, tiled = S.stencil1d_naive(x, w), S.stencil1d_tiled(x, w, T)
    np.testing.assert_allclose(naive.out, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tiled.out, ref, rtol=1e-12, atol=1e-12)
    assert naive.counts == S.stencil1d_formula(n, r) == S.StencilCounts(n * (2 * r + 1), 0, n)
    assert tiled.counts == S.stencil1d_formula(n, r, T)
    assert tiled.counts.shared_loads == naive.counts.global_loads      # the same reads, now from shared
    if n % T == 0:
        assert tiled.counts.global_loads == (n // T) * (T + 2 * r)


@pytest.mark.parametrize("R,C,r,T", [(16, 16, 1, 4), (12, 20, 1, 5), (12, 12, 2, 4), (6, 9, 1, 16)])
def test_2d_star_counts_and_outputs(R, C, r, T):
    rng = np.random.default_rng(R * C + r)
    x, w = rng.standard_normal((R + 2 * r, C + 2 * r)), rng.standard_normal(2 * r + 1)
    ref = S.stencil2d_reference(x, w)
    naive, tiled = S.stencil2d_naive(x, w), S.stencil2d_tiled(x, w, T)
    np.testing.assert_allclose(naive.out, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tiled.out, ref, rtol=1e-12, atol=1e-12)
    assert naive.counts == S.stencil2d_formula(R, C, r) == S.StencilCounts((4 * r + 1) * R * C, 0, R * C)
    assert tiled.counts == S.stencil2d_formula(R, C, r, T)
    if R % T == 0 and C % T == 0:
        assert tiled.counts.global_loads == (R // T) * (C // T) * (T * T + 4 * r * T)


def test_5_point_laplacian_of_a_quadratic_is_4():
    i, j = np.meshgrid(np.arange(10.0), np.arange(10.0), indexing="ij")
    out = S.stencil2d_tiled(i ** 2 + j ** 2, [1, -4, 1], 4).out                 # ∇²(i² + j²) = 4
    np.testing.assert_allclose(out, 4.0)


def test_counted_and_checks():
    a = S.Counted(np.arange(10.0))
    a[2:5], a[0] = a[3:6], a[9]
    assert (a.loads, a.stores) == (4, 4)
    with pytest.raises(ValueError, match="odd length"):
        S.stencil1d_naive(np.zeros(8), [1, 1])
    with pytest.raises(ValueError, match="tile"):
        S.stencil1d_tiled(np.zeros(8), [1], 0)
    with pytest.raises(ValueError, match="more than 2r=4"):
        S.stencil2d_naive(np.zeros((4, 8)), [1, 1, 1, 1, 1])
