"""Known-wrong: divides the gradient by N before the reduce-scatter and again after it."""
from solutions.lab10_zero import _padded, dist, math, torch


def zero1_step(param, grad, state, lr, momentum):
    n, r = dist.get_world_size(), dist.get_rank()
    size = math.ceil(param.numel() / n)
    g_shard = torch.empty(size, dtype=grad.dtype)
    dist.reduce_scatter_tensor(g_shard, _padded(grad / n, n * size))
    g_shard /= n                                           # BUG: averaged twice
    state["momentum"] = g_shard.clone() if "momentum" not in state else state["momentum"] * momentum + g_shard
    full = _padded(param.detach(), n * size)
    dist.all_gather_into_tensor(full, full[r * size:(r + 1) * size] - lr * state["momentum"])
    with torch.no_grad():
        param.copy_(full[:param.numel()])
