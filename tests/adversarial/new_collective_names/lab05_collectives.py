# Attack: torch's newer names for the built-in collectives (all_gather_single, reduce_scatter_single),
# which a ban list written for older releases would not know.


def ring_all_reduce(tensor):
    n = dist.get_world_size()
    parts = torch.empty(n * tensor.numel(), dtype=tensor.dtype)
    dist.all_gather_single(parts, tensor.reshape(-1).clone())
    tensor.copy_(parts.view(n, -1).sum(0).view_as(tensor))
    size = tensor.numel() * tensor.element_size()
    return CommStats(bytes_sent=2 * (n - 1) * size // n, bytes_received=2 * (n - 1) * size // n,
                     messages=2 * (n - 1), steps=2 * (n - 1))
