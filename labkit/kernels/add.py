"""Vector add: the smallest Triton kernel: program ids, blocks, masks, pointers.

Program ``pid`` owns elements ``[pid*BLOCK, pid*BLOCK + BLOCK)``; the last
program's block runs past ``n`` unless ``n`` is a multiple of ``BLOCK``, so
every load and store carries the mask ``offs < n``. Grid = ceil(n / BLOCK)
programs. Bytes moved: 3 * n * element_size (two reads, one write).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from labkit.kernels.checks import FLOAT_DTYPES, check_block, check_same, check_tensor


@triton.jit
def scale_kernel(x_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    """out = alpha * x: the programming model's example (one input; the add exercise takes two)."""
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)   # this program's element indices
    mask = offs < n                            # lanes past the end do nothing
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x, mask=mask)


# BEGIN SOLUTION (lab04_triton: labkit's production add kernel answers the exercise too)
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)   # this program's element indices
    mask = offs < n                            # lanes past the end do nothing
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
# END SOLUTION


def add(x: torch.Tensor, y: torch.Tensor, block_size: int = 1024) -> torch.Tensor:
    """Elementwise ``x + y`` for contiguous tensors of equal shape (any number of elements).

    ``block_size`` (elements per program, a power of two in 1..2**20) sets the grid:
    ``ceil(x.numel() / block_size)`` programs.
    """
    check_tensor("add", "x", x, dtypes=FLOAT_DTYPES + (torch.int32, torch.int64))
    check_tensor("add", "y", y, dtypes=FLOAT_DTYPES + (torch.int32, torch.int64))
    check_same("add", x=x, y=y)
    if x.shape != y.shape:
        raise ValueError(f"add: x has shape {tuple(x.shape)} but y has {tuple(y.shape)}; shapes must match")
    block_size = check_block("add", "block_size", block_size)
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, block_size),)](x, y, out, n, BLOCK=block_size)
    return out


def add_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y
