"""Chimera (Li & Hoefler, SC 2021): two pipelines, in opposite directions, over the same ranks.

With D ranks, the *down* pipeline puts model stage j on rank j and the *up* pipeline puts the
same model stage j on rank D-1-j, so every rank holds two stages (twice 1F1B's weights) and the
two replicas of a stage sum their gradients at the end of the step. Half the micro-batches go
down, half go up; each pipeline runs 1F1B on its half, and the two per-rank orders are merged.
One fills the other's bubbles: with equal forward and backward times the bubble share of the
step is (D-2)/(2N+D-2) for N micro-batches per rank, against 1F1B's (D-1)/(N+D-1).

The lab's `schedule`/`check_schedule`/`time_schedule` place stage s on rank s % p along one chain of
stages, which cannot describe a second pipeline running the other way. This module adds an
explicit placement, a `Layout`, and runs schedules in the same `Action` format on it:

    Layout(stage_rank, chains, route)   where stages live; which stages each micro-batch visits
    looped_layout(p, m, v)              the lab's own placement (one chain, stage s on rank s % p)
    bidirectional_layout(D, m)          stages 0..D-1 down (stage j on rank j), D..2D-1 up
                                        (stage D+j = model stage j, on rank D-1-j); micro-batches
                                        0..m/2-1 go down, m/2..m-1 go up
    check_placed(sched, layout)         `check_schedule` for a layout (one-line ScheduleError)
    simulate_placed(sched, layout, ...) `time_schedule` for a layout -> the lab's SimResult; optional
                                        overlapped pairs (DualPipe's F&B, see dualpipe.py)
    chimera_schedule(D, N)              Chimera's per-rank order (units of D micro-batches)
    chimera_bubble(D, N)                the paper's bubble share (D-2)/(2N+D-2), F = B
    chimera_idle(D, N, F, B)            idle time per rank for any F, B (found by simulation)
    chimera_memory(D)                   stages (weights) per rank, 2 against 1F1B's 1
    chimera_table(cases, F, B)          simulated step and bubble vs the paper and 1F1B
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from fractions import Fraction

from labkit.checks import check_int
from labkit.pipeline.schedules import MAX_STAGE_MICROBATCHES, Action, ScheduleError, normalized, schedule
from labkit.pipeline.simulate import (SimResult, _ratio, check_seconds, run_events, sim_result, stage_times,
                                      time_schedule)
from labkit.table import Table

__all__ = ["Layout", "looped_layout", "bidirectional_layout", "check_placed", "simulate_placed",
           "placed_dependencies", "chimera_slots", "chimera_schedule", "chimera_bubble", "chimera_idle",
           "chimera_memory", "chimera_table"]

_EVENTS = {"F": ("F",), "B": ("G", "W"), "I": ("G",), "W": ("W",)}
_EVENT_NAME = {"F": "forward", "G": "backward (input grad)", "W": "weight grad"}


@dataclass(frozen=True)
class Layout:
    """Where each stage lives and which stages each micro-batch goes through.

    stage_rank[s]  the rank that runs stage s
    chains[c]      the stages of pipeline c, in forward order (every stage in exactly one chain)
    route[i]       the chain micro-batch i goes through
    """

    stage_rank: tuple
    chains: tuple
    route: tuple

    def __post_init__(self):
        fn = "Layout"
        stages = [s for ch in self.chains for s in ch]
        S = len(self.stage_rank)
        if sorted(stages) != list(range(S)):
            raise ValueError(f"{fn}: chains must cover stages 0..{S - 1} once each, got {self.chains}")
        if any(not isinstance(r, numbers.Integral) or r < 0 for r in self.stage_rank):
            raise ValueError(f"{fn}: stage_rank entries must be ints >= 0, got {self.stage_rank}")
        if any(not isinstance(c, numbers.Integral) or not 0 <= c < len(self.chains) for c in self.route):
            raise ValueError(f"{fn}: route entries must be chain indices 0..{len(self.chains) - 1}, "
                             f"got {self.route}")

    @property
    def num_ranks(self) -> int:
        return 1 + max(self.stage_rank)

    @property
    def num_stages(self) -> int:
        return len(self.stage_rank)

    @property
    def num_microbatches(self) -> int:
        return len(self.route)

    def chain_of(self, stage: int) -> int:
        return next(c for c, ch in enumerate(self.chains) if stage in ch)

    def neighbours(self, stage: int) -> tuple:
        """(previous stage, next stage) of ``stage`` in its chain; None at the chain's ends."""
        ch = self.chains[self.chain_of(stage)]
        k = ch.index(stage)
        return (ch[k - 1] if k > 0 else None, ch[k + 1] if k + 1 < len(ch) else None)


def looped_layout(num_ranks: int, num_microbatches: int, virtual_stages: int = 1) -> Layout:
    """The lab's placement: one chain of p*v stages, stage s on rank s % p (for cross-checks)."""
    p = check_int("looped_layout", "num_ranks", num_ranks, minimum=1)
    m = check_int("looped_layout", "num_microbatches", num_microbatches, minimum=1)
    v = check_int("looped_layout", "virtual_stages", virtual_stages, minimum=1)
    if p * v * m > MAX_STAGE_MICROBATCHES:
        raise ValueError(f"looped_layout: num_ranks · virtual_stages · num_microbatches = {p * v * m} is more "
                         f"than {MAX_STAGE_MICROBATCHES}")
    return Layout(tuple(s % p for s in range(p * v)), (tuple(range(p * v)),), (0,) * m)


def bidirectional_layout(num_ranks: int, num_microbatches: int) -> Layout:
    """Chimera's and DualPipe's placement over D = num_ranks ranks (D even, m even, m >= 2).

    Stage j (0 <= j < D) is model stage j of the down pipeline, on rank j; stage D + j is model
    stage j of the up pipeline, on rank D-1-j. Micro-batches 0..m/2-1 go down, m/2..m-1 go up.
    """
    fn = "bidirectional_layout"
    D = check_int(fn, "num_ranks", num_ranks, minimum=2)
    m = check_int(fn, "num_microbatches", num_microbatches, minimum=2)
    if D % 2 or m % 2:
        raise ValueError(f"{fn}: num_ranks and num_microbatches must be even (half the micro-batches "
                         f"go each way), got D={D}, m={m}")
    if 2 * D * m > MAX_STAGE_MICROBATCHES:
        raise ValueError(f"{fn}: 2 · num_ranks · num_microbatches = {2 * D * m} is more than {MAX_STAGE_MICROBATCHES}")
    return Layout(tuple(range(D)) + tuple(range(D - 1, -1, -1)),
                  (tuple(range(D)), tuple(range(D, 2 * D))), (0,) * (m // 2) + (1,) * (m // 2))


def placed_dependencies(action: Action, layout: Layout) -> list:
    """What must finish before ``action`` starts, as (stage, event, microbatch): F needs the
    previous stage's F in the micro-batch's chain; B and I need their own F and the next stage's
    input gradient G; W needs its own G (the lab's rules, along a chain instead of s-1, s+1)."""
    s, k, i = action
    prev, nxt = layout.neighbours(s)
    if k == "F":
        return [(prev, "F", i)] if prev is not None else []
    if k in ("B", "I"):
        return [(s, "F", i)] + ([(nxt, "G", i)] if nxt is not None else [])
    return [(s, "G", i)]


def _check_layout_arg(fn: str, layout) -> Layout:
    if not isinstance(layout, Layout):
        raise TypeError(f"{fn}: layout must be a Layout (see bidirectional_layout), got {type(layout).__name__}")
    return layout


def _check_pairs(fn: str, sched: dict, pairs) -> dict:
    """``pairs`` as {rank: set of positions i (actions i and i+1 run overlapped)}, checked."""
    if pairs is None:
        return {r: set() for r in sched}
    if not isinstance(pairs, dict):
        raise TypeError(f"{fn}: pairs must be a dict rank -> positions, got {type(pairs).__name__}")
    out = {r: set() for r in sched}
    for r, ps in pairs.items():
        if r not in sched:
            raise ValueError(f"{fn}: pairs name rank {r!r}, which the schedule does not have")
        for i in ps:
            if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < len(sched[r]) - 1:
                raise ValueError(f"{fn}: rank {r}: pair position {i!r} must be an int in 0..{len(sched[r]) - 2}")
            if i - 1 in out[r] or i + 1 in out[r]:
                raise ValueError(f"{fn}: rank {r}: pairs at positions {i} and a neighbour overlap")
            out[r].add(int(i))
    return out


def check_placed(sched, layout: Layout, pairs=None) -> None:
    """`check_schedule` for an explicit `Layout`: raise `ScheduleError` naming the first problem.

    Checks the shape (as `normalized`); every action's stage and micro-batch exist, its stage is
    on this rank and in the micro-batch's chain; each (stage, micro-batch) of a chain gets exactly
    one forward and one backward (B, or I plus W); and the ranks can run their lists in order,
    each overlapped pair (``pairs``: {rank: positions i, meaning actions i and i+1 run together})
    starting only when both its actions may. A deadlock names the lowest blocked rank, its next
    action and what it waits for.
    """
    layout = _check_layout_arg("check_placed", layout)
    sched = normalized(sched)
    R, S, M = len(sched), layout.num_stages, layout.num_microbatches
    if R != layout.num_ranks:
        raise ScheduleError(f"the schedule has {R} ranks but the layout places stages on {layout.num_ranks}")
    pairs = _check_pairs("check_placed", sched, pairs)
    seen: dict = {}
    for r in range(R):
        for pos, a in enumerate(sched[r]):
            if not (a.stage < S and a.microbatch < M):
                raise ScheduleError(f"rank {r} position {pos}: {a!r} is outside stages 0..{S - 1} / "
                                    f"microbatches 0..{M - 1}")
            if layout.stage_rank[a.stage] != r:
                raise ScheduleError(f"rank {r} position {pos}: {a!r} belongs on rank {layout.stage_rank[a.stage]}")
            if a.stage not in layout.chains[layout.route[a.microbatch]]:
                raise ScheduleError(f"rank {r} position {pos}: {a!r}: microbatch {a.microbatch} goes through "
                                    f"chain {layout.route[a.microbatch]}, which has no stage {a.stage}")
            for ev in _EVENTS[a.kind]:
                if (a.stage, ev, a.microbatch) in seen:
                    raise ScheduleError(f"rank {r} position {pos}: {a!r} repeats the {_EVENT_NAME[ev]} of "
                                        f"stage {a.stage} microbatch {a.microbatch}")
                seen[(a.stage, ev, a.microbatch)] = r
    for i in range(M):
        for s in layout.chains[layout.route[i]]:
            for ev in ("F", "G", "W"):
                if (s, ev, i) not in seen:
                    raise ScheduleError(f"stage {s} microbatch {i}: its {_EVENT_NAME[ev]} never runs")
    done, pos = set(), [0] * R
    progress = True
    while progress:
        progress = False
        for r in range(R):
            while pos[r] < len(sched[r]):
                block = _block(sched[r], pos[r], pairs[r])
                if not all(d in done for a in block for d in placed_dependencies(a, layout)
                           if d not in {(b.stage, ev, b.microbatch) for b in block for ev in _EVENTS[b.kind]}):
                    break
                for a in block:
                    done.update((a.stage, ev, a.microbatch) for ev in _EVENTS[a.kind])
                pos[r] += len(block)
                progress = True
    blocked = [r for r in range(R) if pos[r] < len(sched[r])]
    if blocked:
        r = blocked[0]
        block = _block(sched[r], pos[r], pairs[r])
        own = {(b.stage, ev, b.microbatch) for b in block for ev in _EVENTS[b.kind]}
        a, (ds, ev, di) = next((a, d) for a in block for d in placed_dependencies(a, layout)
                               if d not in done and d not in own)
        raise ScheduleError(f"rank {r} position {pos[r]}: {a!r} needs the {_EVENT_NAME[ev]} of stage {ds} "
                            f"microbatch {di} first, but that runs on rank {seen[(ds, ev, di)]} behind "
                            f"something that waits (deadlock)")


def _block(acts: list, i: int, pair_starts: set) -> list:
    """The action at position i, or it and the next one when they form an overlapped pair."""
    return acts[i:i + 2] if i in pair_starts else acts[i:i + 1]


def simulate_placed(sched, layout: Layout, forward_time, backward_time, weight_time=None,
                    p2p_latency=0, pairs=None, pair_time=None) -> SimResult:
    """`time_schedule` for an explicit `Layout`; returns the lab's `SimResult` (same conventions).

    forward_time / backward_time / weight_time: a number, or one per stage of the layout; W takes
    weight_time (default half of backward_time) and I the rest. ``pairs`` ({rank: positions i}):
    actions i and i+1 of that rank run overlapped as one block that starts when both may and takes
    ``pair_time`` (DualPipe's F&B; default: the sum of the two, i.e. no gain from overlapping); both
    results are available when the block ends. In the timeline the block is cut in two in
    proportion to the two actions' own times.
    """
    fn = "simulate_placed"
    layout = _check_layout_arg(fn, layout)
    check_placed(sched, layout, pairs)
    sched = normalized(sched)
    pairs = _check_pairs(fn, sched, pairs)
    check_seconds(p2p_latency, "p2p_latency")
    if pair_time is not None:
        check_seconds(pair_time, "pair_time")
    S = layout.num_stages
    tf = stage_times(forward_time, S, "forward_time")
    tb = stage_times(backward_time, S, "backward_time")
    tw = [_ratio(t, 2) for t in tb] if weight_time is None else stage_times(weight_time, S, "weight_time")
    if any(w > b for w, b in zip(tw, tb)):
        raise ValueError(f"{fn}: weight_time {tw} must not exceed backward_time {tb} (I takes the difference)")
    duration = {"F": tf, "B": tb, "W": tw, "I": [b - w for b, w in zip(tb, tw)]}
    timeline = run_events(sched, duration, lambda a: placed_dependencies(a, layout), p2p_latency, pairs, pair_time)
    return sim_result(timeline)


# --------------------------------------------------------------------------- Chimera

def _check_chimera(fn: str, num_ranks, num_microbatches) -> tuple:
    D = check_int(fn, "num_ranks", num_ranks, minimum=2)
    N = check_int(fn, "num_microbatches", num_microbatches, minimum=2)
    if D % 2:
        raise ValueError(f"{fn}: Chimera needs an even number of ranks (stages), got {D}")
    if N % D:
        raise ValueError(f"{fn}: Chimera runs units of D micro-batches (D/2 each way): "
                         f"num_microbatches must be a multiple of num_ranks={D}, got {N}")
    if D * N > 16384:
        raise ValueError(f"{fn}: num_ranks · num_microbatches must be <= 16384 (built and simulated action "
                         f"by action), got {D} · {N}")
    return D, N


def chimera_slots(num_ranks: int) -> dict:
    """Slot of each action of one direction in one basic unit: {(stage, kind, i): slot}.

    The paper's slot model: F and B take one slot each, the D/2 micro-batches of a direction
    enter every second slot (1F1B's steady rhythm), so forward i reaches stage s at slot s + 2i
    and its backward leaves stage s at slot 2D - 1 - s + 2i. On a rank, the down pipeline's
    forwards and the up pipeline's forwards have opposite parities (D is even), and likewise the
    backwards, so the merge never puts two actions in one slot.
    """
    D = check_int("chimera_slots", "num_ranks", num_ranks, minimum=2, maximum=4096)
    return {(s, k, i): (s + 2 * i if k == "F" else 2 * D - 1 - s + 2 * i)
            for s in range(D) for i in range(D // 2) for k in "FB"}


def chimera_schedule(num_ranks: int, num_microbatches: int) -> dict:
    """Chimera's per-rank order on `bidirectional_layout(D, N)`, in the lab's `Action` format.

    One *basic unit* is D micro-batches, D/2 each way, timed by `chimera_slots` (each direction
    on its own is 1F1B: warm-up forwards, then backward/forward alternating); a rank's list is
    its two stages' actions sorted by slot. For N = kD the k units are concatenated, unit u
    shifted by 2D·u slots (a rank's busy time per unit): with F = B the next unit's first
    forwards land exactly in the previous unit's drain. Micro-batch ids: unit u sends
    u·D/2 .. u·D/2 + D/2 - 1 down and N/2 + (the same) up, so the first N/2 go down.
    """
    D, N = _check_chimera("chimera_schedule", num_ranks, num_microbatches)
    half, slots = D // 2, chimera_slots(D)
    timed: dict = {r: [] for r in range(D)}
    for u in range(N // D):
        for (j, k, i), t in slots.items():
            timed[j].append((t + 2 * D * u, Action(j, k, u * half + i)))                  # down: rank j
            timed[D - 1 - j].append((t + 2 * D * u, Action(D + j, k, N // 2 + u * half + i)))  # up
    out = {}
    for r in range(D):
        times = [t for t, _ in timed[r]]
        assert len(set(times)) == len(times), "two actions in one slot"  # the parity argument
        out[r] = [a for _, a in sorted(timed[r])]
    return out


def chimera_bubble(num_ranks: int, num_microbatches: int) -> Fraction:
    """The paper's bubble share of the step, (D-2)/(2N+D-2), for forward time = backward time."""
    D, N = _check_chimera("chimera_bubble", num_ranks, num_microbatches)
    return Fraction(D - 2, 2 * N + D - 2)


def chimera_idle(num_ranks: int, num_microbatches: int, forward_time, backward_time):
    """Idle time per rank of `chimera_schedule` (every rank idles the same), found with the
    simulator and checked by the tests: (D-2)·max(F, B) for one unit (N = D) — the paper's D-2
    slots when F = B — plus (D-2)·|B - F| for each further unit, because plain concatenation
    fits the next unit into the drain only when F = B (the paper's "forward doubling" and
    "backward halving" address B != F; not modelled here)."""
    D, N = _check_chimera("chimera_idle", num_ranks, num_microbatches)
    F, B = (Fraction(check_seconds(x, n)) for x, n in ((forward_time, "forward_time"),
                                                        (backward_time, "backward_time")))
    return (D - 2) * (max(F, B) + (N // D - 1) * abs(B - F))


def chimera_memory(num_ranks: int) -> dict:
    """Weights per rank in stages of the model (Chimera 2, 1F1B 1), and the replica pairs that
    all-reduce gradients at the end of the step (rank j with rank D-1-j)."""
    D = check_int("chimera_memory", "num_ranks", num_ranks, minimum=2, maximum=4096)
    return {"stages_per_rank_chimera": 2, "stages_per_rank_1f1b": 1,
            "replica_pairs": [(j, D - 1 - j) for j in range(D // 2)]}


def chimera_table(cases, forward_time=1, backward_time=1) -> Table:
    """Per (D, N): Chimera's simulated step and bubble share next to the paper's (D-2)/(2N+D-2)
    (exact only for F = B) and to 1F1B's (D-1)/(N+D-1), and the peak activation sets per rank."""
    rows = []
    for D, N in cases:
        r = simulate_placed(chimera_schedule(D, N), bidirectional_layout(D, N), forward_time, backward_time)
        o = time_schedule(schedule("1f1b", D, N), forward_time, backward_time)
        rows.append((D, N, str(r.makespan), str(r.bubble_fraction), str(chimera_bubble(D, N)),
                     str(o.makespan), str(o.bubble_fraction), [r.peak_inflight[k] for k in range(D)]))
    return Table(["D", "N", "step", "bubble", "paper (F=B)", "1F1B step", "1F1B bubble",
                  "peak sets per rank"], rows)
