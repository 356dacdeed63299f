"""Count the collectives a piece of code runs, and the bytes each rank sends in them.

    with count_collectives() as recs:
        loss.backward()
    sum(c.bytes_sent for c in recs)

Code that runs a collective calls ``record_collective(op, phase, full)`` next to it: ``full`` is the
whole tensor the collective is about (the all-reduced tensor; the gathered output of an
all-gather; the input of a reduce-scatter), and ``bytes_sent`` is what one rank sends in a ring
(Lab 05's α–β model): all-reduce 2(p−1)/p·S, all-gather and reduce-scatter (p−1)/p·S for S bytes.
Tensor parallelism (Lab 07) and ZeRO/FSDP (Lab 10) both record through here.

A collective inside a sub-group (3D parallelism, Lab 11) passes ``group=``: p is that group's size
and ``ranks`` names its members (global ranks), so a count can be split by dimension (tensor,
data, pipeline). An all-to-all (DeepSpeed-Ulysses, Lab 14) is recorded with its local tensor as
``full``: each rank keeps 1/p of it and sends the rest, (p−1)/p·S. A point-to-point send (a
pipeline stage handing its activation on, a ring attention step) is recorded with ``record_send``:
op "send", ``bytes_sent`` = the tensor's bytes, ``ranks`` = (source, dest).

Code that records nothing itself (a learner's function, run by a "check your work" picture or the
grader's harness) is watched instead: ``watch_collectives(phase, module)`` wraps torch.distributed's
collectives and logs (kind, elements, phase) of every call.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist

from labkit.collectives.alpha_beta import coefficients

_RECORDS: list[list] = []
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")   # collectives; "send" is point-to-point


@dataclass(frozen=True)
class Collective:
    """One recorded collective: ``op`` (all_reduce, all_gather, reduce_scatter, all_to_all, or
    send), ``phase`` (e.g. "forward", "backward", "step"), ``numel`` elements of the full tensor
    (an all-to-all's: the local tensor), ``bytes_sent`` by one rank; ``ranks``: the global ranks
    of its group ((source, destination) for a send; empty when nobody asked)."""

    op: str
    phase: str
    numel: int
    bytes_sent: float
    ranks: tuple[int, ...] = ()


@contextlib.contextmanager
def count_collectives():
    """Record every collective run inside the block (see the module docstring); yields the list."""
    records: list[Collective] = []
    _RECORDS.append(records)
    try:
        yield records
    finally:
        _RECORDS.remove(records)


def record_collective(op: str, phase: str, full: torch.Tensor, group=None) -> None:
    """Note one collective of the whole tensor ``full`` (module docstring) in every open count;
    ``group``: the process group it runs in (None: the default group)."""
    if op not in OPS:
        raise ValueError(f"record_collective: op must be one of {', '.join(OPS)}, got {op!r}")
    if not _RECORDS:
        return
    p = dist.get_world_size(group)
    nbytes = full.numel() * full.element_size()
    sent = (p - 1) / p * nbytes if op == "all_to_all" else coefficients("ring_" + op, p, nbytes)[1]
    ranks = tuple(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))
    for records in _RECORDS:
        records.append(Collective(op, phase, full.numel(), sent, ranks))


def record_send(phase: str, tensor: torch.Tensor, dst: int) -> None:
    """Note a point-to-point send of ``tensor`` from this rank to global rank ``dst``: one rank
    sends all of its bytes (numel · itemsize)."""
    if not _RECORDS:
        return
    rec = Collective("send", phase, tensor.numel(), float(tensor.numel() * tensor.element_size()),
                     (dist.get_rank(), dst))
    for records in _RECORDS:
        records.append(rec)


def watch_collectives(phase: dict, module=None) -> list:
    """Wrap torch.distributed's collectives to log (kind, elements, phase["now"]) of every call:
    kind "all_gather" / "reduce_scatter" for every variant of those two, else the function's
    name; elements = the biggest tensor argument (a list of tensors counts as their sum: the
    whole vector). Names the submission ``module`` imported from torch.distributed
    (``from torch.distributed import all_gather_single``) are wrapped there too. Returns the log."""
    log = []
    names = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
             "reduce_scatter_tensor", "reduce_scatter_single", "broadcast", "reduce", "all_to_all_single",
             "all_to_all")
    for name in names:
        original = getattr(dist, name, None)
        if original is None:
            continue

        kind = next((k for k in ("all_gather", "reduce_scatter") if name.startswith(k)), name)

        def watched(*args, _kind=kind, _original=original, **kwargs):
            sizes = [sum(t.numel() for t in a if isinstance(t, torch.Tensor)) if isinstance(a, (list, tuple))
                     else a.numel() for a in args if isinstance(a, (list, tuple, torch.Tensor))]
            log.append((_kind, max(sizes, default=0), phase["now"]))
            return _original(*args, **kwargs)

        setattr(dist, name, watched)
        for attr, value in list(vars(module).items()) if module is not None else ():
            if value is original:
                setattr(module, attr, watched)
    return log
