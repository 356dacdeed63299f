"""Graded tests for Lab 04 (Triton kernels).

Each test launches the implementation's *kernel* itself (so a submission is
graded on its @triton.jit body, whatever its wrapper does). Under the
interpreter (CPU; how the course grades) every launch runs inside the access
recorder: out-of-bounds lanes are caught (and kept away from real memory).
Compiled on a GPU the recorder is unavailable; there the output is a window
into a NaN-filled guard buffer, and any write outside the window fails
(out-of-bounds *loads* can only be seen by the interpreter).
Sizes are never block multiples, and include 1-element and 1-row cases.

Tolerances: fp32 kernels do the same arithmetic as torch up to summation order
(a sum of N terms may differ by ~N ulp), hence rtol=atol=1e-5; fp16 outputs
may differ from the rounded fp32 reference by one ulp (rtol 2^-10).
"""
import labkit  # noqa: F401  (TRITON_INTERPRET=1 before any kernel is defined)

import contextlib

import numpy as np
import pytest
import torch
import triton

from labkit.kernels.checks import interpreting
from labkit.kernels.record import record

DEV = "cpu" if interpreting() else "cuda"
GUARD = 64  # elements of guard buffer on each side of an output


def rnd(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(DEV)


def guarded(shape, dtype=torch.float32):
    """(out, buf): a contiguous NaN-filled ``out`` of ``shape`` inside a larger NaN-filled ``buf``."""
    n = int(np.prod(shape))
    buf = torch.full((n + 2 * GUARD,), float("nan"), dtype=dtype, device=DEV)
    return buf[GUARD:GUARD + n].view(shape), buf


def recording():
    """The access recorder under the interpreter; a do-nothing context (yielding None) when compiled."""
    return record() if interpreting() else contextlib.nullcontext()


def run_add(impl, x, y, block):
    out, buf = guarded(x.shape, x.dtype)
    with recording() as rec:
        impl.add_kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK=block)
    return out, (rec, buf)


def run_softmax(impl, x):
    out, buf = guarded(x.shape, x.dtype)
    with recording() as rec:
        impl.softmax_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return out, (rec, buf)


def run_matmul(impl, a, b, block=16):
    (M, K), N = a.shape, b.shape[1]
    c, buf = guarded((M, N), a.dtype)
    with recording() as rec:
        impl.matmul_kernel[(triton.cdiv(M, block), triton.cdiv(N, block))](
            a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
    return c, (rec, buf)


def run_layernorm(impl, x, w, b, eps=1e-5):
    N = x.shape[-1]
    y, buf = guarded(x.shape, x.dtype)
    with recording() as rec:
        impl.layernorm_kernel[(x.numel() // N,)](x, w, b, y, N, eps, BLOCK=triton.next_power_of_2(N))
    return y, (rec, buf)


def assert_in_bounds_once(seen, out_name):
    rec, buf = seen
    assert torch.isnan(buf[:GUARD]).all() and torch.isnan(buf[-GUARD:]).all(), \
        "the kernel wrote outside its output tensor -- missing mask on the store?"
    if rec is None:      # compiled: the recorder needs the interpreter
        return
    bad = [(a.kind, a.tensor, a.pid, a.oob_offsets[:4].tolist()) for a in rec.out_of_bounds]
    assert not bad, f"out-of-bounds accesses (kind, tensor, program, element offsets): {bad[:3]} -- missing mask?"
    counts = rec.counts(out_name, "store")
    assert (counts == 1).all(), f"each output element must be stored exactly once; store counts: {counts.tolist()[:20]}"


# ---------------------------------------------------------------- add
@pytest.mark.graded(points=2, exercise="add_kernel")
@pytest.mark.parametrize("n,block", [(37, 16), (1, 16), (100, 32)])
def test_add_values(impl, n, block):
    x, y = rnd(n), rnd(n, seed=1)
    out, _ = run_add(impl, x, y, block)
    assert torch.equal(out, x + y), "add_kernel: wrong values (or some elements never written)"


@pytest.mark.graded(points=2, exercise="add_kernel")
def test_add_masks(impl):
    x, y = rnd(37), rnd(37, seed=1)
    _, seen = run_add(impl, x, y, 16)
    assert_in_bounds_once(seen, "out_ptr")
    if seen[0] is not None:
        assert seen[0].n_masked("store", "out_ptr") == 3 * 16 - 37, "the last program should mask off 11 lanes"


# ---------------------------------------------------------------- softmax
@pytest.mark.graded(points=2, exercise="softmax_kernel")
@pytest.mark.parametrize("shape", [(5, 37), (1, 100), (3, 1), (2, 64)])
def test_softmax_values(impl, shape):
    x = rnd(*shape) * 3
    out, _ = run_softmax(impl, x)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


@pytest.mark.graded(points=1, exercise="softmax_kernel")
def test_softmax_numerically_stable(impl):
    x = rnd(3, 45) * 500.0                        # exp(500) overflows fp32: subtract the max first
    out, _ = run_softmax(impl, x)
    assert torch.isfinite(out).all(), "softmax_kernel: inf/nan on large inputs -- subtract the row max"
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


@pytest.mark.graded(points=1, exercise="softmax_kernel")
def test_softmax_masks_and_fp16(impl):
    x = rnd(4, 45, dtype=torch.float16)
    out, seen = run_softmax(impl, x)
    assert_in_bounds_once(seen, "out_ptr")
    torch.testing.assert_close(out, torch.softmax(x.float(), -1).half(), rtol=2**-10, atol=1e-3)


# ---------------------------------------------------------------- matmul
@pytest.mark.graded(points=3, exercise="matmul_kernel")
@pytest.mark.parametrize("M,K,N", [(37, 40, 21), (1, 50, 17), (50, 17, 1), (20, 7, 33)])
def test_matmul_values(impl, M, K, N):
    a, b = rnd(M, K), rnd(K, N, seed=1)
    c, _ = run_matmul(impl, a, b)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.graded(points=1, exercise="matmul_kernel")
def test_matmul_strided_fp16(impl):
    a, b = rnd(40, 37).half().t(), rnd(29, 40, seed=1).half().t()     # transposed views: use the strides
    c, _ = run_matmul(impl, a, b)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), rtol=2**-10, atol=1e-3)


@pytest.mark.graded(points=1, exercise="matmul_kernel")
def test_matmul_masks_and_reuse(impl):
    M, K, N, bs = 37, 40, 21, 16
    _, seen = run_matmul(impl, rnd(M, K), rnd(K, N, seed=1), bs)
    assert_in_bounds_once(seen, "c_ptr")
    rec = seen[0]
    if rec is None:
        return
    # each A element is read once per column of tiles, each B element once per row of tiles
    assert (rec.counts("a_ptr", "load") == triton.cdiv(N, bs)).all(), "every A element must be read, once per tile column"
    assert (rec.counts("b_ptr", "load") == triton.cdiv(M, bs)).all(), "every B element must be read, once per tile row"


# ---------------------------------------------------------------- layernorm
@pytest.mark.graded(points=2, exercise="layernorm_kernel")
@pytest.mark.parametrize("shape", [(3, 37), (2, 5, 20), (1, 1), (4, 64)])
def test_layernorm_values(impl, shape):
    N = shape[-1]
    x, w, b = rnd(*shape) * 2 + 1, rnd(N, seed=1), rnd(N, seed=2)
    y, _ = run_layernorm(impl, x, w, b)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (N,), w, b, 1e-5), rtol=1e-5, atol=1e-5)


@pytest.mark.graded(points=1, exercise="layernorm_kernel")
def test_layernorm_masks(impl):
    x, w, b = rnd(3, 37), rnd(37, seed=1), rnd(37, seed=2)
    _, seen = run_layernorm(impl, x, w, b)
    assert_in_bounds_once(seen, "y_ptr")
    rec = seen[0]
    if rec is not None:
        assert np.array_equal(rec.owner("y_ptr"), np.repeat(np.arange(3), 37)), "program r must write row r"
