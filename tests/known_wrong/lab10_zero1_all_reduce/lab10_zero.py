"""Known-wrong: all-reduces the gradient ("ZeRO uses all-reduce"), then updates only its shard."""
from solutions.lab10_zero import _padded, dist, math, torch


def zero1_step(param, grad, state, lr, momentum):
    n, r = dist.get_world_size(), dist.get_rank()
    size = math.ceil(param.numel() / n)
    padded = _padded(grad, n * size)
    dist.all_reduce(padded)                                # BUG: twice the gradient traffic of a reduce-scatter
    g_shard = padded[r * size:(r + 1) * size] / n
    state["momentum"] = g_shard.clone() if "momentum" not in state else state["momentum"] * momentum + g_shard
    full = _padded(param.detach(), n * size)
    dist.all_gather_into_tensor(full, full[r * size:(r + 1) * size] - lr * state["momentum"])
    with torch.no_grad():
        param.copy_(full[:param.numel()])
