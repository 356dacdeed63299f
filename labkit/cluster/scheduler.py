"""Cluster scheduling and fragmentation: where a job's GPUs come from decides who waits.

A cluster of ``nodes`` machines × ``gpus_per_node`` GPUs receives a stream of jobs (arrival
time in s, GPUs wanted, duration in s). Jobs wait in one FIFO queue and only the head may
start: when it does not fit, everything behind it waits too (head-of-line blocking, no
backfilling). Every policy keeps a job of at most G = gpus_per_node GPUs inside one node (a
small job's tensor-parallel traffic must not cross machines); they differ in which node, and
in how bigger jobs are laid out:

    policy           job of k <= G GPUs                    job of k > G GPUs
    first_fit        lowest-numbered node with k free      free GPUs taken node by node in order
    best_fit         node with the fewest free GPUs >= k   free GPUs taken from the fullest nodes
                     (leaves the fewest stranded there)    first (fills holes)
    topology_aware   as best_fit                           ⌈k/G⌉ completely free nodes, or wait

A job spread over m nodes when m_min = ⌈k/G⌉ would do runs ``1 + span_penalty·(m − m_min)``
times longer (its all-reduces cross more machine boundaries); span_penalty = 0 ignores that.

Measured over [0, makespan] (makespan = last completion; time averages weight each interval
between events by its length):

    utilisation        busy GPU-seconds / (total GPUs · makespan)
    mean_wait_s        mean over jobs of (start − arrival)
    stranded_gpus      time-average of the free GPUs while the head cannot start *although*
                       at least that many GPUs are free in total: idle only because of where
                       they are — the fragmentation
    blocked_free_gpus  time-average of the free GPUs while the head cannot start, for any reason
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from labkit.checks import MAX_ENUMERATED, check_int, check_real, check_sequence

POLICIES = ("first_fit", "best_fit", "topology_aware")
DEFAULT_SIZES = (1, 2, 4, 8, 16, 32)
DEFAULT_WEIGHTS = (0.30, 0.20, 0.20, 0.15, 0.10, 0.05)


@dataclass(frozen=True)
class Job:
    """One job: ``id``, ``arrival`` (s), ``gpus`` wanted, ``duration`` (s, when placed compactly)."""

    id: int
    arrival: float
    gpus: int
    duration: float

    def __post_init__(self):
        check_int("Job", "id", self.id)
        check_int("Job", "gpus", self.gpus, minimum=1)
        for name in ("arrival", "duration"):       # inf or NaN would make the simulation loop or NaN
            value = check_real("Job", name, getattr(self, name))
            if value < 0:
                raise ValueError(f"Job: {name} must be >= 0 seconds, got {value!r}")


def job_stream(n_jobs: int, seed: int, sizes=DEFAULT_SIZES, weights=DEFAULT_WEIGHTS,
               mean_interarrival: float = 60.0, mean_duration: float = 600.0,
               duration_sigma: float = 1.0) -> list[Job]:
    """A seeded stream of jobs: exponential gaps between arrivals (mean ``mean_interarrival`` s),
    sizes drawn from ``sizes`` with probabilities ∝ ``weights``, lognormal durations with mean
    ``mean_duration`` s and log-standard-deviation ``duration_sigma``."""
    n_jobs = check_int("job_stream", "n_jobs", n_jobs, minimum=1, maximum=MAX_ENUMERATED)
    rng = np.random.default_rng(check_int("job_stream", "seed", seed, minimum=0))
    gap = check_real("job_stream", "mean_interarrival", mean_interarrival, positive=True)
    mean = check_real("job_stream", "mean_duration", mean_duration, positive=True)
    sigma = check_real("job_stream", "duration_sigma", duration_sigma)
    sizes = [check_int("job_stream", "sizes[i]", s, minimum=1) for s in check_sequence("job_stream", "sizes", sizes)]
    p = np.asarray(weights, dtype=float)
    if p.shape != (len(sizes),) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"job_stream: weights must be {len(sizes)} non-negative numbers, not all 0")
    arrivals = np.cumsum(rng.exponential(gap, n_jobs))
    arrivals -= arrivals[0]                                   # the first job arrives at t = 0
    picks = rng.choice(len(sizes), size=n_jobs, p=p / p.sum())
    durations = rng.lognormal(math.log(mean) - sigma ** 2 / 2, sigma, n_jobs)   # E = mean
    return [Job(i, float(arrivals[i]), sizes[picks[i]], float(durations[i])) for i in range(n_jobs)]


def place(free: list[int], gpus: int, gpus_per_node: int, policy: str) -> dict[int, int] | None:
    """Where ``policy`` puts a job of ``gpus`` GPUs given ``free`` GPUs per node: {node: GPUs taken},
    or None if it cannot start now. Ties go to the lowest-numbered node. Never takes more than
    a node has free."""
    G = gpus_per_node
    if policy not in POLICIES:
        raise ValueError(f"place: policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if gpus <= G:
        fits = [i for i, f in enumerate(free) if f >= gpus]
        if not fits:
            return None
        node = fits[0] if policy == "first_fit" else min(fits, key=lambda i: (free[i], i))
        return {node: gpus}
    if policy == "topology_aware":
        empty = [i for i, f in enumerate(free) if f == G]
        need = -(-gpus // G)
        if len(empty) < need:
            return None
        out, left = {}, gpus
        for i in empty[:need]:
            out[i] = min(G, left)
            left -= out[i]
        return out
    if sum(free) < gpus:
        return None
    order = range(len(free)) if policy == "first_fit" else sorted(
        (i for i in range(len(free)) if free[i] > 0), key=lambda i: (free[i], i))
    out, left = {}, gpus
    for i in order:
        if left == 0:
            break
        take = min(free[i], left)
        if take:
            out[i] = take
            left -= take
    return out


@dataclass(frozen=True)
class JobRecord:
    """What happened to one job: start, end (s), placement {node: GPUs}, nodes spanned."""

    job: Job
    start: float
    end: float
    placement: dict

    @property
    def wait(self) -> float:
        return self.start - self.job.arrival


@dataclass(frozen=True)
class ClusterResult:
    """Outcome of `simulate_cluster` (see the module docstring for each metric)."""

    policy: str
    nodes: int
    gpus_per_node: int
    records: list = field(repr=False)
    makespan: float
    busy_gpu_seconds: float
    utilisation: float
    mean_wait_s: float
    max_wait_s: float
    stranded_gpus: float
    blocked_free_gpus: float
    mean_span_excess: float


def simulate_cluster(jobs, nodes: int, gpus_per_node: int, policy: str,
                     span_penalty: float = 0.0) -> ClusterResult:
    """Event-driven simulation of a FIFO queue (head-of-line blocking) on the cluster under
    ``policy``. Events at the same time: completions first, then arrivals, then the head of the
    queue starts as long as it fits. Deterministic for a given job list."""
    nodes, G, penalty, jobs = _checked("simulate_cluster", jobs, nodes, gpus_per_node, policy, span_penalty)
    free = [G] * nodes
    queue: deque = deque()
    running: list = []               # heap of (end, job id, placement)
    records: dict[int, JobRecord] = {}
    t, nxt = 0.0, 0
    busy_gs = stranded = blocked = 0.0
    while nxt < len(jobs) or queue or running:
        t_next = min(jobs[nxt].arrival if nxt < len(jobs) else math.inf,
                     running[0][0] if running else math.inf)
        dt = t_next - t
        n_free = sum(free)
        busy_gs += (nodes * G - n_free) * dt
        if queue:
            blocked += n_free * dt
            if n_free >= queue[0].gpus:
                stranded += n_free * dt
        t = t_next
        while running and running[0][0] == t:
            _, _, where = heapq.heappop(running)
            for i, k in where.items():
                free[i] += k
        while nxt < len(jobs) and jobs[nxt].arrival == t:
            queue.append(jobs[nxt])
            nxt += 1
        _start_queued(queue, free, G, policy, penalty, t, records, running)
    return _result(policy, nodes, G, [records[j.id] for j in jobs], busy_gs, stranded, blocked)


def _checked(fn: str, jobs, nodes, gpus_per_node, policy, span_penalty) -> tuple:
    """(nodes, GPUs per node, span penalty, the jobs sorted by arrival), or a one-line error."""
    nodes = check_int(fn, "nodes", nodes, minimum=1)
    G = check_int(fn, "gpus_per_node", gpus_per_node, minimum=1)
    if policy not in POLICIES:
        raise ValueError(f"{fn}: policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    penalty = check_real(fn, "span_penalty", span_penalty)
    if penalty < 0:
        raise ValueError(f"{fn}: span_penalty must be >= 0, got {penalty}")
    jobs = list(jobs) if not isinstance(jobs, (str, bytes)) and hasattr(jobs, "__iter__") else None
    if jobs is None or not all(isinstance(j, Job) for j in jobs):
        raise TypeError(f"{fn}: jobs must be a list of scheduler.Job")
    jobs = sorted(jobs, key=lambda j: (j.arrival, j.id))
    if not jobs:
        raise ValueError(f"{fn}: jobs must not be empty")
    if len({j.id for j in jobs}) != len(jobs):
        raise ValueError(f"{fn}: job ids must be distinct")
    for j in jobs:
        if j.gpus > nodes * G or j.gpus < 1 or j.duration < 0 or j.arrival < 0:
            raise ValueError(f"{fn}: job {j.id} cannot run here ({j.gpus} GPUs, cluster has "
                             f"{nodes * G}; duration and arrival must be >= 0)")
    return nodes, G, penalty, jobs


def _start_queued(queue: deque, free: list[int], G: int, policy: str, penalty: float, t: float,
                  records: dict, running: list) -> None:
    """Start the head of the queue at time ``t`` for as long as it fits (FIFO: head-of-line blocking);
    a job spread over more nodes than it needs runs ``penalty`` longer per extra node."""
    while queue:
        job = queue[0]
        where = place(free, job.gpus, G, policy)
        if where is None:
            break
        queue.popleft()
        for i, k in where.items():
            if k > free[i]:
                raise RuntimeError(f"simulate_cluster: policy {policy} took {k} GPUs on node {i} "
                                   f"with {free[i]} free")
            free[i] -= k
        extra = len(where) - -(-job.gpus // G)
        end = t + job.duration * (1 + penalty * extra)
        records[job.id] = JobRecord(job, t, end, dict(where))
        heapq.heappush(running, (end, job.id, where))


def _result(policy: str, nodes: int, G: int, recs: list, busy_gs: float, stranded: float,
            blocked: float) -> ClusterResult:
    makespan = max((r.end for r in recs), default=0.0)
    waits = [r.wait for r in recs]
    span = [len(r.placement) - -(-r.job.gpus // G) for r in recs]
    denom = makespan if makespan > 0 else 1.0
    return ClusterResult(policy, nodes, G, recs, makespan, busy_gs, busy_gs / (nodes * G * denom),
                         float(np.mean(waits)), float(max(waits)), stranded / denom, blocked / denom,
                         float(np.mean(span)))


def compare_policies(jobs, nodes: int, gpus_per_node: int, span_penalty: float = 0.0) -> dict:
    """{policy: ClusterResult} for every policy on the same jobs."""
    return {p: simulate_cluster(jobs, nodes, gpus_per_node, p, span_penalty) for p in POLICIES}


# ---------------------------------------------------------------- data locality: delay scheduling


def _locality_args(fn: str, nodes: int, replicas: int, free: int, waits: int) -> tuple[int, int, int, int]:
    n = check_int(fn, "nodes", nodes, minimum=1, maximum=MAX_ENUMERATED)
    r = check_int(fn, "replicas", replicas, minimum=1, maximum=n)
    f = check_int(fn, "free", free, minimum=1, maximum=n)
    d = check_int(fn, "waits", waits, minimum=0, maximum=n - f)
    return n, r, f, d


def local_probability(nodes: int, replicas: int, free: int, waits: int = 0) -> float:
    """Delay scheduling (Zaharia et al., EuroSys 2010), in its simplest form: a job whose input has
    ``replicas`` copies on distinct random nodes of ``nodes`` finds ``free`` random nodes free; it
    takes a free node holding a copy if there is one, else waits for up to ``waits`` more nodes to
    be released (each a random busy node, without repeats) and takes the first one holding a copy.
    The probability that it runs beside its data:

        1 − C(N − r, f)/C(N, f) · C(N − f − r, D)/C(N − f, D)

    (no copy among the free nodes, and none among the D released next)."""
    n, r, f, d = _locality_args("local_probability", nodes, replicas, free, waits)
    if f > n - r:                                      # more free nodes than nodes without a copy
        return 1.0
    return 1 - math.comb(n - r, f) / math.comb(n, f) * math.comb(n - f - r, d) / math.comb(n - f, d)


def simulate_locality(nodes: int, replicas: int, free: int, waits: int, trials: int, seed: int) -> dict:
    """Monte Carlo of `local_probability`'s model: per trial, replicas on random distinct nodes, a
    random free set, the busy nodes released in random order. Returns {"local": fraction of trials
    run beside the data, "waited": mean releases waited (0 when a free node held a copy; ``waits``
    when none came)}."""
    n, r, f, d = _locality_args("simulate_locality", nodes, replicas, free, waits)
    trials = check_int("simulate_locality", "trials", trials, minimum=1, maximum=MAX_ENUMERATED)
    rng = np.random.default_rng(check_int("simulate_locality", "seed", seed, minimum=0))
    local, waited = 0, 0
    for _ in range(trials):
        order = rng.permutation(n)                         # the first f are free, then the releases
        copies = set(rng.choice(n, size=r, replace=False).tolist())
        if any(int(u) in copies for u in order[:f]):
            local += 1
            continue
        hit = next((k for k, u in enumerate(order[f:f + d]) if int(u) in copies), None)
        local += hit is not None
        waited += d if hit is None else hit + 1
    return {"local": local / trials, "waited": waited / trials}
