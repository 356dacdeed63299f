"""Load balancing: static splits, greedy list scheduling, work stealing, heterogeneous devices.

Tasks have durations in seconds (``times``); P workers run them.

- Static: round-robin (task i on worker i mod P) or block (contiguous runs of ⌈n/P⌉ tasks).
  Fine for equal tasks; under skewed times (lognormal, Pareto) one worker gets the giants.
- Greedy list scheduling (Graham, "Bounds on multiprocessing timing anomalies", 1969): each
  task, in list order, goes to the worker that is free first. With T₁ = Σ times:

      makespan <= T₁/P + (1 − 1/P)·max(times) <= (2 − 1/P)·OPT

  since OPT >= max(T₁/P, max(times)). This is the famous "2" bound. Sorting longest first
  (LPT) improves it to (4/3 − 1/(3P))·OPT.
- Work stealing (Blumofe & Leiserson, "Scheduling multithreaded computations by work
  stealing", JACM 1999; Arora, Blumofe & Plaxton 1998): each worker keeps a deque of ready
  tasks, works at its bottom, and when idle steals the top of a uniformly random victim's
  deque. For a DAG of work T₁ and span (critical path) T∞ the expected time is
  T₁/P + O(T∞). It is not "2-competitive": the 2 belongs to Graham's bound above; work
  stealing's promise is linear speed-up while T₁/P dominates T∞, with no central queue.
- Heterogeneous devices (speeds s_i, work per second): divisible work split in proportion to
  speed finishes everywhere at W/Σs; indivisible tasks go greedily to the device on which
  they would finish earliest.

Imbalance of per-worker loads L: max/mean (1 is perfect) and the coefficient of variation
std/mean (population std; 0 is perfect).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from labkit.checks import MAX_ENUMERATED, check_int, check_real


def _times(fn: str, times) -> np.ndarray:
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 1 or len(t) == 0 or not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError(f"{fn}: times must be a non-empty 1-D sequence of finite seconds >= 0")
    return t


def skewed_times(n: int, seed: int, kind: str = "lognormal", sigma: float = 1.5, alpha: float = 1.5,
                 mean: float = 1.0) -> np.ndarray:
    """n task durations (s) with mean ``mean``: lognormal (log-std ``sigma``) or Pareto (tail index
    ``alpha`` > 1, minimum chosen to give the mean), from numpy's Generator seeded with ``seed``."""
    n = check_int("skewed_times", "n", n, minimum=1, maximum=MAX_ENUMERATED)
    rng = np.random.default_rng(check_int("skewed_times", "seed", seed, minimum=0))
    mean = check_real("skewed_times", "mean", mean, positive=True)
    if kind == "lognormal":
        s = check_real("skewed_times", "sigma", sigma)
        return rng.lognormal(math.log(mean) - s * s / 2, s, n)
    if kind == "pareto":
        a = check_real("skewed_times", "alpha", alpha)
        if a <= 1:
            raise ValueError(f"skewed_times: alpha must be > 1 for a finite mean, got {a}")
        return (rng.pareto(a, n) + 1) * mean * (a - 1) / a
    raise ValueError(f"skewed_times: kind must be 'lognormal' or 'pareto', got {kind!r}")


# ---------------------------------------------------------------- metrics


@dataclass(frozen=True)
class Imbalance:
    """max_over_mean: largest load / mean load; cv: population std / mean of the loads."""

    max_over_mean: float
    cv: float


def imbalance(loads) -> Imbalance:
    """Imbalance metrics of per-worker loads (s); ValueError if they are all zero."""
    x = _times("imbalance", loads)
    m = x.mean()
    if m == 0:
        raise ValueError("imbalance: loads are all zero")
    return Imbalance(float(x.max() / m), float(x.std() / m))


# ---------------------------------------------------------------- static and greedy


@dataclass(frozen=True)
class Assignment:
    """worker[i]: the worker running task i; loads: busy seconds per worker; makespan: max load."""

    worker: np.ndarray
    loads: np.ndarray
    makespan: float


def _assignment(t: np.ndarray, worker, workers: int) -> Assignment:
    worker = np.asarray(worker, dtype=np.int64)
    loads = np.zeros(workers)
    for i, w in enumerate(worker):      # in task order: the same sums as a worker running its list
        loads[w] += t[i]
    return Assignment(worker, loads, float(loads.max()))


def static_assignment(times, workers: int, scheme: str = "round_robin") -> Assignment:
    """Round-robin (task i on worker i mod P) or block (task i on worker i // ⌈n/P⌉)."""
    t = _times("static_assignment", times)
    P = check_int("static_assignment", "workers", workers, minimum=1)
    idx = np.arange(len(t))
    if scheme == "round_robin":
        return _assignment(t, idx % P, P)
    if scheme == "block":
        return _assignment(t, idx // -(-len(t) // P), P)
    raise ValueError(f"static_assignment: scheme must be 'round_robin' or 'block', got {scheme!r}")


def list_schedule(times, workers: int, order: str = "given") -> Assignment:
    """Graham's greedy list scheduling: tasks in ``order`` ("given", or "lpt": longest first,
    ties by index) each go to the least-loaded worker (ties: lowest worker)."""
    t = _times("list_schedule", times)
    P = check_int("list_schedule", "workers", workers, minimum=1)
    if order == "given":
        seq = range(len(t))
    elif order == "lpt":
        seq = sorted(range(len(t)), key=lambda i: (-t[i], i))
    else:
        raise ValueError(f"list_schedule: order must be 'given' or 'lpt', got {order!r}")
    heap = [(0.0, w) for w in range(P)]
    worker = np.zeros(len(t), dtype=np.int64)
    for i in seq:
        load, w = heapq.heappop(heap)
        worker[i] = w
        heapq.heappush(heap, (load + t[i], w))
    return _assignment(t, worker, P)


def lower_bound(times, workers: int) -> float:
    """max(T₁/P, longest task): no schedule on P identical workers finishes sooner."""
    t = _times("lower_bound", times)
    P = check_int("lower_bound", "workers", workers, minimum=1)
    return float(max(t.sum() / P, t.max()))


def graham_bound(times, workers: int) -> float:
    """T₁/P + (1 − 1/P)·max task: what greedy list scheduling never exceeds (<= (2 − 1/P)·OPT)."""
    t = _times("graham_bound", times)
    P = check_int("graham_bound", "workers", workers, minimum=1)
    return float(t.sum() / P + (1 - 1 / P) * t.max())


def optimal_makespan(times, workers: int) -> float:
    """The optimal makespan by exhaustive search (branch and bound; small instances only, <= 12 tasks)."""
    t = _times("optimal_makespan", times)
    P = check_int("optimal_makespan", "workers", workers, minimum=1)
    if len(t) > 12:
        raise ValueError(f"optimal_makespan: exhaustive search is limited to 12 tasks, got {len(t)}")
    order = sorted(t, reverse=True)
    best = [list_schedule(t, P, "lpt").makespan]
    loads = [0.0] * P

    def rec(i: int):
        if i == len(order):
            best[0] = min(best[0], max(loads))
            return
        seen = set()
        for w in range(P):
            if loads[w] in seen or loads[w] + order[i] >= best[0]:
                continue            # equal loads are interchangeable; no improvement possible
            seen.add(loads[w])
            loads[w] += order[i]
            rec(i + 1)
            loads[w] -= order[i]

    rec(0)
    return best[0]


# ---------------------------------------------------------------- heterogeneous devices


def proportional_split(work: float, speeds) -> np.ndarray:
    """Split ``work`` (s of work at speed 1) in proportion to ``speeds``: device i gets
    work·s_i/Σs, so every device finishes at work/Σs seconds."""
    w = check_real("proportional_split", "work", work)
    s = _times("proportional_split", speeds)
    if np.any(s <= 0):
        raise ValueError("proportional_split: speeds must be > 0")
    return w * s / s.sum()


def earliest_finish(times, speeds, order: str = "lpt") -> Assignment:
    """Each task (``times`` at speed 1; "lpt": longest first, or "given") goes to the device on
    which it would finish earliest: argmin_i load_i + t/s_i (ties: lowest device). loads are
    finish times (s)."""
    t = _times("earliest_finish", times)
    s = _times("earliest_finish", speeds)
    if np.any(s <= 0):
        raise ValueError("earliest_finish: speeds must be > 0")
    if order not in ("lpt", "given"):
        raise ValueError(f"earliest_finish: order must be 'lpt' or 'given', got {order!r}")
    seq = sorted(range(len(t)), key=lambda i: (-t[i], i)) if order == "lpt" else range(len(t))
    finish = np.zeros(len(s))
    worker = np.zeros(len(t), dtype=np.int64)
    for i in seq:
        d = int(np.argmin(finish + t[i] / s))
        worker[i] = d
        finish[d] += t[i] / s[d]
    return Assignment(worker, finish, float(finish.max()))


# ---------------------------------------------------------------- work stealing


@dataclass(frozen=True)
class ForkJoin:
    """A divide-and-conquer fork-join DAG over ``leaves`` (s): the range [lo, hi) forks into
    [lo, mid) and [mid, hi), mid = (lo + hi) // 2, down to single leaves; each fork costs
    ``fork_s`` and each join ``join_s``. work = T₁, span = T∞ (s); depth = nodes on the
    longest root-to-leaf-to-root path."""

    leaves: tuple
    fork_s: float
    join_s: float
    work: float
    span: float
    depth: int


def fork_join(leaves, fork_s: float = 0.0, join_s: float = 0.0) -> ForkJoin:
    """Build the `ForkJoin` DAG of ``leaves`` and compute its work and span."""
    t = _times("fork_join", leaves)
    f = check_real("fork_join", "fork_s", fork_s)
    j = check_real("fork_join", "join_s", join_s)
    if f < 0 or j < 0:
        raise ValueError("fork_join: fork_s and join_s must be >= 0")

    def span(lo, hi):
        if hi - lo == 1:
            return float(t[lo]), 1
        mid = (lo + hi) // 2
        (a, da), (b, db) = span(lo, mid), span(mid, hi)
        return f + max(a, b) + j, 2 + max(da, db)

    s, d = span(0, len(t))
    return ForkJoin(tuple(float(x) for x in t), f, j, float(t.sum() + (len(t) - 1) * (f + j)), s, d)


@dataclass(frozen=True)
class StealResult:
    """Outcome of `simulate_work_stealing`: makespan (s); per-worker busy (work) and stealing
    seconds (attempts in progress at the end are cut at the makespan); steal attempts and
    successful steals."""

    makespan: float
    busy: np.ndarray = field(repr=False)
    stealing: np.ndarray = field(repr=False)
    attempts: int
    steals: int


def simulate_work_stealing(dag: ForkJoin, workers: int, steal_s: float, seed: int) -> StealResult:
    """Randomised work stealing on a fork-join DAG (the work-first policy of Cilk).

    Worker 0 starts at the root; the others start idle. A worker running a fork [lo, hi) pushes
    [mid, hi) on the bottom of its deque and goes on with [lo, mid). A worker that completes
    the second child of a fork runs that fork's join itself. A worker with nothing to run pops
    the bottom of its own deque, or else makes a steal attempt: it picks a victim uniformly at
    random among the other workers (numpy Generator seeded with ``seed``), spends ``steal_s``
    seconds, and then takes the top (oldest) entry of the victim's deque if there is one.
    Events at equal times run in worker order. Every worker is always working or stealing, so
    workers·makespan = T₁ + total stealing time.
    """
    P = check_int("simulate_work_stealing", "workers", workers, minimum=1)
    s = check_real("simulate_work_stealing", "steal_s", steal_s)
    if s < 0 or (s == 0 and P > 1):
        raise ValueError(f"simulate_work_stealing: steal_s must be > 0 with several workers, got {steal_s}")
    rng = np.random.default_rng(check_int("simulate_work_stealing", "seed", seed))
    n = len(dag.leaves)
    deques: list[list] = [[] for _ in range(P)]      # bottom = end of the list
    done_children: dict = {}
    busy, stealing = np.zeros(P), np.zeros(P)
    attempts = steals = 0
    # each worker: (time it acts next, worker, what): what = ("run", kind, lo, hi) or ("steal", victim)
    events = [(0.0, 0, ("start", (0, n)))] + [(0.0, w, ("idle",)) for w in range(1, P)]
    heapq.heapify(events)
    finished_at = None

    def begin(w, now, lo, hi):
        """Worker w starts the node [lo, hi): a leaf, or a fork."""
        if hi - lo == 1:
            dur = dag.leaves[lo]
            heapq.heappush(events, (now + dur, w, ("leaf_done", (lo, hi))))
        else:
            dur = dag.fork_s
            heapq.heappush(events, (now + dur, w, ("fork_done", (lo, hi))))
        busy[w] += dur

    def complete(w, now, lo, hi):
        """[lo, hi) (a leaf, or a join) finished on worker w at ``now``; returns True if w has more."""
        nonlocal finished_at
        if (lo, hi) == (0, n):
            finished_at = now
            return True
        parent = _parent(lo, hi, n)
        done_children[parent] = done_children.get(parent, 0) + 1
        if done_children[parent] == 2:
            busy[w] += dag.join_s
            heapq.heappush(events, (now + dag.join_s, w, ("join_done", parent)))
            return True
        return False

    def find_work(w, now):
        nonlocal attempts
        if deques[w]:
            begin(w, now, *deques[w].pop())
        elif P > 1:
            victim = int(rng.integers(P - 1))
            victim += victim >= w
            attempts += 1
            stealing[w] += s
            heapq.heappush(events, (now + s, w, ("steal", victim)))

    while events:
        now, w, what = heapq.heappop(events)
        if finished_at is not None:
            if what[0] == "steal":          # cut the attempt in progress at the makespan
                stealing[w] -= now - finished_at
            continue
        kind = what[0]
        if kind == "start":
            begin(w, now, *what[1])
        elif kind == "idle":
            find_work(w, now)
        elif kind == "fork_done":
            lo, hi = what[1]
            mid = (lo + hi) // 2
            deques[w].append((mid, hi))
            begin(w, now, lo, mid)
        elif kind in ("leaf_done", "join_done"):
            if not complete(w, now, *what[1]):
                find_work(w, now)
        elif kind == "steal":
            victim = what[1]
            if deques[victim]:
                steals += 1
                begin(w, now, *deques[victim].pop(0))
            else:
                find_work(w, now)
    return StealResult(float(finished_at), busy, stealing, attempts, steals)


def _parent(lo: int, hi: int, n: int) -> tuple[int, int]:
    """The fork whose child is [lo, hi), found by descending from the root [0, n)."""
    a, b = 0, n
    while True:
        mid = (a + b) // 2
        if (lo, hi) in ((a, mid), (mid, b)):
            return a, b
        a, b = (a, mid) if hi <= mid else (mid, b)


@dataclass(frozen=True)
class BalanceComparison:
    """Makespans (s) of each strategy on one list of tasks and P workers, with T₁/P and the
    lower bound max(T₁/P, longest task); stealing: the mean over seeds."""

    round_robin: float
    block: float
    greedy: float
    lpt: float
    stealing: float
    t1_over_p: float
    lower_bound: float


def compare_balancing(times, workers: int, steal_s: float, seeds=range(5)) -> BalanceComparison:
    """Static (round-robin, block), greedy (given order, LPT) and work stealing (a fork-join over
    the tasks with free forks and joins, mean over ``seeds``) on the same tasks."""
    t = _times("compare_balancing", times)
    P = check_int("compare_balancing", "workers", workers, minimum=1)
    dag = fork_join(t)
    ws = [simulate_work_stealing(dag, P, steal_s, seed).makespan for seed in seeds]
    return BalanceComparison(static_assignment(t, P, "round_robin").makespan, static_assignment(t, P, "block").makespan,
                             list_schedule(t, P).makespan, list_schedule(t, P, "lpt").makespan,
                             float(np.mean(ws)), float(t.sum() / P), lower_bound(t, P))


# ---------------------------------------------------------------- threshold rebalancing


@dataclass(frozen=True)
class RebalanceRun:
    """Outcome of `threshold_rebalancing`: total seconds (steps plus rebalancing pauses), the
    steps' seconds alone, the ideal (every step at the mean load), rebalances done, and each
    step's max/mean load (as it ran, after any rebalancing)."""

    total_s: float
    steps_s: float
    ideal_s: float
    rebalances: int
    max_over_mean: np.ndarray = field(repr=False)


def threshold_rebalancing(workers: int, steps: int, threshold: float, rebalance_s: float, sigma: float = 0.1,
                          seed: int = 0) -> RebalanceRun:
    """Synchronous steps over work that drifts: each worker's load (seconds per step, 1 at the
    start) is multiplied every step by a seeded lognormal factor of mean 1 and log-std ``sigma``
    (the mesh refines, the experts get more tokens, ...). Before each step, if the largest load
    exceeds (1 + ``threshold``) × the mean, the (divisible) work is spread evenly again at a cost of
    ``rebalance_s`` seconds. A step takes the largest load. ``threshold`` = math.inf never
    rebalances; 0 rebalances whenever the loads differ. The same seed gives the same drift
    whatever the threshold, so runs compare like for like."""
    fn = "threshold_rebalancing"
    P = check_int(fn, "workers", workers, minimum=1, maximum=MAX_ENUMERATED)
    n = check_int(fn, "steps", steps, minimum=1, maximum=MAX_ENUMERATED)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold >= 0:
        raise ValueError(f"{fn}: threshold must be a number >= 0 (math.inf: never), got {threshold!r}")
    cost = check_real(fn, "rebalance_s", rebalance_s)
    if cost < 0:
        raise ValueError(f"{fn}: rebalance_s must be >= 0 seconds, got {cost}")
    s = check_real(fn, "sigma", sigma)
    rng = np.random.default_rng(check_int(fn, "seed", seed, minimum=0))
    drift = np.exp(rng.normal(-s * s / 2, s, size=(n, P)))
    load = np.ones(P)
    steps_s, ideal, done, ratio = 0.0, 0.0, 0, np.empty(n)
    for k in range(n):
        load = load * drift[k]
        mean = load.mean()
        if load.max() > (1 + threshold) * mean:
            load = np.full(P, mean)
            done += 1
        ratio[k] = load.max() / mean
        steps_s += load.max()
        ideal += mean
    return RebalanceRun(steps_s + done * cost, steps_s, ideal, done, ratio)
