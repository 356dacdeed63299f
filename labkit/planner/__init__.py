"""Lab 11: 3D parallelism — an auto-parallel planner for (dp, tp, pp) and what it predicts.

    model.py      Model (a GPT's sizes), exact and Megatron parameter counts, FLOPs per iteration
    grid.py       Plan; its groups placed on nodes (worst_span); problems() (the rank order, coords and
                  groups are `labkit.parallel3d.grid`'s, which this package imports)
    memory.py     bytes per GPU of a plan: model states (ZeRO) + activations in flight, stage by stage
    device.py     Device (A100_80GB, ...): a GEMM's time from its shape (roofline, tiles, waves), and
                  memory-bound kernels' from their bytes
    network.py    Network (DGX_A100, ...): NCCL ring / tree collectives, rail-aligned network cards
    layer.py      one layer's GEMMs, kernels and tp collectives; the embedding, the head, the optimizer
    pipeline.py   stage splits (even, or balanced by cost) and the 1F1B / interleaved pipeline's time
    cost.py       Cluster, Software and predict(): an iteration's parts
    search.py     search() / plan(): enumerate, reject (with reasons), predict, sort fastest first
    published.py  published runs (Narayanan et al. 2021 Table 1 to fit; held-out runs to validate)
    calibrate.py  the device and network terms' forms against this CPU (GEMM sweep, kernels, gloo)
    guide.py      which parallelism when: describe(plan) in words, and the decision guide's cases
    local.py      the planner on this machine: predicted vs measured 3D-parallel steps on gloo ranks
"""
from labkit.planner.cost import (A100_80GB_SELENE, H100_80GB_DGX, MEGATRON_2021, MEGATRON_2021_TORCH_DDP,
                                 MEGATRON_2022, MEGATRON_DEEPSPEED_BF16, Cluster, Prediction, Software, predict,
                                 selene, stage_split)
from labkit.planner.device import A100_40GB, A100_80GB, H100_80GB, Device, gemm_time, memory_op_time
from labkit.planner.guide import describe
from labkit.planner.grid import Plan, problems
from labkit.planner.memory import MemoryEstimate, memory_per_gpu
from labkit.planner.model import Model, flops_per_iteration, megatron_params
from labkit.planner.network import DGX_A100, DGX_H100, JEAN_ZAY_A100, Network, all_reduce_time
from labkit.planner.search import Rejection, SearchResult, plan, why_not   # search(): labkit.planner.search.search

__all__ = ["A100_80GB_SELENE", "H100_80GB_DGX", "Cluster", "Prediction", "Software", "predict", "selene",
           "stage_split", "MEGATRON_2021", "MEGATRON_2021_TORCH_DDP", "MEGATRON_2022", "MEGATRON_DEEPSPEED_BF16",
           "Device", "A100_80GB", "A100_40GB", "H100_80GB", "gemm_time", "memory_op_time",
           "Network", "DGX_A100", "DGX_H100", "JEAN_ZAY_A100", "all_reduce_time",
           "Plan", "problems",
           "MemoryEstimate", "memory_per_gpu", "Model", "flops_per_iteration", "megatron_params",
           "Rejection", "SearchResult", "plan", "why_not", "describe"]
