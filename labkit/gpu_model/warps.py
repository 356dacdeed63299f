"""SIMT divergence: one warp of 32 lanes running a tiny branchy kernel, slot by slot.

A GPU issues one instruction per *slot* for a whole warp; every lane either does it (active)
or sits it out (masked off). When lanes of one warp disagree at a branch, the warp runs the
`then` side with the lanes that took it, then the `else` side with the others, and the lanes
join again after the branch. A loop runs until its last lane is done. Nothing is timed: this
is a count of issued instruction slots and of the lanes doing useful work in each.

A kernel is a list of nodes (the "per-lane control flow"):

    Op(name, cost)                  `cost` instructions (slots) run by the lanes active here
    If(cond, then, orelse, text)    `cond(lane_value) -> bool` picks a side for each lane
    Loop(trips, body, text)         `trips(lane_value) -> int`: how many times each lane runs `body`

e.g. ``[If(lambda v: v % 4 == 0, [Op("A", 3)], [Op("B", 5)], text="v % 4 == 0")]``.
The branch test and loop test themselves cost no slot (put an `Op` there to count them).

Units: *slots* are instructions issued for the warp; a *lane-instruction* is one lane doing
one instruction. Active-lane efficiency = useful lane-instructions / (warp_size · slots).

Closed forms (checked against `simulate_warp` by tests/test_gpu_model_warps.py):
- a two-way branch whose sides cost a and b slots: a + b when both sides have a lane,
  a (or b) when the branch is uniform over the warp (`branch_formula`);
- a loop whose body costs c, lane i running it t_i times: c · max t_i slots, efficiency
  Σ t_i / (warp_size · max t_i) (`loop_formula`).
Divergence is per warp: a branch on ``thread_id // 32`` diverges nowhere (`simulate_threads`).

This is the stack-based model of pre-Volta GPUs (reconverge right after the branch); newer
GPUs schedule lanes independently but still issue one instruction per slot for the lanes
that share a program counter, so the counts are the same for these structured kernels.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from labkit.checks import check_int

__all__ = ["Op", "If", "Loop", "WarpCost", "WarpRun", "ThreadsRun", "simulate_warp", "simulate_threads",
           "branch_formula", "loop_formula", "divergent_branch", "trip_loop", "pseudocode", "WARP_SIZE"]

WARP_SIZE = 32


# ---------------------------------------------------------------------------- the kernel language
@dataclass(frozen=True)
class Op:
    """``cost`` instructions in a row (slots), labelled ``name``."""
    name: str
    cost: int = 1

    def __post_init__(self):
        object.__setattr__(self, "cost", check_int("Op", "cost", self.cost, minimum=0))


@dataclass(frozen=True)
class If:
    """``if cond(lane_value): then else: orelse``; ``text`` is how the condition is printed."""
    cond: Callable[[object], bool]
    then: tuple = ()
    orelse: tuple = ()
    text: str = "cond"

    def __post_init__(self):
        if not callable(self.cond):
            raise TypeError(f"If: cond must be callable (lane value -> bool), got {type(self.cond).__name__}")
        object.__setattr__(self, "then", _nodes("If", "then", self.then))
        object.__setattr__(self, "orelse", _nodes("If", "orelse", self.orelse))


@dataclass(frozen=True)
class Loop:
    """``for _ in range(trips(lane_value)): body``; ``text`` is how the trip count is printed."""
    trips: Callable[[object], int]
    body: tuple = ()
    text: str = "trips"

    def __post_init__(self):
        if not callable(self.trips):
            raise TypeError(f"Loop: trips must be callable (lane value -> int), got {type(self.trips).__name__}")
        object.__setattr__(self, "body", _nodes("Loop", "body", self.body))


def _nodes(fn: str, name: str, nodes) -> tuple:
    if isinstance(nodes, (Op, If, Loop)):
        nodes = (nodes,)
    nodes = tuple(nodes)
    for n in nodes:
        if not isinstance(n, (Op, If, Loop)):
            raise TypeError(f"{fn}: {name} must hold Op/If/Loop nodes, got {type(n).__name__}")
    return nodes


def pseudocode(program, indent: str = "") -> str:
    """The kernel as indented Python-like text, one node per line (slot costs in comments)."""
    lines = []
    for node in _nodes("pseudocode", "program", program):
        if isinstance(node, Op):
            lines.append(f"{indent}{node.name}  # {node.cost} slot{'s' if node.cost != 1 else ''}")
        elif isinstance(node, If):
            lines.append(f"{indent}if {node.text}:")
            lines.append(pseudocode(node.then, indent + "    ") or f"{indent}    pass")
            if node.orelse:
                lines.append(f"{indent}else:")
                lines.append(pseudocode(node.orelse, indent + "    "))
        else:
            lines.append(f"{indent}for _ in range({node.text}):")
            lines.append(pseudocode(node.body, indent + "    ") or f"{indent}    pass")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- results
@dataclass(frozen=True)
class WarpCost:
    """What a warp costs: ``issued`` slots, ``useful`` lane-instructions, and their ratio
    ``efficiency`` = useful / (warp_size · issued) (1.0 when nothing is issued)."""
    issued: int
    useful: int
    efficiency: float


def _cost(issued: int, useful: int, warp_size: int) -> WarpCost:
    return WarpCost(issued, useful, useful / (warp_size * issued) if issued else 1.0)


@dataclass(frozen=True)
class WarpRun:
    """One warp's run. Per slot: the ``label`` of the Op issued and how many lanes were ``active``.

    ``per_lane[i]``: lane-instructions lane i executed (its own path length); ``useful`` is their
    sum, which equals ``sum(active_per_slot)``. ``alone`` = max(per_lane): the slots the warp
    would need if each lane had its own program counter; ``issued / alone`` is what divergence costs.
    """
    warp_size: int
    labels: tuple            # Op name issued in each slot
    active_per_slot: tuple   # lanes active in each slot
    per_lane: tuple          # lane-instructions per lane

    @property
    def issued(self) -> int:
        return len(self.active_per_slot)

    @property
    def useful(self) -> int:
        return int(sum(self.active_per_slot))

    @property
    def efficiency(self) -> float:
        return self.cost().efficiency

    @property
    def alone(self) -> int:
        return max(self.per_lane, default=0)

    def cost(self) -> WarpCost:
        return _cost(self.issued, self.useful, self.warp_size)

    def slot_table(self) -> list[tuple[int, str, int]]:
        """(slot, Op name, active lanes) for every issued slot."""
        return [(k, lab, act) for k, (lab, act) in enumerate(zip(self.labels, self.active_per_slot))]


@dataclass(frozen=True)
class ThreadsRun:
    """Many threads cut into warps of ``warp_size`` consecutive threads; totals over the warps."""
    warps: tuple = field(default_factory=tuple)   # WarpRun per warp
    warp_size: int = WARP_SIZE

    @property
    def issued(self) -> int:
        return sum(w.issued for w in self.warps)

    @property
    def useful(self) -> int:
        return sum(w.useful for w in self.warps)

    def cost(self) -> WarpCost:
        return _cost(self.issued, self.useful, self.warp_size)


# ---------------------------------------------------------------------------- the simulator
MAX_SLOTS = 1_000_000   # simulate_warp: issued slots (and trips of one loop) it will simulate


def simulate_warp(program, lane_values: Sequence | None = None, *, warp_size: int = WARP_SIZE,
                  active: Sequence[bool] | None = None) -> WarpRun:
    """Run ``program`` on one warp; lane i sees ``lane_values[i]`` (default: its lane id i).

    ``active``: which lanes exist at all (default all; a partial last warp has fewer). Conditions
    and trip counts are evaluated only for lanes active at that point.
    """
    warp_size = check_int("simulate_warp", "warp_size", warp_size, minimum=1, maximum=1024)
    program = _nodes("simulate_warp", "program", program)
    values = list(range(warp_size)) if lane_values is None else list(lane_values)
    if len(values) != warp_size:
        raise ValueError(f"simulate_warp: lane_values must have warp_size={warp_size} entries, got {len(values)}")
    mask = np.ones(warp_size, bool) if active is None else np.asarray(active, dtype=bool)
    if mask.shape != (warp_size,):
        raise ValueError(f"simulate_warp: active must have warp_size={warp_size} entries, got shape {mask.shape}")
    labels: list[str] = []
    counts: list[int] = []
    per_lane = np.zeros(warp_size, np.int64)

    def run(nodes, m):
        for node in nodes:
            if not m.any():
                return
            if isinstance(node, Op):
                if len(labels) + node.cost > MAX_SLOTS:
                    raise ValueError(f"simulate_warp: the program issues more than {MAX_SLOTS} slots (at "
                                     f"{node.name!r}); use smaller trip counts or costs")
                for _ in range(node.cost):
                    labels.append(node.name)
                    counts.append(int(m.sum()))
                per_lane[m] += node.cost
            elif isinstance(node, If):
                taken = np.zeros(warp_size, bool)
                for i in np.flatnonzero(m):
                    taken[i] = bool(node.cond(values[i]))
                run(node.then, m & taken)          # lanes that took the branch (nothing if none did)
                run(node.orelse, m & ~taken)       # then the others; all rejoin afterwards
            else:
                trips = np.zeros(warp_size, np.int64)
                for i in np.flatnonzero(m):
                    trips[i] = check_int("simulate_warp", f"trips of lane {i}", node.trips(values[i]), minimum=0,
                                         maximum=MAX_SLOTS)
                for k in range(int(trips.max())):   # the warp loops until its slowest lane is done
                    run(node.body, m & (trips > k))

    run(program, mask)
    return WarpRun(warp_size, tuple(labels), tuple(counts), tuple(int(v) for v in per_lane))


def simulate_threads(program, values: Sequence, *, warp_size: int = WARP_SIZE) -> ThreadsRun:
    """Run ``program`` for ``len(values)`` threads: warp w holds threads w·warp_size .. +warp_size
    (the last warp's missing lanes are inactive). Divergence happens inside a warp only."""
    warp_size = check_int("simulate_threads", "warp_size", warp_size, minimum=1, maximum=1024)
    values = list(values)
    if not values:
        raise ValueError("simulate_threads: values must hold at least one thread's value")
    warps = []
    for w0 in range(0, len(values), warp_size):
        chunk = values[w0:w0 + warp_size]
        act = [True] * len(chunk) + [False] * (warp_size - len(chunk))
        warps.append(simulate_warp(program, chunk + [None] * (warp_size - len(chunk)), warp_size=warp_size,
                                   active=act))
    return ThreadsRun(tuple(warps), warp_size)


# ---------------------------------------------------------------------------- closed forms
def branch_formula(a: int, b: int, lanes_then: int, warp_size: int = WARP_SIZE) -> WarpCost:
    """``if c: A (a slots) else: B (b slots)`` with ``lanes_then`` of the warp's lanes taking A:
    issued = a·[lanes_then > 0] + b·[lanes_else > 0]; useful = lanes_then·a + lanes_else·b."""
    fn = "branch_formula"
    warp_size = check_int(fn, "warp_size", warp_size, minimum=1)
    a, b = check_int(fn, "a", a, minimum=0), check_int(fn, "b", b, minimum=0)
    t = check_int(fn, "lanes_then", lanes_then, minimum=0, maximum=warp_size)
    e = warp_size - t
    return _cost(a * (t > 0) + b * (e > 0), t * a + e * b, warp_size)


def loop_formula(trips: Sequence[int], body_cost: int = 1, warp_size: int = WARP_SIZE) -> WarpCost:
    """A loop whose body costs ``body_cost`` slots, lane i running it ``trips[i]`` times:
    issued = body_cost · max t_i; efficiency = Σ t_i / (warp_size · max t_i)."""
    fn = "loop_formula"
    warp_size = check_int(fn, "warp_size", warp_size, minimum=1)
    c = check_int(fn, "body_cost", body_cost, minimum=0)
    t = [check_int(fn, "trips[i]", v, minimum=0) for v in trips]
    if len(t) != warp_size:
        raise ValueError(f"{fn}: trips must have warp_size={warp_size} entries, got {len(t)}")
    return _cost(c * max(t), c * sum(t), warp_size)


# ---------------------------------------------------------------------------- ready-made kernels
def divergent_branch(a: int, b: int, period: int = 4) -> list:
    """``if v % period == 0: A (a slots) else: B (b slots)``: with lane ids, 32/period lanes take A."""
    period = check_int("divergent_branch", "period", period, minimum=1)
    return [If(lambda v: v % period == 0, [Op("A", a)], [Op("B", b)], text=f"v % {period} == 0")]


def trip_loop(body_cost: int = 1) -> list:
    """``for _ in range(v): body`` (``body_cost`` slots): lane i runs the body v_i times."""
    return [Loop(lambda v: v, [Op("body", body_cost)], text="v")]
