"""Layer norm forward: one program per row, three passes over blocks of the row.

y = (x - mean) / sqrt(var + eps) * weight + bias, with mean and (biased)
variance over the last dimension, computed in fp32. Pass 1 sums x for the
mean; pass 2 sums (x - mean)^2 (two passes are more accurate than E[x^2] -
mean^2); pass 3 normalises and writes. ``mean`` and ``rstd`` (1/std) per row
are saved, as a backward pass would need them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from labkit.kernels.checks import check_block, check_real, check_same, check_tensor, interpreting


# BEGIN SOLUTION (lab04_triton: labkit's production layernorm kernel answers the exercise too)
@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols, eps,
                     BLOCK: tl.constexpr, NUM_BLOCKS: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * n_cols
    y_row = y_ptr + row.to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for b in range(0, NUM_BLOCKS):
        c = b * BLOCK + cols
        acc += tl.load(x_row + c, mask=c < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for b in range(0, NUM_BLOCKS):
        c = b * BLOCK + cols
        x = tl.load(x_row + c, mask=c < n_cols, other=0.0).to(tl.float32)
        d = tl.where(c < n_cols, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for b in range(0, NUM_BLOCKS):
        c = b * BLOCK + cols
        mask = c < n_cols
        x = tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
        bias = tl.load(b_ptr + c, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + c, ((x - mean) * rstd * w + bias).to(y_ptr.dtype.element_ty), mask=mask)
# END SOLUTION


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
              block_size: int | None = None, return_stats: bool = False):
    """Layer norm over the last dimension of contiguous ``x`` (any leading shape, N columns).

    ``weight`` and ``bias`` have shape (N,). Returns y (x.dtype, x.shape), or
    (y, mean, rstd) with fp32 per-row statistics of shape x.shape[:-1] when
    ``return_stats``. ``block_size`` as in :func:`labkit.kernels.softmax.softmax`.
    """
    check_tensor("layernorm", "x", x, min_ndim=1)
    check_tensor("layernorm", "weight", weight, ndim=1)
    check_tensor("layernorm", "bias", bias, ndim=1)
    check_same("layernorm", x=x, weight=weight, bias=bias)
    N = x.shape[-1]
    if weight.shape != (N,) or bias.shape != (N,):
        raise ValueError(f"layernorm: weight {tuple(weight.shape)} and bias {tuple(bias.shape)} must have "
                         f"shape ({N},) to match x's last dimension")
    eps = check_real("layernorm", "eps", eps, positive=True)
    rows = x.numel() // N
    cap = 256 if interpreting() else 4096
    block = (check_block("layernorm", "block_size", block_size) if block_size is not None
             else min(triton.next_power_of_2(N), cap))
    y = torch.empty_like(x)
    mean = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    extra = {} if interpreting() else {"num_warps": 4 if block <= 1024 else 8}
    layernorm_kernel[(rows,)](x, weight, bias, y, mean, rstd, N, float(eps),
                              BLOCK=block, NUM_BLOCKS=triton.cdiv(N, block), **extra)
    return (y, mean, rstd) if return_stats else y


def layernorm_reference(x, weight, bias, eps: float = 1e-5):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), eps).to(x.dtype)


# ---------------------------------------------------------------- backward
# With xhat = (x - mean) * rstd and g = dy * w (per row of N columns):
#   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
#   dw = sum over rows of dy * xhat,   db = sum over rows of dy.
# Kernel 1 (one program per row) writes dx and the per-row products dy*xhat
# and dy into fp32 (rows, N) buffers; kernel 2 (one program per block of
# columns) sums those buffers down the rows. No atomics, so results are
# deterministic.


@triton.jit
def layernorm_bwd_dx_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, pdw_ptr, pdb_ptr, n_cols,
                            BLOCK: tl.constexpr, NUM_BLOCKS: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    acc_g = tl.zeros([BLOCK], tl.float32)
    acc_gx = tl.zeros([BLOCK], tl.float32)
    for b in range(0, NUM_BLOCKS):           # pass 1: mean(g) and mean(g * xhat)
        c = b * BLOCK + cols
        mask = c < n_cols
        x = tl.load(x_ptr + base + c, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + base + c, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        g = dy * w
        acc_g += g
        acc_gx += g * xhat
        tl.store(pdw_ptr + base + c, dy * xhat, mask=mask)
        tl.store(pdb_ptr + base + c, dy, mask=mask)
    mg = tl.sum(acc_g, axis=0) / n_cols
    mgx = tl.sum(acc_gx, axis=0) / n_cols
    for b in range(0, NUM_BLOCKS):           # pass 2: dx
        c = b * BLOCK + cols
        mask = c < n_cols
        x = tl.load(x_ptr + base + c, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + base + c, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
        xhat = (x - mean) * rstd
        dx = rstd * (dy * w - mg - xhat * mgx)
        tl.store(dx_ptr + base + c, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def column_sum_kernel(p_ptr, out_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """out[j] = sum_i p[i, j] for a contiguous fp32 (n_rows, n_cols) p; program = block of columns."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    for r0 in range(0, n_rows, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        acc += tl.load(p_ptr + rows[:, None].to(tl.int64) * n_cols + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def layernorm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                       rstd: torch.Tensor, block_size: int | None = None):
    """Gradients of :func:`layernorm`: returns (dx, dweight, dbias) in x's / weight's dtype.

    ``mean`` and ``rstd`` are the fp32 per-row statistics from ``layernorm(..., return_stats=True)``.
    Extra memory: two fp32 (rows, N) buffers for the per-row dw/db terms.
    """
    check_tensor("layernorm_backward", "dy", dy, min_ndim=1)
    check_tensor("layernorm_backward", "x", x, min_ndim=1)
    check_same("layernorm_backward", dy=dy, x=x)
    if dy.shape != x.shape:
        raise ValueError(f"layernorm_backward: dy {tuple(dy.shape)} and x {tuple(x.shape)} must have the same shape")
    N = x.shape[-1]
    rows = x.numel() // N
    check_tensor("layernorm_backward", "weight", weight, ndim=1)
    if weight.shape != (N,):
        raise ValueError(f"layernorm_backward: weight must have shape ({N},), got {tuple(weight.shape)}")
    for name, t in (("mean", mean), ("rstd", rstd)):
        check_tensor("layernorm_backward", name, t, dtypes=(torch.float32,))
        if t.numel() != rows:
            raise ValueError(f"layernorm_backward: {name} must hold one value per row ({rows}), got {t.numel()}")
    cap = 256 if interpreting() else 4096
    block = (check_block("layernorm_backward", "block_size", block_size) if block_size is not None
             else min(triton.next_power_of_2(N), cap))
    dx = torch.empty_like(x)
    pdw = torch.empty((rows, N), dtype=torch.float32, device=x.device)
    pdb = torch.empty_like(pdw)
    layernorm_bwd_dx_kernel[(rows,)](dy, x, weight, mean, rstd, dx, pdw, pdb, N,
                                     BLOCK=block, NUM_BLOCKS=triton.cdiv(N, block))
    dw = torch.empty_like(weight)
    db = torch.empty_like(weight)
    bc = 32 if interpreting() else 128
    for p, out in ((pdw, dw), (pdb, db)):
        column_sum_kernel[(triton.cdiv(N, bc),)](p, out, rows, N, BLOCK_R=16, BLOCK_C=bc)
    return dx, dw, db


class LayerNormFunction(torch.autograd.Function):
    """Autograd wrapper: forward = layernorm kernel, backward = the two kernels above."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = layernorm(x, weight, bias, eps, return_stats=True)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layernorm_backward(dy.contiguous(), x, weight, mean, rstd)
        return dx, dw, db, None
