"""Graded tests for Lab 02 (exercises/lab02_strides.py): every answer is checked against torch itself.

Bases are built with torch.as_strided over an arange storage, so the learner's
(shape, strides, offset) must match torch's .shape, .stride(), .storage_offset().
"""
import math

import numpy as np
import pytest
import torch

from labkit.grading.generate import references
from labkit.grading.static import Policy

POLICY = Policy(references=references("lab02_strides"))


def random_layout(rng):
    """A random (shape, strides, offset): a permuted row-major layout, sometimes with gaps or a size-1 dim."""
    ndim = int(rng.integers(1, 5))
    shape = [int(x) for x in rng.integers(1, 6, ndim)]
    gaps = [int(x) for x in rng.integers(1, 3, ndim)] if rng.random() < 0.3 else [1] * ndim
    order = rng.permutation(ndim)
    strides, step = [0] * ndim, 1
    for d in reversed(order):
        step *= gaps[d]
        strides[d] = step
        step *= shape[d]
    for d in range(ndim):
        if shape[d] == 1 and rng.random() < 0.5:
            strides[d] = int(rng.integers(1, 50))   # a size-1 dim's stride is free
    return tuple(shape), tuple(strides), int(rng.integers(0, 4))


def base(shape, strides, offset=0):
    need = offset + sum((n - 1) * s for n, s in zip(shape, strides)) + 1
    return torch.as_strided(torch.arange(need), shape, strides, offset)


def meta(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def contig(shape):
    return tuple(torch.empty(shape).stride())


SLICES = [  # (shape, strides, offset, dim, start, stop, step)
    ((10,), (1,), 0, 0, 1, 10, 3),        # 1, 4, 7: length 3 = ceil(9/3)
    ((10,), (1,), 0, 0, 0, 9, 2),         # ceil(9/2) = 5 (floor would give 4)
    ((1, 7), (7, 1), 0, 1, 2, 7, 2),      # 1 x n
    ((7, 1), (1, 1), 0, 0, 1, 7, 4),      # n x 1
    ((4, 6), (6, 1), 3, 1, 1, 6, 2),      # nonzero base offset
    ((4, 6), (1, 4), 0, 0, 1, 4, 2),      # transposed base (column-major strides)
    ((5, 3), (3, 1), 0, 0, 2, 100, 1),    # stop past the end is clamped
    ((5, 3), (3, 1), 0, 0, 7, 9, 2),      # start past the end: length 0, offset clamps to size
    ((5, 3), (3, 1), 0, 1, 2, 1, 1),      # stop before start: length 0
    ((2, 3, 4), (12, 4, 1), 0, 2, 1, 4, 3),
]


@pytest.mark.graded(points=3, exercise="slice_view")
def test_slice_view(impl, seed):
    for case in SLICES:
        shape, strides, offset, dim, start, stop, step = case
        t = base(shape, strides, offset)
        want = meta(t[(slice(None),) * dim + (slice(start, stop, step),)])
        got = impl.slice_view(shape, strides, offset, dim, start, stop, step)
        got = (tuple(got[0]), tuple(got[1]), got[2])
        assert got == want, f"slice_view{case}: got {got}, torch gives (shape, strides, offset) = {want}"
    random_slice_view(impl, seed, 5)  # never only public inputs


def random_slice_view(impl, seed, n=None):
    rng = np.random.default_rng(seed)
    for _ in range(n or 25):
        shape, strides, offset = random_layout(rng)
        dim = int(rng.integers(0, len(shape)))
        start, stop, step = int(rng.integers(0, 7)), int(rng.integers(0, 9)), int(rng.integers(1, 4))
        want = meta(base(shape, strides, offset)[(slice(None),) * dim + (slice(start, stop, step),)])
        got = impl.slice_view(shape, strides, offset, dim, start, stop, step)
        got = (tuple(got[0]), tuple(got[1]), got[2])
        assert got == want, f"slice_view{(shape, strides, offset, dim, start, stop, step)}: got {got}, torch {want}"


@pytest.mark.graded(points=1, exercise="slice_view")
def test_slice_view_random(impl, seed):
    random_slice_view(impl, seed)


PERMS = [
    ((2, 3), (3, 1), 0, (1, 0)),
    ((2, 3, 4), (12, 4, 1), 5, (1, 2, 0)),   # not its own inverse: catches dims/inverse mix-ups
    ((2, 3, 4), (12, 4, 1), 0, (2, 0, 1)),
    ((2, 3, 4, 5), (60, 20, 5, 1), 1, (3, 1, 0, 2)),
    ((1, 4, 1), (9, 1, 9), 0, (2, 0, 1)),
]


@pytest.mark.graded(points=2, exercise="permute_view")
def test_permute_view(impl, seed):
    for case in PERMS:
        shape, strides, offset, dims = case
        want = meta(base(shape, strides, offset).permute(dims))
        got = impl.permute_view(shape, strides, offset, dims)
        got = (tuple(got[0]), tuple(got[1]), got[2])
        assert got == want, f"permute_view{case}: got {got}, torch gives {want}"
    random_permute_view(impl, seed, 5)  # never only public inputs


def random_permute_view(impl, seed, n=None):
    rng = np.random.default_rng(seed)
    for _ in range(n or 25):
        shape, strides, offset = random_layout(rng)
        dims = tuple(int(d) for d in rng.permutation(len(shape)))
        want = meta(base(shape, strides, offset).permute(dims))
        got = impl.permute_view(shape, strides, offset, dims)
        got = (tuple(got[0]), tuple(got[1]), got[2])
        assert got == want, f"permute_view{(shape, strides, offset, dims)}: got {got}, torch gives {want}"


@pytest.mark.graded(points=1, exercise="permute_view")
def test_permute_view_random(impl, seed):
    random_permute_view(impl, seed)


CONTIG = [  # (shape, strides)
    ((2, 3), (3, 1)), ((2, 3), (1, 2)),          # row-major / transposed
    ((1, 5), (5, 1)), ((1, 5), (99, 1)),         # 1 x n: the size-1 stride is free
    ((5, 1), (1, 1)), ((5, 1), (1, 7)),          # n x 1
    ((3, 1, 4), (4, 50, 1)),                     # size-1 in the middle
    ((3, 4), (8, 1)),                            # every other row: not contiguous
    ((3, 4), (0, 1)),                            # broadcast rows (stride 0)
    ((2, 0, 3), (7, 7, 7)),                      # no elements: contiguous
    ((1, 1), (5, 9)), ((4,), (2,)),
]


@pytest.mark.graded(points=2, exercise="is_contiguous")
def test_is_contiguous(impl, seed):
    for shape, strides in CONTIG:
        t = torch.empty(0).as_strided(shape, strides) if math.prod(shape) == 0 else base(shape, strides)
        got = impl.is_contiguous(shape, strides)
        assert bool(got) == t.is_contiguous(), \
            f"is_contiguous({shape}, {strides}): got {got}, torch says {t.is_contiguous()}"
    random_is_contiguous(impl, seed, 8)  # never only public inputs


def random_is_contiguous(impl, seed, n=None):
    rng = np.random.default_rng(seed)
    for _ in range(n or 40):
        shape, strides, _ = random_layout(rng)
        want = base(shape, strides).is_contiguous()
        assert bool(impl.is_contiguous(shape, strides)) == want, f"is_contiguous({shape}, {strides}): torch says {want}"


@pytest.mark.graded(points=1, exercise="is_contiguous")
def test_is_contiguous_random(impl, seed):
    random_is_contiguous(impl, seed)


VIEWS = [  # (shape, strides, new_shape)
    ((2, 3), (3, 1), (6,)),
    ((2, 3), (3, 1), (3, 2)),
    ((2, 3), (1, 2), (6,)),                       # transposed: no view
    ((4, 3), (1, 4), (2, 2, 3)),                  # transposed: splitting one dim is fine
    ((4, 3), (1, 4), (4, 3, 1)),
    ((1, 6), (99, 1), (2, 3)),                    # 1 x n with an odd stride on the 1
    ((6, 1), (1, 1), (3, 2)),                     # n x 1
    ((6, 1), (1, 1), (1, 6)),
    ((3, 4), (8, 1), (12,)),                      # every other row: no view
    ((3, 4), (8, 1), (3, 2, 2)),                  # ... but splitting the rows is fine
    ((3, 4), (0, 1), (12,)),                      # broadcast rows: no view
    ((3, 4), (0, 1), (3, 1, 4)),
    ((2, 1, 3), (3, 50, 1), (6,)),                # size-1 in the middle never breaks a run
    ((2, 2, 2), (4, 1, 2), (4, 2)),               # last two swapped: merging the first two is fine
    ((2, 2, 2), (4, 1, 2), (2, 4)),               # ... merging the last two is not
]


def _check_views(impl, cases):
    for shape, strides, new_shape in cases:
        try:
            want = tuple(base(shape, strides).view(new_shape).stride())
        except RuntimeError:
            want = None  # torch refuses the view
        got = impl.view_strides(shape, strides, new_shape)
        got = None if got is None else tuple(got)
        assert got == want, f"view_strides({shape}, {strides}, {new_shape}): got {got}, torch gives {want}"


@pytest.mark.graded(points=2, exercise="view_strides")
def test_view_strides_contiguous_and_transposed(impl, seed):
    _check_views(impl, VIEWS[:5])
    random_view_strides(impl, seed, 5)  # never only public inputs


@pytest.mark.graded(points=2, exercise="view_strides")
def test_view_strides_size_one_dims(impl, seed):
    _check_views(impl, [v for v in VIEWS[5:] if 1 in v[0]])
    random_view_strides(impl, seed, 5)  # never only public inputs


@pytest.mark.graded(points=2, exercise="view_strides")
def test_view_strides_gaps_and_broadcasts(impl, seed):
    _check_views(impl, [v for v in VIEWS[5:] if 1 not in v[0]])
    random_view_strides(impl, seed, 5)  # never only public inputs


def _random_new_shape(rng, numel):
    dims, left = [], numel
    while left > 1:
        divisors = [d for d in range(2, left + 1) if left % d == 0]
        d = int(rng.choice(divisors))
        dims.append(d)
        left //= d
        if rng.random() < 0.2:
            dims.append(1)
    return tuple(int(x) for x in rng.permutation(dims)) if dims else (1,)


def random_view_strides(impl, seed, n=30):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        shape, strides, _ = random_layout(rng)
        cases.append((shape, strides, _random_new_shape(rng, math.prod(shape))))
    _check_views(impl, cases)


@pytest.mark.graded(points=1, exercise="view_strides")
def test_view_strides_random(impl, seed):
    random_view_strides(impl, seed)
