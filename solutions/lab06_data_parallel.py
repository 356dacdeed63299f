"""Lab 06 exercises: data parallelism (reference answers).

- ``bucket_indices``: which gradients travel together (PyTorch DDP's bucketing rule);
- ``data_parallel_hooks``: DDP from backward hooks, one asynchronous all-reduce per parameter;
- ``ssp_start_times``: the clock rule of a stale-synchronous parameter server;
- ``noise_scale``: the gradient noise scale from the two gradients a data-parallel step has.
"""
import torch
import torch.distributed as dist


def bucket_indices(param_bytes, param_dtypes, cap_bytes):
    """Group parameters into gradient buckets the way PyTorch's DDP does.

    param_bytes: list of ints, the gradient size in bytes of each parameter, in registration
    order (the order of ``module.parameters()``); param_dtypes: list of str, each parameter's
    dtype name (parameters of different dtypes never share a bucket); cap_bytes: int > 0.
    Walk the parameters in REVERSE registration order (about the order backward produces
    their gradients). Each dtype fills its own open bucket; add the parameter, and if the
    bucket now holds >= cap_bytes, close it (the parameter that crosses the cap stays in it).
    Return the buckets as lists of parameter indices (in the order they were added), listed
    in the order they closed, followed by the buckets still open at the end in the order
    they were opened.
    Example: bytes [4, 4, 4], one dtype, cap 8 -> [[2, 1], [0]].
    """
    closed, open_ = [], {}
    for i in reversed(range(len(param_bytes))):
        members, size = open_.get(param_dtypes[i], ([], 0))
        members, size = members + [i], size + param_bytes[i]
        if size >= cap_bytes:
            closed.append(members)
            open_.pop(param_dtypes[i], None)
        else:
            open_[param_dtypes[i]] = (members, size)
    return closed + [members for members, _ in open_.values()]


def data_parallel_hooks(module):
    """Make ``module`` data-parallel on the current process group; return ``finish``.

    module: a torch.nn.Module whose replicas may start different on each rank.
    1. Copy rank 0's parameters and buffers to every rank (dist.broadcast, in place).
    2. On every parameter that requires grad, register a hook that runs when its gradient
       has been accumulated (``p.register_post_accumulate_grad_hook``). The hook divides
       ``p.grad`` by the world size and starts ``dist.all_reduce(p.grad, async_op=True)``,
       keeping the returned work handle. Each parameter must be reduced exactly once per
       backward, also when two modules share it (a tied embedding and output layer);
       parameters with requires_grad=False get no hook.
    3. Return ``finish()``: it waits for every work handle started since the last call (so
       every rank then holds the mean gradient of the whole batch) and forgets them.
    Use: loss.backward(); finish(); optimizer.step().
    """
    for t in [*module.parameters(), *module.buffers()]:
        dist.broadcast(t.data, src=0)
    world = dist.get_world_size()
    pending = []

    def hook(p):
        p.grad.div_(world)
        pending.append(dist.all_reduce(p.grad, async_op=True))

    for p in module.parameters():                 # each shared parameter appears once here
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(hook)

    def finish():
        for work in pending:
            work.wait()
        pending.clear()

    return finish


def ssp_start_times(durations, staleness):
    """When each worker starts each iteration under a stale-synchronous parameter server.

    durations: list of W lists, each of the same length n: worker k's iteration c takes
    durations[k][c] time units (talking to the server takes no time). staleness: an int
    s >= 0, or None for fully asynchronous (ASP).
    A worker that has finished c iterations may start its next one at once under ASP;
    under SSP(s) only once every worker has finished at least c - s iterations (s = 0 is
    BSP: a barrier at every clock). Return start, a list of W lists of n numbers:
    start[k][c] = max(finish[k][c-1], max over j of finish[j][c-s-1]), dropping terms whose
    index is negative, where finish[k][c] = start[k][c] + durations[k][c].
    Example: durations [[1, 1, 1], [3, 3, 3]], s = 1 -> [[0, 1, 3], [0, 3, 6]].
    """
    workers, n = len(durations), len(durations[0])
    start = [[0] * n for _ in range(workers)]
    finish = [[0] * n for _ in range(workers)]
    for c in range(n):
        gate = 0
        if staleness is not None and c - staleness - 1 >= 0:
            gate = max(finish[j][c - staleness - 1] for j in range(workers))
        for k in range(workers):
            start[k][c] = max(finish[k][c - 1] if c else 0, gate)
            finish[k][c] = start[k][c] + durations[k][c]
    return start


def noise_scale(g_small_sq, g_big_sq, b_small, b_big):
    """The gradient noise scale B_simple = tr(Σ)/|G|² from gradients over two batch sizes
    (McCandlish et al. 2018): what a data-parallel step already has — each rank's own gradient
    over ``b_small`` examples and the all-reduced one over ``b_big`` (> b_small).

    g_small_sq: mean over ranks (and steps) of |local gradient|²; g_big_sq: mean (over steps) of
    |all-reduced gradient|²; b_small, b_big: examples per local and per global gradient.
    A gradient over B examples has E|G_B|² = |G|² + tr(Σ)/B, Σ the covariance of one example's
    gradient and G the true gradient. Solve the two equations (one per batch size) for |G|² and
    tr(Σ), and return (|G|² estimate, tr(Σ) estimate, their ratio tr(Σ)/|G|²) as floats.
    Example: g_small_sq = 3.0, g_big_sq = 1.5, b_small = 1, b_big = 4 -> (1.0, 2.0, 2.0).
    """
    g2 = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small)
    trace = (g_small_sq - g_big_sq) / (1 / b_small - 1 / b_big)
    return g2, trace, trace / g2
