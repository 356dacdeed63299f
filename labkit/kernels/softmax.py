"""Row-wise fused softmax: one program per row, any row length.

Fusion: the row is read from DRAM once (or twice when it spans several
blocks), max, exp, sum and divide happen on chip, and the result is written
once: about 2*M*N*element_size bytes, against 8 passes over the whole matrix
(5 reads, 3 writes) for the unfused max / subtract / exp / sum / divide chain
(`labkit.roofline.measure.count_passes` counts them op by op; a test checks).

Numerically stable: exp(x - max(row)), never exp(x) itself.
- Row fits in one block (``BLOCK >= N``): load, reduce, store. One pass.
- Longer rows: pass 1 walks the row in blocks keeping a running max ``m``
  and a running sum ``s`` of exp(x - m), rescaling ``s`` by exp(m_old - m_new)
  whenever the max grows (the "online softmax"); pass 2 re-reads each block
  and writes exp(x - m) / s.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from labkit.kernels.checks import check_block, check_tensor, interpreting


# BEGIN SOLUTION (lab04_triton: labkit's production softmax kernel answers the exercise too)
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out,
                   BLOCK: tl.constexpr, NUM_BLOCKS: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride_x
    o_row = out_ptr + row.to(tl.int64) * stride_out
    cols = tl.arange(0, BLOCK)
    if NUM_BLOCKS == 1:
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        z = x - tl.max(x, axis=0)
        e = tl.exp(z)
        tl.store(o_row + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), axis=0)  # running max (scalar)
        s = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)                # running sum of exp(x - m)
        for b in range(0, NUM_BLOCKS):
            c = b * BLOCK + cols
            x = tl.load(x_row + c, mask=c < n_cols, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))   # finite: every block has >= 1 real column
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        for b in range(0, NUM_BLOCKS):
            c = b * BLOCK + cols
            mask = c < n_cols
            x = tl.load(x_row + c, mask=mask, other=float("-inf")).to(tl.float32)
            tl.store(o_row + c, (tl.exp(x - m) / s).to(out_ptr.dtype.element_ty), mask=mask)
# END SOLUTION


def softmax(x: torch.Tensor, block_size: int | None = None) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor (M rows, N columns); fp32/fp16/bf16.

    ``block_size`` = columns per block (a power of two in 1..2**20). Default: the whole row
    rounded up to a power of two, capped at 16384 on a GPU (registers) and 256
    under the interpreter; rows longer than a block take the two-pass path.
    Computes in fp32, returns ``x.dtype``.
    """
    check_tensor("softmax", "x", x, ndim=2, contiguous=False)
    if x.stride(1) != 1:
        raise ValueError(f"softmax: rows must be contiguous (x.stride(1) == 1), got strides {tuple(x.stride())}")
    M, N = x.shape
    cap = 256 if interpreting() else 16384
    block = (check_block("softmax", "block_size", block_size) if block_size is not None
             else min(triton.next_power_of_2(N), cap))
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    num_blocks = triton.cdiv(N, block)
    extra = {} if interpreting() else {"num_warps": 4 if block <= 1024 else 8 if block <= 4096 else 16}
    softmax_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK=block, NUM_BLOCKS=num_blocks, **extra)
    return out


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def online_softmax_trace(row, block: int) -> list[dict]:
    """Pass 1 of the multi-block kernel, in numpy (float64), one state per block visited.

    Each state: ``block`` (index), ``cols`` (start, stop), ``block_max``,
    ``m`` (running max after the block), ``scale`` = exp(m_old - m_new) applied
    to the old sum (0 for the first block, whose old max is -inf), ``s``
    (running sum of exp(x - m)). The last state's m and s are the row's max and
    sum(exp(x - max)), so softmax = exp(x - m) / s.
    """
    import numpy as np

    x = np.asarray(row, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("online_softmax_trace: empty row")
    block = check_block("online_softmax_trace", "block", block)
    m, s, out = -np.inf, 0.0, []
    for b, start in enumerate(range(0, x.size, block)):
        xb = x[start:start + block]
        m_new = max(m, float(xb.max()))
        scale = float(np.exp(m - m_new))
        s = s * scale + float(np.exp(xb - m_new).sum())
        out.append({"block": b, "cols": (start, min(start + block, x.size)), "block_max": float(xb.max()),
                    "m": m_new, "scale": scale, "s": s})
        m = m_new
    return out
