"""DDP from scratch: all-reduce the gradients from backward hooks, while backward still runs.

    model = DDP(GPT(cfg), bucket_cap_mb=1)       # inside a launched process group
    _, loss = model(tokens_of_this_rank, targets_of_this_rank)
    loss.backward()                                # reductions start as gradients become ready
    model.finish_gradient_synchronization()        # wait; every rank now holds the mean gradient
    optimizer.step()

Same shape as PyTorch's ``DistributedDataParallel``: ``.module`` is the wrapped model, the
constructor broadcasts rank 0's parameters and buffers so all replicas start equal, and
``no_sync()`` skips the reductions for gradient accumulation (the next synchronised backward
reduces the accumulated sums). Each rank's loss is the mean over its own slice of the batch, so
DDP divides each gradient by the world size before the sum: the result is the mean gradient over
the whole batch — what one process would compute on all of it.

Parameters that do not require grad are left alone; a parameter shared by two modules (a tied
embedding and LM head) appears once in ``module.parameters()`` and is reduced once.

``bucket_cap_mb=None`` reduces each parameter on its own; a number groups gradients into buckets
(`labkit.data_parallel.buckets`), each reduced as one flat tensor once its last gradient is ready.
``comm="torch"`` uses ``dist.all_reduce(async_op=True)``, which runs in the background while
backward goes on; ``comm="ring"`` uses Lab 05's ring all-reduce built from isend/irecv — it runs
inside the hook and blocks backward while it does (no overlap), which the timeline makes visible.
``overlap=False`` is the naive baseline: the hooks only note which gradients are ready and every
reduction starts in ``finish_gradient_synchronization``, after backward has ended.

Lab 06's exercises are the same idea as plain functions returning ``finish``:
``data_parallel_hooks`` (one all-reduce per parameter) and ``bucketed_ddp_hooks`` (one per bucket).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from labkit.checks import check_same_on_ranks, module_tensors
from labkit.collectives.counting import record_collective
from labkit.data_parallel.buckets import assign_buckets, cap_bytes_of

COMMS = ("torch", "ring")


@dataclass
class CommEvent:
    """One bucket's reduction: ``bucket`` index, ``nbytes`` reduced, and perf_counter times (seconds):
    ``ready`` when its last gradient was accumulated, ``start`` when its all-reduce began (= ready
    when overlapping), ``end`` when it was done (for async all-reduces: when
    finish_gradient_synchronization found it complete)."""

    bucket: int
    nbytes: int
    ready: float
    start: float = 0.0
    end: float = 0.0


# BEGIN SOLUTION (labkit's bucketed DDP: it answers data_parallel_hooks and bucketed_ddp_hooks too)
class DDP(nn.Module):
    """Data-parallel wrapper; see the module docstring. Needs an initialised process group."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float | None = None, comm: str = "torch",
                 overlap: bool = True):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"DDP: module must be a torch.nn.Module, got {type(module).__name__}")
        if comm not in COMMS:
            raise ValueError(f"DDP: comm must be one of {', '.join(COMMS)}, got {comm!r}")
        if not isinstance(overlap, bool):
            raise TypeError(f"DDP: overlap must be True or False, got {overlap!r}")
        if not dist.is_initialized():
            raise RuntimeError("DDP: no process group; run inside labkit.dist.launch (or torchrun)")
        cap = None if bucket_cap_mb is None else cap_bytes_of(bucket_cap_mb, "DDP")
        self.module, self.comm, self.overlap = module, comm, overlap
        self.world_size = dist.get_world_size()
        check_same_on_ranks("DDP", "the module's parameters and buffers", module_tensors(module))
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t.data, src=0)
        self.params = [p for p in module.parameters() if p.requires_grad]
        if bucket_cap_mb is None:
            self.buckets = [[i] for i in reversed(range(len(self.params)))]
        else:
            self.buckets = assign_buckets(self.params, cap)
        self._bucket_of = {i: b for b, members in enumerate(self.buckets) for i in members}
        self._index = {id(p): i for i, p in enumerate(self.params)}
        self._ready: list[set[int]] = [set() for _ in self.buckets]
        self._pending: list[tuple[int, torch.Tensor, object, CommEvent]] = []
        self._waiting: list[tuple[int, float]] = []   # (bucket, ready time) not yet started (overlap=False)
        self._sync = True
        self.events: list[CommEvent] = []   # this step's reductions, for timelines
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad_ready) for p in self.params]

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally without any communication."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    # ------------------------------------------------------------------ backward hooks

    def _on_grad_ready(self, param: torch.Tensor) -> None:
        if not self._sync:
            return
        i = self._index[id(param)]
        b = self._bucket_of[i]
        self._ready[b].add(i)
        if len(self._ready[b]) == len(self.buckets[b]):
            if self.overlap:
                self._reduce(b, time.perf_counter())
            else:
                self._waiting.append((b, time.perf_counter()))

    def _reduce(self, b: int, ready: float) -> None:
        members = [self.params[i] for i in self.buckets[b]]
        if len(members) == 1:
            flat = members[0].grad                                        # reduced in place
        else:
            flat = torch.cat([p.grad.reshape(-1) for p in members])       # one message
        flat.div_(self.world_size)
        event = CommEvent(b, flat.numel() * flat.element_size(), ready, time.perf_counter())
        if self.world_size > 1:
            record_collective("all_reduce", "backward", flat)
        if self.comm == "torch":
            work = dist.all_reduce(flat, async_op=True)
        else:
            from labkit.collectives import ring_all_reduce

            ring_all_reduce(flat)
            work, event.end = None, time.perf_counter()
        self._pending.append((b, flat, work, event))

    # ------------------------------------------------------------------ after backward

    def finish_gradient_synchronization(self) -> None:
        """Wait for every bucket's all-reduce and put the mean gradients back into ``.grad``.

        RuntimeError (one line) if some parameter got no gradient in this backward: every rank must
        reduce the same buckets, so DDP needs every parameter that requires grad to be used.
        """
        if self.params and not self._pending and not self._waiting and not any(self._ready):
            raise RuntimeError("DDP: finish_gradient_synchronization found no gradient since its last call: "
                               "call it once after each backward (and not after a backward inside no_sync)")
        missing = [i for b, got in enumerate(self._ready) for i in self.buckets[b] if i not in got]
        for b, ready in self._waiting:
            self._reduce(b, ready)
        self._waiting = []
        self.events = []
        for b, flat, work, event in self._pending:
            if work is not None:
                work.wait()
                event.end = time.perf_counter()
            members = [self.params[i] for i in self.buckets[b]]
            if len(members) > 1:
                offset = 0
                for p in members:
                    n = p.numel()
                    p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
                    offset += n
            self.events.append(event)
        self._pending = []
        self._ready = [set() for _ in self.buckets]
        if missing:
            names = {id(p): n for n, p in self.module.named_parameters()}
            first = names.get(id(self.params[missing[0]]), f"parameter {missing[0]}")
            raise RuntimeError(f"DDP: {len(missing)} parameter(s) got no gradient in this backward "
                               f"(first: {first}); use every parameter or set requires_grad=False")

    def bucket_names(self) -> list[list[str]]:
        """Each bucket's parameter names (in the order the bucket was filled)."""
        names = {id(p): n for n, p in self.module.named_parameters()}
        return [[names[id(self.params[i])] for i in members] for members in self.buckets]
# END SOLUTION


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
    # BEGIN SOLUTION
    # HINT: overlap: a gradient is final once backward has accumulated it, so its reduction can start
    # HINT: then and run in the background while backward goes on. APIs: dist.broadcast,
    # HINT: Tensor.register_post_accumulate_grad_hook, dist.all_reduce(async_op=True) and Work.wait().
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
    # END SOLUTION


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
    # BEGIN SOLUTION
    # HINT: a bucket is ready when its last gradient is, whatever order backward takes: count what
    # HINT: each bucket still waits for. One flat message per bucket (torch.cat); finish() must undo
    # HINT: the flattening (slices of the flat mean, Tensor.copy_) and reset the counts.
    for t in [*module.parameters(), *module.buffers()]:
        dist.broadcast(t.data, src=0)
    world = dist.get_world_size()
    params = [p for p in module.parameters() if p.requires_grad]
    bucket_of = {id(params[i]): b for b, members in enumerate(buckets) for i in members}
    waiting = [len(members) for members in buckets]   # gradients each bucket still waits for
    pending = []                                      # (bucket, flat tensor, work handle)

    def hook(p):
        b = bucket_of[id(p)]
        waiting[b] -= 1
        if waiting[b] == 0:
            flat = torch.cat([params[i].grad.reshape(-1) for i in buckets[b]]).div_(world)
            pending.append((b, flat, dist.all_reduce(flat, async_op=True)))

    for p in params:
        p.register_post_accumulate_grad_hook(hook)

    def finish():
        for b, flat, work in pending:
            work.wait()
            offset = 0
            for i in buckets[b]:
                grad = params[i].grad
                grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
                offset += grad.numel()
        pending.clear()
        waiting[:] = [len(members) for members in buckets]

    return finish
    # END SOLUTION
