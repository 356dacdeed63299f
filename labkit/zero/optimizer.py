"""ZeRO stages 1 and 2: each rank keeps and steps only its shard of the optimizer states.

    model = GPT(cfg)                                   # the same model on every rank
    opt = ShardedOptimizer(model.parameters(), torch.optim.AdamW, stage=2, lr=1e-3)
    _, loss = model(tokens_of_this_rank, targets_of_this_rank)
    loss.backward()
    opt.step()                                         # every rank ends with the same parameters
    opt.zero_grad()

Same constructor shape as PyTorch's ``ZeroRedundancyOptimizer(params, optimizer_class, **defaults)``.
Use it on the plain model, *without* DDP: the optimizer averages the gradients itself.

The parameters (those that require grad) are grouped into buckets — PyTorch DDP's rule, in the
order gradients become ready (`labkit.data_parallel.buckets`) — and each bucket is one flat,
padded vector cut into N shards (`labkit.zero.flat`). For its shard of every bucket, a rank keeps

- a **master copy** of the parameters (float32; float64 for a float64 model) and
- the inner optimizer's states for it (Adam: m and v): K = 4 + 8 = 12 bytes per element,

and nothing of the other shards. A step, per bucket:

1. **reduce-scatter** the gradients: rank r receives the sum of its slice; divided by N it is the
   mean gradient over the whole batch, as DDP's all-reduce would give — but only the slice;
2. the inner optimizer (``optimizer_class``, any elementwise one: SGD, Adam, AdamW, …) steps the
   master shard;
3. **all-gather** the updated shards (cast to the parameters' dtype) into every rank's parameters.

Stage 1 reduce-scatters in ``step()``; the full gradients stay in ``p.grad`` as in plain data
parallelism. **Stage 2** reduce-scatters each bucket from a backward hook as soon as its last
gradient is ready, and frees the full gradients there: a rank then holds only its gradient shard
(and, while a reduce-scatter runs, one bucket's flat copy: one bucket is in flight at a time).
Several backward passes before a step (gradient accumulation) add up in the shards.

Bytes moved per step, per rank: (N−1)/N·Ψ' gradient elements + (N−1)/N·Ψ' parameter elements —
the 2(N−1)/N·Ψ of DDP's all-reduce: ZeRO-1 and -2 save memory at no extra traffic (and use a
reduce-scatter and an all-gather, not an all-reduce). Hyper-parameters are read from
``param_groups`` at every step, so learning-rate schedulers work. Elementwise optimizers only:
one that looks at a whole tensor (LAMB's trust ratio, Shampoo) would see shards instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from labkit.checks import check_int, check_same_on_ranks
from labkit.data_parallel.buckets import assign_buckets, cap_bytes_of
from labkit.zero.comm import all_gather_flat, broadcast_from_rank0_, reduce_scatter_flat
from labkit.zero.flat import FlatLayout


def master_dtype(dtype: torch.dtype) -> torch.dtype:
    """The optimizer's dtype for parameters of ``dtype``: float32, or float64 for float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@dataclass
class Bucket:
    """One bucket: its parameters, their flat layout, this rank's master shard and gradient shard."""

    group: int
    params: list
    layout: FlatLayout
    master: nn.Parameter
    grad_shard: torch.Tensor | None = None      # (Ψ'/N,) mean over ranks, in the parameters' dtype
    ready: set = field(default_factory=set)
    pending: list = field(default_factory=list)  # stage 2: (work, out, flat input kept alive)


# BEGIN SOLUTION (labkit's ZeRO-1/2 optimizer: it answers zero1_step)
class ShardedOptimizer(torch.optim.Optimizer):
    """ZeRO-1 (``stage=1``) or ZeRO-2 (``stage=2``); see the module docstring."""

    def __init__(self, params, optimizer_class: type, *, stage: int = 1, bucket_cap_mb: float = 25.0,
                 **defaults):
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise TypeError(f"ShardedOptimizer: optimizer_class must be a torch.optim.Optimizer class, "
                            f"got {optimizer_class!r}")
        self.stage = check_int("ShardedOptimizer", "stage", stage, minimum=1, maximum=2)
        if not dist.is_initialized():
            raise RuntimeError("ShardedOptimizer: no process group; run inside labkit.dist.launch (or torchrun)")
        cap = cap_bytes_of(bucket_cap_mb, "ShardedOptimizer")
        try:
            super().__init__(params, defaults)
        except (TypeError, ValueError) as e:          # torch's: an empty list, a tensor instead of a list
            raise type(e)(f"ShardedOptimizer: params: {str(e).strip().splitlines()[0]}") from None
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        check_same_on_ranks("ShardedOptimizer", "the parameters", [
            (f"param_groups[{g}][{i}]" + ("" if p.requires_grad else " (frozen)"), p)
            for g, group in enumerate(self.param_groups) for i, p in enumerate(group["params"])])
        self.buckets: list[Bucket] = []
        inner_groups = []
        for g, group in enumerate(self.param_groups):
            trainable = [p for p in group["params"] if p.requires_grad]
            broadcast_from_rank0_(trainable)
            masters = []
            for members in assign_buckets(trainable, cap):
                ps = [trainable[i] for i in members]
                layout = FlatLayout.of(ps, self.world)
                lo, hi = layout.shard_range(self.rank)
                flat = layout.flatten([p.detach() for p in ps], dtype=master_dtype(ps[0].dtype))
                master = nn.Parameter(flat[lo:hi].clone())          # (Ψ'/N,)
                self.buckets.append(Bucket(g, ps, layout, master))
                masters.append(master)
            inner_groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": masters})
        self.inner = optimizer_class(inner_groups, **defaults)
        self._bucket_of = {id(p): b for b in self.buckets for p in b.params}
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad_ready)
                       for b in self.buckets for p in b.params] if self.stage == 2 else []

    # ------------------------------------------------------------------ stage 2: backward hooks
    def _on_grad_ready(self, param: torch.Tensor) -> None:
        b = self._bucket_of[id(param)]
        b.ready.add(id(param))
        if len(b.ready) == len(b.params):
            for other in self.buckets:          # one bucket in flight: its full-size input is freed
                self._collect(other)            # before the next one is flattened
            self._reduce_scatter(b, "backward", async_op=True)

    def _reduce_scatter(self, b: Bucket, phase: str, async_op: bool) -> None:
        flat = b.layout.flatten([p.grad for p in b.params]) if any(p.grad is not None for p in b.params) \
            else torch.zeros(b.layout.padded, dtype=b.params[0].dtype, device=b.params[0].device)     # (Ψ',)
        out, work = reduce_scatter_flat(flat, phase, async_op=async_op)                 # (Ψ'/N,)
        b.ready.clear()
        if self.stage == 2:
            for p in b.params:
                p.grad = None                     # the full gradient is gone; the shard remains
        b.pending.append((work, out, flat))

    def _collect(self, b: Bucket) -> None:
        for work, out, _flat in b.pending:
            if work is not None:
                work.wait()
            out.div_(self.world)                                   # the mean over the whole batch
            b.grad_shard = out if b.grad_shard is None else b.grad_shard.add_(out)
        b.pending.clear()

    # ------------------------------------------------------------------ the step
    @torch.no_grad()
    def step(self, closure=None):
        """Reduce-scatter what is left, step the master shards, all-gather the parameters."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for b in self.buckets:
            # stage 1 reduces here; stage 2 only buckets that backward left incomplete (an unused
            # parameter) or never reached
            if self.stage == 1 or b.ready or (not b.pending and b.grad_shard is None):
                self._reduce_scatter(b, "step", async_op=False)
            self._collect(b)
            b.master.grad = b.grad_shard.to(b.master.dtype)    # shares grad_shard if dtypes match
        for outer, inner in zip(self.param_groups, self.inner.param_groups):
            inner.update({k: v for k, v in outer.items() if k != "params"})
        self.inner.step()
        for b in self.buckets:
            full = all_gather_flat(b.master.detach().to(b.params[0].dtype), "step")      # (Ψ',)
            for p, new in zip(b.params, b.layout.unflatten(full)):
                p.copy_(new)
            b.master.grad = None
            if self.stage == 1:
                b.grad_shard = None      # stage 1 keeps the full gradients in p.grad
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for b in self.buckets:
            b.grad_shard = None

    # ------------------------------------------------------------------ what a rank holds
    def memory_categories(self) -> dict[str, list[torch.Tensor]]:
        """Tensors this optimizer holds, by MemoryTracker category: master shards and the inner
        optimizer's states under "optimizer", gradient shards under "gradients"."""
        states = [v for s in self.inner.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        return {"optimizer": [b.master for b in self.buckets] + states,
                "gradients": [b.grad_shard for b in self.buckets if b.grad_shard is not None]}

    @property
    def padded_numel(self) -> int:
        """Σ over buckets of Ψ'_b: the sharded elements (this rank holds padded_numel / N of them)."""
        return sum(b.layout.padded for b in self.buckets)
# END SOLUTION


# BEGIN SOLUTION
def _padded(t, total):
    """t (P,) followed by zeros up to ``total`` elements."""
    return torch.cat([t.reshape(-1), t.new_zeros(total - t.numel())])
# END SOLUTION


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
    # BEGIN SOLUTION
    # HINT: each rank owns one equal shard of the (padded) flat parameters: reduce-scatter gives it
    # HINT: the summed gradient of exactly its shard, it updates only that shard with only that
    # HINT: shard's state, and an all-gather rebuilds the full parameters
    # HINT: (dist.reduce_scatter_single, dist.all_gather_single).
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
    # END SOLUTION
