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

**Which ranks.** By default the operators (and `layers.tp_rank_world`) use the default process group:
every launched rank is one tensor-parallel rank. Inside ``with tp_group(g):`` they use the
sub-group ``g`` instead — 3D parallelism (Lab 11) runs several tensor-parallel groups side by side.
Each autograd function remembers the group it was built under in forward, so its backward talks
to the same ranks even when backward runs after the ``with`` block has ended.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from labkit.collectives.counting import Collective, count_collectives  # noqa: F401 - re-exported
from labkit.collectives.counting import record_collective

_GROUP = None   # the tensor-parallel group in force; None = the default (whole-world) group


def current_group():
    """The process group tensor parallelism uses now (None: the default group)."""
    return _GROUP


@contextlib.contextmanager
def tp_group(group):
    """Within the block, tensor-parallel layers and operators split over ``group`` (a
    torch.distributed ProcessGroup; None = the default group). Nested uses restore on exit."""
    global _GROUP
    old, _GROUP = _GROUP, group
    try:
        yield group
    finally:
        _GROUP = old


def _record(op: str, phase: str, full: torch.Tensor, group=None) -> None:
    record_collective(op, phase, full, group)


def _all_reduce(x: torch.Tensor, phase: str, group=None) -> torch.Tensor:
    x = x.contiguous().clone()
    if dist.get_world_size(group) > 1:
        _record("all_reduce", phase, x, group)
        dist.all_reduce(x, group=group)
    return x


def _all_gather(x: torch.Tensor, dim: int, phase: str, group=None) -> torch.Tensor:
    p = dist.get_world_size(group)
    if p == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(p)]
    dist.all_gather(parts, x.contiguous(), group=group)
    out = torch.cat(parts, dim=dim)
    _record("all_gather", phase, out, group)
    return out


def _reduce_scatter(x: torch.Tensor, dim: int, phase: str, group=None) -> torch.Tensor:
    from labkit.collectives import ring_reduce_scatter

    p, r = dist.get_world_size(group), dist.get_rank(group)
    if p == 1:
        return x
    if group is not None:
        raise NotImplementedError("sequence parallelism runs on the default group only (Lab 05's ring "
                                  "reduce-scatter spans all ranks); use tp_group(None)")
    _record("reduce_scatter", phase, x)
    moved = x.movedim(dim, 0).contiguous()                     # chunks along `dim` become contiguous
    out = torch.empty_like(moved.chunk(p)[r])
    ring_reduce_scatter(out, moved)
    return out.movedim(0, dim)


def _split(x: torch.Tensor, dim: int, group=None) -> torch.Tensor:
    return x.chunk(dist.get_world_size(group), dim=dim)[dist.get_rank(group)].contiguous()


# BEGIN SOLUTION (labkit's f and g: the group in force, each collective recorded)
class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.group = _GROUP
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, "backward", ctx.group)


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _all_reduce(x, "forward", _GROUP)

    @staticmethod
    def backward(ctx, grad):
        return grad
# END SOLUTION


class _GatherLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.group = _GROUP
        return _all_gather(x, -1, "forward", _GROUP)

    @staticmethod
    def backward(ctx, grad):
        return _split(grad, -1, ctx.group)


class _SplitLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.group = _GROUP
        return _split(x, -1, _GROUP)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, -1, "backward", ctx.group)


class _ReduceScatterSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.group = _GROUP
        return _reduce_scatter(x, 1, "forward", _GROUP)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, 1, "backward", ctx.group)


class _AllGatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.group = _GROUP
        return _all_gather(x, 1, "forward", _GROUP)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter(grad, 1, "backward", ctx.group)


# BEGIN SOLUTION (labkit's f and g)
def copy_to_tp(x: torch.Tensor) -> torch.Tensor:
    """Megatron's f: identity forward, all-reduce backward."""
    return _CopyToTP.apply(x)


def reduce_from_tp(x: torch.Tensor) -> torch.Tensor:
    """Megatron's g: all-reduce forward, identity backward."""
    return _ReduceFromTP.apply(x)
# END SOLUTION


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


# Lab 07's exercises: f and g on the default group, nothing recorded.
# BEGIN SOLUTION
class _PlainCopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class _PlainReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad
# END SOLUTION


def _copy_to_tp(x):
    """Megatron's f: return x unchanged in forward; in backward, all-reduce (sum) the gradient.

    x: a tensor, the same on every rank (a replicated activation entering a split region).
    Write it as a torch.autograd.Function (forward / backward static methods) and return
    ``YourFunction.apply(x)``.
    """
    # BEGIN SOLUTION
    # HINT: a torch.autograd.Function: forward changes nothing, but must hand autograd a new tensor
    # HINT: object, not x itself; backward is where the ranks' gradients are summed (dist.all_reduce),
    # HINT: on a tensor you own rather than the gradient autograd gave you.
    return _PlainCopyToTP.apply(x)
    # END SOLUTION


def _reduce_from_tp(x):
    """Megatron's g: in forward, return the sum of x over all ranks; in backward, pass the
    gradient through unchanged.

    x: a tensor of the same shape on every rank (each rank's partial result). Do not modify x
    in place (clone before dist.all_reduce). Write it as a torch.autograd.Function.
    """
    # BEGIN SOLUTION
    # HINT: the mirror image of copy_to_tp: the all-reduce (of a clone) moves to forward, and
    # HINT: backward passes the gradient through.
    return _PlainReduceFromTP.apply(x)
    # END SOLUTION
