"""Time all-reduce algorithms on real gloo ranks (Lab 05's timer; the planner of Lab 11 reuses it).

`time_all_reduces(p, sizes)` returns {(algorithm, bytes): seconds}: a barrier, each call timed on
every rank with `labkit.bench.now`, the slowest rank's time, the minimum over ``repeat`` calls.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from labkit.bench import now
from labkit.collectives.recursive import recursive_doubling_all_reduce
from labkit.collectives.ring import ring_all_reduce
from labkit.collectives.tree import tree_broadcast, tree_reduce

TIMED = ("ring_all_reduce", "recursive_doubling_all_reduce", "tree_all_reduce", "gloo_all_reduce")
SIZES = (256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)

def _tree_all_reduce(x):
    return tree_reduce(x, 0) + tree_broadcast(x, 0)


def gloo_all_reduce(x):
    """torch's own all-reduce (gloo's algorithm), in place."""
    dist.all_reduce(x)


_TIMED_FNS = {"ring_all_reduce": ring_all_reduce, "recursive_doubling_all_reduce": recursive_doubling_all_reduce,
              "tree_all_reduce": _tree_all_reduce, "gloo_all_reduce": gloo_all_reduce}


def _time_rank(rank, n, sizes, algorithms, repeat):
    """Per (algorithm, bytes): the minimum over ``repeat`` calls of the slowest rank's time."""
    out = {}
    for nbytes in sizes:
        x = torch.ones(nbytes // 4)
        for name in algorithms:
            fn = _TIMED_FNS[name]
            fn(x)  # warm-up
            samples = []
            for _ in range(repeat):
                dist.barrier()
                t0 = now()
                fn(x)
                dt = torch.tensor([now() - t0], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)     # harness only: the slowest rank's time
                samples.append(float(dt))
            out[(name, nbytes)] = min(samples)  # on a shared CPU other processes only ever add time
    return out


def time_all_reduces(p: int = 4, sizes=SIZES, algorithms=TIMED, repeat: int = 15) -> dict:
    """{(algorithm, bytes): seconds} on p gloo ranks: a barrier, each call timed on every rank, the
    slowest rank's time, the minimum of ``repeat`` calls. gloo_all_reduce is torch's own."""
    from labkit.dist import launch

    return launch(_time_rank, p, tuple(sizes), tuple(algorithms), repeat, backend="gloo", timeout=300)[0]


def samples_of(measured: dict, p: int, algorithms=TIMED[:3]) -> list:
    """``measured`` as fit_alpha_beta samples [(algorithm, p, bytes, seconds)] (modelled algorithms only)."""
    return [(a, p, n, t) for (a, n), t in measured.items() if a in algorithms]
