"""An MLP y = gelu(x·W1)·W2 split two ways with DTensor, and the bytes each rank sends.

x is (m, h) — m tokens — W1 (h, f), W2 (f, h). N = N1·N2 ranks.

**1-D tensor parallelism** (Megatron; Lab 07) on a (N,) mesh: x replicated, W1 cut by columns
("S(1)"), W2 by rows ("S(0)"). The product leaves every rank a summand of y (Partial); one
all-reduce makes it whole:

    bytes per rank = 2·(N−1)/N · m·h·e                          (e bytes per element)

**2-D sharding** on an (N1, N2) mesh: activations and weights are cut along both mesh
dimensions. x enters as ("R", "S(1)") — its features cut over the mesh's second dimension —
and W1 as ("S(1)", "S(0)"). By the propagation rule (`rules`) the product is ("S(1)", "P"): a
reduce-scatter over the second mesh dimension (cutting the rows) and an all-gather back along
it give gelu its input ("S(1)", "R"). W2 is ("S(0)", "S(1)"), the product ("P", "S(1)"), and a
reduce-scatter plus all-gather over the first mesh dimension return y to x's layout:

    bytes per rank = 2·(N2−1)·m·f/N + 2·(N1−1)·m·h/N

— falling like 1/√N on a square mesh, where 1-D's stays ≈ 2·m·h. With f = 4h the 2-D layout
sends more on a 2 × 2 mesh, the same on 4 × 4, and less from 5 × 5 on (`crossover`). What 1-D buys with its
bytes: nothing of x is cut, so every rank holds all m·h of the activations; 2-D holds m·h/N2.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from labkit.checks import check_int

SCHEMES = ("1-D", "2-D")


def bytes_1d(m: int, h: int, world: int, itemsize: int = 8) -> float:
    """Bytes one rank sends for one forward of the MLP under 1-D tensor parallelism."""
    return 2 * (world - 1) / world * m * h * itemsize


def bytes_2d(m: int, h: int, f: int, n1: int, n2: int, itemsize: int = 8) -> float:
    """Bytes one rank sends for one forward of the MLP under the 2-D layout on an (n1, n2) mesh."""
    n = n1 * n2
    return (2 * (n2 - 1) * m * f + 2 * (n1 - 1) * m * h) / n * itemsize


def crossover(h: int, f: int, m: int = 1) -> int:
    """The smallest n such that the 2-D layout on an n × n mesh sends fewer bytes than 1-D on n²."""
    for n in range(2, 1000):
        if bytes_2d(m, h, f, n, n) < bytes_1d(m, h, n * n):
            return n
    raise ValueError("crossover: none below a 1000 x 1000 mesh")


def mlp_rank(rank: int, world: int, scheme: str, m: int, h: int, f: int, seed: int = 0) -> dict:
    """One forward of the MLP on this rank's DTensors (``scheme`` "1-D" on (world,), "2-D" on
    (2, world/2)); returns {"err": max |y − one process|, "bytes": sent by this rank (counted by
    `dtensor.CommBytesMode`), "counts": collectives by name, "x_local": elements of x held}."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    from labkit.sharding.dtensor import CommBytesMode, from_placement, to_placement

    if scheme not in SCHEMES:
        raise ValueError(f"mlp_rank: scheme must be one of {SCHEMES}, got {scheme!r}")
    check_int("mlp_rank", "world", world, minimum=1)
    g = torch.Generator().manual_seed(seed)
    x, w1, w2 = (torch.randn(*s, dtype=torch.float64, generator=g) for s in ((m, h), (h, f), (f, h)))
    want = F.gelu(x @ w1) @ w2
    pl = lambda *ps: [to_placement(p) for p in ps]                                    # noqa: E731
    if scheme == "1-D":
        mesh = init_device_mesh("cpu", (world,))
        dx, d1, d2 = (distribute_tensor(t, mesh, pl(p)) for t, p in ((x, "R"), (w1, "S(1)"), (w2, "S(0)")))
        with CommBytesMode() as comm:
            y = (F.gelu(dx @ d1) @ d2).redistribute(mesh, pl("R"))
    else:
        mesh = init_device_mesh("cpu", (2, world // 2))
        dx = distribute_tensor(x, mesh, pl("R", "S(1)"))
        d1, d2 = distribute_tensor(w1, mesh, pl("S(1)", "S(0)")), distribute_tensor(w2, mesh, pl("S(0)", "S(1)"))
        with CommBytesMode() as comm:
            hid = (dx @ d1).redistribute(mesh, pl("S(1)", "S(0)")).redistribute(mesh, pl("S(1)", "R"))
            y = (F.gelu(hid) @ d2).redistribute(mesh, pl("S(0)", "S(1)")).redistribute(mesh, pl("R", "S(1)"))
    return {"err": (y.full_tensor() - want).abs().max().item(), "bytes": comm.bytes_sent,
            "counts": {str(k).split(".")[-1]: v for k, v in comm.get_comm_counts().items()},
            "out": tuple(from_placement(p) for p in y.placements), "x_local": dx.to_local().numel()}
