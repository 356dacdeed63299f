"""Timing DDP steps on real ranks: naive vs per-parameter vs bucketed, and the parts the overlap
model needs (forward, backward without communication, each gradient's ready time, each bucket's
all-reduce alone).

    measured = launch(time_ddp_steps, 2, cfg, batch_per_rank, cap_mb, steps)[0]

Every rank runs the same steps; ranks meet at a barrier before each timed step so that they
start together; rank 0's times are returned (every rank waits for the slowest in the
all-reduces, so rank 0's step time is the group's). The variants' steps are interleaved (step k
of each in turn), so load from other programs falls on all of them alike. Times are medians over
``steps`` steps after one warm-up step, in seconds, read with `labkit.bench.now` (on a GPU it waits
for queued kernels and NCCL work, so backward's time includes the communication it overlaps with).
Under NCCL every rank computes on its own GPU (`labkit.dist.device`).
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
    three); ``events`` = the last step's CommEvents with times relative to backward's start;
    ``lag`` = how much later than this rank the last rank finished its backward (0 when this rank
    was the last): no all-reduce can complete before every rank has started it."""

    fwd: float
    bwd: float
    wait: float
    step: float
    events: list
    lag: float = 0.0


@dataclass
class Measured:
    """What `time_ddp_steps` returns: ``variants`` {name: StepTimes}; compute alone (``fwd``,
    ``bwd`` with no communication); ``ready`` each parameter's gradient-ready time (s after
    backward starts, registration order) and ``nbytes`` its size; ``comm`` {bytes: seconds of a
    blocking all-reduce of that many bytes, alone}; ``buckets`` the bucketed variant's buckets;
    ``burst`` the seconds of every parameter's all-reduce issued at once (asynchronously, last
    layer first) and then waited for, alone: what the naive variant does after backward."""

    world: int
    cap_mb: float
    variants: dict
    fwd: float
    bwd: float
    ready: list
    nbytes: list
    comm: dict
    buckets: list
    burst: float = 0.0


def _data(cfg, batch_per_rank, rank, world, step):
    return tuple(t.to(device()) for t in batch(cfg, batch_per_rank, seed=step * world + rank))


def _time_variants(cfg, batch_per_rank, rank, world, cap_mb, steps):
    """Every variant of VARIANTS, their steps interleaved (step k of each in turn), so that a burst
    of load from other programs hits all of them alike. Returns ({name: StepTimes}, buckets)."""
    models = {name: DDP(GPT(cfg, seed=0).to(device()), bucket_cap_mb=cap_mb if bucketed else None, overlap=overlap)
              for name, (bucketed, overlap) in VARIANTS.items()}
    rows = interleaved_steps({name: (m, m.finish_gradient_synchronization) for name, m in models.items()},
                             cfg, batch_per_rank, rank, world, steps)
    out = {}
    for name, model in models.items():
        t1 = rows[name][-1][5]
        events = [(e.bucket, e.nbytes, e.ready - t1, e.start - t1, e.end - t1) for e in model.events]
        med = [statistics.median(r[k] for r in rows[name][1:]) for k in range(5)]
        out[name] = StepTimes(*med[:4], events, lag=med[4])
    return out, [list(b) for b in models["bucketed"].buckets]


def interleaved_steps(variants: dict, cfg: GPTConfig, batch_per_rank: int, rank: int, world: int,
                      steps: int) -> dict:
    """``steps`` + 1 training steps (no optimizer) of every variant {name: (model, finish)}, step k
    of each in turn, ranks meeting at a barrier before each. Returns {name: one row per step
    (fwd, bwd, finish, whole step, lag, forward's end), seconds}; the first step is a warm-up."""
    rows = {name: [] for name in variants}
    for step in range(steps + 1):
        tokens, targets = _data(cfg, batch_per_rank, rank, world, step)
        for name, (model, finish) in variants.items():
            model.zero_grad(set_to_none=True)
            dist.barrier()
            t0 = now()
            loss = model(tokens, targets)[1]
            t1 = now()
            loss.backward()
            t2 = now()
            finish()
            t3 = now()
            rows[name].append((t1 - t0, t2 - t1, t3 - t2, t3 - t0, _lag(t2, world), t1))
    return rows


def _lag(t_end: float, world: int) -> float:
    """Seconds between this rank's end of backward and the last rank's (harness only, after the
    timed step; perf_counter is the machine's monotonic clock, the same in every process)."""
    mine = torch.tensor([t_end], dtype=torch.float64)
    ends = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(ends, mine)
    return max(float(e) for e in ends) - t_end


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


def _burst_alone(sizes, repeat):
    """Median seconds of all-reducing one buffer per size (bytes), issued at once asynchronously in
    the given order and then waited for: the naive variant's pattern, without the model."""
    bufs = [torch.zeros(n // 4, device=device()) for n in sizes]
    samples = []
    for _ in range(repeat + 1):
        dist.barrier()
        t0 = now()
        works = [dist.all_reduce(b, async_op=True) for b in bufs]
        for w in works:
            w.wait()
        samples.append(now() - t0)
    return statistics.median(samples[1:])


def time_ddp_steps(rank: int, world: int, cfg: GPTConfig, batch_per_rank: int, cap_mb: float,
                   steps: int = 5) -> Measured:
    """Rank function for `labkit.dist.launch`: every variant of VARIANTS, then the parts alone."""
    check_int("time_ddp_steps", "batch_per_rank", batch_per_rank, minimum=1)
    check_int("time_ddp_steps", "steps", steps, minimum=1)
    variants, buckets = _time_variants(cfg, batch_per_rank, rank, world, cap_mb, steps)
    fwd, bwd, ready, nbytes = _compute_alone(cfg, batch_per_rank, rank, world, steps)
    bucket_bytes = [sum(nbytes[i] for i in b) for b in buckets]
    comm = _comm_alone(nbytes + bucket_bytes, max(15, steps))
    burst = _burst_alone(list(reversed(nbytes)), max(5, steps))
    return Measured(world, cap_mb, variants, fwd, bwd, ready, nbytes, comm, buckets, burst)
