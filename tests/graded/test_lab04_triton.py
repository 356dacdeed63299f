"""Graded tests for Lab 04 (Triton kernels).

Each test launches the implementation's *kernel* itself (so a submission is
graded on its @triton.jit body, whatever its wrapper does), in the sandboxed
worker, on inputs drawn from the grading seed; outputs come back as data and
are compared here with torch. Under the interpreter (CPU; how the course
grades) every launch runs inside the access recorder: out-of-bounds lanes are
caught (and kept away from real memory), and exactly one launch must be seen.
Compiled on a GPU the recorder is unavailable; there the output is a window
into a NaN-filled guard buffer, and any write outside the window fails
(out-of-bounds *loads* can only be seen by the interpreter).
Sizes are never block multiples, and include 1-element and 1-row cases.

Tolerances: fp32 kernels do the same arithmetic as torch up to summation order
(a sum of N terms may differ by ~N ulp), hence rtol=atol=1e-5; fp16 outputs
may differ from the rounded fp32 reference by one ulp (rtol 2^-10).
"""
import numpy as np
import pytest
import torch
import triton

from labkit.grading.generate import references
from labkit.grading.static import Policy

POLICY = Policy(
    labkit_allowed=frozenset({"labkit", "labkit.kernels.checks.check_same", "labkit.kernels.checks.check_tensor"}),
    references=references("lab04_triton"),
    jit_kernels=("add_kernel", "softmax_kernel", "matmul_kernel", "layernorm_kernel"))


def rnd(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def launch(impl, kernel, grid, args, out_index, out_shape, dtype, watch=(), **constexprs):
    """Run the submission's kernel in its worker (under the access recorder when interpreted).

    ``args[out_index]`` is replaced there by a NaN-filled output inside a NaN guard buffer.
    Returns (output, what the harness saw: see labkit.grading.harness.triton_kernel).
    """
    seen = impl.harness("triton_kernel", kernel, list(grid), args, constexprs, out_index, list(out_shape),
                        str(dtype).removeprefix("torch."), tuple(watch))
    if seen["recorded"]:
        assert seen["launches"] == 1, f"{kernel} launched {seen['launches']} times; expected one Triton launch"
    return seen["out"], seen


def run_add(impl, x, y, block):
    return launch(impl, "add_kernel", (triton.cdiv(x.numel(), block),), [x, y, None, x.numel()], 2, x.shape,
                  x.dtype, BLOCK=block)


def run_softmax(impl, x):
    return launch(impl, "softmax_kernel", (x.shape[0],), [x, None, x.shape[1], x.stride(0)], 1, x.shape, x.dtype,
                  BLOCK=triton.next_power_of_2(x.shape[1]))


def run_matmul(impl, a, b, block=16, transposed=False):
    """a, b: contiguous; with ``transposed`` the kernel gets a.t() and b.t() (strided views)."""
    A, B = (a.t(), b.t()) if transposed else (a, b)
    (M, K), N = A.shape, B.shape[1]
    args = [("t", a) if transposed else a, ("t", b) if transposed else b, None, M, N, K,
            A.stride(0), A.stride(1), B.stride(0), B.stride(1), N, 1]
    return launch(impl, "matmul_kernel", (triton.cdiv(M, block), triton.cdiv(N, block)), args, 2, (M, N),
                  a.dtype, watch=("a_ptr", "b_ptr"), BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)


def run_layernorm(impl, x, w, b, eps=1e-5):
    N = x.shape[-1]
    return launch(impl, "layernorm_kernel", (x.numel() // N,), [x, w, b, None, N, eps], 3, x.shape, x.dtype,
                  BLOCK=triton.next_power_of_2(N))


def assert_in_bounds_once(seen, out_name):
    assert seen["guard_intact"], "the kernel wrote outside its output tensor -- missing mask on the store?"
    if not seen["recorded"]:      # compiled: the recorder needs the interpreter
        return
    assert seen["out_name"] == out_name, f"the output parameter should be called {out_name}"
    bad = seen["out_of_bounds"]
    assert not bad, f"out-of-bounds accesses (kind, tensor, program, element offsets): {bad} -- missing mask?"
    counts = seen["counts"][(out_name, "store")]
    assert (counts == 1).all(), f"each output element must be stored exactly once; store counts: {counts.tolist()[:20]}"


# ---------------------------------------------------------------- add
@pytest.mark.graded(points=2, exercise="add_kernel")
@pytest.mark.parametrize("n,block", [(37, 16), (1, 16), (100, 32)])
def test_add_values(impl, seed, n, block):
    x, y = rnd(n, seed=seed), rnd(n, seed=seed + 1)
    out, _ = run_add(impl, x, y, block)
    assert torch.equal(out, x + y), "add_kernel: wrong values (or some elements never written)"


@pytest.mark.graded(points=2, exercise="add_kernel")
def test_add_masks(impl, seed):
    x, y = rnd(37, seed=seed), rnd(37, seed=seed + 1)
    _, seen = run_add(impl, x, y, 16)
    assert_in_bounds_once(seen, "out_ptr")
    if seen["recorded"]:
        assert seen["masked_stores"] == 3 * 16 - 37, "the last program should mask off 11 lanes"


# ---------------------------------------------------------------- softmax
@pytest.mark.graded(points=2, exercise="softmax_kernel")
@pytest.mark.parametrize("shape", [(5, 37), (1, 100), (3, 1), (2, 64)])
def test_softmax_values(impl, seed, shape):
    x = rnd(*shape, seed=seed) * 3
    out, _ = run_softmax(impl, x)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


@pytest.mark.graded(points=1, exercise="softmax_kernel")
def test_softmax_numerically_stable(impl, seed):
    x = rnd(3, 45, seed=seed) * 500.0                        # exp(500) overflows fp32: subtract the max first
    out, _ = run_softmax(impl, x)
    assert torch.isfinite(out).all(), "softmax_kernel: inf/nan on large inputs -- subtract the row max"
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


@pytest.mark.graded(points=1, exercise="softmax_kernel")
def test_softmax_masks_and_fp16(impl, seed):
    x = rnd(4, 45, seed=seed, dtype=torch.float16)
    out, seen = run_softmax(impl, x)
    assert_in_bounds_once(seen, "out_ptr")
    torch.testing.assert_close(out, torch.softmax(x.float(), -1).half(), rtol=2**-10, atol=1e-3)


# ---------------------------------------------------------------- matmul
@pytest.mark.graded(points=3, exercise="matmul_kernel")
@pytest.mark.parametrize("M,K,N", [(37, 40, 21), (1, 50, 17), (50, 17, 1), (20, 7, 33)])
def test_matmul_values(impl, seed, M, K, N):
    a, b = rnd(M, K, seed=seed), rnd(K, N, seed=seed + 1)
    c, _ = run_matmul(impl, a, b)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.graded(points=1, exercise="matmul_kernel")
def test_matmul_strided_fp16(impl, seed):
    a, b = rnd(40, 37, seed=seed).half(), rnd(29, 40, seed=seed + 1).half()
    c, _ = run_matmul(impl, a, b, transposed=True)      # the kernel gets a.t(), b.t(): it must use the strides
    torch.testing.assert_close(c, (a.t().float() @ b.t().float()).half(), rtol=2**-10, atol=1e-3)


@pytest.mark.graded(points=1, exercise="matmul_kernel")
def test_matmul_masks_and_reuse(impl, seed):
    M, K, N, bs = 37, 40, 21, 16
    _, seen = run_matmul(impl, rnd(M, K, seed=seed), rnd(K, N, seed=seed + 1), bs)
    assert_in_bounds_once(seen, "c_ptr")
    if not seen["recorded"]:
        return
    # each A element is read once per column of tiles, each B element once per row of tiles
    counts = seen["counts"]
    assert (counts[("a_ptr", "load")] == triton.cdiv(N, bs)).all(), "every A element must be read, once per tile column"
    assert (counts[("b_ptr", "load")] == triton.cdiv(M, bs)).all(), "every B element must be read, once per tile row"


# ---------------------------------------------------------------- layernorm
@pytest.mark.graded(points=2, exercise="layernorm_kernel")
@pytest.mark.parametrize("shape", [(3, 37), (2, 5, 20), (1, 1), (4, 64)])
def test_layernorm_values(impl, seed, shape):
    N = shape[-1]
    x, w, b = rnd(*shape, seed=seed) * 2 + 1, rnd(N, seed=seed + 1), rnd(N, seed=seed + 2)
    y, _ = run_layernorm(impl, x, w, b)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (N,), w, b, 1e-5), rtol=1e-5, atol=1e-5)


@pytest.mark.graded(points=1, exercise="layernorm_kernel")
def test_layernorm_masks(impl, seed):
    x, w, b = rnd(3, 37, seed=seed), rnd(37, seed=seed + 1), rnd(37, seed=seed + 2)
    _, seen = run_layernorm(impl, x, w, b)
    assert_in_bounds_once(seen, "y_ptr")
    if seen["recorded"]:
        assert np.array_equal(seen["owner"], np.repeat(np.arange(3), 37)), "program r must write row r"
