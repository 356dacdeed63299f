"""Pipeline stages: how the layers are split, and how long m micro-batches take through them.

**The split.** When pp divides the layers, Megatron-LM gives every stage l/pp layers (the first
stage also runs the embedding, the last the final LayerNorm, logits and loss). When it does not —
BLOOM-176B put 70 layers on 12 stages — the layers are split by cost: the chain
[embedding, layer, …, layer, head] with each piece's time for one micro-batch is cut by Lab 11's
dynamic programme (`labkit.cluster.autoparallel.partition_stages`) into pp contiguous stages with
the smallest bottleneck; the embedding stays on the first stage and the head on the last.

**The schedule** (each stage's time t_i for one micro-batch, forward + backward + recomputation):

    1F1B         T = Σ_i t_i + (m − 1) · max_i t_i
    interleaved  T = (m + (p − 1)/v) · R,   R = max_r Σ_c t_rc      (v chunks c on each rank r)

For equal stages the first is m·t + (p − 1)·t: the bubble (p − 1)/m of the ideal m·t, GPipe's and
1F1B's; the second is (p − 1)/(v·m) of the ideal m·R. With unequal stages the slowest stage (rank)
sets the pace and the others add their fill and drain. tests/test_planner_pipeline.py compares both
with `labkit.pipeline.simulate` run with per-stage forward and backward times: the 1F1B form is
exact when the slowest stage is the last (the usual case: it runs the logits and the loss) and
otherwise an upper bound (with stages up to ±20 % apart: within 3 % at m = 8p, 15 % at m = p); the
interleaved form is within −1 % and +9 % of the simulator for a heavier first or last chunk.
"""
from __future__ import annotations

from functools import lru_cache

from labkit.checks import check_int


def even_split(layers: int, stages: int) -> tuple[int, ...]:
    """l/pp layers per stage (pp must divide l)."""
    if layers % stages:
        raise ValueError(f"even_split: stages ({stages}) must divide layers ({layers})")
    return (layers // stages,) * stages


def balanced_split(layers: int, stages: int, layer_cost: float, first_extra: float, last_extra: float
                   ) -> tuple[int, ...]:
    """Layers per stage minimising the slowest stage: `partition_stages` on [first_extra, layer_cost ×
    layers, last_extra] (the embedding's and the head's costs stay with the first and last stage).
    Costs in any one unit (seconds); the split only depends on their ratios, which are rounded to
    1/50 of a layer first (plans whose embedding and head differ by less share one split, and one
    run of the DP)."""
    fn = "balanced_split"
    layers = check_int(fn, "layers", layers, minimum=1)
    stages = check_int(fn, "stages", stages, minimum=1)
    if stages > layers:
        raise ValueError(f"{fn}: stages ({stages}) must be <= layers ({layers}): every stage needs a layer")
    if not (layer_cost > 0 and first_extra >= 0 and last_extra >= 0):
        raise ValueError(f"{fn}: costs must be layer_cost > 0, extras >= 0, got {layer_cost}, {first_extra}, "
                         f"{last_extra}")
    return _balanced(layers, stages, layer_units(first_extra / layer_cost), layer_units(last_extra / layer_cost))


def layer_units(ratio: float) -> float:
    """A cost in layers, rounded to 1/50 of a layer (what `balanced_split` partitions)."""
    return round(ratio * 50) / 50


@lru_cache(maxsize=4096)
def _balanced(layers: int, stages: int, first: float, last: float) -> tuple[int, ...]:
    from labkit.cluster.autoparallel import partition_stages

    if stages == 1:
        return (layers,)
    # the first and last layers carry the embedding and the head: the DP cuts a chain of layers whose
    # end pieces are heavier, so the embedding never leaves stage 0 and the head never leaves the last
    costs = [1.0 + first] + [1.0] * (layers - 2) + [1.0 + last] if layers > 1 else [1.0 + first + last]
    sizes, _ = partition_stages(costs, stages)
    return tuple(sizes)


def pipeline_time(stage_times, micro_batches: int, virtual_stages: int = 1) -> float:
    """Seconds for ``micro_batches`` through stages of ``stage_times`` (seconds per micro-batch, in
    pipeline order: chunk c of rank r is stage c·p + r when interleaved) — module docstring."""
    t = [float(x) for x in stage_times]
    m = check_int("pipeline_time", "micro_batches", micro_batches, minimum=1)
    v = check_int("pipeline_time", "virtual_stages", virtual_stages, minimum=1)
    if not t or len(t) % v:
        raise ValueError(f"pipeline_time: {len(t)} stage times do not make {v} chunks per rank")
    if v == 1:
        return sum(t) + (m - 1) * max(t)
    p = len(t) // v
    slowest = max(sum(t[c * p + r] for c in range(v)) for r in range(p))
    return (m + (p - 1) / v) * slowest


__all__ = ["even_split", "balanced_split", "pipeline_time"]
