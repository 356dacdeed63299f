"""Pipeline schedules as data, and a checker that proves a schedule can run.

A schedule is ``dict[rank, list[Action]]``: the compute actions each rank runs,
in order. There are ``num_ranks * virtual_stages`` stages; stage ``s`` lives on
rank ``s % num_ranks`` (the "looped" placement PyTorch uses). An `Action` is
``(stage, kind, microbatch)`` with kind ``"F"`` (forward), ``"B"`` (full
backward) or, for split-backward schedules, ``"I"`` (input gradient) and
``"W"`` (weight gradient).

``schedule(kind, num_ranks, num_microbatches, virtual_stages=1)`` builds
``"gpipe"``, ``"1f1b"``, ``"interleaved_1f1b"`` and the zero-bubble
``"interleaved_zb"`` (backward split into I and W) in the order PyTorch's
``torch.distributed.pipelining`` runs them (tests/test_pipeline_torch.py
checks action for action), and refuses the combinations PyTorch refuses.

``check_schedule(sched)`` raises `ScheduleError` naming the first dependency a
schedule violates (or the first missing / duplicated / misplaced action).
"""
from __future__ import annotations

from numbers import Integral
from typing import NamedTuple

__all__ = ["Action", "ScheduleError", "schedule", "check_schedule", "is_valid", "normalized",
           "dependencies", "num_stages_of", "num_microbatches_of", "KINDS"]

KINDS = ("gpipe", "1f1b", "interleaved_1f1b", "interleaved_zb")


class Action(NamedTuple):
    """One compute action: ``kind`` ("F", "B", "I" or "W") of ``microbatch`` on ``stage``."""

    stage: int
    kind: str
    microbatch: int

    def __repr__(self) -> str:  # compact, e.g. F3@s1
        return f"{self.kind}{self.microbatch}@s{self.stage}"


class ScheduleError(ValueError):
    """A schedule that cannot run correctly; the message names the first problem found."""


MAX_STAGE_MICROBATCHES = 200_000   # schedule: stages (p·v) × micro-batches, each a few actions


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"schedule: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"schedule: {name} must be >= {minimum}, got {value}")


def schedule(kind: str, num_ranks: int, num_microbatches: int, virtual_stages: int = 1) -> dict[int, list[Action]]:
    """Per-rank compute order for one training step of ``kind``.

    ``num_ranks`` ranks (p), ``num_microbatches`` microbatches (m),
    ``virtual_stages`` stages per rank (v; the pipeline has p*v stages).
    Restrictions mirror PyTorch's: "gpipe" and "1f1b" take v = 1; "1f1b" needs
    m >= p; "interleaved_1f1b" and "interleaved_zb" (PyTorch's
    ScheduleInterleavedZeroBubble: B split into I, the input gradient, and W,
    the weight gradient, W deferred to fill bubbles) need m to be a multiple of
    their number of rounds max(1, m // p).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown schedule kind {kind!r}; expected one of {KINDS}")
    _check_int("num_ranks", num_ranks, 1)
    _check_int("num_microbatches", num_microbatches, 1)
    _check_int("virtual_stages", virtual_stages, 1)
    p, m, v = num_ranks, num_microbatches, virtual_stages
    if p * v * m > MAX_STAGE_MICROBATCHES:
        raise ValueError(f"schedule: num_ranks · virtual_stages · num_microbatches = {p * v * m} is more than "
                         f"{MAX_STAGE_MICROBATCHES} (every action is built and simulated one by one)")
    if kind in ("gpipe", "1f1b") and v != 1:
        raise ValueError(f"{kind!r} runs one stage per rank: virtual_stages must be 1, got {v} "
                         "(use 'interleaved_1f1b' for several stages per rank)")
    if kind == "gpipe":
        return {r: [Action(r, "F", i) for i in range(m)] + [Action(r, "B", i) for i in range(m)]
                for r in range(p)}
    if kind == "1f1b":
        if m < p:
            raise ValueError(f"1f1b needs num_microbatches >= num_ranks (as PyTorch's Schedule1F1B), "
                             f"got {m} microbatches for {p} ranks")
        return {r: _one_f_one_b(r, p, m) for r in range(p)}
    return {r: _interleaved(r, p, m, v, zero_bubble=(kind == "interleaved_zb")) for r in range(p)}


# BEGIN SOLUTION (the 1F1B order of one rank, shown in Lab 08 after the exercise)
def _one_f_one_b(r: int, p: int, m: int) -> list[Action]:
    """1F1B on rank r: min(m, p - r) warm-up forwards, then alternate B (oldest) and F (next)
    until the forwards run out, then the remaining Bs."""
    warmup = min(m, p - r)
    ops = [Action(r, "F", i) for i in range(warmup)]
    f = warmup
    for b in range(m):
        ops.append(Action(r, "B", b))
        if f < m:
            ops.append(Action(r, "F", f))
            f += 1
    return ops
# END SOLUTION


def schedule_1f1b(num_ranks: int, num_microbatches: int) -> dict[int, list[Action]]:
    """The 1F1B (one-forward-one-backward) schedule, one stage per rank (stage r on rank r).

    Returns {rank: [Action(stage, kind, microbatch), ...]} with kind "F" or "B",
    in the order PyTorch's Schedule1F1B runs them. Rank r:
      1. warm-up: forwards of microbatches 0, 1, ... - as many as min(m, p - r);
      2. steady state: repeat "backward of the oldest microbatch not yet
         backwarded, then forward of the next microbatch" until every
         forward has run;
      3. cool-down: the remaining backwards, oldest first.
    Example p=3, m=4, rank 0: F0 F1 F2 B0 F3 B1 B2 B3; rank 2: F0 B0 F1 B1 F2 B2 F3 B3.
    Raise ValueError if num_microbatches < num_ranks (PyTorch refuses that too)
    or either argument is < 1.
    """
    # BEGIN SOLUTION
    # HINT: check the arguments first; then each rank runs min(m, p - r) forwards, then alternates
    # HINT: the backward of its oldest microbatch with the next forward; build Action(stage, kind, microbatch) tuples.
    p, m = num_ranks, num_microbatches
    if p < 1 or m < 1:
        raise ValueError(f"need num_ranks >= 1 and num_microbatches >= 1, got {p}, {m}")
    if m < p:
        raise ValueError(f"1F1B needs num_microbatches >= num_ranks, got m={m}, p={p}")
    return {r: _one_f_one_b(r, p, m) for r in range(p)}
    # END SOLUTION


def _interleaved(r: int, p: int, m: int, v: int, zero_bubble: bool = False) -> list[Action]:
    """Depth-first interleaved 1F1B (Narayanan et al. 2021) in PyTorch's flexible-microbatch form.

    Microbatches go through a rank's local stages in rounds of ``per_round``
    microbatches; warm-up runs (v-1)*per_round + 2*(p-1-r) forwards (capped at
    all m*v), then one forward + one backward per step, then the leftover
    backwards. Backward visits local stages last-to-first.

    zero_bubble: warm-up is (v-1)*per_round + (p-1-r) forwards; each backward is
    an I (input gradient, what the previous stage waits for) and the matching
    W (weight gradient) is deferred: rank r runs its first r backwards without
    W, after that every I is followed by the W of the oldest pending backward,
    and the leftover Ws end the step.
    """
    kind = "interleaved_zb" if zero_bubble else "interleaved_1f1b"
    rounds = max(1, m // p)
    if m % rounds != 0:
        raise ValueError(f"{kind} needs num_microbatches to be a multiple of its number of "
                         f"rounds max(1, m // p) = {rounds} (as PyTorch's ScheduleInterleaved1F1B), got m={m}, p={p}")
    per_round = m // rounds
    total = m * v
    warmup = min((v - 1) * per_round + (1 if zero_bubble else 2) * (p - 1 - r), total)

    def fwd_stage(k: int) -> int:
        return ((k // per_round) % v) * p + r

    def bwd_stage(k: int) -> int:
        return (v - 1 - ((k - warmup) // per_round) % v) * p + r

    next_f: dict[int, int] = {}
    next_b: dict[int, int] = {}

    def take(counter: dict[int, int], stage: int) -> int:
        i = counter.get(stage, 0)
        counter[stage] = i + 1
        return i

    next_w: dict[int, int] = {}
    pending_w: list[int] = []  # steps whose backward still owes its W, oldest first
    ops: list[Action] = []
    for k in range(total + warmup):
        if k < total:
            s = fwd_stage(k)
            ops.append(Action(s, "F", take(next_f, s)))
        if k >= warmup:
            s = bwd_stage(k)
            ops.append(Action(s, "I" if zero_bubble else "B", take(next_b, s)))
            if zero_bubble:
                pending_w.append(k)
                if k - warmup >= r:
                    ws = bwd_stage(pending_w.pop(0))
                    ops.append(Action(ws, "W", take(next_w, ws)))
    for k in pending_w:
        ws = bwd_stage(k)
        ops.append(Action(ws, "W", take(next_w, ws)))
    return ops


# --------------------------------------------------------------------------- checking

def num_stages_of(sched: dict[int, list[Action]]) -> int:
    """Number of stages a schedule touches (1 + the largest stage index)."""
    return 1 + max((a[0] for acts in sched.values() for a in acts), default=-1)   # a[0]: plain tuples too


def num_microbatches_of(sched: dict[int, list[Action]]) -> int:
    """Number of microbatches a schedule touches (1 + the largest microbatch index)."""
    return 1 + max((a[2] for acts in sched.values() for a in acts), default=-1)


def dependencies(action: Action, num_stages: int) -> list[tuple[int, str, int]]:
    """What must have finished before ``action`` may start, as (stage, event, microbatch).

    Events: "F" forward done; "G" input gradient done (by a B or an I); "W"
    never needed by others. F(s) needs F(s-1); B(s)/I(s) need F(s) and G(s+1);
    W(s) needs G(s) (its own input gradient, which keeps the activations alive).
    """
    s, k, i = action
    if k == "F":
        return [(s - 1, "F", i)] if s > 0 else []
    if k in ("B", "I"):
        deps = [(s, "F", i)]
        if s < num_stages - 1:
            deps.append((s + 1, "G", i))
        return deps
    if k == "W":
        return [(s, "G", i)]
    raise ValueError(f"unknown action kind {k!r} in {action!r}; expected F, B, I or W")


def _events(action: Action) -> list[str]:
    return {"F": ["F"], "B": ["G", "W"], "I": ["G"], "W": ["W"]}[action.kind]


_EVENT_NAME = {"F": "forward", "G": "backward (input grad)", "W": "weight grad"}


ACTION_KINDS = ("F", "B", "I", "W")


def _index(value) -> bool:
    """True for a non-negative int (not a bool)."""
    return isinstance(value, Integral) and not isinstance(value, bool) and value >= 0


def normalized(sched) -> dict[int, list[Action]]:
    """``sched`` with every action as an `Action` of plain ints, after checking its shape.

    Raises `ScheduleError` (one line) unless ``sched`` is a non-empty dict whose keys are the
    ranks 0..R-1 (ints) and whose values are lists (or tuples) of actions, each an `Action` or a
    3-tuple (stage, kind, microbatch) with stage and microbatch ints >= 0 and kind one of
    F, B, I, W. Dependencies are not checked here (see `check_schedule`).
    """
    if not isinstance(sched, dict) or not sched:
        raise ScheduleError(f"a schedule is a non-empty dict rank -> list of Action, got "
                            f"{type(sched).__name__}{' (empty)' if isinstance(sched, dict) else ''}")
    bad = [r for r in sched if not _index(r)]
    if bad:
        raise ScheduleError(f"ranks (the schedule's keys) must be ints 0..{len(sched) - 1}, got {bad[0]!r} "
                            f"({type(bad[0]).__name__})")
    R = len(sched)
    if sorted(sched) != list(range(R)):
        raise ScheduleError(f"ranks must be 0..{R - 1}, got {sorted(sched)}")
    out: dict[int, list[Action]] = {}
    for r in range(R):
        acts = sched[r]
        if not isinstance(acts, (list, tuple)):
            raise ScheduleError(f"rank {r}: its actions must be a list of Action(stage, kind, microbatch), "
                                f"got {type(acts).__name__}")
        out[r] = []
        for pos, a in enumerate(acts):
            if not isinstance(a, tuple) or len(a) != 3:
                raise ScheduleError(f"rank {r} position {pos}: {a!r} is not an Action(stage, kind, microbatch)")
            stage, kind, mb = a
            if not isinstance(kind, str) or kind not in ACTION_KINDS:
                raise ScheduleError(f"rank {r} position {pos}: unknown kind {kind!r} in {a!r} "
                                    "(expected F, B, I or W)")
            for name, v in (("stage", stage), ("microbatch", mb)):
                if not _index(v):
                    raise ScheduleError(f"rank {r} position {pos}: {name} must be an int >= 0, got {v!r} "
                                        f"({type(v).__name__}) in {a!r}")
            out[r].append(Action(int(stage), kind, int(mb)))
    return out


def check_schedule(sched: dict[int, list[Action]], num_stages: int | None = None,
                   num_microbatches: int | None = None) -> None:
    """Raise `ScheduleError` naming the first problem, or return None for a valid schedule.

    Checks, in this order: the schedule's shape (see `normalized`: a dict of ranks
    0..R-1 to lists of (stage, kind, microbatch) with int stage/microbatch >= 0 and
    kind F, B, I or W); num_stages / num_microbatches, if given, are ints >= 1;
    every action lies within the stages / microbatches and on the rank that owns
    its stage (stage % R); every (stage, microbatch) gets exactly one forward and
    exactly one backward (a B, or one I plus one W); and the ranks can run
    their lists in order without waiting forever: F of stage s after F of s-1,
    B of s after B of s+1 and after its own F. For a deadlock the message names
    the lowest blocked rank, its next action and the dependency it waits for.
    """
    sched = normalized(sched)
    S, M = _sizes(sched, num_stages, num_microbatches)
    seen = _placed_events(sched, S, M)
    for s in range(S):
        for i in range(M):
            for ev in ("F", "G", "W"):
                if (s, ev, i) not in seen:
                    raise ScheduleError(f"stage {s} microbatch {i}: its {_EVENT_NAME[ev]} never runs")
    done, pos = _run_in_order(sched, S)
    blocked = [r for r in range(len(sched)) if pos[r] < len(sched[r])]
    if blocked:
        raise _deadlock(sched, S, seen, done, pos, blocked[0])


def _sizes(sched: dict[int, list[Action]], num_stages, num_microbatches) -> tuple[int, int]:
    """(stages, microbatches): the given ones (each an int >= 1), else the schedule's."""
    for name, value in (("num_stages", num_stages), ("num_microbatches", num_microbatches)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, Integral) or value < 1):
            raise ScheduleError(f"{name} must be an int >= 1 (or None to infer it), got {value!r}")
    S = int(num_stages) if num_stages is not None else num_stages_of(sched)
    M = int(num_microbatches) if num_microbatches is not None else num_microbatches_of(sched)
    return S, M


def _placed_events(sched: dict[int, list[Action]], S: int, M: int) -> dict[tuple[int, str, int], int]:
    """{(stage, event, microbatch): rank that runs it}, after checking each action is within the
    stages and microbatches, on the rank that owns its stage, and repeats no event."""
    R = len(sched)
    seen: dict[tuple[int, str, int], int] = {}
    for r in range(R):
        for pos, a in enumerate(sched[r]):
            if not (0 <= a.stage < S) or not (0 <= a.microbatch < M):
                raise ScheduleError(f"rank {r} position {pos}: {a!r} is outside stages 0..{S - 1} / microbatches 0..{M - 1}")
            if a.stage % R != r:
                raise ScheduleError(f"rank {r} position {pos}: {a!r} belongs on rank {a.stage % R} "
                                    f"(stage s lives on rank s mod {R})")
            for ev in _events(a):
                key = (a.stage, ev, a.microbatch)
                if key in seen:
                    raise ScheduleError(f"rank {r} position {pos}: {a!r} repeats the {_EVENT_NAME[ev]} of "
                                        f"stage {a.stage} microbatch {a.microbatch}")
                seen[key] = r
    return seen


def _run_in_order(sched: dict[int, list[Action]], S: int) -> tuple[set[tuple[int, str, int]], list[int]]:
    """Run the lists: advance any rank whose next action has its dependencies done, until none can.
    Returns (the events done, each rank's position: its first action not run)."""
    R = len(sched)
    done: set[tuple[int, str, int]] = set()
    pos = [0] * R
    progress = True
    while progress:
        progress = False
        for r in range(R):
            acts = sched[r]
            while pos[r] < len(acts):
                a = Action(*acts[pos[r]])
                if not all(d in done for d in dependencies(a, S)):
                    break
                done.update((a.stage, ev, a.microbatch) for ev in _events(a))
                pos[r] += 1
                progress = True
    return done, pos


def _deadlock(sched, S: int, seen: dict, done: set, pos: list[int], first_blocked: int) -> ScheduleError:
    """The error for a schedule whose ranks stop: follow who-waits-for-whom from the lowest blocked
    rank to the root cause, an action waiting for something later on its own rank, or a cycle of
    ranks waiting for each other (reported at its lowest rank)."""

    def missing_of(r):
        a = Action(*sched[r][pos[r]])
        return a, next(d for d in dependencies(a, S) if d not in done)

    chain, r = [], first_blocked
    while r not in chain:
        chain.append(r)
        a, missing = missing_of(r)
        if seen[missing] == r:
            break
        r = seen[missing]
    if r in chain and seen[missing_of(r)[1]] != r:  # a cycle: report its lowest rank
        r = min(chain[chain.index(r):])
    a, missing = missing_of(r)
    ds, ev, di = missing
    where = seen[missing]
    same = " later on the same rank" if where == r else f" on rank {where}, which is itself blocked"
    rule = ("F of stage s after F of s-1" if a.kind == "F" else
            "backward of stage s after its own forward" if ev == "F" else
            "backward of stage s after backward of s+1" if ev == "G" and ds == a.stage + 1 else
            "W after its own input gradient")
    return ScheduleError(f"rank {r} position {pos[r]}: {a!r} needs the {_EVENT_NAME[ev]} of stage {ds} "
                         f"microbatch {di} first, but that runs{same} (dependency violated: {rule})")


def is_valid(sched: dict[int, list[Action]]) -> bool:
    """True when `check_schedule` finds nothing wrong."""
    try:
        check_schedule(sched)
    except ScheduleError:
        return False
    return True
