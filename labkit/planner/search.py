"""The auto-parallel planner: enumerate 3D-parallel plans, drop those that break a rule or do not
fit in memory, predict the rest, and sort them fastest first.

    best = plan(model, cluster, global_batch)[0]            # a `Prediction`; best.plan is the `Plan`
    found = search(model, cluster, global_batch)            # .plans, .rejected (with reasons), .considered
    why_not(model, cluster, Plan(dp=4, tp=8, pp=2), 512)    # None, or the reason it is rejected

**Candidates.** tp runs over the divisors of gcd(heads, gpus) (a tp group spread over two nodes
is rejected, with its reason, unless ``allow_cross_node_tp``); pp over the divisors of layers
with tp·pp | gpus; dp = gpus/(tp·pp); then each micro-batch size in ``micro_batches``, each
v | layers/pp (interleaving, pp > 1, up to ``max_virtual_stages``), each ZeRO stage and
recompute policy. So the number of candidates is about

    d(heads) · d(layers) · |micro_batches| · d(layers/pp) · |zero_stages| · |recompute|

(d = number of divisors) — it grows with the divisors of the model's sizes, *not* with the number
of GPUs: nothing loops over ranks (`labkit.planner.grid.worst_span` looks at one group per
residue mod gpus_per_node). For a 1T-parameter model (128 layers, 160 heads) on 4096 GPUs that is
a few thousand candidates, and each costs one memory estimate plus, if it fits, one prediction
(tests/test_planner.py times it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from labkit.checks import check_int
from labkit.planner.cost import Cluster, Prediction, _predict
from labkit.planner.grid import Plan, problems
from labkit.planner.memory import GiB, memory_per_gpu
from labkit.planner.model import RECOMPUTE, Model, _check_model


@dataclass(frozen=True)
class Rejection:
    """A candidate ``plan`` left out, and why (one line)."""

    plan: Plan
    reason: str


@dataclass
class SearchResult:
    """Feasible ``plans`` (`Prediction`s, fastest first), the ``rejected`` candidates with their
    reasons, and how many candidates were ``considered`` (= len(plans) + len(rejected))."""

    plans: list[Prediction]
    rejected: list[Rejection] = field(default_factory=list)

    @property
    def considered(self) -> int:
        return len(self.plans) + len(self.rejected)

    @property
    def best(self) -> Prediction:
        if not self.plans:
            raise ValueError("search: no plan fits; see .rejected for the reasons")
        return self.plans[0]


MAX_DIVIDED = 10 ** 12   # model.layers and model.heads: their divisors are listed in O(√n) steps


def divisors(n: int) -> list[int]:
    """The divisors of n ≥ 1, ascending (n <= `MAX_DIVIDED`: O(√n) steps)."""
    n = check_int("divisors", "n", n, minimum=1, maximum=MAX_DIVIDED)
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def memory_reason(needed: float, limit: float) -> str:
    """"needs 91.2 GiB per GPU, has 80.0 GiB" (bytes in, GiB = 2³⁰ bytes out)."""
    return f"needs {needed / GiB:.1f} GiB per GPU, has {limit / GiB:.1f} GiB"


def _check_args(fn, model, cluster, global_batch, **flags):
    _check_model(fn, model)
    if not isinstance(cluster, Cluster):
        raise TypeError(f"{fn}: cluster must be a labkit.planner.Cluster, got {type(cluster).__name__}")
    for name in ("layers", "heads"):
        check_int(fn, f"model.{name}", getattr(model, name), maximum=MAX_DIVIDED)
    for name, value in flags.items():           # "no" is truthy: a non-bool would be read as True
        if not isinstance(value, bool):
            raise TypeError(f"{fn}: {name} must be True or False, got {value!r}")
    return check_int(fn, "global_batch", global_batch, minimum=1)


def _options(fn: str, name: str, values, allowed=None, minimum: int = 1) -> tuple:
    """A non-empty tuple of distinct ints >= minimum (or of ``allowed`` strings)."""
    if isinstance(values, (str, int)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{fn}: {name} must be a sequence, got {type(values).__name__} {values!r}")
    out = tuple(dict.fromkeys(values))
    if not out:
        raise ValueError(f"{fn}: {name} must not be empty")
    for x in out:
        if allowed is None:
            check_int(fn, name, x, minimum=minimum, maximum=3 if name == "zero_stages" else None)
        elif x not in allowed:
            raise ValueError(f"{fn}: {name} must hold values from {', '.join(allowed)}, got {x!r}")
    return out


def candidates(model: Model, cluster: Cluster, global_batch: int, *, micro_batches=(1, 2, 4, 8),
               max_virtual_stages: int | None = None, zero_stages=(0, 1), recompute=RECOMPUTE,
               allow_cross_node_tp: bool = False):
    """Every `Plan` the search looks at (module docstring), before any rule or memory check."""
    g = cluster.gpus
    for tp in divisors(math.gcd(model.heads, g)):
        for pp in divisors(model.layers):
            if g % (tp * pp):
                continue
            chunks = [v for v in divisors(model.layers // pp)
                      if (v == 1 or pp > 1) and (max_virtual_stages is None or v <= max_virtual_stages)]
            for mb in micro_batches:
                for v in chunks:
                    for r in recompute:
                        for z in zero_stages:
                            yield Plan(g // (tp * pp), tp, pp, mb, v, z, r)


def search(model: Model, cluster: Cluster, global_batch: int, *, micro_batches=(1, 2, 4, 8),
           max_virtual_stages: int | None = None, zero_stages=(0, 1), recompute=RECOMPUTE,
           allow_cross_node_tp: bool = False, sequence_parallel: bool = False) -> SearchResult:
    """All candidate plans for ``model`` on ``cluster`` at ``global_batch`` sequences per
    iteration: the feasible ones predicted and sorted fastest first (ties: less memory, fewer
    chunks, lower ZeRO stage, smaller micro-batch), the others with the reason they were rejected."""
    fn = "search"
    B = _check_args(fn, model, cluster, global_batch, allow_cross_node_tp=allow_cross_node_tp,
                    sequence_parallel=sequence_parallel)
    micro_batches = _options(fn, "micro_batches", micro_batches)
    zero_stages = _options(fn, "zero_stages", zero_stages, minimum=0)
    recompute = _options(fn, "recompute", recompute, allowed=RECOMPUTE)
    if max_virtual_stages is not None:
        check_int(fn, "max_virtual_stages", max_virtual_stages, minimum=1)
    plans, rejected = [], []
    for p in candidates(model, cluster, B, micro_batches=micro_batches, max_virtual_stages=max_virtual_stages,
                        zero_stages=zero_stages, recompute=recompute, allow_cross_node_tp=allow_cross_node_tp):
        reason = _reason(model, cluster, p, B, allow_cross_node_tp, sequence_parallel)
        if isinstance(reason, str):
            rejected.append(Rejection(p, reason))
        else:
            plans.append(_predict(model, cluster, p, B, sequence_parallel, memory=reason))
    plans.sort(key=lambda r: (r.step_time, r.memory.total, r.plan.virtual_stages, r.plan.zero_stage,
                              r.plan.micro_batch))
    return SearchResult(plans, rejected)


def _reason(model, cluster, p: Plan, B: int, allow_cross_node_tp: bool, sequence_parallel: bool):
    """The reason ``p`` is rejected (a str), or its `MemoryEstimate` when it is feasible."""
    wrong = problems(model, p, B, cluster.gpus, cluster.gpus_per_node, allow_cross_node_tp)
    if wrong:
        return "; ".join(wrong)
    mem = memory_per_gpu(model, p, B, sequence_parallel)
    if mem.total > cluster.memory_bytes:
        return memory_reason(mem.total, cluster.memory_bytes)
    return mem


def plan(model: Model, cluster: Cluster, global_batch: int, **options) -> list[Prediction]:
    """Feasible plans (`Prediction`s), fastest first; ``options`` as for `search`."""
    return search(model, cluster, global_batch, **options).plans


def why_not(model: Model, cluster: Cluster, candidate: Plan, global_batch: int, *,
            allow_cross_node_tp: bool = False, sequence_parallel: bool = False) -> str | None:
    """None if ``candidate`` is feasible, else the one-line reason the search would give."""
    fn = "why_not"
    B = _check_args(fn, model, cluster, global_batch, allow_cross_node_tp=allow_cross_node_tp,
                    sequence_parallel=sequence_parallel)
    if not isinstance(candidate, Plan):
        raise TypeError(f"{fn}: candidate must be a labkit.planner.Plan, got {type(candidate).__name__}")
    reason = _reason(model, cluster, candidate, B, allow_cross_node_tp, sequence_parallel)
    return reason if isinstance(reason, str) else None
