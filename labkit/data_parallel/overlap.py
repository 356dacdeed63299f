"""When does gradient communication hide behind backward? A model and a simulator (pure Python).

A DDP step is forward (T_fwd), backward (T_bwd) and the all-reduces of its buckets. A bucket's
all-reduce can start once its last gradient is ready, and the buckets share one communication
channel, so they run one after another. Backward makes gradients from the last layer to the first;
the last bucket (the first layers' parameters) is ready only when backward ends, so its all-reduce
can never hide. With T_comm the summed time of all buckets and t_last the last bucket's:

    T_step >= T_fwd + max(T_bwd, T_comm − t_last) + t_last       (`overlap_step_time`)

a *lower bound*: the channel is busy for T_comm − t_last before the last bucket, which is ready no
earlier than the end of backward. It is exact when the channel never waits for a bucket (every
bucket but the last is ready by the time the channel could take it); otherwise the channel idles
while backward makes the next bucket, and the step is longer. `exact_step_time` replays the channel
from each bucket's ready time: ready at 0.9 and 1.0 (backward ends at 1.0), all-reduces of 0.5 and
0.1 give 0.9 + 0.5 + 0.1 = 1.5, where the bound says 1.1. When it applies, communication is hidden
(apart from the tail) whenever T_comm − t_last ≤ T_bwd — not only when the two are equal. Without
overlap (every all-reduce after backward), T_step = T_fwd + T_bwd + T_comm (`naive_step_time`).

`simulate_overlap` does the same replay with each bucket's time from the α–β model of Lab 05 for a
ring all-reduce, 2(p−1)·α + 2(p−1)/p · bytes · β, and gives the timeline the notebook draws; with a
bucket cap it forms the same buckets as `labkit.data_parallel.DDP` (`assign_buckets`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from labkit.checks import check_int, check_real
from labkit.collectives.alpha_beta import predict_time
from labkit.data_parallel.buckets import assign_buckets


def overlap_step_time(t_fwd: float, t_bwd: float, comm_s: Sequence[float]) -> float:
    """A lower bound on the seconds per step when buckets are reduced during backward;
    ``comm_s`` = each bucket's all-reduce time in the order they are ready (the last one is the
    exposed tail). Exact when the channel never waits for a bucket (see `exact_step_time`)."""
    t_fwd, t_bwd = _seconds("overlap_step_time", t_fwd, t_bwd)
    comm = _times("overlap_step_time", comm_s)
    return t_fwd + max(t_bwd, sum(comm[:-1])) + (comm[-1] if comm else 0.0)


def replay_channel(ready_s: Sequence[float], comm_s: Sequence[float]) -> list[tuple[float, float]]:
    """(start, end) of each bucket's all-reduce on one channel that takes them in the order they are
    ready: a bucket starts when it is ready and the previous one has finished. ``ready_s`` and
    ``comm_s`` are per bucket, in seconds from the start of backward; returned in ready order."""
    ready, comm = _times("replay_channel", ready_s), _times("replay_channel", comm_s)
    if len(ready) != len(comm):
        raise ValueError(f"replay_channel: one ready time per all-reduce time "
                         f"(got {len(ready)} and {len(comm)})")
    out, free = [], 0.0
    for k in sorted(range(len(ready)), key=lambda i: ready[i]):
        start = max(ready[k], free)
        free = start + comm[k]
        out.append((start, free))
    return out


def exact_step_time(t_fwd: float, t_bwd: float, ready_s: Sequence[float], comm_s: Sequence[float]) -> float:
    """Seconds per step from the channel's replay (`replay_channel`): T_fwd + the later of the end
    of backward (``t_bwd``) and the end of the last all-reduce. Never below `overlap_step_time`
    when the last bucket is ready at ``t_bwd``."""
    t_fwd, t_bwd = _seconds("exact_step_time", t_fwd, t_bwd)
    spans = replay_channel(ready_s, comm_s)
    return t_fwd + max([t_bwd] + [end for _, end in spans])


def naive_step_time(t_fwd: float, t_bwd: float, comm_s: Sequence[float]) -> float:
    """Seconds per step when every all-reduce starts after backward: T_fwd + T_bwd + T_comm."""
    t_fwd, t_bwd = _seconds("naive_step_time", t_fwd, t_bwd)
    return t_fwd + t_bwd + sum(_times("naive_step_time", comm_s))


@dataclass(frozen=True)
class BucketSpan:
    """One bucket on the simulated timeline (seconds from the start of backward)."""

    bucket: int
    params: tuple          # indices into the parameter list (registration order)
    nbytes: int
    ready: float
    start: float
    end: float


@dataclass(frozen=True)
class OverlapResult:
    """``spans`` in the order they run; ``t_bwd`` backward's length; ``step`` = t_fwd + time from
    backward's start to the last all-reduce's end; ``exposed`` = step − t_fwd − t_bwd (seconds of
    communication nothing hid)."""

    spans: tuple
    t_fwd: float
    t_bwd: float
    step: float
    exposed: float


def simulate_overlap(ready_s: Sequence[float], nbytes: Sequence[int], cap_bytes: float | None,
                     world: int, alpha: float, beta: float, t_fwd: float = 0.0,
                     overlap: bool = True) -> OverlapResult:
    """Replay one step's communication.

    ``ready_s[i]``: seconds after backward starts at which parameter i's gradient is ready (i in
    registration order); ``nbytes[i]`` its gradient's bytes. ``cap_bytes=None`` gives one bucket
    per parameter. Backward ends at max(ready_s). With ``overlap=False`` no all-reduce starts
    before backward ends.
    """
    fn = "simulate_overlap"
    ready = _times(fn, ready_s)
    if len(nbytes) != len(ready) or not ready:
        raise ValueError(f"{fn}: ready_s and nbytes need one entry per parameter "
                         f"(got {len(ready)} and {len(nbytes)})")
    sizes = [check_int(fn, "nbytes", n, minimum=0) for n in nbytes]
    t_fwd, = _seconds(fn, t_fwd)
    world = check_int(fn, "world", world, minimum=1)
    alpha, beta = _seconds(fn, alpha, beta)
    if cap_bytes is None:
        groups = [[i] for i in reversed(range(len(ready)))]
    else:
        groups = assign_buckets([_Sized(n) for n in sizes], cap_bytes)
    t_bwd = max(ready)
    order = sorted(range(len(groups)), key=lambda b: max(ready[i] for i in groups[b]))
    bucket_ready = [max(ready[i] for i in groups[b]) for b in order]
    bucket_bytes = [sum(sizes[i] for i in groups[b]) for b in order]
    times = [predict_time("ring_all_reduce", world, n, alpha, beta) for n in bucket_bytes]
    runs = replay_channel(bucket_ready if overlap else [t_bwd] * len(order), times)
    spans = tuple(BucketSpan(b, tuple(groups[b]), n, r, start, end)
                  for b, n, r, (start, end) in zip(order, bucket_bytes, bucket_ready, runs))
    end = max([t_bwd] + [s.end for s in spans])
    return OverlapResult(spans, t_fwd, t_bwd, t_fwd + end, end - t_bwd)


class _Sized:
    """Stands in for a parameter in `assign_buckets`: numel = bytes, one byte per element."""

    dtype, device = "bytes", "sim"

    def __init__(self, n: int):
        self.n = n

    def numel(self) -> int:
        return self.n

    def element_size(self) -> int:
        return 1


def _seconds(fn: str, *values) -> tuple:
    out = tuple(check_real(fn, "time", v) for v in values)
    if any(v < 0 for v in out):
        raise ValueError(f"{fn}: times must be >= 0 seconds, got {values}")
    return out


def _times(fn: str, values) -> list[float]:
    return list(_seconds(fn, *values))
