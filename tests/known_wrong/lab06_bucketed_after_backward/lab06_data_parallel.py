"""Known-wrong: the right buckets and the right means, but every bucket's all-reduce starts in
finish(), after backward has ended: no overlap (the naive DDP with buckets)."""
from solutions.lab06_data_parallel import *  # noqa: F401,F403
from solutions.lab06_data_parallel import dist, torch


def bucketed_ddp_hooks(module, buckets):
    for t in [*module.parameters(), *module.buffers()]:
        dist.broadcast(t.data, src=0)
    world = dist.get_world_size()
    params = [p for p in module.parameters() if p.requires_grad]

    def finish():   # BUG: nothing is reduced while backward runs
        for members in buckets:
            flat = torch.cat([params[i].grad.reshape(-1) for i in members]).div_(world)
            dist.all_reduce(flat, async_op=True).wait()
            offset = 0
            for i in members:
                g = params[i].grad
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()

    return finish
