"""Fallbacks for an older torch (labkit runs on torch >= 2.11; the course pins 2.13).

A GPU box often comes with its own PyTorch and no network (torch 2.11 with CUDA 13, say). Where
labkit or an exercise calls a name a newer torch added, the older one gets an alias here, one line
each; `torch_fallbacks()` is idempotent and is applied by every launched rank, by
`labkit.dist.init_torchrun_group` and by the modules that call these names.
"""
from __future__ import annotations

# torch 2.13 renamed the single-tensor collectives; 2.11 has only the older names.
ALIASES = {"all_gather_single": "all_gather_into_tensor", "reduce_scatter_single": "reduce_scatter_tensor"}


def torch_fallbacks() -> list[str]:
    """Give torch.distributed each name of ALIASES it lacks; returns the names added."""
    import torch.distributed as dist

    added = []
    for new, old in ALIASES.items():
        if not hasattr(dist, new) and hasattr(dist, old):
            setattr(dist, new, getattr(dist, old))
            added.append(new)
    return added
