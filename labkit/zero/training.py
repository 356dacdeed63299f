"""One training loop for every way of sharding the model states, ours and PyTorch's.

    launch(train_rank, world, "zero2", cfg, steps=3)     # -> per rank: a `RankRun`

Methods (``METHODS``):

    ddp           labkit's DDP (Lab 06) + AdamW: nothing sharded (stage 0)
    zero1, zero2  our `ShardedOptimizer` (stage 1, 2) around AdamW
    fsdp          our `FSDP` (stage 3) + AdamW on its shards
    fsdp-prefetch the same with forward and backward prefetch (`FSDP(prefetch=True)`)
    torch-zero1   PyTorch: DistributedDataParallel + ``ZeroRedundancyOptimizer(AdamW)``
    torch-fsdp2   PyTorch: ``fully_shard`` on every block and the root (FSDP2) + AdamW

Every rank builds the same ``GPT(cfg, seed=0)`` and trains on its own equal slice of the same
global batches (``batch(cfg, global_batch, seed=step)``), so each method should end where one
process training on whole batches ends (`reference_params`). A run reports the full parameters
at the end, the losses, the collectives counted in each step (ours only: PyTorch's are not
instrumented), the model-state bytes the rank holds after the last step (`MemoryTracker`), and
the peak bytes of a whole step.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

from labkit.collectives.counting import count_collectives
from labkit.dist import device
from labkit.memory.tracker import MemoryTracker
from labkit.model import GPT, GPTConfig, batch

METHODS = ("ddp", "zero1", "zero2", "fsdp", "fsdp-prefetch", "torch-zero1", "torch-fsdp2")
STAGE = {"ddp": 0, "zero1": 1, "zero2": 2, "fsdp": 3, "fsdp-prefetch": 3, "torch-zero1": 1, "torch-fsdp2": 3}


@dataclass
class RankRun:
    """What one rank saw. ``params``: {name: full tensor} after training; ``losses``: this rank's
    loss per step; ``comm``: per step, {op: elements} summed over that step's collectives;
    ``held``: bytes by MemoryTracker category after the last step; ``peak``: peak bytes of the
    last step (forward, backward, step); ``padded_numel``: Σ Ψ' of our sharded groups (0 for
    PyTorch's methods); ``stepped_tensors``: tensors with optimizer state on this rank (AdamW keeps
    a 4-byte step counter for each)."""

    params: dict
    losses: list
    comm: list
    held: dict
    peak: int
    padded_numel: int
    stepped_tensors: int


def _model(cfg: GPTConfig, dtype, frozen, device="cpu") -> GPT:
    model = GPT(cfg, seed=0, dtype=dtype).to(device)
    for name in frozen:
        model.get_parameter(name).requires_grad_(False)
    return model


def build(method: str, cfg: GPTConfig, dtype=torch.float32, lr: float = 1e-2, weight_decay: float = 0.1,
          bucket_cap_mb: float = 25.0, policy=None, frozen: tuple = ()):
    """(model to call, optimizer) for ``method`` on this rank; the model is ``GPT(cfg, seed=0)``, on
    this rank's device (`labkit.dist.device`)."""
    model = _model(cfg, dtype, frozen, device())
    kw = dict(lr=lr, weight_decay=weight_decay)
    if method == "ddp":
        from labkit.data_parallel import DDP

        wrapped = DDP(model, bucket_cap_mb=bucket_cap_mb)
        return wrapped, torch.optim.AdamW(model.parameters(), **kw)
    if method in ("zero1", "zero2"):
        from labkit.zero.optimizer import ShardedOptimizer

        opt = ShardedOptimizer(model.parameters(), torch.optim.AdamW, stage=STAGE[method],
                               bucket_cap_mb=bucket_cap_mb, **kw)
        return model, opt
    if method in ("fsdp", "fsdp-prefetch"):
        from labkit.zero.fsdp import FSDP, shard_if_matrix

        wrapped = FSDP(model, policy=policy or shard_if_matrix, prefetch=method == "fsdp-prefetch")
        return wrapped, torch.optim.AdamW(wrapped.parameters(), **kw)
    if method == "torch-zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
        return wrapped, ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW, **kw)
    if method == "torch-fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device().type, (dist.get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, torch.optim.AdamW(model.parameters(), **kw)
    raise ValueError(f"train_rank: method must be one of {', '.join(METHODS)}, got {method!r}")


def local_optimizer(opt):
    """The optimizer whose ``state`` holds this rank's tensors: ZeroRedundancyOptimizer keeps them
    in its local ``optim``."""
    return getattr(opt, "optim", opt)


def full_params(method: str, model) -> dict:
    """{name: full parameter} of the original model, however it is sharded."""
    if method in ("fsdp", "fsdp-prefetch"):
        return model.gather_full_params()
    inner = getattr(model, "module", model)
    if method == "torch-fsdp2":
        return {n: p.full_tensor().detach().clone() for n, p in inner.named_parameters()}
    return {n: p.detach().clone() for n, p in inner.named_parameters()}


def train_rank(rank: int, world: int, method: str, cfg: GPTConfig, steps: int = 3, global_batch: int = 4,
               lr: float = 1e-2, weight_decay: float = 0.1, dtype=torch.float64, bucket_cap_mb: float = 0.004,
               policy=None, frozen: tuple = ()) -> RankRun:
    """Train ``steps`` AdamW steps with ``method`` on this rank (run it under `labkit.dist.launch`);
    ``frozen`` names parameters that do not train; ``policy`` is FSDP's (which to shard)."""
    warnings.simplefilter("ignore", FutureWarning)     # torch's deprecation notes for renamed collectives
    model, opt = build(method, cfg, dtype, lr, weight_decay, bucket_cap_mb, policy, frozen)
    lo, hi = rank * global_batch // world, (rank + 1) * global_batch // world
    losses, comm, peak = [], [], 0
    for step in range(steps):
        tokens, targets = (t.to(device()) for t in batch(cfg, global_batch, seed=step))
        tracker = MemoryTracker(model, local_optimizer(opt))
        with tracker, count_collectives() as recs:
            opt.zero_grad()
            _, loss = model(tokens[lo:hi], targets[lo:hi])
            loss.backward()
            finish = getattr(model, "finish_gradient_synchronization", None)   # ours: wait for comm
            if finish is not None:
                finish()
            opt.step()
        losses.append(loss.item())
        ops: dict[str, int] = {}
        for c in recs:
            ops[c.op] = ops.get(c.op, 0) + c.numel
        comm.append(ops)
        peak = tracker.peak_bytes
    tracker = MemoryTracker(model, local_optimizer(opt))
    with tracker:
        held = tracker.live_by_category()
    padded = getattr(opt, "padded_numel", 0) or getattr(model, "padded_numel", 0)
    stepped = len(getattr(opt, "inner", local_optimizer(opt)).state)
    return RankRun(full_params(method, model), losses, comm, held, peak, padded, stepped)


def reference_params(cfg: GPTConfig, steps: int = 3, global_batch: int = 4, lr: float = 1e-2,
                     weight_decay: float = 0.1, dtype=torch.float64, frozen: tuple = ()) -> dict:
    """{name: parameter} after the same training in one process on whole batches."""
    model = _model(cfg, dtype, frozen)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay)
    for step in range(steps):
        opt.zero_grad()
        model(*batch(cfg, global_batch, seed=step))[1].backward()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}
