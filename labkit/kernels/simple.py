"""Lab 04's four Triton kernels in their simplest form, and the wrappers that launch them.

One block per row (softmax, layer norm), one fixed tile size (matmul), no autotuning: the kernels
learners write (labkit.grading.generate turns the marked bodies into exercises/lab04_triton.py).
labkit's production kernels, with long rows, grouped ordering, autotuning and a backward pass, are
`labkit.kernels.add`, `softmax`, `matmul` and `layernorm`.
"""
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
    # BEGIN SOLUTION
    # HINT: each program finds its lanes from tl.program_id and tl.arange; a mask of the lanes
    # HINT: below n guards the tl.load and the tl.store.
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
    # END SOLUTION


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
    # BEGIN SOLUTION
    # HINT: one masked tl.load of the row with a neutral other= for the max, then tl.max, tl.exp,
    # HINT: tl.sum in fp32; store masked, cast to the output's element type.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * stride_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    # END SOLUTION


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
    # BEGIN SOLUTION
    # HINT: an fp32 accumulator tile (tl.zeros) updated by tl.dot over a loop on K in
    # HINT: BLOCK_K steps; mask the loads at every edge (other=0.0) and the store at M and N.
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
    # END SOLUTION


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
    # BEGIN SOLUTION
    # HINT: reduce the row with tl.sum for the mean and the biased variance; tl.where keeps
    # HINT: masked lanes out of the variance; tl.sqrt, then scale and shift.
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
    # END SOLUTION


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
