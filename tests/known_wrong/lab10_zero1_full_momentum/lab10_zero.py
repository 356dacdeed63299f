"""Known-wrong: right parameters, but every rank keeps the whole momentum buffer: no memory saved."""
from solutions.lab10_zero import _padded, dist, math, torch


def zero1_step(param, grad, state, lr, momentum):
    n, r = dist.get_world_size(), dist.get_rank()
    size = math.ceil(param.numel() / n)
    padded = _padded(grad, n * size)
    dist.all_reduce(padded)                                # every rank gets the whole sum
    mean = padded / n
    state["momentum"] = mean.clone() if "momentum" not in state else state["momentum"] * momentum + mean   # BUG: (P',)
    with torch.no_grad():
        param.sub_(lr * state["momentum"][:param.numel()])
