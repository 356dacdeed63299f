"""What labkit's optimizers share (`zero.ShardedOptimizer`, `memory.MixedPrecisionAdam`,
`memory.OffloadedAdam`): the closure every `torch.optim.Optimizer.step` may be given."""
from __future__ import annotations

from typing import Callable

import torch


def loss_from_closure(closure: Callable[[], torch.Tensor] | None):
    """``closure()`` (the loss, recomputed with its gradients) run with autograd on, as a step
    decorated with ``@torch.no_grad()`` needs; None when there is no closure."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
