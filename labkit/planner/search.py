"""The auto-parallel planner: enumerate 3D-parallel plans, drop those that break a rule or do not
fit in memory, predict the rest, and sort them fastest first.

    best = plan(model, cluster, global_batch)[0]            # a `Prediction`; best.plan is the `Plan`
    found = search(model, cluster, global_batch)            # .plans, .rejected (with reasons), .considered
    why_not(model, cluster, Plan(dp=4, tp=8, pp=2), 512)    # None, or the reason it is rejected

**Candidates.** tp runs over the divisors of gcd(heads, gpus) (a tp group spread over two nodes
is rejected, with its reason, unless ``allow_cross_node_tp``); pp over the divisors of gpus/tp up
to the number of layers — pp need not divide the layers: such plans get stages balanced by cost
(`labkit.planner.cost.stage_split`); dp = gpus/(tp·pp); then each micro-batch size in
``micro_batches``, each v | layers/pp (interleaving, when pp > 1 divides the layers, up to
``max_virtual_stages``), each ZeRO stage, recompute policy and sequence-parallel setting (on only
with tp > 1). So the number of candidates is about

    d(heads) · d(gpus) · |micro_batches| · d(layers/pp) · |zero_stages| · |recompute| · 2

(d = number of divisors) — nothing loops over ranks (`labkit.planner.grid.worst_span` looks at one
group per residue mod gpus_per_node), and a layer's cost is computed once per (micro-batch, tp,
recompute, sequence parallelism, placement) and shared by all plans that have them. For a
1T-parameter model (128 layers, 160 heads) on 4096 GPUs that is a few thousand candidates
(tests/test_planner.py times it).

**Why the best plan wins** follows from the cost model's parts: a larger micro-batch makes each
GEMM more tiles and fewer partly-empty waves (`labkit.planner.device`) and pays per-kernel
overheads fewer times, but lengthens the pipeline's fill and drain; more chunks per rank (v)
shrink the bubble by 1/v but add 2 sends per micro-batch and chunk. The search weighs these; it
does not prefer any setting by rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from labkit.checks import check_int
from labkit.planner.cost import MEGATRON_2021, Cluster, Prediction, Software, _predict, piece_times, stage_split
from labkit.planner.grid import Plan, problems, worst_span
from labkit.planner.memory import GiB, _memory_per_gpu
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


def memory_reason(needed: float, limit: float, total: float | None = None) -> str:
    """"needs 91.2 GiB per GPU, has 74.0 GiB usable of 80.0 GiB" (bytes in, GiB = 2³⁰ bytes out)."""
    of = "" if total is None else f" usable of {total / GiB:.1f} GiB"
    return f"needs {needed / GiB:.1f} GiB per GPU, has {limit / GiB:.1f} GiB{of}"


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
        elif x not in allowed or type(x) is not type(allowed[0]):
            raise ValueError(f"{fn}: {name} must hold values from {', '.join(map(str, allowed))}, got {x!r}")
    return out


def candidates(model: Model, cluster: Cluster, global_batch: int, *, micro_batches=(1, 2, 4, 8),
               max_virtual_stages: int | None = None, zero_stages=(0, 1), recompute=RECOMPUTE,
               sequence_parallel=(False, True), allow_cross_node_tp: bool = False):
    """Every `Plan` the search looks at (module docstring), before any rule or memory check."""
    g = cluster.gpus
    for tp in divisors(math.gcd(model.heads, g)):
        for pp in divisors(g // tp):
            if pp > model.layers:
                continue
            even = model.layers % pp == 0
            chunks = [v for v in (divisors(model.layers // pp) if even else [1])
                      if (v == 1 or pp > 1) and (max_virtual_stages is None or v <= max_virtual_stages)]
            for mb in micro_batches:
                for v in chunks:
                    for r in recompute:
                        for sp in sequence_parallel:
                            if sp and tp == 1:
                                continue
                            for z in zero_stages:
                                yield Plan(g // (tp * pp), tp, pp, mb, v, z, r, sp)


def search(model: Model, cluster: Cluster, global_batch: int, *, micro_batches=(1, 2, 4, 8),
           max_virtual_stages: int | None = None, zero_stages=(0, 1), recompute=RECOMPUTE,
           sequence_parallel=(False, True), allow_cross_node_tp: bool = False,
           software: Software = MEGATRON_2021) -> SearchResult:
    """All candidate plans for ``model`` on ``cluster`` at ``global_batch`` sequences per
    iteration: the feasible ones predicted and sorted fastest first (ties: less memory, fewer
    chunks, lower ZeRO stage, smaller micro-batch), the others with the reason they were rejected.
    ``sequence_parallel``: the settings to try (a bool means just that one)."""
    fn = "search"
    B = _check_args(fn, model, cluster, global_batch, allow_cross_node_tp=allow_cross_node_tp)
    micro_batches = _options(fn, "micro_batches", micro_batches)
    zero_stages = _options(fn, "zero_stages", zero_stages, minimum=0)
    recompute = _options(fn, "recompute", recompute, allowed=RECOMPUTE)
    if isinstance(sequence_parallel, bool):
        sequence_parallel = (sequence_parallel,)
    sequence_parallel = _options(fn, "sequence_parallel", sequence_parallel, allowed=(False, True))
    if max_virtual_stages is not None:
        check_int(fn, "max_virtual_stages", max_virtual_stages, minimum=1)
    if not isinstance(software, Software):
        raise TypeError(f"{fn}: software must be a labkit.planner.Software, got {type(software).__name__}")
    plans, rejected = [], []
    cache: dict = {}
    for p in candidates(model, cluster, B, micro_batches=micro_batches, max_virtual_stages=max_virtual_stages,
                        zero_stages=zero_stages, recompute=recompute, sequence_parallel=sequence_parallel,
                        allow_cross_node_tp=allow_cross_node_tp):
        reason = _reason(model, cluster, p, B, allow_cross_node_tp, software, cache)
        if isinstance(reason, str):
            rejected.append(Rejection(p, reason))
        else:
            plan_, mem, pieces = reason
            plans.append(_predict(model, cluster, plan_, B, software, memory=mem, pieces=pieces))
    plans.sort(key=lambda r: (r.step_time, r.memory.total, r.plan.virtual_stages, r.plan.zero_stage,
                              r.plan.micro_batch))
    return SearchResult(plans, rejected)


def _pieces(model, cluster, p: Plan, software, cache):
    """`piece_times` of ``p``, shared by plans with the same micro-batch, tp, recompute, sequence
    parallelism and placement of their tp and pp groups."""
    g = cluster.gpus_per_node
    key = (p.micro_batch, p.tp, p.recompute, p.sequence_parallel, worst_span("tp", p.dp, p.tp, p.pp, g),
           p.pp > 1, p.pp > 1 and worst_span("pp", p.dp, p.tp, p.pp, g) == 1)
    if key not in cache:
        cache[key] = piece_times(model, cluster, p, software)
    return cache[key]


def _reason(model, cluster, p: Plan, B: int, allow_cross_node_tp: bool, software=MEGATRON_2021, cache=None):
    """The reason ``p`` is rejected (a str), or (plan with its stage split, `MemoryEstimate`,
    `Pieces`) when it is feasible."""
    wrong = problems(model, p, B, cluster.gpus, cluster.gpus_per_node, allow_cross_node_tp)
    if wrong:
        return "; ".join(wrong)
    pieces = _pieces(model, cluster, p, software, {} if cache is None else cache)
    if p.stage_layers is None and p.pp > 1 and model.layers % p.pp:
        p = replace(p, stage_layers=stage_split(model, p, cluster, software, pieces))
    mem = _memory_per_gpu(model, p, B, p.sequence_parallel)
    if mem.total > cluster.usable_memory:
        return memory_reason(mem.total, cluster.usable_memory, cluster.memory_bytes)
    return p, mem, pieces


def plan(model: Model, cluster: Cluster, global_batch: int, **options) -> list[Prediction]:
    """Feasible plans (`Prediction`s), fastest first; ``options`` as for `search`."""
    return search(model, cluster, global_batch, **options).plans


def why_not(model: Model, cluster: Cluster, candidate: Plan, global_batch: int, *,
            allow_cross_node_tp: bool = False, software: Software = MEGATRON_2021) -> str | None:
    """None if ``candidate`` is feasible, else the one-line reason the search would give."""
    fn = "why_not"
    B = _check_args(fn, model, cluster, global_batch, allow_cross_node_tp=allow_cross_node_tp)
    if not isinstance(candidate, Plan):
        raise TypeError(f"{fn}: candidate must be a labkit.planner.Plan, got {type(candidate).__name__}")
    reason = _reason(model, cluster, candidate, B, allow_cross_node_tp, software)
    return reason if isinstance(reason, str) else None
