"""A 3D-parallel plan, and the rules a plan must obey on a cluster (Lab 11's planner).

Where ranks sit on the (pp, dp, tp) grid (rank order, `coords`, `groups`, `nodes_spanned`) is
`labkit.parallel3d.grid`'s; this module places a `Plan`'s groups on nodes (`worst_span`) and lists
what is wrong with a plan (`problems`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from labkit.checks import check_int
from labkit.parallel3d.grid import KINDS
from labkit.planner.model import RECOMPUTE



@dataclass(frozen=True)
class Plan:
    """One way to train: ``dp`` data-parallel replicas × ``tp`` tensor-parallel ranks × ``pp``
    pipeline stages; ``micro_batch`` sequences per micro-batch; ``virtual_stages`` model chunks per
    pipeline rank (v of the interleaved 1F1B schedule; 1 = plain 1F1B); ``zero_stage`` 0-3 of
    ZeRO over the data-parallel group; activation ``recompute`` "none", "selective" or "full";
    ``sequence_parallel`` (Korthikanti et al. 2022: LayerNorm and dropout split over the tp ranks);
    ``stage_layers``: layers on each pipeline stage, or None for l/pp each when pp divides l and
    a split balanced by cost when it does not (`labkit.planner.cost.stage_split`)."""

    dp: int
    tp: int
    pp: int
    micro_batch: int = 1
    virtual_stages: int = 1
    zero_stage: int = 0
    recompute: str = "full"
    sequence_parallel: bool = False
    stage_layers: tuple | None = None

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "micro_batch", "virtual_stages"):
            check_int("Plan", name, getattr(self, name), minimum=1)
        check_int("Plan", "zero_stage", self.zero_stage, minimum=0, maximum=3)
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"Plan: recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        if self.virtual_stages > 1 and self.pp == 1:
            raise ValueError(f"Plan: virtual_stages={self.virtual_stages} needs pp > 1 (interleaving "
                             "splits each pipeline rank's layers into chunks)")
        if not isinstance(self.sequence_parallel, bool):
            raise TypeError(f"Plan: sequence_parallel must be a bool, got {self.sequence_parallel!r}")
        if self.stage_layers is not None:
            if not isinstance(self.stage_layers, tuple) or len(self.stage_layers) != self.pp:
                raise ValueError(f"Plan: stage_layers must be a tuple of pp={self.pp} layer counts, "
                                 f"got {self.stage_layers!r}")
            for i, n in enumerate(self.stage_layers):
                check_int("Plan", f"stage_layers[{i}]", n, minimum=1)
            if self.virtual_stages > 1 and len(set(self.stage_layers)) > 1:
                raise ValueError("Plan: interleaving (virtual_stages > 1) needs equal stages, "
                                 f"got stage_layers={self.stage_layers}")

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def uneven(self) -> bool:
        """True when the stages hold different numbers of layers."""
        return self.stage_layers is not None and len(set(self.stage_layers)) > 1

    def __str__(self) -> str:
        v = f" v={self.virtual_stages}" if self.virtual_stages > 1 else ""
        sp = " SP" if self.sequence_parallel else ""
        split = ""
        if self.uneven:
            counts = sorted(set(self.stage_layers), reverse=True)
            split = " [" + "/".join(f"{self.stage_layers.count(c)}×{c}" for c in counts) + "]"
        return (f"dp={self.dp} tp={self.tp} pp={self.pp}{v} mb={self.micro_batch} "
                f"ZeRO-{self.zero_stage} {self.recompute}{sp}{split}")


def _check_sizes(fn: str, dp, tp, pp) -> tuple[int, int, int]:
    return (check_int(fn, "dp", dp, minimum=1), check_int(fn, "tp", tp, minimum=1),
            check_int(fn, "pp", pp, minimum=1))


def _layout(kind: str, dp: int, tp: int, pp: int) -> tuple[int, int]:
    """(size, stride) of the groups of ``kind``: a group is start + stride·i for i < size."""
    return {"tp": (tp, 1), "dp": (dp, tp), "pp": (pp, dp * tp)}[kind]


@lru_cache(maxsize=65536)
def _nodes_of_progression(offset: int, stride: int, size: int, gpus_per_node: int) -> int:
    """Nodes spanned by the ranks offset + stride·i, i < size."""
    return len({(offset + stride * i) // gpus_per_node for i in range(size)})


def worst_span(kind: str, dp: int, tp: int, pp: int, gpus_per_node: int) -> int:
    """The most nodes any one group of ``kind`` spans: max of `nodes_spanned` over `groups`, without
    listing every group — a group's node pattern depends only on its first rank modulo
    gpus_per_node, so at most gpus_per_node groups are looked at, whatever the world size."""
    if kind not in KINDS:
        raise ValueError(f"worst_span: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    dp, tp, pp = _check_sizes("worst_span", dp, tp, pp)
    g = check_int("worst_span", "gpus_per_node", gpus_per_node, minimum=1)
    size, stride = _layout(kind, dp, tp, pp)
    return max(_nodes_of_progression(r, stride, size, g) for r in _start_residues(kind, dp, tp, pp, g))


@lru_cache(maxsize=65536)
def _start_residues(kind: str, dp: int, tp: int, pp: int, g: int) -> tuple[int, ...]:
    """The distinct values of (first rank of a group) mod g, without listing every group."""
    seen: set[int] = set()
    if kind == "tp":      # starts p·dp·tp + d·tp = multiples of tp below the world size
        for k in range(dp * pp):
            seen.add((k * tp) % g)
            if len(seen) == g or (k * tp) % g == 0 and k:
                break
    elif kind == "dp":    # p·dp·tp + t
        for p in range(pp):
            base = (p * dp * tp) % g
            if p and base == 0:
                break
            for t in range(min(tp, g)):
                seen.add((base + t) % g)
    else:                 # d·tp + t = every rank below dp·tp
        for k in range(min(dp * tp, g)):
            seen.add(k % g)
    return tuple(sorted(seen))


def problems(model, plan: Plan, global_batch: int, gpus: int | None = None, gpus_per_node: int | None = None,
             allow_cross_node_tp: bool = True) -> list[str]:
    """Why ``plan`` cannot train ``model`` (a `labkit.planner.Model`) on batches of ``global_batch``
    sequences — one short reason per broken rule, [] when none is broken:

    tp | heads (each rank gets whole heads; then tp | hidden and tp | ffn too), pp <= layers (every
    stage holds a layer; pp need not divide the layers: the stages are then uneven), pp·v | layers
    when interleaving (equal chunks, Megatron's rule), ``stage_layers`` (when given) summing to the
    layers, dp·micro_batch | global_batch, m % pp == 0 for the interleaved schedule (Megatron's
    rule), dp·tp·pp == gpus (when given), and — unless ``allow_cross_node_tp`` — no
    tensor-parallel group spread over two nodes."""
    out = []
    if model.heads % plan.tp:
        out.append(f"tp={plan.tp} does not divide heads={model.heads}")
    if plan.pp > model.layers:
        out.append(f"pp={plan.pp} exceeds layers={model.layers}: every stage needs a layer")
    elif plan.virtual_stages > 1 and model.layers % (plan.pp * plan.virtual_stages):
        out.append(f"pp·v={plan.pp * plan.virtual_stages} does not divide layers={model.layers}")
    if plan.stage_layers is not None and sum(plan.stage_layers) != model.layers:
        out.append(f"stage_layers add up to {sum(plan.stage_layers)}, not layers={model.layers}")
    per_step = plan.dp * plan.micro_batch
    if global_batch % per_step:
        out.append(f"dp·micro_batch={per_step} does not divide global_batch={global_batch}")
    elif plan.virtual_stages > 1 and (global_batch // per_step) % plan.pp:
        out.append(f"interleaving needs the micro-batch count {global_batch // per_step} "
                   f"to be a multiple of pp={plan.pp}")
    if gpus is not None and plan.gpus != gpus:
        out.append(f"dp·tp·pp={plan.gpus} is not the {gpus} GPUs")
    if gpus_per_node is not None and not allow_cross_node_tp:
        nodes = worst_span("tp", plan.dp, plan.tp, plan.pp, gpus_per_node)
        if nodes > 1:
            out.append(f"tp={plan.tp} group spans {nodes} nodes of {gpus_per_node} GPUs")
    return out
