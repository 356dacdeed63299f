"""Lab 06 exercises: data parallelism.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

- ``bucket_indices``: which gradients travel together (PyTorch DDP's bucketing rule);
- ``data_parallel_hooks``: DDP from backward hooks, one asynchronous all-reduce per parameter;
- ``bucketed_ddp_hooks``: the same with gradient buckets, one asynchronous all-reduce per bucket;
- ``ssp_start_times``: the clock rule of a stale-synchronous parameter server;
- ``noise_scale``: the gradient noise scale from the two gradients a data-parallel step has.
"""
import torch  # noqa: F401
import torch.distributed as dist  # noqa: F401


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
    raise NotImplementedError("hint: one open bucket per dtype at any moment, each knowing its bytes so far; reversed() walks in backward's order, and a dict remembers the order its keys were first added.")


def data_parallel_hooks(module):
    """Make ``module`` data-parallel on the current process group; return ``finish``.

    module: a torch.nn.Module whose replicas may start different on each rank.
    1. Copy rank 0's parameters and buffers to every rank (dist.broadcast, in place).
    2. While backward runs, as soon as a parameter's gradient has been accumulated, start ONE
       asynchronous all-reduce of that gradient, in place, so that after it every rank holds the
       mean of the ranks' gradients. Each parameter that requires grad is reduced exactly once
       per backward, also when two modules share it (a tied embedding and output layer);
       parameters with requires_grad=False are never reduced.
    3. Return ``finish()``: it waits for every all-reduce started since the last call (so every
       rank then holds the mean gradient of the whole batch in ``.grad``) and forgets them.
    Use: loss.backward(); finish(); optimizer.step(). The grader counts one all-reduce per
    trainable parameter, each with async_op=True and started during backward.
    """
    raise NotImplementedError("hint: overlap: a gradient is final once backward has accumulated it, so its reduction can start then and run in the background while backward goes on. APIs: dist.broadcast, Tensor.register_post_accumulate_grad_hook, dist.all_reduce(async_op=True) and Work.wait().")


def bucketed_ddp_hooks(module, buckets):
    """Make ``module`` data-parallel with gradient buckets reduced while backward runs; return ``finish``.

    module: a torch.nn.Module whose replicas may start different on each rank.
    buckets: a list of buckets, each a list of indices into
    ``params = [p for p in module.parameters() if p.requires_grad]``; every index is in exactly
    one bucket (``bucket_indices`` gives such a list for params' sizes and dtypes, one dtype per
    bucket).
    1. Copy rank 0's parameters and buffers to every rank (dist.broadcast, in place).
    2. During backward, as soon as the LAST gradient of a bucket has been accumulated (in the hook
       of that gradient, not later), start ONE asynchronous all-reduce (async_op=True) of a flat
       tensor holding all of the bucket's gradients, so that it yields the mean over the ranks.
    3. Return ``finish()``: it waits for every bucket's all-reduce started since the last call,
       puts each parameter's mean gradient (of the whole batch) into its ``.grad``, and readies
       everything for the next backward.
    Use: loss.backward(); finish(); optimizer.step(). The grader checks one all-reduce per bucket
    carrying exactly the bucket's bytes, each started in the hook of its bucket's last gradient,
    and the trained parameters against one process on the whole batch.
    """
    raise NotImplementedError("hint: a bucket is ready when its last gradient is, whatever order backward takes: count what each bucket still waits for. One flat message per bucket (torch.cat); finish() must undo the flattening (slices of the flat mean, Tensor.copy_) and reset the counts.")


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
    raise NotImplementedError("hint: every start depends only on finishes of earlier clocks, so the table can be filled one clock (column) at a time for all workers; the staleness bound is one gate shared by a whole clock.")


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
    raise NotImplementedError("hint: write E|G_B|^2 = |G|^2 + tr(Sigma)/B once for each batch size: two linear equations in the two unknowns. The big batch's norm alone is not |G|^2: it still carries tr(Sigma)/b_big.")
