"""Known-wrong: hooks registered module by module, so a weight shared by two modules is reduced twice."""
from solutions.lab06_data_parallel import *  # noqa: F401,F403
from solutions.lab06_data_parallel import dist


def data_parallel_hooks(module):
    for t in [*module.parameters(), *module.buffers()]:
        dist.broadcast(t.data, src=0)
    world = dist.get_world_size()
    pending = []

    def hook(p):
        p.grad.div_(world)
        pending.append(dist.all_reduce(p.grad, async_op=True))

    for m in module.modules():
        for p in m.parameters(recurse=False):  # BUG: the tied weight is seen once per module holding it
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(hook)

    def finish():
        for work in pending:
            work.wait()
        pending.clear()

    return finish
