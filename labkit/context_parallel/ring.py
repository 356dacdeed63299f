"""Ring attention (Liu, Zaharia & Abbeel 2023): attention over a sequence split across N ranks.

Each rank holds a chunk of the sequence — its queries, keys and values. Queries never move; the
key/value blocks travel round a ring. In step s (0 … N−1) rank r holds the block that started
on rank (r − s) mod N, folds it into its queries' online softmax (`attention.softmax_step`), and
meanwhile passes it on to rank r + 1: the send and receive for step s + 1 are posted *before*
step s computes, so the transfer overlaps the compute. After N steps every query has seen every
key, and no rank ever held more than two blocks.

Backward is a second lap. The key/value blocks go round again, and with each block travels the
running sum of its gradient (dK, dV): every rank adds its queries' share and passes it on. After
the lap the sums take one last hop home. dQ stays where the queries are.

Bytes one rank sends, with one block = B·H·(S/N)·D elements of k (and as many of v):

    forward    (N − 1) · 2 · block          k and v, N − 1 hops
    backward   (N − 1) · 2 · block          k and v again
               + N · 2 · block              dK and dV: N hops (round the ring and home)

— the same for every N: per rank a ring moves about twice the whole sequence's k and v,
however many ranks share it (`formulas.ring_bytes`).

Under a causal mask a contiguous chunk on rank r needs only the blocks of ranks ≤ r: rank 0
computes one (half-masked) tile, rank N − 1 computes N. The blocks still travel, so the
slowest rank sets the pace. ``layout="zigzag"`` (`layout.spans`) gives every rank one early and
one late half-chunk, and the same work.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from labkit.collectives.counting import record_send
from labkit.context_parallel.attention import backward_block, check_qkv, forward_block
from labkit.context_parallel.layout import check_layout, spans


def _world(group):
    return dist.get_rank(group), dist.get_world_size(group)


def _global(group, rank: int) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def _pass_on(send: torch.Tensor, group, phase: str, stats: dict | None):
    """Post: ``send`` to the next rank of the ring, a block of its size from the previous one.
    Returns (the receive buffer, the works to wait on)."""
    rank, world = _world(group)
    nxt, prv = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    recv = torch.empty_like(send)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt, group),
                                    dist.P2POp(dist.irecv, recv, prv, group)])
    record_send(phase, send, nxt)
    if stats is not None:
        stats["bytes_sent"] = stats.get("bytes_sent", 0) + send.numel() * send.element_size()
    return recv, works


def _wait(works) -> None:
    for w in works:
        w.wait()


def _pack(*ts: torch.Tensor) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in ts])


def _unpack(flat: torch.Tensor, like: torch.Tensor, n: int) -> list[torch.Tensor]:
    return [part.view_as(like) for part in flat.split(like.numel())][:n]


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, group, layout, stats):
        rank, world = _world(group)
        seq = q.shape[2] * world
        mine = spans(rank, world, seq, layout)
        B, H, s, D = q.shape
        state = [q.new_full((B, H, s), float("-inf")), q.new_zeros(B, H, s), q.new_zeros(B, H, s, D)]
        block = _pack(k, v)
        for step in range(world):
            if step < world - 1:                                  # post the next hop first: overlap
                incoming, works = _pass_on(block, group, "forward", stats)
            kb, vb = _unpack(block, k, 2)
            theirs = spans((rank - step) % world, world, seq, layout)
            forward_block(state, q, kb, vb, mine, theirs, causal, stats)
            if step < world - 1:
                _wait(works)
                block = incoming
        m, l, acc = state   # noqa: E741
        out = acc / l[..., None]
        lse = m + torch.log(l)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.group, ctx.layout, ctx.stats = causal, group, layout, stats
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        group, causal, layout, stats = ctx.group, ctx.causal, ctx.layout, ctx.stats
        rank, world = _world(group)
        seq = q.shape[2] * world
        mine = spans(rank, world, seq, layout)
        dout = dout.contiguous()
        delta = (dout * out).sum(dim=-1)                          # (B, H, s)
        dq = torch.zeros_like(q)
        block, grads, pending = _pack(k, v), None, None
        for step in range(world):
            if step < world - 1:
                incoming, works = _pass_on(block, group, "backward", stats)
            kb, vb = _unpack(block, k, 2)
            dk, dv = backward_block(q, kb, vb, dout, lse, delta, mine,
                                    spans((rank - step) % world, world, seq, layout), causal, dq)
            share = _pack(dk, dv)
            if pending is not None:                               # the running sum for this block
                _wait(pending[1])
                share = share + pending[0]
            pending = _pass_on(share, group, "backward", stats) if world > 1 else (share, [])
            if step < world - 1:
                _wait(works)
                block = incoming
        _wait(pending[1])                                         # my own block's sum, home
        dk, dv = _unpack(pending[0], k, 2)
        return dq, dk, dv, None, None, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, group=None,
                   layout: str = "contiguous", stats: dict | None = None) -> torch.Tensor:
    """This rank's rows of softmax attention over the whole sequence, by ring attention.

    q, k, v: (B, H, S/N, D), this rank's chunk of the sequence (``layout`` says which positions:
    "contiguous" — chunks in rank order — or "zigzag", `layout.spans`). ``causal`` masks by
    global position. ``group``: the process group of the N ranks (None: all ranks). Gradients
    flow to q, k and v through autograd. ``stats`` (a dict) accumulates ``bytes_sent`` and
    ``score_elements`` (q·kᵀ entries computed) on this rank.
    """
    fn = "ring_attention"
    check_qkv(fn, q, k, v)
    check_layout(fn, layout)
    if not dist.is_initialized():
        raise RuntimeError(f"{fn}: no process group; run inside labkit.dist.launch (or torchrun)")
    spans(dist.get_rank(group), dist.get_world_size(group), q.shape[2] * dist.get_world_size(group), layout)
    return _RingAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), bool(causal), group, layout, stats)
