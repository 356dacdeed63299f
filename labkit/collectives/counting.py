"""Count the collectives a piece of code runs, and the bytes each rank sends in them.

    with count_collectives() as recs:
        loss.backward()
    sum(c.bytes_sent for c in recs)

Code that runs a collective calls ``record_collective(op, phase, full)`` next to it: ``full`` is the
whole tensor the collective is about (the all-reduced tensor; the gathered output of an
all-gather; the input of a reduce-scatter), and ``bytes_sent`` is what one rank sends in a ring
(Lab 05's α–β model): all-reduce 2(p−1)/p·S, all-gather and reduce-scatter (p−1)/p·S for S bytes.
Tensor parallelism (Lab 07) and ZeRO/FSDP (Lab 10) both record through here.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist

from labkit.collectives.alpha_beta import coefficients

_RECORDS: list[list] = []
OPS = ("all_reduce", "all_gather", "reduce_scatter")


@dataclass(frozen=True)
class Collective:
    """One recorded collective: ``op`` (all_reduce, all_gather, reduce_scatter), ``phase``
    (e.g. "forward", "backward", "step"), ``numel`` elements of the full tensor, ``bytes_sent`` by
    one rank."""

    op: str
    phase: str
    numel: int
    bytes_sent: float


@contextlib.contextmanager
def count_collectives():
    """Record every collective run inside the block (see the module docstring); yields the list."""
    records: list[Collective] = []
    _RECORDS.append(records)
    try:
        yield records
    finally:
        _RECORDS.remove(records)


def record_collective(op: str, phase: str, full: torch.Tensor) -> None:
    """Note one collective of the whole tensor ``full`` (module docstring) in every open count."""
    if op not in OPS:
        raise ValueError(f"record_collective: op must be one of {', '.join(OPS)}, got {op!r}")
    p = dist.get_world_size()
    sent = coefficients("ring_" + op, p, full.numel() * full.element_size())[1]
    for records in _RECORDS:
        records.append(Collective(op, phase, full.numel(), sent))
