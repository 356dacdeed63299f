"""DTensor's own choices, measured on real ranks: output placements, collectives and their bytes.

`run_cases(rank, world, mesh_shape, cases)` (a `labkit.dist.launch` rank function) builds a
DeviceMesh (``init_device_mesh``: gloo ranks on CPU) and, for each case (equation, placements of
a, placements of b, shape of a, shape of b, seed), makes the two operands as DTensors with those
placements (a "P" operand: every rank holds a summand), runs ``torch.einsum`` on them under
`CommBytesMode` and returns the output's placements, the collectives DTensor ran (name → count)
and the bytes this rank sent in them, and the largest difference of the result from the
single-process einsum.

`CommBytesMode` is PyTorch's ``CommDebugMode`` (which counts DTensor's collectives) plus the bytes
one rank sends in each, by Lab 05's ring formulas: all-gather (p−1)/p of the gathered tensor,
reduce-scatter (p−1)/p of its input, all-reduce 2(p−1)/p, all-to-all (p−1)/p.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor.debug import CommDebugMode

from labkit.sharding.rules import parse_placement

_KIND = (("all_gather", "all_gather"), ("reduce_scatter", "reduce_scatter"), ("all_reduce", "all_reduce"),
         ("all_to_all", "all_to_all"))


def _group_size(args, kwargs) -> int:
    from torch.distributed.distributed_c10d import _resolve_process_group

    name = next((a for a in [*args, *kwargs.values()] if isinstance(a, str) and a not in ("sum", "avg")), None)
    return _resolve_process_group(name).size() if name is not None else dist.get_world_size()


class CommBytesMode(CommDebugMode):
    """``CommDebugMode`` that also adds up ``bytes_sent`` by this rank (module docstring)."""

    def __init__(self):
        super().__init__()
        self.bytes_sent = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if out is NotImplemented or isinstance(func, torch._ops.HigherOrderOperator):
            return out
        name = str(func._overloadpacket).split(".")[-1]
        kind = next((k for prefix, k in _KIND if name.startswith(prefix)), None)
        if kind is not None and args and isinstance(args[0], torch.Tensor):
            p = _group_size(args[1:], kwargs or {})
            nbytes = args[0].numel() * args[0].element_size()          # this rank's input
            self.bytes_sent += {"all_gather": (p - 1) * nbytes, "reduce_scatter": (p - 1) / p * nbytes,
                                "all_reduce": 2 * (p - 1) / p * nbytes, "all_to_all": (p - 1) / p * nbytes}[kind]
        return out


def to_placement(p: str):
    """DTensor's placement object for "S(i)", "R" or "P"."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    kind, i = parse_placement(p)
    return Shard(i) if kind == "S" else Replicate() if kind == "R" else Partial()


def from_placement(p) -> str:
    """"S(i)", "R" or "P" for a DTensor placement object."""
    if p.is_shard():
        return f"S({p.dim})"
    return "R" if p.is_replicate() else "P"


def make_dtensor(full: torch.Tensor, mesh, placements: tuple):
    """A DTensor equal to ``full`` with ``placements``; along a "P" mesh dimension each rank holds
    full/n (so the summands add up to it exactly in binary for n a power of two)."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    objs = [to_placement(p) for p in placements]
    partial = [i for i, p in enumerate(placements) if p == "P"]
    scale = 1.0
    for i in partial:
        scale *= mesh.size(i)
    spread = [Replicate() if i in partial else o for i, o in enumerate(objs)]
    local = distribute_tensor(full / scale, mesh, spread).to_local()
    return DTensor.from_local(local, mesh, objs, run_check=False, shape=full.shape, stride=full.stride())


def run_cases(rank: int, world: int, mesh_shape: tuple, cases: list) -> list[dict]:
    """For each (equation, a, b, shape_a, shape_b, seed): {"out": placements, "counts": {collective:
    calls}, "bytes": sent by this rank, "err": max |result − einsum|} (module docstring)."""
    import logging

    from torch.distributed.device_mesh import init_device_mesh

    # full_tensor() of a (P, P) result warns (with a timestamp) that it runs two all-reduces
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    mesh = init_device_mesh("cpu", tuple(mesh_shape))
    results = []
    for equation, a, b, shape_a, shape_b, seed in cases:
        g = torch.Generator().manual_seed(seed)
        full_a = torch.randn(*shape_a, dtype=torch.float64, generator=g)
        full_b = torch.randn(*shape_b, dtype=torch.float64, generator=g)
        da, db = make_dtensor(full_a, mesh, tuple(a)), make_dtensor(full_b, mesh, tuple(b))
        with CommBytesMode() as comm:
            out = torch.einsum(equation, da, db)
        counts = {str(k).split(".")[-1]: v for k, v in comm.get_comm_counts().items()}
        err = (out.full_tensor() - torch.einsum(equation, full_a, full_b)).abs().max().item()
        results.append({"out": tuple(from_placement(p) for p in out.placements), "counts": counts,
                        "bytes": comm.bytes_sent, "err": err})
    return results
