"""Known-wrong: gradients are summed over ranks, not averaged (the step is world_size times too big)."""
from solutions.lab06_data_parallel import *  # noqa: F401,F403
from solutions.lab06_data_parallel import dist


def data_parallel_hooks(module):
    for t in [*module.parameters(), *module.buffers()]:
        dist.broadcast(t.data, src=0)
    pending = []

    def hook(p):
        pending.append(dist.all_reduce(p.grad, async_op=True))  # BUG: no division by the world size

    for p in module.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(hook)

    def finish():
        for work in pending:
            work.wait()
        pending.clear()

    return finish
