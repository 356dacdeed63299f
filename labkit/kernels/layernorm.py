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

from labkit.kernels.add import check_block
from labkit.kernels.checks import check_same, check_tensor, interpreting


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


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
              block_size: int | None = None, return_stats: bool = False):
    """Layer norm over the last dimension of contiguous ``x`` (any leading shape, N columns).

    ``weight`` and ``bias`` have shape (N,). Returns y (x.dtype, x.shape), or
    (y, mean, rstd) with fp32 per-row statistics of shape x.shape[:-1] when
    ``return_stats``. ``block_size`` as in :func:`labkit.kernels.softmax.softmax`.
    """
    check_tensor("layernorm", "x", x)
    check_tensor("layernorm", "weight", weight, ndim=1)
    check_tensor("layernorm", "bias", bias, ndim=1)
    check_same("layernorm", x=x, weight=weight, bias=bias)
    N = x.shape[-1]
    if weight.shape != (N,) or bias.shape != (N,):
        raise ValueError(f"layernorm: weight {tuple(weight.shape)} and bias {tuple(bias.shape)} must have "
                         f"shape ({N},) to match x's last dimension")
    if not (isinstance(eps, (int, float)) and eps > 0):
        raise ValueError(f"layernorm: eps must be a positive number, got {eps!r}")
    rows = x.numel() // N
    cap = 256 if interpreting() else 4096
    block = block_size if block_size is not None else min(triton.next_power_of_2(N), cap)
    check_block("layernorm", block)
    y = torch.empty_like(x)
    mean = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    extra = {} if interpreting() else {"num_warps": 4 if block <= 1024 else 8}
    layernorm_kernel[(rows,)](x, weight, bias, y, mean, rstd, N, float(eps),
                              BLOCK=block, NUM_BLOCKS=triton.cdiv(N, block), **extra)
    return (y, mean, rstd) if return_stats else y


def layernorm_reference(x, weight, bias, eps: float = 1e-5):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), eps).to(x.dtype)
