"""How often to checkpoint: Young's and Daly's intervals, the expected wall time, and a Monte Carlo job.

**The trade-off.** A job that needs ``W`` seconds of computation runs on a machine that fails at
random, on average once every ``M`` seconds (the *mean time between failures*, MTBF). Every
``τ`` seconds of work it writes a checkpoint, which takes ``C`` seconds. A failure throws away
everything since the last checkpoint; coming back (new node, reload the checkpoint) costs ``R``
seconds. Checkpoint often and you pay ``C`` many times; rarely, and each failure loses more work.
All times here are seconds.

**System MTBF.** With N devices failing independently, each as a Poisson process of rate 1/M_dev,
the first failure among them is a Poisson process of rate N/M_dev: ``M = M_dev / N``
(`system_mtbf`). Ten thousand GPUs that each fail once in five years fail, together, every 4.4 h.

**Young's interval (1974).** To first order (failures rare, C ≪ M) the wasted fraction is
C/τ (checkpoints) + τ/(2M) (on average a failure loses half an interval), minimised at

    τ_Young = √(2·C·M)                                     (`young_interval`)

**Daly's interval (2006).** J. T. Daly, "A higher order estimate of the optimum checkpoint
interval for restart dumps", Future Generation Computer Systems 22(3), 2006, keeps the exact
cost of his model (below) and expands its optimum in ξ = C/(2M):

    τ_Daly = √(2CM)·[1 + ⅓·√ξ + ⅑·ξ] − C      for C < 2M
    τ_Daly = M                                 for C ≥ 2M   (`daly_interval`)

Daly's own worked cases (M = 24 h, 6 h, 15 min with C = 5 min) give 117, 57 and 9.1 minutes.

**The model (Daly's complete one) and its exact expected wall time.** The job is a sequence of
segments, each τ of work followed by a C checkpoint (the last segment holds the remaining work,
and is checkpointed too). Failures form a Poisson process of rate λ = 1/M in *wall* time: they can
strike during work, during a checkpoint (the segment is lost: it restarts from the previous
checkpoint), and during a restart (the restart begins again). A segment of length L = τ + C then
takes, in expectation,

    E[T_segment] = M·e^{R/M}·(e^{L/M} − 1)                 (Daly's T_w per segment)

Derivation: the number of attempts is geometric with success probability e^{−L/M}, each attempt
lasts E[min(T_fail, L)] = M(1 − e^{−L/M}), so the attempts take M(e^{L/M} − 1) in all (Wald's
identity); there are e^{L/M} − 1 failed attempts, each followed by a restart that itself takes
M(e^{R/M} − 1) until R seconds pass without a failure. `expected_wall_time` sums this over the
segments and splits the waste (wall time − W) into completed checkpoints, lost work (failed
attempts: partial work and partial checkpoints) and restarts:

    lost = M(e^{L/M} − 1) − L        restarts = M(e^{L/M} − 1)(e^{R/M} − 1)        per segment

For a long job the wall time per second of work tends to M·e^{R/M}(e^{(τ+C)/M} − 1)/τ
(`wall_time_per_work`); its exact minimiser solves e^{(τ+C)/M}(1 − τ/M) = 1, i.e.
τ* = M·[1 + W₀(−e^{−1−C/M})] with Lambert's W (`exact_interval`, solved by bisection). Daly's
formula is a series for this τ*; Young's is its first term. R shifts the wall time but not τ*.

`simulate_job` runs the same model as a Monte Carlo (exponential inter-failure times in wall
time: by memorylessness a fresh exponential per attempt is the same Poisson process), and its
mean agrees with the closed form within its standard error; `simulate_timeline` records one run's
events for the picture; `optimum_table` puts Young, Daly, the exact optimum and the simulated
best interval side by side.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit.checks import check_int, check_real
from labkit.table import Table

__all__ = ["young_interval", "daly_interval", "exact_interval", "system_mtbf", "first_order_waste",
           "wall_time_per_work", "segment_lengths", "expected_wall_time", "simulate_job",
           "simulate_timeline", "optimum_table", "WallTime", "JobSimulation", "Event", "Timeline",
           "YEAR_S", "HOUR_S"]

HOUR_S = 3600.0
YEAR_S = 365 * 24 * HOUR_S           # a 365-day year, in seconds
_MAX_DRAWS = 4e7                    # expected random draws one simulate_job call may take


def _nonnegative(fn: str, name: str, value) -> float:
    value = check_real(fn, name, value)
    if value < 0:
        raise ValueError(f"{fn}: {name} must be >= 0 seconds, got {value!r}")
    return value


def _in_range(fn: str, what: str, compute, detail: str) -> float:
    """``compute()``, or a one-line ValueError if it overflows float64 (OverflowError or inf)."""
    try:
        value = compute()
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise ValueError(f"{fn}: {what} overflows float64 ({detail})")
    return value


def _sqrt_2cm(fn: str, c: float, m: float) -> float:
    # √(2C)·√M, not √(2CM): the product overflows for C = M = 1e300, the answer (1.4e300) does not
    return _in_range(fn, "√(2·C·M)", lambda: math.sqrt(2.0 * c) * math.sqrt(m), f"C = {c:.3g} s, M = {m:.3g} s")


# BEGIN SOLUTION (labkit's checked Young interval, safe from overflow: it answers young_interval)
def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum √(2·C·M), in seconds of work between checkpoints."""
    c = check_real("young_interval", "checkpoint_s", checkpoint_s, positive=True)
    m = check_real("young_interval", "mtbf_s", mtbf_s, positive=True)
    return _sqrt_2cm("young_interval", c, m)
# END SOLUTION


def _young_interval(checkpoint_s, mtbf_s):
    """Young's optimal checkpoint interval (seconds of work between checkpoints), to first order:
    minimise the wasted fraction C/τ + τ/(2M) — checkpoints, plus on average half an interval lost
    per failure — over τ. checkpoint_s: C, seconds one checkpoint takes; mtbf_s: M, the mean time
    between failures of the whole job (seconds). Returns a float."""
    # BEGIN SOLUTION
    # HINT: balance the time spent writing checkpoints against the work lost at a failure
    # HINT: (half an interval on average); math.sqrt of the optimum.
    return math.sqrt(2 * checkpoint_s * mtbf_s)
    # END SOLUTION


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's (2006) higher-order optimum √(2CM)[1 + ⅓√(C/2M) + ⅑(C/2M)] − C, or M when C ≥ 2M (s)."""
    c = check_real("daly_interval", "checkpoint_s", checkpoint_s, positive=True)
    m = check_real("daly_interval", "mtbf_s", mtbf_s, positive=True)
    if c >= 2.0 * m:
        return m
    xi = c / (2.0 * m)
    root = _sqrt_2cm("daly_interval", c, m)
    return _in_range("daly_interval", "the interval", lambda: root * (1.0 + math.sqrt(xi) / 3.0 + xi / 9.0) - c,
                     f"C = {c:.3g} s, M = {m:.3g} s")


def exact_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """The τ minimising `wall_time_per_work` exactly (seconds): the root in (0, M) of
    e^{(τ+C)/M}(1 − τ/M) = 1, i.e. M[1 + W₀(−e^{−1−C/M})], found by bisection to float precision."""
    c = check_real("exact_interval", "checkpoint_s", checkpoint_s, positive=True)
    m = check_real("exact_interval", "mtbf_s", mtbf_s, positive=True)
    # g(τ) = e^{(τ+C)/M}(1 − τ/M) − 1 falls from e^{C/M} − 1 > 0 at τ = 0 to −1 at τ = M.
    # g > 0  ⟺  C > τ·S(τ/M) with S(x) = (−x − ln(1 − x))/x = x/2 + x²/3 + …: the form used when
    # C/M is so small that e^{(τ+C)/M} rounds to 1 (C = 1e-300 s, M = 1e300 s), or e^x would overflow.
    def S(x):
        return x / 2 + x * x / 3 + x ** 3 / 4 + x ** 4 / 5 if x < 1e-4 else (-x - math.log1p(-x)) / x
    lo, hi = 0.0, m
    for _ in range(2200):                          # enough halvings to go from 1e300 to 1e-300
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        x = (mid + c) / m
        if c / m < 1e-8 or x >= 700:
            above = c > mid * S(mid / m)
        else:
            above = math.exp(x) * (1.0 - mid / m) - 1.0 > 0
        if above:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def system_mtbf(device_mtbf_s: float, devices: int) -> float:
    """MTBF of N devices failing independently (exponential): the first failure comes after M_dev/N s."""
    m = check_real("system_mtbf", "device_mtbf_s", device_mtbf_s, positive=True)
    n = check_int("system_mtbf", "devices", devices, minimum=1)
    return m / n


def first_order_waste(interval_s: float, checkpoint_s: float, mtbf_s: float) -> float:
    """Young's first-order wasted fraction C/τ + τ/(2M) (dimensionless); its minimum, at τ_Young,
    is √(2C/M)."""
    t = check_real("first_order_waste", "interval_s", interval_s, positive=True)
    c = _nonnegative("first_order_waste", "checkpoint_s", checkpoint_s)
    m = check_real("first_order_waste", "mtbf_s", mtbf_s, positive=True)
    return _in_range("first_order_waste", "C/τ + τ/(2M)", lambda: c / t + t / (2.0 * m),
                     f"τ = {t:.3g} s, C = {c:.3g} s, M = {m:.3g} s")


def wall_time_per_work(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Expected wall seconds per second of work for a long job: M·e^{R/M}·(e^{(τ+C)/M} − 1)/τ."""
    fn = "wall_time_per_work"
    t = check_real(fn, "interval_s", interval_s, positive=True)
    c = _nonnegative(fn, "checkpoint_s", checkpoint_s)
    r = _nonnegative(fn, "restart_s", restart_s)
    m = check_real(fn, "mtbf_s", mtbf_s, positive=True)
    return _in_range(fn, "the wall time per work", lambda: m * math.exp(r / m) * math.expm1((t + c) / m) / t,
                     f"(τ + C)/M = {(t + c) / m:.3g}, R/M = {r / m:.3g}: failures far too frequent")


def segment_lengths(work_s: float, interval_s: float) -> list[float]:
    """Work (seconds) in each segment: ⌈W/τ⌉ segments of τ, the last one holding what remains."""
    w = check_real("segment_lengths", "work_s", work_s, positive=True)
    t = check_real("segment_lengths", "interval_s", interval_s, positive=True)
    if not w / t <= 10_000_000:                  # (inf too: W = 1e300 s, τ = 1e-300 s)
        raise ValueError(f"segment_lengths: W/τ = {w / t:.3g} segments is too many (limit 1e7); "
                         f"use a longer interval_s")
    n = max(1, math.ceil(w / t - 1e-9))          # W = 3τ (up to rounding) is 3 segments, not 4
    return [t] * (n - 1) + [w - (n - 1) * t]


@dataclass(frozen=True)
class WallTime:
    """Expected wall time of a job (closed form); all in seconds except the counts and fractions.

    wall_s = work_s + checkpoint_s + lost_s + restart_s exactly (up to rounding)."""

    work_s: float
    interval_s: float
    segments: int
    wall_s: float
    checkpoint_s: float   # completed checkpoints: segments · C
    lost_s: float         # failed attempts (work and partial checkpoints thrown away)
    restart_s: float      # restarts, failed restarts included
    failures: float       # expected failures per run: wall_s / M (Poisson in wall time)

    @property
    def waste_s(self) -> float:
        return self.wall_s - self.work_s

    @property
    def waste_fraction(self) -> float:
        """Share of the wall time that is not useful work: 1 − W / wall."""
        return self.waste_s / self.wall_s


def _check_job(fn, work_s, interval_s, checkpoint_s, restart_s, mtbf_s):
    return (check_real(fn, "work_s", work_s, positive=True),
            check_real(fn, "interval_s", interval_s, positive=True),
            _nonnegative(fn, "checkpoint_s", checkpoint_s),
            _nonnegative(fn, "restart_s", restart_s),
            check_real(fn, "mtbf_s", mtbf_s, positive=True))


def expected_wall_time(work_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                       mtbf_s: float) -> WallTime:
    """Closed-form expected wall time of the job (seconds) under Daly's model; see the module doc."""
    w, t, c, r, m = _check_job("expected_wall_time", work_s, interval_s, checkpoint_s, restart_s, mtbf_s)
    segs = segment_lengths(w, t)
    wall = lost = rest = 0.0
    def total():
        nonlocal wall, lost, rest
        for work in segs:
            length = work + c
            attempts = m * math.expm1(length / m)      # time in all attempts, failed ones included
            restarts = attempts * math.expm1(r / m)
            wall += attempts + restarts
            lost += attempts - length
            rest += restarts
        return wall
    _in_range("expected_wall_time", "the expected wall time", total,
              f"(τ + C)/M = {(t + c) / m:.3g}, R/M = {r / m:.3g}: failures far too frequent")
    return WallTime(w, t, len(segs), wall, len(segs) * c, lost, rest, wall / m)


@dataclass(frozen=True)
class JobSimulation:
    """Monte Carlo of the job over ``runs`` runs (seconds; ``*_se`` are standard errors of means).

    wall_mean_s = work_s + checkpoint_s + lost_mean_s + restart_mean_s for every run, hence also
    for the means."""

    work_s: float
    interval_s: float
    runs: int
    seed: int
    wall_mean_s: float
    wall_se_s: float              # sample std (ddof=1) / √runs
    checkpoint_s: float           # completed checkpoints: the same in every run
    lost_mean_s: float
    lost_se_s: float
    restart_mean_s: float
    restart_se_s: float
    failures_mean: float
    failures_se: float

    @property
    def waste_fraction(self) -> float:
        return 1.0 - self.work_s / self.wall_mean_s


# BEGIN SOLUTION (labkit's simulator: it answers simulate_wall_time)
def simulate_job(work_s: float, interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float,
                 runs: int = 1000, seed: int = 0) -> JobSimulation:
    """Run the job ``runs`` times with exponential failures (mean ``mtbf_s``) striking during work,
    checkpoints and restarts alike; vectorised over runs and segments, seeded and deterministic."""
    fn = "simulate_job"
    w, t, c, r, m = _check_job(fn, work_s, interval_s, checkpoint_s, restart_s, mtbf_s)
    runs = check_int(fn, "runs", runs, minimum=2)
    seed = check_int(fn, "seed", seed, minimum=0)
    segs = np.array(segment_lengths(w, t))
    lengths = segs + c
    n = len(segs)
    draws = runs * float(np.sum(np.exp(np.minimum(lengths / m, 700.0)))) * math.exp(min(r / m, 700.0))
    if draws > _MAX_DRAWS:
        raise ValueError(f"{fn}: about {draws:.2g} random draws needed (segments of {lengths.max():.3g} s "
                         f"against MTBF {m:.3g} s, {runs} runs); shorten interval_s or use fewer runs")
    rng = np.random.default_rng(seed)
    lost = np.zeros(runs)
    rest = np.zeros(runs)
    fails = np.zeros(runs)
    pending = np.arange(runs * n)                 # (run, segment) pairs not yet through; flat index
    while pending.size:
        life = rng.exponential(m, pending.size)   # time to the next failure from this attempt's start
        failed = life < lengths[pending % n]
        who = pending[failed] // n
        lost += np.bincount(who, weights=life[failed], minlength=runs)
        fails += np.bincount(who, minlength=runs)
        restarting = who
        while restarting.size:                   # each failure is followed by a restart, which may fail
            life = rng.exponential(m, restarting.size)
            ok = life >= r
            rest += np.bincount(restarting, weights=np.where(ok, r, life), minlength=runs)
            fails += np.bincount(restarting[~ok], minlength=runs)
            restarting = restarting[~ok]
        pending = pending[failed]
    wall = w + n * c + lost + rest
    se = lambda x: float(x.std(ddof=1) / math.sqrt(runs))  # noqa: E731
    return JobSimulation(w, t, runs, seed, float(wall.mean()), se(wall), n * c, float(lost.mean()), se(lost),
                         float(rest.mean()), se(rest), float(fails.mean()), se(fails))
# END SOLUTION


@dataclass(frozen=True)
class Event:
    """One stretch of a run, ``start_s`` to ``end_s`` (seconds of wall time).

    kind: "work" (kept), "checkpoint" (completed), "lost" (an attempt cut by a failure: its work
    and any partial checkpoint), "restart" (a restart attempt, failed or not), "failure" (an
    instant: start_s == end_s). ``segment`` is the segment being worked on (0-based)."""

    kind: str
    start_s: float
    end_s: float
    segment: int


@dataclass(frozen=True)
class Timeline:
    """One seeded run of the job: its events in time order and their totals (seconds)."""

    events: tuple
    work_s: float
    interval_s: float
    wall_s: float
    checkpoint_s: float
    lost_s: float
    restart_s: float
    failures: int

    @property
    def waste_fraction(self) -> float:
        return 1.0 - self.work_s / self.wall_s


def simulate_timeline(work_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                      mtbf_s: float, seed: int = 0, max_events: int = 100_000) -> Timeline:
    """One run of `simulate_job`'s model, event by event (for the picture); seeded."""
    fn = "simulate_timeline"
    w, t, c, r, m = _check_job(fn, work_s, interval_s, checkpoint_s, restart_s, mtbf_s)
    seed = check_int(fn, "seed", seed, minimum=0)
    max_events = check_int(fn, "max_events", max_events, minimum=1)
    segs = segment_lengths(w, t)
    # expected events: per segment e^{(τ+C)/M} attempts, each failure followed by e^{R/M} restarts
    expected = sum(math.exp(min((work + c) / m, 700.0)) for work in segs) * math.exp(min(r / m, 700.0))
    if expected > max_events:
        raise ValueError(f"{fn}: about {expected:.2g} events expected, more than max_events={max_events} "
                         f"((τ + C)/M = {(t + c) / m:.3g}, restart_s/mtbf_s = {r / m:.3g})")
    rng = np.random.default_rng(seed)
    events: list[Event] = []
    now = lost = rest = 0.0
    fails = 0
    for k, work in enumerate(segs):
        while True:
            if len(events) > max_events:
                raise ValueError(f"{fn}: more than {max_events} events; the MTBF is too short for this job")
            life = float(rng.exponential(m))
            if life >= work + c:
                events += [Event("work", now, now + work, k), Event("checkpoint", now + work, now + work + c, k)]
                now += work + c
                break
            events += [Event("lost", now, now + life, k), Event("failure", now + life, now + life, k)]
            now += life
            lost += life
            fails += 1
            while True:
                life = float(rng.exponential(m))
                if life >= r:
                    events.append(Event("restart", now, now + r, k))
                    now += r
                    rest += r
                    break
                events += [Event("restart", now, now + life, k), Event("failure", now + life, now + life, k)]
                if len(events) > max_events:
                    raise ValueError(f"{fn}: more than {max_events} events; the MTBF is too short for this job")
                now += life
                rest += life
                fails += 1
    n = k + 1
    return Timeline(tuple(events), w, t, now, n * c, lost, rest, fails)


def optimum_table(cases=((60.0, 15768.0), (300.0, 6 * HOUR_S), (300.0, 900.0)), restart_s: float = 600.0,
                  work_mtbfs: float = 20.0, runs: int = 4000, seed: int = 0) -> Table:
    """For each (C, M) in ``cases`` (seconds): Young, Daly, the exact optimum, and the simulated best
    interval over a grid that no formula chose: every τ = 2^(k/8) minutes (k an integer) from half
    to twice the exact optimum (a job of ``work_mtbfs``·M seconds of work, ``runs`` runs per point,
    its own seed per point). Intervals are printed in minutes.

    "z Young", "z Daly": the job simulated at that formula's τ, how many standard errors of the
    difference its mean wall time lies above the best grid point's (negative: below it).
    "sim - closed": the simulated mean wall time at Daly's τ minus the closed form's, in standard
    errors. "Young +%", "Daly +%": the closed form's wall time at that τ above its minimum."""
    fn = "optimum_table"
    r = _nonnegative(fn, "restart_s", restart_s)
    work_mtbfs = check_real(fn, "work_mtbfs", work_mtbfs, positive=True)
    rows = []
    for i, (c, m) in enumerate(cases):
        c = check_real(fn, "checkpoint_s", c, positive=True)
        m = check_real(fn, "mtbf_s", m, positive=True)
        young, daly, exact = young_interval(c, m), daly_interval(c, m), exact_interval(c, m)
        lo, hi = math.ceil(8 * math.log2(exact / 2 / 60)), math.floor(8 * math.log2(2 * exact / 60))
        grid = [60.0 * 2.0 ** (k / 8) for k in range(lo, hi + 1)]
        sim = lambda tau, j: simulate_job(work_mtbfs * m, tau, c, r, m, runs=runs, seed=seed + 1000 * i + j)  # noqa: E731
        sims = [sim(tau, j) for j, tau in enumerate(grid)]
        best = min(range(len(grid)), key=lambda j: sims[j].wall_mean_s)
        b = sims[best]
        z = lambda s: (s.wall_mean_s - b.wall_mean_s) / math.hypot(s.wall_se_s, b.wall_se_s)  # noqa: E731
        at_young, at_daly = sim(young, len(grid)), sim(daly, len(grid) + 1)
        closed = expected_wall_time(work_mtbfs * m, daly, c, r, m).wall_s
        floor = wall_time_per_work(exact, c, r, m)
        excess = lambda tau: 100 * (wall_time_per_work(tau, c, r, m) / floor - 1)  # noqa: E731
        rows.append([c / 60, m / HOUR_S, young / 60, daly / 60, exact / 60, grid[best] / 60, z(at_young),
                     z(at_daly), (at_daly.wall_mean_s - closed) / at_daly.wall_se_s, excess(young), excess(daly)])
    one = ".1f"
    return Table(["C", "M (h)", "Young", "Daly", "exact", "sim best", "z Young", "z Daly", "sim - closed",
                  "Young +%", "Daly +%"],
                 rows, formats={"C": one, "M (h)": ".2f", "Young": one, "Daly": one, "exact": one,
                                "sim best": one, "z Young": one, "z Daly": one, "sim - closed": one,
                                "Young +%": ".3f", "Daly +%": ".5f"},
                 title=f"Checkpoint intervals (min): formulas vs simulation, R = {r / 60:g} min, "
                       f"{work_mtbfs:g} MTBFs of work, {runs} runs a point")


def simulate_wall_time(work_s, interval_s, checkpoint_s, restart_s, mtbf_s, runs, seed):
    """Monte Carlo estimate of a job's expected wall time (seconds); returns (mean, standard error).

    The job needs ``work_s`` seconds of work, done in segments of ``interval_s`` seconds of work
    (the last one holds what is left) each followed by a checkpoint of ``checkpoint_s`` seconds.
    Failures arrive as a Poisson process in wall time with mean gap ``mtbf_s``: after each attempt
    starts, draw the time to the next failure from an exponential distribution (mean mtbf_s). An
    attempt at a segment (work plus its checkpoint) that a failure interrupts is lost entirely and
    is followed by a restart of ``restart_s`` seconds — which a failure can interrupt too (then the
    restart starts over) — and then the segment is tried again. Simulate ``runs`` jobs with
    ``np.random.default_rng(seed)``; return (the mean wall time, its standard error: sample
    standard deviation (ddof=1) / sqrt(runs)).
    """
    # BEGIN SOLUTION
    # HINT: one numpy Generator; each segment of work plus its checkpoint is retried until an
    # HINT: exponential lifetime outlasts it, and a restart can fail too; mean and standard error over runs.
    rng = np.random.default_rng(seed)
    n = math.ceil(work_s / interval_s)
    segments = [interval_s] * (n - 1) + [work_s - (n - 1) * interval_s]
    walls = np.empty(runs)
    for k in range(runs):
        wall = 0.0
        for work in segments:
            length = work + checkpoint_s
            while True:
                life = rng.exponential(mtbf_s)
                if life >= length:
                    wall += length
                    break
                wall += life                                   # the attempt is lost
                while True:                                   # restart, which may fail too
                    life = rng.exponential(mtbf_s)
                    if life >= restart_s:
                        wall += restart_s
                        break
                    wall += life
        walls[k] = wall
    return float(walls.mean()), float(walls.std(ddof=1) / math.sqrt(runs))
    # END SOLUTION
