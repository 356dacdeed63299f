"""Bytes saved for backward, counted by where they were saved — to measure sequence parallelism.

`saved_bytes(model, run, kinds)` runs ``run()`` (a forward) and adds up the bytes of every tensor
autograd saves for backward while a module of one of ``kinds`` is running (parameters are not
activations and are left out; a storage saved twice counts once). With sequence parallelism the
LayerNorms see T/t positions instead of T, so what they save shrinks exactly t-fold.
"""
from __future__ import annotations

from torch import nn


def saved_bytes(model: nn.Module, run, kinds=(nn.LayerNorm,)) -> int:
    """Bytes of activations saved for backward inside modules of ``kinds`` during ``run()``."""
    params = {p.data_ptr() for p in model.parameters()}
    depth, seen = [0], {}

    def pack(t):
        if depth[0] and t.data_ptr() not in params:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    def enter(*_):
        depth[0] += 1

    def leave(*_):
        depth[0] -= 1

    handles = []
    for m in model.modules():
        if isinstance(m, tuple(kinds)):
            handles += [m.register_forward_pre_hook(enter), m.register_forward_hook(leave)]
    import torch

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run()
    finally:
        for h in handles:
            h.remove()
    return sum(seen.values())
