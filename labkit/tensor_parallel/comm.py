"""The communication of tensor parallelism: Megatron's conjugate operators, as autograd functions.

Megatron-LM (Shoeybi et al. 2019) needs only two operators around a split layer pair:

- ``f`` (`copy_to_tp`): identity in forward, all-reduce of the gradient in backward — placed where
  a replicated activation enters the split region (every rank used it; their gradients add up);
- ``g`` (`reduce_from_tp`): all-reduce in forward, identity in backward — placed where the ranks'
  partial sums leave the split region.

They are *conjugate*: each one's backward is the other's forward. Sequence parallelism
(Korthikanti et al. 2022) replaces g by a reduce-scatter along the sequence (`reduce_scatter_seq`)
and f by an all-gather along the sequence (`all_gather_seq`), again a conjugate pair. `gather_last`
and `split_last` move between a split and a full last dimension.

Every collective is recorded while `count_collectives()` (`labkit.collectives.counting`) is active: its name, the pass
("forward"/"backward"), the elements of the full tensor, and the bytes one rank sends in a ring
(all-reduce 2(p−1)/p·S, all-gather and reduce-scatter (p−1)/p·S; Lab 05's α–β model). The
reduce-scatter is Lab 05's ring.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from labkit.collectives.counting import Collective, count_collectives  # noqa: F401 - re-exported
from labkit.collectives.counting import record_collective as _record


def _all_reduce(x: torch.Tensor, phase: str) -> torch.Tensor:
    x = x.contiguous().clone()
    if dist.get_world_size() > 1:
        _record("all_reduce", phase, x)
        dist.all_reduce(x)
    return x


def _all_gather(x: torch.Tensor, dim: int, phase: str) -> torch.Tensor:
    p = dist.get_world_size()
    if p == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(p)]
    dist.all_gather(parts, x.contiguous())
    out = torch.cat(parts, dim=dim)
    _record("all_gather", phase, out)
    return out


def _reduce_scatter(x: torch.Tensor, dim: int, phase: str) -> torch.Tensor:
    from labkit.collectives import ring_reduce_scatter

    p, r = dist.get_world_size(), dist.get_rank()
    if p == 1:
        return x
    _record("reduce_scatter", phase, x)
    moved = x.movedim(dim, 0).contiguous()                     # chunks along `dim` become contiguous
    out = torch.empty_like(moved.chunk(p)[r])
    ring_reduce_scatter(out, moved)
    return out.movedim(0, dim)


def _split(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x.chunk(dist.get_world_size(), dim=dim)[dist.get_rank()].contiguous()


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, "backward")


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _all_reduce(x, "forward")

    @staticmethod
    def backward(ctx, grad):
        return grad


class _GatherLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _all_gather(x, -1, "forward")

    @staticmethod
    def backward(ctx, grad):
        return _split(grad, -1)


class _SplitLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _split(x, -1)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, -1, "backward")


class _ReduceScatterSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _reduce_scatter(x, 1, "forward")

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, 1, "backward")


class _AllGatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _all_gather(x, 1, "forward")

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter(grad, 1, "backward")


def copy_to_tp(x: torch.Tensor) -> torch.Tensor:
    """Megatron's f: identity forward, all-reduce backward."""
    return _CopyToTP.apply(x)


def reduce_from_tp(x: torch.Tensor) -> torch.Tensor:
    """Megatron's g: all-reduce forward, identity backward."""
    return _ReduceFromTP.apply(x)


def gather_last(x: torch.Tensor) -> torch.Tensor:
    """All-gather along the last dim forward (split ranks' columns into the full width); split backward."""
    return _GatherLast.apply(x)


def split_last(x: torch.Tensor) -> torch.Tensor:
    """Keep this rank's slice of the last dim forward; all-gather the gradient backward."""
    return _SplitLast.apply(x)


def reduce_scatter_seq(x: torch.Tensor) -> torch.Tensor:
    """Sequence parallelism's g: sum over ranks and keep this rank's slice of dim 1 (the sequence)
    forward; all-gather along the sequence backward. x: (B, T, h) -> (B, T/t, h)."""
    return _ReduceScatterSeq.apply(x)


def all_gather_seq(x: torch.Tensor) -> torch.Tensor:
    """Sequence parallelism's f: all-gather along dim 1 forward; reduce-scatter backward.
    x: (B, T/t, h) -> (B, T, h)."""
    return _AllGatherSeq.apply(x)
