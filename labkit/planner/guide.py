"""Which parallelism when: a model and a cluster in, the planner's best plan out, named in words.

The rules of thumb practitioners use, each a `Case` the planner (`labkit.planner.search`) is run on
in Lab 11's closing section — the rule is only as good as the search that confirms it:

1. the model states fit on one GPU           → data parallelism (DDP) over every GPU;
2. the states do not fit, a node does         → shard them (ZeRO / FSDP), then tensor parallelism
                                                inside the node if it is faster;
3. the model does not fit in one node         → tensor parallelism inside a node (it needs NVLink),
                                                pipeline parallelism across nodes;
4. many nodes                                 → the same tp × pp "model replica", data parallelism
                                                over the replicas;
5. long sequences                             → split the sequence itself (context parallelism,
                                                Lab 14): dp, tp and pp cannot split one sequence's
                                                attention beyond tp ranks.

`describe` names a plan's parallelism: which dimensions it uses and whether each group stays inside
one node (`labkit.planner.grid.worst_span`).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.checks import check_int
from labkit.planner.cost import Cluster, selene
from labkit.planner.device import A100_80GB
from labkit.planner.grid import Plan, worst_span
from labkit.planner.model import Model
from labkit.planner.network import DGX_A100


def describe(plan: Plan, gpus_per_node: int) -> str:
    """The parallelism of ``plan`` in words, e.g. "TP 4 in a node, PP 8 over 8 nodes, DP 2 (ZeRO-1)"
    (tensor, pipeline, data parallel sizes; where each group runs; how dp shards the states: DDP,
    ZeRO-1, ZeRO-2, ZeRO-3/FSDP); "one GPU" when dp = tp = pp = 1."""
    if not isinstance(plan, Plan):
        raise TypeError(f"describe: plan must be a labkit.planner.Plan, got {type(plan).__name__}")
    g = check_int("describe", "gpus_per_node", gpus_per_node, minimum=1)
    parts = []
    for kind, size in (("tp", plan.tp), ("pp", plan.pp)):
        if size > 1:
            span = worst_span(kind, plan.dp, plan.tp, plan.pp, g)
            where = "in a node" if span == 1 else f"over {span} nodes"
            parts.append(f"{kind.upper()} {size} {where}")
    if plan.dp > 1:
        sharding = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3/FSDP"}[plan.zero_stage]
        parts.append(f"DP {plan.dp} ({sharding})")
    return ", ".join(parts) or "one GPU"


@dataclass(frozen=True)
class Case:
    """A question a practitioner asks: train ``model`` on ``cluster`` at ``global_batch`` sequences
    per iteration; ``zero_stages`` the search may use; ``rule`` the rule of thumb it illustrates."""

    name: str
    model: Model
    cluster: Cluster
    global_batch: int
    rule: str
    zero_stages: tuple = (0, 1, 2, 3)


NODE = Cluster(gpus=8, device=A100_80GB, network=DGX_A100, name="one DGX A100 node")
GPT_1_3B = Model(24, 2048, 16, 2048, 51200)
GPT_13B = Model(40, 5120, 40, 2048, 51200)
GPT3_175B = Model(96, 12288, 96, 2048, 51200)
GPT_13B_64K = Model(40, 5120, 40, 65536, 51200)

CASES = (
    Case("1.3B on 8 GPUs", GPT_1_3B, NODE, 64, "states fit a GPU: data parallel"),
    Case("13B on 8 GPUs", GPT_13B, NODE, 64, "states outgrow a GPU: shard them, or tp"),
    Case("175B on 64 GPUs", GPT3_175B, selene(64), 512, "outgrows a node: tp in, pp across"),
    Case("175B on 1024 GPUs", GPT3_175B, selene(1024), 1536, "many nodes: dp over tp x pp replicas"),
    Case("13B, 64k tokens, 64 GPUs", GPT_13B_64K, selene(64), 16, "long sequences: split them (Lab 14)"),
)

__all__ = ["describe", "Case", "CASES", "NODE", "GPT_1_3B", "GPT_13B", "GPT3_175B", "GPT_13B_64K"]
