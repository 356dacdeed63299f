"""Scaling laws, fitted to measured data-parallel steps.

**Strong scaling** (fixed total work, more ranks): Amdahl's law. If a fraction s of the one-rank
time cannot be parallelised, t(n) = t(1)·(s + (1 − s)/n) and the speedup is

    S_Amdahl(n) = 1 / (s + (1 − s)/n)  ≤  1/s.

**Weak scaling** (fixed work *per rank*): Gustafson's law. If a fraction s of the *parallel run's*
time is serial, the same run would take s + (1 − s)·n on one rank, so the scaled speedup is

    S_Gustafson(n) = n − s·(n − 1).

Both use the **serial** fraction s (writing Gustafson with the parallel fraction is a common slip).
Scaling efficiency η(n) = S(n)/n. `fit_amdahl` and `fit_gustafson` recover s by least squares;
`measure_scaling` times our DDP's steps on real ranks for both kinds of scaling.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.distributed as dist

from labkit.checks import check_int, check_real
from labkit.model import GPT, GPTConfig, batch


def _fraction(fn: str, s) -> float:
    s = check_real(fn, "serial_fraction", s)
    if not 0 <= s <= 1:
        raise ValueError(f"{fn}: serial_fraction must lie in [0, 1], got {s}")
    return s


def amdahl_speedup(serial_fraction: float, n: int) -> float:
    """1 / (s + (1 − s)/n)."""
    s, n = _fraction("amdahl_speedup", serial_fraction), check_int("amdahl_speedup", "n", n, minimum=1)
    return 1.0 / (s + (1.0 - s) / n)


def gustafson_speedup(serial_fraction: float, n: int) -> float:
    """n − s·(n − 1), s = serial fraction of the parallel run's time."""
    s, n = _fraction("gustafson_speedup", serial_fraction), check_int("gustafson_speedup", "n", n, minimum=1)
    return n - s * (n - 1)


def efficiency(speedup: float, n: int) -> float:
    """η = speedup / n."""
    return check_real("efficiency", "speedup", speedup) / check_int("efficiency", "n", n, minimum=1)


def _points(fn, ns, values):
    ns = [check_int(fn, "n", n, minimum=1) for n in ns]
    values = [check_real(fn, "value", v, positive=True) for v in values]
    if len(ns) != len(values) or len(set(ns)) < 2:
        raise ValueError(f"{fn}: need one value per n and at least two different n (got {len(ns)}, {len(values)})")
    return ns, values


def fit_amdahl(ns: Sequence[int], times: Sequence[float]) -> float:
    """Serial fraction s from strong-scaling step times: least squares of t(n) = a + b/n, s = a/(a+b)."""
    ns, ts = _points("fit_amdahl", ns, times)
    xs = [1.0 / n for n in ns]
    mx, mt = statistics.fmean(xs), statistics.fmean(ts)
    b = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sum((x - mx) ** 2 for x in xs)
    a = mt - b * mx
    return a / (a + b)


def fit_gustafson(ns: Sequence[int], speedups: Sequence[float]) -> float:
    """Serial fraction s from weak-scaling scaled speedups S(n): least squares of n − S = s·(n − 1)."""
    ns, ss = _points("fit_gustafson", ns, speedups)
    return sum((n - s) * (n - 1) for n, s in zip(ns, ss)) / sum((n - 1) ** 2 for n in ns)


# --------------------------------------------------------------------------- measured

@dataclass
class ScalingPoint:
    """One launch: ``world`` ranks, ``per_rank`` sequences each, median ``step_s`` (seconds)."""

    world: int
    per_rank: int
    step_s: float


def _step_rank(rank, world, cfg, per_rank, steps, cap_mb):
    from labkit.bench import now
    from labkit.data_parallel.ddp import DDP
    from labkit.dist import device

    model = DDP(GPT(cfg, seed=0).to(device()), bucket_cap_mb=cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    times = []
    for step in range(steps + 1):
        tokens, targets = (t.to(device()) for t in batch(cfg, per_rank, seed=step * world + rank))
        opt.zero_grad(set_to_none=True)
        dist.barrier()
        t0 = now()
        model(tokens, targets)[1].backward()
        model.finish_gradient_synchronization()
        opt.step()
        times.append(now() - t0)
    return statistics.median(times[1:])


def measure_scaling(cfg: GPTConfig, worlds: Sequence[int], global_batch: int | None = None,
                    per_rank: int | None = None, steps: int = 5, cap_mb: float = 1.0) -> list[ScalingPoint]:
    """DDP step times on real ranks: strong scaling (``global_batch`` split over the ranks) or weak
    scaling (``per_rank`` sequences on every rank) — give exactly one of the two."""
    from labkit.dist import launch

    if (global_batch is None) == (per_rank is None):
        raise ValueError("measure_scaling: give exactly one of global_batch (strong) or per_rank (weak)")
    out = []
    for n in worlds:
        n = check_int("measure_scaling", "world", n, minimum=1)
        b = per_rank if per_rank is not None else global_batch // n
        if per_rank is None and global_batch % n:
            raise ValueError(f"measure_scaling: global_batch {global_batch} does not split over {n} ranks")
        check_int("measure_scaling", "sequences per rank", b, minimum=1)
        t = launch(_step_rank, n, cfg, b, steps, cap_mb, timeout=300)[0]
        out.append(ScalingPoint(n, b, t))
    return out
