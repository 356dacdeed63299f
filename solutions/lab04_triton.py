"""Lab 04 exercises: write the bodies of four Triton kernels.

Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.

Each exercise is a ``@triton.jit`` kernel; the Python wrapper below it (already
complete) checks the inputs, allocates the output, picks the block size and
launches the grid. Your kernels run in Triton's interpreter on a CPU
(``import labkit`` sets TRITON_INTERPRET=1 before any kernel is defined) and
compile unchanged on a GPU.

Rules of thumb: every program computes its element indices from
``tl.program_id``; any block that can run past the end of the data needs a
mask on its loads *and* stores; reductions over masked lanes need a neutral
``other=`` (0 for sums, -inf for maxima). The graded tests use sizes that are
not block multiples and record every access: an out-of-bounds lane loses points
even when the numbers come out right.

Grade: ``python -m labkit.grade --lab 04`` (or ``make grade LAB=04``).
"""
import labkit

import torch
import triton
import triton.language as tl

from labkit.kernels.checks import check_same, check_tensor


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] + y[i] for 0 <= i < n; program p handles i in [p*BLOCK, (p+1)*BLOCK).

    The grid has ceil(n / BLOCK) programs, so the last block may run past n:
    mask those lanes on the loads and on the store.
    """
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, block_size: int = 16) -> torch.Tensor:
    """x + y for contiguous tensors of one shape and dtype, via add_kernel (ceil(n/block_size) programs)."""
    check_tensor("add", "x", x)
    check_tensor("add", "y", y)
    check_same("add", x=x, y=y)
    if x.shape != y.shape:
        raise ValueError(f"add: x has shape {tuple(x.shape)} but y has {tuple(y.shape)}")
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, block_size),)](x, y, out, n, BLOCK=block_size)
    return out


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    """Row-wise softmax; program r handles row r, whose n_cols values start at x_ptr + r*stride_row.

    BLOCK >= n_cols (a power of two), so one masked block holds the whole row.
    Be numerically stable: subtract the row maximum before exp (masked lanes
    must not win the max, nor add to the sum). Compute in fp32 and store in
    out_ptr's element type (``out_ptr.dtype.element_ty``); out has the same
    row stride as x.
    """
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * stride_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a contiguous 2-D tensor, one program per row (softmax_kernel)."""
    check_tensor("softmax", "x", x, ndim=2)
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = A @ B tile by tile; program (pid_m, pid_n) = (program_id(0), program_id(1)) owns
    C[pid_m*BLOCK_M : +BLOCK_M, pid_n*BLOCK_N : +BLOCK_N].

    Element (i, j) of A is at a_ptr + i*stride_am + j*stride_ak (same for B, C).
    Accumulate in an fp32 BLOCK_M x BLOCK_N tile over a k-loop that covers all
    of K in steps of BLOCK_K (K need not be a multiple of BLOCK_K: mask the
    tail, with other=0.0), using tl.dot(a, b, acc, input_precision="ieee").
    Store the tile in c_ptr's element type, masked at the M and N edges.
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor, block: int = 16) -> torch.Tensor:
    """A (M, K) @ B (K, N) in fp32 or fp16 via matmul_kernel, block x block x block tiles, 2-D grid."""
    check_tensor("matmul", "a", a, ndim=2, dtypes=(torch.float32, torch.float16), contiguous=False)
    check_tensor("matmul", "b", b, ndim=2, dtypes=(torch.float32, torch.float16), contiguous=False)
    check_same("matmul", a=a, b=b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: inner dimensions differ: a {tuple(a.shape)}, b {tuple(b.shape)}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, block), triton.cdiv(N, block))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
    return c


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    """Layer norm of row r = program_id(0) of a contiguous (rows, n_cols) x; BLOCK >= n_cols.

    y = (x - mean) / sqrt(var + eps) * w + b, with mean and the biased variance
    (divide by n_cols) over the row's n_cols real values, all in fp32; masked
    lanes must not count. Store y in y_ptr's element type.
    """
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = d / tl.sqrt(var + eps) * w + b
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Layer norm over the last dim of contiguous x with (N,) weight and bias, via layernorm_kernel."""
    check_tensor("layernorm", "x", x)
    check_tensor("layernorm", "weight", weight, ndim=1)
    check_tensor("layernorm", "bias", bias, ndim=1)
    check_same("layernorm", x=x, weight=weight, bias=bias)
    N = x.shape[-1]
    if weight.shape != (N,) or bias.shape != (N,):
        raise ValueError(f"layernorm: weight and bias must have shape ({N},)")
    y = torch.empty_like(x)
    layernorm_kernel[(x.numel() // N,)](x, weight, bias, y, N, float(eps), BLOCK=triton.next_power_of_2(N))
    return y
