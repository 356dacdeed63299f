"""DeepSpeed-Ulysses (Jacobs et al. 2023): attention over a split sequence by re-sharding heads.

Attention mixes positions but never heads: each head is an independent attention over the whole
sequence. So instead of passing blocks round, Ulysses trades the split: an **all-to-all** turns
"every rank has all H heads of S/N positions" into "every rank has H/N heads of all S positions",
each rank runs ordinary attention for its heads, and a second all-to-all turns the output back.

    q, k, v (B, H, S/N, D) --all-to-all--> (B, H/N, S, D) --attention--> (B, H/N, S, D)
                                                        --all-to-all--> out (B, H, S/N, D)

`all_to_all_4d(x, scatter_dim, gather_dim)` is that exchange: x is cut into N pieces along
``scatter_dim`` (the heads), piece j goes to rank j, and the N pieces a rank receives are joined
along ``gather_dim`` (the sequence) in rank order. Its backward is the same exchange the other
way round. H must be divisible by N.

Bytes one rank sends: an all-to-all keeps 1/N of its local tensor and sends the rest, so with one
block = B·H·(S/N)·D elements,

    forward    4 · (N − 1)/N · block       q, k, v in, the output back
    backward   4 · (N − 1)/N · block       the output's gradient in, dq, dk, dv back

— falling as the sequence is split further, where ring attention's stays ≈ 4 blocks
(`formulas`). Its limit: N ≤ H.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from labkit.collectives.counting import record_collective
from labkit.context_parallel.attention import attention, check_qkv
from labkit.context_parallel.layout import check_layout, positions, spans


# BEGIN SOLUTION (labkit's exchange, shown in Lab 14: it answers all_to_all_4d)
def all_to_all_4d(x: torch.Tensor, scatter_dim: int, gather_dim: int, group=None,
                  phase: str = "forward", stats: dict | None = None) -> torch.Tensor:
    """Cut ``x`` into N equal pieces along ``scatter_dim``; send piece j to rank j; return the
    pieces received from ranks 0 … N−1 joined along ``gather_dim`` (module docstring). One
    ``dist.all_to_all_single`` call; recorded for `count_collectives` and in ``stats``."""
    world = dist.get_world_size(group)
    if x.shape[scatter_dim] % world:
        raise ValueError(f"all_to_all_4d: dimension {scatter_dim} of size {x.shape[scatter_dim]} "
                         f"does not split into {world} equal pieces")
    if world == 1:
        return x
    send = torch.stack(x.chunk(world, dim=scatter_dim)).contiguous()  # (N, ...): piece j, rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    record_collective("all_to_all", phase, send, group)
    if stats is not None:
        sent = (world - 1) * recv[0].numel() * recv.element_size()
        stats["bytes_sent"] = stats.get("bytes_sent", 0) + sent
    return torch.cat(recv.unbind(0), dim=gather_dim)
# END SOLUTION


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scatter_dim, gather_dim, group, stats):
        ctx.dims, ctx.group, ctx.stats = (scatter_dim, gather_dim), group, stats
        return all_to_all_4d(x, scatter_dim, gather_dim, group, "forward", stats)

    @staticmethod
    def backward(ctx, grad):
        scatter_dim, gather_dim = ctx.dims
        return all_to_all_4d(grad.contiguous(), gather_dim, scatter_dim, ctx.group, "backward", ctx.stats), \
            None, None, None, None


# BEGIN SOLUTION (lab14_long_context)
def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                      group=None, layout: str = "contiguous", stats: dict | None = None):
    """This rank's rows of softmax attention over the whole sequence, by DeepSpeed-Ulysses.

    q, k, v: (B, H, S/N, D), this rank's chunk of the sequence (``layout`` as in
    `ring.ring_attention`); H divisible by N. ``causal`` masks by global position. Gradients flow
    through autograd. ``stats`` (a dict) accumulates ``bytes_sent`` on this rank.
    """
    fn = "ulysses_attention"
    check_qkv(fn, q, k, v)
    check_layout(fn, layout)
    if not dist.is_initialized():
        raise RuntimeError(f"{fn}: no process group; run inside labkit.dist.launch (or torchrun)")
    world = dist.get_world_size(group)
    if q.shape[1] % world:
        raise ValueError(f"{fn}: {q.shape[1]} heads do not split over {world} ranks (Ulysses "
                         f"needs heads divisible by the ranks; ring attention does not)")
    seq = q.shape[2] * world
    spans(dist.get_rank(group), world, seq, layout)                 # checks seq against the layout
    qh, kh, vh = (_AllToAll.apply(t, 1, 2, group, stats) for t in (q, k, v))   # (B, H/N, S, D) each
    pos = torch.cat([positions(r, world, seq, layout) for r in range(world)]).to(q.device)
    out = attention(qh, kh, vh, pos, pos, bool(causal))                   # (B, H/N, S, D)
    return _AllToAll.apply(out, 2, 1, group, stats)                       # (B, H, S/N, D)
# END SOLUTION


def _all_to_all_4d(x, scatter_dim, gather_dim, group=None):
    """DeepSpeed-Ulysses' re-sharding: cut x into N equal pieces along ``scatter_dim``, send piece j
    to rank j, and return the N pieces received (from ranks 0, 1, ..., N-1, in that order) joined
    along ``gather_dim``.

    x: a tensor of the same shape on every rank of ``group`` (None: all ranks); its size along
    scatter_dim is divisible by N. With (B, H, S/N, D) inputs, scatter_dim=1 and gather_dim=2
    turn "all heads of my S/N positions" into "H/N heads of all S positions"; (2, 1) turns it
    back. Use one ``dist.all_to_all_single`` (or ``dist.all_to_all``) call; on one rank return x.
    """
    # BEGIN SOLUTION
    # HINT: an all-to-all sends piece j of your tensor to rank j and receives rank j's piece for
    # HINT: you: cut along the dimension to scatter, exchange (dist.all_to_all_single), and join
    # HINT: what arrives along the dimension to gather.
    world = dist.get_world_size(group)
    if world == 1:
        return x
    send = torch.stack(x.chunk(world, dim=scatter_dim)).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return torch.cat(recv.unbind(0), dim=gather_dim)
    # END SOLUTION
