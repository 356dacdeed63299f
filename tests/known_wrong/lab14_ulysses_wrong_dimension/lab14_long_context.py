"""Known-wrong: the pieces received are joined along the dimension that was cut (heads) instead
of gather_dim (the sequence): the shapes stay plausible, the positions land among the heads."""
from solutions.lab14_long_context import *  # noqa: F401,F403
from solutions.lab14_long_context import dist, torch


def all_to_all_4d(x, scatter_dim, gather_dim, group=None):
    world = dist.get_world_size(group)
    if world == 1:
        return x
    send = torch.stack(x.chunk(world, dim=scatter_dim)).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return torch.cat(recv.unbind(0), dim=scatter_dim)    # BUG: should be gather_dim
