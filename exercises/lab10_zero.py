"""Lab 10 exercises: ZeRO and FSDP.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

- ``model_state_bytes``: what one rank holds at each ZeRO stage;
- ``zero1_step``: a ZeRO-1 step — your rank keeps and updates only its shard of the optimizer
  state, then the updated shards are all-gathered;
- ``fsdp_linear``: FSDP's gather → compute → free for one linear layer, forward and backward.

``zero1_step`` and ``fsdp_linear`` run on every rank of an initialised process group (e.g. under
``labkit.dist.launch``). Use ``dist.reduce_scatter_single(out, inp)`` (sum) and
``dist.all_gather_single(out, inp)`` (their older names, reduce_scatter_tensor and
all_gather_into_tensor, work too); the grader logs every collective you call.
"""
import math  # noqa: F401

import torch  # noqa: F401
import torch.distributed as dist  # noqa: F401


def model_state_bytes(num_params, world_size, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Bytes of parameters + gradients + optimizer states one rank holds.

    num_params: Ψ, the number of parameters; world_size: N data-parallel ranks; stage: 0 (plain
    data parallelism: everything replicated), 1 (optimizer states sharded over the N ranks),
    2 (gradients too), 3 (parameters too). param_bytes, grad_bytes, optimizer_bytes: bytes per
    parameter of each (mixed-precision Adam: 2, 2 and 12 — fp32 master copy, m and v).
    Return a float. Example: Ψ = 7.5e9, N = 64, stage 1 -> 4Ψ + 12Ψ/64 = 31.40625e9.
    """
    raise NotImplementedError("hint: start from everything replicated, (p + g + k)·Ψ, and divide by N the kinds of bytes each stage shards: optimizer states from stage 1, gradients from 2, parameters at 3.")


def zero1_step(param, grad, state, lr, momentum):
    """One ZeRO-1 step of SGD with momentum on this rank; ``param`` is updated in place.

    param: (P,) float64, the flat parameters, the same on every rank.
    grad: (P,) float64, this rank's gradient (of the mean loss over its own slice of the batch).
    state: a dict this rank keeps from call to call (empty at the first call). Keep in it only
        this rank's shard of the momentum buffer: P'/N numbers, not P (the grader counts the
        elements of the tensors stored directly in ``state``).
    lr, momentum: floats. The update is torch.optim.SGD's, on the gradient averaged over ranks:
        v = momentum·v + g_mean  (v starts at g_mean),  p = p − lr·v.
    Sharding: pad P to P' = ceil(P/N)·N elements (zeros at the end); rank r owns elements
    [r·P'/N, (r+1)·P'/N) of the padded vector.
    1. reduce-scatter the padded gradient (sum), divide by N: your shard of g_mean;
    2. update your shard of v and of the parameters;
    3. all-gather the updated shards into the padded parameters and copy the first P back into
       ``param``.
    No all-reduce: ZeRO-1 moves what DDP moves, as a reduce-scatter plus an all-gather.
    """
    raise NotImplementedError("hint: each rank owns one equal shard of the (padded) flat parameters: reduce-scatter gives it the summed gradient of exactly its shard, it updates only that shard with only that shard's state, and an all-gather rebuilds the full parameters (dist.reduce_scatter_single, dist.all_gather_single).")


def fsdp_linear(x, weight_shard, bias, out_features, in_features):
    """y = x·Wᵀ + b, where W lives sharded: FSDP's gather → compute → free, in both passes.

    x: (B, in_features), this rank's input; weight_shard: (P'/N,) with requires_grad, this
    rank's shard of W (out_features, in_features) flattened row by row and padded with zeros to
    P' = ceil(out·in/N)·N elements; bias: (out_features,), the same on every rank.
    Return y: (B, out_features). Write a torch.autograd.Function:
    - forward: all-gather the full padded W, compute y, and keep for backward only x and what
      you were given — NOT the full W (it must be freed when forward returns);
    - backward: all-gather W again, compute dx = dy·W and dW = dyᵀ·x, flatten and pad dW, and
      reduce-scatter it (sum over ranks) into the gradient of weight_shard; the gradient of
      bias is dy summed over the batch (no communication).
    """
    raise NotImplementedError("hint: the full weight exists only while it is used: gathered for forward, freed, gathered again for backward (a torch.autograd.Function that saves the shard, not the full weight); the weight's gradient leaves backward already summed and cut to your shard (dist.reduce_scatter_single).")
