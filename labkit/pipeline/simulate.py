"""Event-driven timing of a pipeline schedule (pure Python; no torch).

``time_schedule(sched, forward_time, backward_time, p2p_latency=0.0)`` runs each
rank's list in order; an action starts when its rank is free and every
dependency has finished (plus ``p2p_latency`` seconds when the dependency ran
on another rank). Times are seconds (any unit works if used consistently),
either one number for every stage or a sequence with one entry per stage.

The result gives the per-rank timeline, the makespan, the bubble fraction
(idle time / (ranks * makespan): the "share of total time" convention) and the
activation memory in flight: per rank, how many (stage, microbatch) activation
sets are held, counted from the start of a forward to the end of its backward
(for a split backward, to the end of its W).
"""
from __future__ import annotations

import math
import numbers
from fractions import Fraction
from dataclasses import dataclass, field
from typing import Sequence, Union

from labkit.checks import check_int
from labkit.pipeline.schedules import Action, check_schedule, dependencies, normalized, num_stages_of

__all__ = ["Interval", "SimResult", "time_schedule", "run_events", "sim_result", "stage_times", "check_seconds"]

Times = Union[float, int, Sequence[float]]


@dataclass(frozen=True)
class Interval:
    """``action`` ran on ``rank`` from ``start`` to ``end`` (seconds)."""

    rank: int
    action: Action
    start: float
    end: float


@dataclass
class SimResult:
    """What `time_schedule` found. All times in seconds.

    timeline[r]      intervals rank r computed, in its order
    makespan         end of the last action (the step starts at 0)
    (with int or Fraction times every number here is exact: bubble_fraction is then a Fraction)
    busy[r]          compute time of rank r
    bubble_fraction  sum of idle time / (num_ranks * makespan)
    peak_inflight[r] most activation sets rank r held at once
    inflight[r]      [(time, count after that time)] step function of held activation sets
    """

    timeline: dict[int, list[Interval]]
    makespan: float
    busy: dict[int, float]
    bubble_fraction: float
    peak_inflight: dict[int, int]
    inflight: dict[int, list[tuple[float, int]]] = field(repr=False)

    @property
    def num_ranks(self) -> int:
        return len(self.timeline)

    def bubble_vs_ideal(self) -> float:
        """Idle time relative to ideal compute: total idle / total busy (the (p-1)/m convention).

        Undefined (ValueError) when the ranks did no compute at all (every time was 0).
        """
        busy = sum(self.busy.values())
        if busy == 0:
            raise ValueError("bubble_vs_ideal: total busy time is 0 (every forward/backward time was 0), "
                             "so idle / busy is undefined; time the schedule with positive times")
        return _ratio(self.num_ranks * self.makespan - busy, busy)


def _ratio(a, b):
    """a / b, exact (a Fraction) when both are integers or Fractions."""
    if isinstance(a, numbers.Rational) and isinstance(b, numbers.Rational):
        return Fraction(a) / Fraction(b)
    return a / b


def stage_times(value: Times, num_stages: int, name: str) -> list[float]:
    """Expand a number or a per-stage sequence into one finite, non-negative number per stage.

    Numbers are kept as given, so `fractions.Fraction` times give exact results.
    """
    num_stages = check_int("stage_times", "num_stages", num_stages, minimum=1, maximum=10 ** 6)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        vals = [value] * num_stages
    else:
        try:
            vals = list(value)
        except TypeError:
            raise TypeError(f"{name} must be a number or one number per stage, got {type(value).__name__}") from None
        if not all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in vals):
            raise TypeError(f"{name} entries must be real numbers, got {vals!r}")
        if len(vals) != num_stages:
            raise ValueError(f"{name} has {len(vals)} entries but the schedule has {num_stages} stages")
    if not all(_finite(x) for x in vals):
        raise ValueError(f"{name} must be finite (no NaN or infinity), got {vals}")
    if any(x < 0 for x in vals):
        raise ValueError(f"{name} must be >= 0 seconds, got {vals}")
    return vals


def _finite(x) -> bool:
    """True for a finite real (exact rationals, which may be too large for a float, always are)."""
    return isinstance(x, numbers.Rational) or math.isfinite(x)


def check_seconds(value, name: str):
    """``value`` if it is a finite real number >= 0 (not a bool); one-line TypeError/ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    if not _finite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0 seconds, got {value!r}")
    return value


def time_schedule(sched: dict[int, list[Action]], forward_time: Times, backward_time: Times,
             p2p_latency: float = 0, weight_time: Times | None = None) -> SimResult:
    """Time one step of ``sched`` (a valid schedule; checked first).

    forward_time / backward_time: seconds per stage per microbatch (number or
    per-stage list); backward_time is a full backward (B). p2p_latency: seconds
    added to each dependency that crosses ranks (activation or gradient
    transfer). For split backwards, W takes ``weight_time`` (default half of
    backward_time) and I the rest of backward_time.
    """
    check_schedule(sched)
    sched = normalized(sched)          # plain (stage, kind, microbatch) tuples -> Action
    check_seconds(p2p_latency, "p2p_latency")
    S = num_stages_of(sched)
    tf = stage_times(forward_time, S, "forward_time")
    tb = stage_times(backward_time, S, "backward_time")
    if weight_time is None:
        tw = [_ratio(t, 2) for t in tb]
    else:
        tw = stage_times(weight_time, S, "weight_time")
        if any(w > b for w, b in zip(tw, tb)):
            raise ValueError(f"weight_time {tw} must not exceed backward_time {tb} (I takes the difference)")
    duration = {"F": tf, "B": tb, "W": tw, "I": [b - w for b, w in zip(tb, tw)]}
    timeline = run_events(sched, duration, lambda a: dependencies(a, S), p2p_latency)
    return sim_result(timeline)


_EVENTS = {"F": ("F",), "B": ("G", "W"), "I": ("G",), "W": ("W",)}   # what an action completes


def run_events(sched: dict[int, list[Action]], duration: dict, dependencies_of, p2p_latency: float = 0,
               pairs: dict[int, set] | None = None, pair_time=None) -> dict[int, list[Interval]]:
    """The event loop of `time_schedule` and `chimera.simulate_placed`: each rank runs its list in
    order; an action starts when its rank is free and every event it depends on
    (``dependencies_of(action)``) has finished, plus ``p2p_latency`` for one finished on another
    rank; it takes ``duration[kind][stage]``. ``pairs`` ({rank: positions i}): actions i and i+1 of
    that rank run as one overlapped block that starts when both may and takes ``pair_time``
    (default: the sum of the two); the block is cut in two in proportion to the two actions' own
    times, and both results are available when it ends. Returns {rank: [Interval]}."""
    R = len(sched)
    finish: dict[tuple[int, str, int], tuple[float, int]] = {}  # event -> (end time, rank)
    free, pos = [0] * R, [0] * R
    timeline: dict[int, list[Interval]] = {r: [] for r in range(R)}
    progress = True
    while progress:
        progress = False
        for r in range(R):
            while pos[r] < len(sched[r]):
                n = 2 if pairs is not None and pos[r] in pairs[r] else 1
                block = [Action(*a) for a in sched[r][pos[r]:pos[r] + n]]
                own = {(b.stage, ev, b.microbatch) for b in block for ev in _EVENTS[b.kind]}
                deps = [d for a in block for d in dependencies_of(a) if d not in own]
                if not all(d in finish for d in deps):
                    break
                start = free[r]
                for d in deps:
                    end, where = finish[d]
                    start = max(start, end + (p2p_latency if where != r else 0))
                end = _place_block(timeline[r], r, block, start, duration, pair_time)
                for a in block:
                    for ev in _EVENTS[a.kind]:
                        finish[(a.stage, ev, a.microbatch)] = (end, r)
                free[r] = end
                pos[r] += len(block)
                progress = True
    return timeline


def _place_block(intervals: list, r: int, block: list[Action], start, duration: dict, pair_time):
    """Append the block's intervals from ``start``; return when it ends."""
    own_times = [duration[a.kind][a.stage] for a in block]
    if len(block) == 1:
        intervals.append(Interval(r, block[0], start, start + own_times[0]))
        return start + own_times[0]
    total = sum(own_times)
    span = pair_time if pair_time is not None else total
    t = start
    for a, d in zip(block, own_times):
        piece = _ratio(span * d, total) if total else 0
        intervals.append(Interval(r, a, t, t + piece))
        t += piece
    return start + span


def sim_result(timeline: dict[int, list[Interval]]) -> SimResult:
    """Makespan, busy time, bubble fraction and activations in flight of a timed ``timeline``."""
    R = len(timeline)
    makespan = max((iv.end for ivs in timeline.values() for iv in ivs), default=0)
    busy = {r: sum(iv.end - iv.start for iv in timeline[r]) for r in range(R)}
    idle = R * makespan - sum(busy.values())
    bubble = _ratio(idle, R * makespan) if makespan > 0 else 0
    inflight, peak = {}, {}
    for r in range(R):
        inflight[r], peak[r] = in_flight(timeline[r])
    return SimResult(timeline, makespan, busy, bubble, peak, inflight)


def in_flight(intervals) -> tuple[list, int]:
    """Activation sets one rank holds over time: [(time, count)] steps and the peak count.
    +1 at a forward's start, -1 at the end of its B (or of its W, which still needs the
    activations); at equal times release first."""
    deltas = sorted([(iv.start, +1) for iv in intervals if iv.action.kind == "F"]
                    + [(iv.end, -1) for iv in intervals if iv.action.kind in ("B", "W")],
                    key=lambda t: (t[0], t[1]))
    count, steps, best = 0, [(0, 0)], 0
    for t, dlt in deltas:
        count += dlt
        best = max(best, count)
        if steps[-1][0] == t:
            steps[-1] = (t, count)
        else:
            steps.append((t, count))
    return steps, best


def bubble_fraction(num_ranks: int, num_microbatches: int, virtual_stages: int = 1) -> Fraction:
    """Idle share of the total time of a synchronous pipeline step, as an exact Fraction.

    p = num_ranks, m = num_microbatches, v = virtual_stages (stages per rank; each
    stage costs 1/v of a rank's share of the model). Every stage takes the same
    time. Convention: idle time / (p x step time) - the share of all ranks' time
    that is bubble (not idle / ideal compute). Valid for GPipe and 1F1B (v = 1)
    and for interleaved 1F1B with m >= p. Raise ValueError for arguments < 1.
    """
    # BEGIN SOLUTION
    # HINT: each rank idles while the pipeline fills and drains, p - 1 stage times; interleaving
    # HINT: makes a stage 1/v as long; fractions.Fraction keeps the ratio exact.
    p, m, v = num_ranks, num_microbatches, virtual_stages
    if min(p, m, v) < 1:
        raise ValueError(f"need positive arguments, got p={p}, m={m}, v={v}")
    return Fraction(p - 1, v * m + p - 1)
    # END SOLUTION
