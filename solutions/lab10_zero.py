"""Lab 10 exercises: ZeRO and FSDP.

Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.

- ``model_state_bytes``: what one rank holds at each ZeRO stage;
- ``zero1_step``: a ZeRO-1 step — your rank keeps and updates only its shard of the optimizer
  state, then the updated shards are all-gathered;
- ``fsdp_linear``: FSDP's gather → compute → free for one linear layer, forward and backward.

``zero1_step`` and ``fsdp_linear`` run on every rank of an initialised process group (e.g. under
``labkit.dist.launch``). Use ``dist.reduce_scatter_single(out, inp)`` (sum) and
``dist.all_gather_single(out, inp)`` (their older names, reduce_scatter_tensor and
all_gather_into_tensor, work too); the grader logs every collective you call.
"""
import math

import torch
import torch.distributed as dist


def model_state_bytes(num_params, world_size, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Bytes of parameters + gradients + optimizer states one rank holds.

    num_params: Ψ, the number of parameters; world_size: N data-parallel ranks; stage: 0 (plain
    data parallelism: everything replicated), 1 (optimizer states sharded over the N ranks),
    2 (gradients too), 3 (parameters too). param_bytes, grad_bytes, optimizer_bytes: bytes per
    parameter of each (mixed-precision Adam: 2, 2 and 12 — fp32 master copy, m and v).
    Return a float. Example: Ψ = 7.5e9, N = 64, stage 1 -> 4Ψ + 12Ψ/64 = 31.40625e9.
    """
    p, g, k = param_bytes, grad_bytes, optimizer_bytes
    sharded = [0, k, g + k, p + g + k][stage]
    return float((p + g + k - sharded) * num_params + sharded * num_params / world_size)


def _padded(t, total):
    """t (P,) followed by zeros up to ``total`` elements."""
    return torch.cat([t.reshape(-1), t.new_zeros(total - t.numel())])


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
    n, r = dist.get_world_size(), dist.get_rank()
    size = math.ceil(param.numel() / n)                    # P'/N
    lo, hi = r * size, (r + 1) * size
    g_shard = torch.empty(size, dtype=grad.dtype, device=grad.device)
    dist.reduce_scatter_single(g_shard, _padded(grad, n * size))
    g_shard /= n                                           # the mean over ranks
    if "momentum" not in state:
        state["momentum"] = g_shard.clone()
    else:
        state["momentum"].mul_(momentum).add_(g_shard)
    full = _padded(param.detach(), n * size)               # (P',)
    mine = full[lo:hi] - lr * state["momentum"]
    dist.all_gather_single(full, mine)
    with torch.no_grad():
        param.copy_(full[:param.numel()])


def _gather_weight(shard, out_features, in_features):
    n = dist.get_world_size()
    full = torch.empty(n * shard.numel(), dtype=shard.dtype, device=shard.device)
    dist.all_gather_single(full, shard.detach().contiguous())
    return full[:out_features * in_features].view(out_features, in_features)


class _FSDPLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, shard, bias, out_features, in_features):
        w = _gather_weight(shard, out_features, in_features)           # (out, in), freed on return
        ctx.save_for_backward(x, shard)
        ctx.sizes = (out_features, in_features)
        return x @ w.t() + bias

    @staticmethod
    def backward(ctx, dy):
        x, shard = ctx.saved_tensors
        out_features, in_features = ctx.sizes
        w = _gather_weight(shard, out_features, in_features)           # gathered again
        n = dist.get_world_size()
        dw = _padded(dy.t() @ x, n * shard.numel())                     # (P',)
        dshard = torch.empty_like(shard)
        dist.reduce_scatter_single(dshard, dw)
        return dy @ w, dshard, dy.sum(0), None, None


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
    return _FSDPLinear.apply(x, weight_shard, bias, out_features, in_features)
