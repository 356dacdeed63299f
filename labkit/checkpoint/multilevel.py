"""Multi-level checkpointing, simulated: expected wall time with a cheap checkpoint for frequent
failures and an expensive one for rare failures, against one level; and selective replication.

A **level** is a place checkpoints go (memory, a peer's memory, disk), with the seconds of work
between its checkpoints (a whole number of the finest level's interval, so the checkpoints nest:
every disk checkpoint is also a memory one), the seconds a checkpoint blocks training, and the
seconds to restart from it. A **failure kind** has its own mean time between failures and the
levels it leaves intact. After a failure the job restarts from the newest checkpoint of a level
that survived it, paying that level's restart time (a failure can strike during a restart too,
which then starts over). Failures of all kinds form independent Poisson processes in wall time,
striking during work, checkpoints and restarts alike — the model of `labkit.checkpoint.interval`,
which this generalises: with a single level and a single kind, `simulate_multilevel` is
`interval.simulate_job`'s model (tests/test_checkpoint_multilevel.py compares the two).

First order (failures rare next to the intervals), the wasted fraction is

    Σ_levels C_l/τ_l  +  Σ_kinds λ_k · (τ_{l(k)}/2 + R_{l(k)})

with l(k) the most frequent level that survives kind k: each checkpoint level costs its C/τ, and
each failure loses half an interval *of the level it falls back to* plus that level's restart.
With one level this is Young's C/τ + τ/(2M) (plus R/M). Each level's best interval is then
Young's √(2·C_l/Λ_l), Λ_l the rate of the failures that fall back to it (`young_per_level`).

**Selective replication** (`replication_cost`): a component whose loss stops the job (a parameter
server, a pipeline stage) can instead keep a hot standby that takes over in ``failover_s``
seconds with no rollback — at the price of its devices twice. Replicating every component doubles
the devices; replicating none pays every failure with a rollback and a restart. Per standby
device, a component's replica removes λ_dev·(τ/2 + R_c − F) of wall time per second of work: the
most where a device fails often and where a restart of that component is slow (a stage whose state
takes long to reload). `best_replication` picks, under a budget of standby devices, the set that
shortens the wall time most.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from labkit.checks import check_int, check_real


@dataclass(frozen=True)
class Level:
    """A checkpoint level: ``name``, ``every`` (checkpoints every that many finest intervals),
    ``cost_s`` (seconds a checkpoint blocks training), ``restart_s`` (seconds to restart from it)."""

    name: str
    every: int
    cost_s: float
    restart_s: float

    def __post_init__(self):
        check_int("Level", "every", self.every, minimum=1)
        for f in ("cost_s", "restart_s"):
            if check_real("Level", f, getattr(self, f)) < 0:
                raise ValueError(f"Level: {f} must be >= 0 seconds")


@dataclass(frozen=True)
class Failure:
    """A failure kind: ``name``, ``mtbf_s`` (mean seconds between failures of this kind), and the
    names of the levels it leaves intact (``survives``)."""

    name: str
    mtbf_s: float
    survives: tuple

    def __post_init__(self):
        check_real("Failure", "mtbf_s", self.mtbf_s, positive=True)
        if not self.survives:
            raise ValueError(f"Failure: {self.name} must leave at least one level intact (a disk, say)")


def _check(fn, levels, kinds, interval_s):
    tau = check_real(fn, "interval_s", interval_s, positive=True)
    levels, kinds = tuple(levels), tuple(kinds)
    if not levels or not all(isinstance(l, Level) for l in levels):
        raise TypeError(f"{fn}: levels must be a non-empty list of Level")
    if not kinds or not all(isinstance(k, Failure) for k in kinds):
        raise TypeError(f"{fn}: kinds must be a non-empty list of Failure")
    names = [l.name for l in levels]
    if len(set(names)) != len(names):
        raise ValueError(f"{fn}: level names must differ, got {names}")
    for k in kinds:
        bad = [s for s in k.survives if s not in names]
        if bad:
            raise ValueError(f"{fn}: failure {k.name!r} survives unknown level(s) {bad}; levels are {names}")
    return tau, levels, kinds


def fallback(levels, kind: Failure) -> Level:
    """The level a failure of ``kind`` restarts from: the most frequent one it leaves intact."""
    return min((l for l in levels if l.name in kind.survives), key=lambda l: l.every)


def first_order_waste(interval_s: float, levels, kinds) -> float:
    """Σ C_l/τ_l + Σ λ_k (τ_{l(k)}/2 + R_{l(k)}) (module docstring); τ_l = every_l · interval_s."""
    tau, levels, kinds = _check("first_order_waste", levels, kinds, interval_s)
    waste = sum(l.cost_s / (l.every * tau) for l in levels)
    for k in kinds:
        l = fallback(levels, k)
        waste += (l.every * tau / 2 + l.restart_s) / k.mtbf_s
    return waste


def young_per_level(levels, kinds) -> dict:
    """{level name: √(2·C_l/Λ_l)}: Young's interval for each level, Λ_l the rate of the failures
    that fall back to it (inf when none does: that level is not needed)."""
    _, levels, kinds = _check("young_per_level", levels, kinds, 1.0)
    rate = {l.name: 0.0 for l in levels}
    for k in kinds:
        rate[fallback(levels, k).name] += 1 / k.mtbf_s
    return {l.name: math.sqrt(2 * l.cost_s / rate[l.name]) if rate[l.name] else math.inf for l in levels}


@dataclass(frozen=True)
class MultiLevelSimulation:
    """Monte Carlo of a job over ``runs`` runs (seconds; ``*_se``: standard errors of the means):
    the mean wall time, its parts (``checkpoint_s`` for the completed checkpoints, ``restart_mean_s``
    for restarts, the rest lost work), and the mean number of failures of each kind."""

    work_s: float
    interval_s: float
    runs: int
    wall_mean_s: float
    wall_se_s: float
    checkpoint_s: float
    restart_mean_s: float
    failures: dict

    @property
    def waste_fraction(self) -> float:
        """Wasted share of the work: wall/work − 1 (first_order_waste's quantity)."""
        return self.wall_mean_s / self.work_s - 1.0


def simulate_multilevel(work_s: float, interval_s: float, levels, kinds, runs: int = 1000,
                        seed: int = 0) -> MultiLevelSimulation:
    """Run the job ``runs`` times (seeded): ``work_s`` seconds of work in segments of
    ``interval_s``; after segment j, every level with j % every == 0 checkpoints (their costs add);
    failures as in the module docstring. Jumps from failure to failure with the cumulative time of
    the segments (numpy searchsorted), so the cost grows with the failures, not the segments."""
    fn = "simulate_multilevel"
    tau, levels, kinds = _check(fn, levels, kinds, interval_s)
    work = check_real(fn, "work_s", work_s, positive=True)
    runs = check_int(fn, "runs", runs, minimum=2, maximum=10**6)
    n = math.ceil(work / tau - 1e-9)
    if n > 10**7:
        raise ValueError(f"{fn}: {n} segments is too many (limit 1e7); use a longer interval_s")
    j = np.arange(n + 1)
    seg = np.full(n + 1, tau)
    seg[0] = 0.0
    seg[n] = work - (n - 1) * tau
    ckpt = sum(l.cost_s * ((j % l.every == 0) | (j == n)) * (j > 0) for l in levels)
    T = np.cumsum(seg + ckpt)                                 # time to finish segment j from the start
    rates = np.array([1 / k.mtbf_s for k in kinds])
    total = rates.sum()
    if T[-1] * total > 1e4:
        raise ValueError(f"{fn}: about {T[-1] * total:.2g} failures per run; failures far too frequent")
    cum_p = np.cumsum(rates / total)
    back = [[i for i, l in enumerate(levels) if l.name in k.survives] for k in kinds]
    rng = np.random.default_rng(check_int(fn, "seed", seed, minimum=0))
    walls, restarts, counts = np.zeros(runs), np.zeros(runs), np.zeros((runs, len(kinds)))

    def kind() -> int:
        return min(int(np.searchsorted(cum_p, rng.random(), side="right")), len(kinds) - 1)

    for r in range(runs):
        pos, wall, rest = 0, 0.0, 0.0
        saved = [0] * len(levels)                          # segment of each level's newest checkpoint
        while pos < n:
            life = rng.exponential(1 / total)
            reach = int(np.searchsorted(T, T[pos] + life, side="right")) - 1
            if reach >= n:
                wall += T[n] - T[pos]
                break
            saved = [max(s, reach - reach % l.every) for s, l in zip(saved, levels)]
            wall += life
            k = kind()
            while True:                                    # roll back, restart; a restart can fail too
                counts[r, k] += 1
                pos = max(saved[i] for i in back[k])
                saved = [min(s, pos) for s in saved]       # newer checkpoints: an abandoned future
                restart = min(levels[i].restart_s for i in back[k] if saved[i] == pos)
                life = rng.exponential(1 / total)
                if life >= restart:
                    wall += restart
                    rest += restart
                    break
                wall += life
                rest += life
                k = kind()
        walls[r], restarts[r] = wall, rest
    return MultiLevelSimulation(work, tau, runs, float(walls.mean()), float(walls.std(ddof=1) / math.sqrt(runs)),
                                float(ckpt.sum()), float(restarts.mean()),
                                {k.name: float(c) for k, c in zip(kinds, counts.mean(0))})


# ------------------------------------------------------------------------ selective replication

@dataclass(frozen=True)
class Component:
    """A part of the job whose loss stops it: ``name``, ``devices``, ``mtbf_s`` per device, and
    ``restart_s``, the seconds the job needs to restart after losing it (reloading its state)."""

    name: str
    devices: int
    mtbf_s: float
    restart_s: float

    def __post_init__(self):
        check_int("Component", "devices", self.devices, minimum=1)
        check_real("Component", "mtbf_s", self.mtbf_s, positive=True)
        if check_real("Component", "restart_s", self.restart_s) < 0:
            raise ValueError("Component: restart_s must be >= 0 seconds")


def replication_cost(components, replicated, interval_s: float, checkpoint_s: float, failover_s: float) -> dict:
    """First-order cost of a job when the components named in ``replicated`` keep a hot standby:
    a failure of one of their devices costs ``failover_s``; any other failure half an interval of
    work plus that component's restart; checkpoints cost C/τ. Returns {"wall": wall seconds per
    second of work, "devices" (a standby's count twice), "device_seconds": their product}."""
    fn = "replication_cost"
    tau = check_real(fn, "interval_s", interval_s, positive=True)
    C = check_real(fn, "checkpoint_s", checkpoint_s)
    F = check_real(fn, "failover_s", failover_s)
    names = [c.name for c in components]
    bad = set(replicated) - set(names)
    if bad:
        raise ValueError(f"{fn}: no component named {sorted(bad)}; components are {names}")
    wall, devices = 1 + C / tau, 0
    for c in components:
        rate = c.devices / c.mtbf_s
        if c.name in replicated:
            wall += rate * F
            devices += 2 * c.devices
        else:
            wall += rate * (tau / 2 + c.restart_s)
            devices += c.devices
    return {"wall": wall, "devices": devices, "device_seconds": wall * devices}


def best_replication(components, interval_s: float, checkpoint_s: float, failover_s: float,
                     extra_devices: int) -> tuple:
    """The components to replicate, with at most ``extra_devices`` standby devices, that give the
    shortest wall time (every subset tried); and its `replication_cost`."""
    names = [c.name for c in components]
    if len(names) > 16:
        raise ValueError("best_replication: at most 16 components (every subset is tried)")
    size = {c.name: c.devices for c in components}
    options = [s for k in range(len(names) + 1) for s in itertools.combinations(names, k)
               if sum(size[n] for n in s) <= extra_devices]
    costs = {s: replication_cost(components, s, interval_s, checkpoint_s, failover_s) for s in options}
    best = min(options, key=lambda s: (costs[s]["wall"], len(s)))
    return best, costs[best]
