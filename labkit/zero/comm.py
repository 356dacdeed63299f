"""The communication of ZeRO and FSDP: all-gather of parameter shards, reduce-scatter of gradients.

Every sharded stage uses the same two collectives on flat, padded vectors (`labkit.zero.flat`):

- **reduce-scatter** of a (Ψ',) gradient: rank r receives the sum over ranks of its (Ψ'/N,) slice;
- **all-gather** of a (Ψ'/N,) parameter shard: every rank receives the whole (Ψ',) vector.

In a ring each sends (N−1)/N of the vector's bytes (Lab 05). Both are recorded with
`labkit.collectives.count_collectives` (op, phase, elements, bytes one rank sends), so a step's
traffic can be counted and compared with the closed forms in `labkit.zero.formulas`. On one rank
nothing is sent and nothing is recorded. Sums only: the callers divide by N.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from labkit.collectives.counting import record_collective
from labkit.compat import torch_fallbacks

torch_fallbacks()   # all_gather_single / reduce_scatter_single on torch < 2.13


def all_gather_flat(shard: torch.Tensor, phase: str) -> torch.Tensor:
    """A new (N·len(shard),) tensor: every rank's ``shard`` in rank order."""
    world = dist.get_world_size()
    if world == 1:
        return shard.clone()
    out = torch.empty(world * shard.numel(), dtype=shard.dtype, device=shard.device)
    dist.all_gather_single(out, shard.contiguous())
    record_collective("all_gather", phase, out)
    return out


def all_gather_flat_async(shard: torch.Tensor, phase: str):
    """(out, work): `all_gather_flat` posted without waiting; ``out`` is ready once ``work.wait()``
    returns (``work`` is None on one rank, where ``out`` is ready at once)."""
    world = dist.get_world_size()
    if world == 1:
        return shard.clone(), None
    out = torch.empty(world * shard.numel(), dtype=shard.dtype, device=shard.device)
    work = dist.all_gather_single(out, shard.contiguous(), async_op=True)
    record_collective("all_gather", phase, out)
    return out, work


def reduce_scatter_flat(flat: torch.Tensor, phase: str, async_op: bool = False):
    """(shard, work): this rank's (len(flat)/N,) slice of the sum of ``flat`` over ranks; ``work``
    is the handle to wait on when ``async_op`` (None otherwise, or on one rank). Keep ``flat``
    alive until the work is done."""
    world = dist.get_world_size()
    if world == 1:
        return flat.clone(), None
    out = torch.empty(flat.numel() // world, dtype=flat.dtype, device=flat.device)
    work = dist.reduce_scatter_single(out, flat, async_op=async_op)
    record_collective("reduce_scatter", phase, flat)
    return out, work


def all_reduce_(t: torch.Tensor, phase: str) -> None:
    """Sum ``t`` over ranks, in place."""
    if dist.get_world_size() > 1:
        dist.all_reduce(t)
        record_collective("all_reduce", phase, t)


def broadcast_from_rank0_(tensors) -> None:
    """Make every rank's ``tensors`` equal rank 0's (in place), as DDP does when it starts."""
    if dist.get_world_size() > 1:
        with torch.no_grad():
            for t in tensors:
                dist.broadcast(t, src=0)
