"""Fused attention forward (FlashAttention): softmax(Q K^T * scale) V without the S x S matrix.

Program (m-block, batch*head) keeps a BLOCK_M x D tile of Q on chip and walks
the keys/values in BLOCK_N blocks. For each block: scores s = Q K^T * scale
(fp32), masked past the sequence end (and above the diagonal when causal);
then the online softmax: running row max m, running denominator l,
accumulator acc, with the old terms rescaled by alpha = exp(m_old - m_new)
before adding the new block's exp(s - m_new) and its exp(s - m_new) @ V.
At the end out = acc / l. Memory traffic is O(S*D) per head instead of the
O(S^2) a materialised score matrix needs.

Causal masking is top-left aligned (query i sees keys 0..i), like
``F.scaled_dot_product_attention(is_causal=True)``; with causal=True the key
loop stops after the block holding the last query row of the tile.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from labkit.kernels.checks import (DOT_MAX, DOT_MIN, check_block, check_real, check_same, check_shared_memory,
                                   check_tensor, interpreting, pipelined_tile_bytes, shared_memory_limit)


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_q, seq_k, head_dim, scale,
                     stride_qh, stride_qm, stride_kh, stride_kn,
                     stride_vh, stride_vn, stride_oh, stride_om,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                     CAUSAL: tl.constexpr, DOT_FP32: tl.constexpr = False):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)           # flattened batch * head
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim
    q = tl.load(q_ptr + bh * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=(offs_m[:, None] < seq_q) & d_ok, other=0.0)
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)   # finite: exp(m_old - m_new) avoids -inf - -inf
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    n_end = seq_k
    if CAUSAL:
        n_end = tl.minimum(seq_k, (pid_m + 1) * BLOCK_M)
    if DOT_FP32:  # interpreter + bf16: its tl.dot mishandles bf16 (see labkit.kernels.matmul)
        q = q.to(tl.float32)
    for start_n in range(0, n_end, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols[:, None] < seq_k) & d_ok
        k = tl.load(k_ptr + bh * stride_kh + cols[:, None] * stride_kn + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        if DOT_FP32:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = cols[None, :] < seq_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + bh * stride_vh + cols[:, None] * stride_vn + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        if DOT_FP32:  # round p to bf16 as the GPU path does, then multiply in fp32
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32),
                                                input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + bh * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < seq_q) & d_ok)


def shared_bytes(block_m: int, block_n: int, block_d: int, itemsize: int, stages: int) -> int:
    """Shared memory one program needs (bytes): K and V tiles (block_n x block_d) in flight, the Q
    tile (block_m x block_d) and P (block_m x block_n) converted for the second dot."""
    return pipelined_tile_bytes(2 * block_n * block_d, stages, block_m * block_d + block_m * block_n, itemsize)


def gpu_tiles(head_dim: int, itemsize: int, limit: int | None, block_m: int | None = None,
              block_n: int | None = None) -> tuple[int, int, int]:
    """(block_m, block_n, num_stages) for a compiled launch: the defaults (128, 64 or 32, 3 stages)
    when they fit ``limit`` bytes of shared memory, else fewer stages, then smaller tiles (fp32 at
    head dim 256 needs 272 KiB with the defaults; an H100 allows 227). Tiles the caller chose are
    kept; ValueError in one line when they cannot fit."""
    bd = max(16, triton.next_power_of_2(head_dim))
    bm0, bn0 = block_m or 128, block_n or (64 if head_dim <= 64 else 32)
    tries = [(bm0, bn0, s) for s in (3, 2)]
    if block_m is None:
        tries += [(64, bn0, 2), (32, bn0, 2)]
    if block_n is None:
        tries += [(bm, 16, 2) for bm in ((64, 32) if block_m is None else (bm0,))]
    for bm, bn, stages in tries:
        if limit is None or shared_bytes(bm, bn, bd, itemsize, stages) <= limit:
            return bm, bn, stages
    bm, bn, stages = tries[-1]
    check_shared_memory("attention", shared_bytes(bm, bn, bd, itemsize, stages), limit,
                        f"tiles {bm}x{bn} at head dim {head_dim} ({itemsize}-byte elements)",
                        "use smaller block_m / block_n, or fp16/bf16 inputs")
    raise AssertionError("unreachable")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None, block_m: int | None = None, block_n: int | None = None) -> torch.Tensor:
    """softmax(q k^T * scale [+ causal mask]) v for contiguous (B, H, S, D) tensors; fp32/fp16/bf16.

    q: (B, H, S_q, D); k, v: (B, H, S_k, D); any S and D (D <= 256).
    ``scale`` (a finite number) defaults to 1/sqrt(D). ``block_m`` / ``block_n``
    (query / key rows per tile) must be powers of two in 16..256 (``tl.dot``
    needs >= 16); by default 16 under the interpreter, 128 and 64 or 32 on a GPU, smaller where
    the device's shared memory is too small for them (`gpu_tiles`).
    Returns (B, H, S_q, D) in q's dtype; scores, softmax statistics and the
    accumulator are fp32.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor("attention", name, t, ndim=4)
    check_same("attention", q=q, k=k, v=v)
    if k.shape != v.shape:
        raise ValueError(f"attention: k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"attention: q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch, heads "
                         f"and head dim (B, H, S, D)")
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    if D > 256:
        raise ValueError(f"attention: head dim {D} > 256 is not supported")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"attention: causal must be True or False, got {type(causal).__name__} {causal!r}")
    scale = 1.0 / math.sqrt(D) if scale is None else check_real("attention", "scale", scale)
    if block_m is not None:
        block_m = check_block("attention", "block_m", block_m, minimum=DOT_MIN, maximum=DOT_MAX)
    if block_n is not None:
        block_n = check_block("attention", "block_n", block_n, minimum=DOT_MIN, maximum=DOT_MAX)
    if interpreting():
        bm, bn, extra = block_m or 16, block_n or 16, {}
    else:
        bm, bn, stages = gpu_tiles(D, q.element_size(), shared_memory_limit(q.device), block_m, block_n)
        extra = {"num_warps": 4 if D <= 64 else 8, "num_stages": stages}
    bd = max(16, triton.next_power_of_2(D))
    o = torch.empty_like(q)
    q3, k3, v3, o3 = (t.view(B * H, t.shape[2], D) for t in (q, k, v, o))
    grid = (triton.cdiv(Sq, bm), B * H)
    try:
        attention_kernel[grid](q3, k3, v3, o3, Sq, Sk, D, scale,
                               q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1),
                               v3.stride(0), v3.stride(1), o3.stride(0), o3.stride(1),
                               BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, CAUSAL=bool(causal),
                               DOT_FP32=interpreting() and q.dtype == torch.bfloat16, **extra)
    except OutOfResources as e:          # our estimate was short: Triton's own count, in one line
        raise ValueError(f"attention: tiles {bm}x{bn} at head dim {D}: {e}") from None
    return o


def attention_reference(q, k, v, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """Materialised fp32 reference: softmax(q k^T * scale) v, causal top-left aligned."""
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        Sq, Sk = q.shape[-2], k.shape[-2]
        s = s.masked_fill(torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)
