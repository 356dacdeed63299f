"""Lab 11: 3D parallelism — an auto-parallel planner for (dp, tp, pp) and what it predicts.

    model.py      Model (a GPT's sizes), exact and Megatron parameter counts, FLOPs per iteration
    grid.py       Plan; the rank order rank = pp_i·(dp·tp) + dp_i·tp + tp_i; coords, groups, nodes_spanned
    memory.py     bytes per GPU of a plan: model states (ZeRO) + activations in flight
    cost.py       Cluster (A100_80GB_SELENE, ...) and predict(): compute, bubble, tp/pp/dp communication
    search.py     search() / plan(): enumerate, reject (with reasons), predict, sort fastest first
    published.py  Narayanan et al. 2021 (Megatron-LM) Table 1, and the planner's predictions next to it
"""
from labkit.planner.cost import A100_80GB_SELENE, H100_80GB_DGX, Cluster, Prediction, predict, selene
from labkit.planner.grid import Plan, coords, groups, nodes_spanned, problems, rank_of
from labkit.planner.memory import MemoryEstimate, memory_per_gpu
from labkit.planner.model import Model, flops_per_iteration, megatron_params
from labkit.planner.search import Rejection, SearchResult, plan, search, why_not

__all__ = ["A100_80GB_SELENE", "H100_80GB_DGX", "Cluster", "Prediction", "predict", "selene",
           "Plan", "coords", "groups", "nodes_spanned", "problems", "rank_of",
           "MemoryEstimate", "memory_per_gpu", "Model", "flops_per_iteration", "megatron_params",
           "Rejection", "SearchResult", "plan", "search", "why_not"]
