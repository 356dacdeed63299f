"""Timing DDP steps on real ranks: naive vs per-parameter vs bucketed, and the parts the overlap
model needs (forward, backward without communication, each gradient's ready time, each bucket's
all-reduce alone).

    measured = launch(time_ddp_steps, 2, cfg, batch_per_rank, cap_mb, steps)[0]

Every rank runs the same steps; ranks meet at a barrier before each timed step so that they
start together; rank 0's times are returned (every rank waits for the slowest in the
all-reduces, so rank 0's step time is the group's). Times are medians over ``steps`` steps
after one warm-up step, in seconds, read with `labkit.bench.now` (on a GPU it waits for queued
kernels and NCCL work, so backward's time includes the communication it overlaps with). Under
NCCL every rank computes on its own GPU (`labkit.dist.device`).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
import torch.distributed as dist

from labkit.bench import now
from labkit.checks import check_int
from labkit.data_parallel.ddp import DDP
from labkit.dist import device
from labkit.model import GPT, GPTConfig, batch

# name -> (bucketed?, overlap?)
VARIANTS = {"naive": (False, False), "per-parameter": (False, True), "bucketed": (True, True)}


@dataclass
class StepTimes:
    """One variant's medians (seconds): ``fwd``, ``bwd`` (loss.backward() returning; includes any
    communication a hook ran inline), ``wait`` (finish_gradient_synchronization), ``step`` (all
    three); ``events`` = the last step's CommEvents with times relative to backward's start."""

    fwd: float
    bwd: float
    wait: float
    step: float
    events: list


@dataclass
class Measured:
    """What `time_ddp_steps` returns: ``variants`` {name: StepTimes}; compute alone (``fwd``,
    ``bwd`` with no communication); ``ready`` each parameter's gradient-ready time (s after
    backward starts, registration order) and ``nbytes`` its size; ``comm`` {bytes: seconds of a
    blocking all-reduce of that many bytes, alone}; ``buckets`` the bucketed variant's buckets."""

    world: int
    cap_mb: float
    variants: dict
    fwd: float
    bwd: float
    ready: list
    nbytes: list
    comm: dict
    buckets: list


def _data(cfg, batch_per_rank, rank, world, step):
    return tuple(t.to(device()) for t in batch(cfg, batch_per_rank, seed=step * world + rank))


def _time_variant(cfg, batch_per_rank, rank, world, cap_mb, bucketed, overlap, steps):
    model = DDP(GPT(cfg, seed=0).to(device()), bucket_cap_mb=cap_mb if bucketed else None, overlap=overlap)
    rows = []
    for step in range(steps + 1):
        tokens, targets = _data(cfg, batch_per_rank, rank, world, step)
        model.zero_grad(set_to_none=True)
        dist.barrier()
        t0 = now()
        loss = model(tokens, targets)[1]
        t1 = now()
        loss.backward()
        t2 = now()
        model.finish_gradient_synchronization()
        t3 = now()
        rows.append((t1 - t0, t2 - t1, t3 - t2, t3 - t0))
    events = [(e.bucket, e.nbytes, e.ready - t1, e.start - t1, e.end - t1) for e in model.events]
    med = [statistics.median(r[k] for r in rows[1:]) for k in range(4)]
    return StepTimes(*med, events), [list(b) for b in model.buckets]


def _compute_alone(cfg, batch_per_rank, rank, world, steps):
    """Forward, backward and per-parameter ready times with no communication at all."""
    model = GPT(cfg, seed=0).to(device())
    params = list(model.parameters())
    stamps = [0.0] * len(params)
    index = {id(p): i for i, p in enumerate(params)}

    def hook(p):
        stamps[index[id(p)]] = now()

    handles = [p.register_post_accumulate_grad_hook(hook) for p in params]
    rows, ready = [], []
    for step in range(steps + 1):
        tokens, targets = _data(cfg, batch_per_rank, rank, world, step)
        model.zero_grad(set_to_none=True)
        dist.barrier()
        t0 = now()
        loss = model(tokens, targets)[1]
        t1 = now()
        loss.backward()
        t2 = now()
        rows.append((t1 - t0, t2 - t1))
        ready.append([s - t1 for s in stamps])
    for h in handles:
        h.remove()
    fwd = statistics.median(r[0] for r in rows[1:])
    bwd = statistics.median(r[1] for r in rows[1:])
    ready_med = [statistics.median(r[i] for r in ready[1:]) for i in range(len(params))]
    return fwd, bwd, ready_med, [p.numel() * p.element_size() for p in params]


def _comm_alone(sizes, repeat):
    """Median seconds of one blocking all-reduce of each size (bytes, float32) on its own."""
    out = {}
    for n in sorted(set(sizes)):
        buf = torch.zeros(n // 4, device=device())
        samples = []
        for _ in range(repeat + 1):
            dist.barrier()
            t0 = now()
            dist.all_reduce(buf)
            samples.append(now() - t0)
        out[n] = statistics.median(samples[1:])
    return out


def time_ddp_steps(rank: int, world: int, cfg: GPTConfig, batch_per_rank: int, cap_mb: float,
                   steps: int = 5) -> Measured:
    """Rank function for `labkit.dist.launch`: every variant of VARIANTS, then the parts alone."""
    check_int("time_ddp_steps", "batch_per_rank", batch_per_rank, minimum=1)
    check_int("time_ddp_steps", "steps", steps, minimum=1)
    variants, buckets = {}, []
    for name, (bucketed, overlap) in VARIANTS.items():
        variants[name], b = _time_variant(cfg, batch_per_rank, rank, world, cap_mb, bucketed, overlap, steps)
        buckets = b if bucketed else buckets
    fwd, bwd, ready, nbytes = _compute_alone(cfg, batch_per_rank, rank, world, steps)
    bucket_bytes = [sum(nbytes[i] for i in b) for b in buckets]
    comm = _comm_alone(nbytes + bucket_bytes, max(15, steps))
    return Measured(world, cap_mb, variants, fwd, bwd, ready, nbytes, comm, buckets)
