"""Softmax attention a block of keys at a time: the arithmetic under ring attention.

Shapes follow PyTorch's scaled_dot_product_attention: q, k, v are (B, H, S, D) — batch, heads,
sequence, head dimension — and attention is softmax(q·kᵀ/√D)·v over the last two, with an
optional causal mask (a query at position i sees keys at positions ≤ i).

**The online softmax** (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022). A query
row's softmax over all keys can be built one block of keys at a time from a running state
(m, l, acc): the largest score seen so far, the sum of exp(score − m), and the sum of
exp(score − m)·v. A new block with scores s and values v updates it by `softmax_step`:

    m' = max(m, max s);   l' = l·e^(m − m') + Σ e^(s − m');   acc' = acc·e^(m − m') + e^(s − m')·v

The rescaling by e^(m − m') keeps every exponent ≤ 0 (no overflow) and puts old and new terms
on the same footing; the answer is acc/l, and m + log l is the row's log-sum-exp ("lse"), which
the backward pass needs. A block whose scores are all masked (−∞) leaves the state as it was.

**Backward of one block** (FlashAttention-2, Dao 2023), given the row's final lse and
Δ = Σ_d dout·out: P = e^(s − lse), dV += Pᵀ·dout, dS = P ∘ (dout·vᵀ − Δ), dQ += dS·k/√D,
dK += dSᵀ·q/√D. Each block's share of the gradients is computed from that block alone.

A *tile* is one contiguous span of query positions against one contiguous span of key
positions (`labkit.context_parallel.layout.Span`): under a causal mask it is skipped (every key
is later than every query), computed whole (every key is at or before every query), or computed
with the mask (the diagonal).
"""
from __future__ import annotations

import math

import torch

from labkit.context_parallel.layout import Span

SKIP, WHOLE, DIAGONAL = "skip", "whole", "diagonal"


def check_qkv(fn: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """One line naming the problem unless q, k, v are tensors of one 4-D shape, dtype and device."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{fn}: {name} must be (batch, heads, seq, head_dim), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{fn}: {name} must be a floating-point tensor, got {t.dtype}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"{fn}: q, k, v must have one shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if len({q.dtype, k.dtype, v.dtype}) != 1 or len({q.device, k.device, v.device}) != 1:
        raise ValueError(f"{fn}: q, k, v must share one dtype and device, got {q.dtype}/{q.device}, "
                         f"{k.dtype}/{k.device}, {v.dtype}/{v.device}")


def masked_scores(q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                  causal: bool) -> torch.Tensor:
    """(B, H, Sq, Sk) scores q·kᵀ/√D, −∞ where a key comes after its query (if ``causal``).
    ``q_pos`` (Sq,) and ``k_pos`` (Sk,) are the rows' global positions."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(q_pos[:, None] < k_pos[None, :], float("-inf"))
    return s


def attention(q, k, v, q_pos, k_pos, causal: bool = False) -> torch.Tensor:
    """softmax(masked_scores)·v, (B, H, Sq, D): plain autograd ops (Ulysses and the reference)."""
    return torch.softmax(masked_scores(q, k, q_pos, k_pos, causal), dim=-1) @ v


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Full attention over the whole sequence in one process: what every version must equal."""
    check_qkv("reference_attention", q, k, v)
    pos = torch.arange(q.shape[2], device=q.device)
    return attention(q, k, v, pos, pos, causal)


def softmax_step(m, l, acc, scores, v):  # noqa: E741
    """Fold one block of keys into a running softmax-attention state; return the new (m, l, acc).

    The state of each query row, after the blocks seen so far: ``m`` (..., Sq) the largest score,
    ``l`` (..., Sq) the sum of exp(score - m), ``acc`` (..., Sq, D) the sum of exp(score - m) * v.
    A fresh state is m = -inf, l = 0, acc = 0. The new block: ``scores`` (..., Sq, Sk) and its
    values ``v`` (..., Sk, D). After the last block the attention output is acc / l.

    Rescale the old sums when the maximum grows (by exp(m_old - m_new)), so that no exp() ever
    sees a positive argument. A score of -inf (a masked key) counts for nothing; a row whose
    scores are all -inf so far must keep m = -inf, l = 0, acc = 0 (no NaN: beware -inf - -inf).
    Do not modify the arguments in place.
    """
    # BEGIN SOLUTION
    # HINT: online softmax: carry per row a running max, a running sum of exponentials and an
    # HINT: unnormalised output; when a new block raises the max, rescale what you carried. Rows
    # HINT: that have seen only masked scores need care (torch.where).
    m_new = torch.maximum(m, scores.amax(dim=-1))
    base = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)   # no −∞ − (−∞)
    alpha = torch.exp(m - base)                                                  # rescale the old terms
    p = torch.exp(scores - base[..., None])
    return m_new, l * alpha + p.sum(dim=-1), acc * alpha[..., None] + p @ v
    # END SOLUTION


def tile_kind(q_span: Span, k_span: Span, causal: bool) -> str:
    """SKIP, WHOLE or DIAGONAL for the tile of these query and key spans (module docstring)."""
    if not causal or q_span.start >= k_span.stop - 1:
        return WHOLE
    if q_span.stop - 1 < k_span.start:
        return SKIP
    return DIAGONAL


def _pos(span: Span, device) -> torch.Tensor:
    return torch.arange(span.start, span.stop, device=device)


def _rows(span: Span) -> slice:
    return slice(span.offset, span.offset + span.length)


def tiles(q_spans: list[Span], k_spans: list[Span], causal: bool):
    """The (q_span, k_span, kind) tiles to compute, skipped ones left out."""
    for qs in q_spans:
        for ks in k_spans:
            kind = tile_kind(qs, ks, causal)
            if kind != SKIP:
                yield qs, ks, kind


def forward_block(state, q, k, v, q_spans, k_spans, causal: bool, stats: dict | None = None) -> None:
    """Fold the key/value block (k, v) — holding ``k_spans`` — into ``state`` = [m, l, acc] of
    the queries q (holding ``q_spans``), in place, tile by tile; ``stats["score_elements"]``
    counts the q·kᵀ entries computed."""
    m, l, acc = state     # noqa: E741
    for qs, ks, kind in tiles(q_spans, k_spans, causal):
        r, c = _rows(qs), _rows(ks)
        s = masked_scores(q[:, :, r], k[:, :, c], _pos(qs, q.device), _pos(ks, q.device), kind == DIAGONAL)
        m[:, :, r], l[:, :, r], acc[:, :, r] = softmax_step(m[:, :, r], l[:, :, r], acc[:, :, r], s, v[:, :, c])
        if stats is not None:
            stats["score_elements"] = stats.get("score_elements", 0) + s.numel()


def backward_block(q, k, v, dout, lse, delta, q_spans, k_spans, causal: bool, dq):
    """This block's share of the gradients: adds to ``dq`` in place and returns (dk, dv) for
    (k, v). ``lse`` (B, H, Sq) and ``delta`` = Σ_d dout·out (B, H, Sq) belong to the queries."""
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    scale = 1.0 / math.sqrt(q.shape[-1])
    for qs, ks, kind in tiles(q_spans, k_spans, causal):
        r, c = _rows(qs), _rows(ks)
        s = masked_scores(q[:, :, r], k[:, :, c], _pos(qs, q.device), _pos(ks, q.device), kind == DIAGONAL)
        p = torch.exp(s - lse[:, :, r, None])                               # (B, H, sq, sk)
        do = dout[:, :, r]
        dv[:, :, c] += p.transpose(-1, -2) @ do
        ds = p * (do @ v[:, :, c].transpose(-1, -2) - delta[:, :, r, None])
        dq[:, :, r] += ds @ k[:, :, c] * scale
        dk[:, :, c] += ds.transpose(-1, -2) @ q[:, :, r] * scale
    return dk, dv
