"""Multi-resource bin packing: jobs that need GPUs, CPU cores and memory, on identical nodes.

A job fits a node when, in *every* resource, its demand plus what the node already runs stays
within the node's capacity (vector bin packing). The fewest nodes that hold a set of jobs is
NP-hard to find; schedulers use greedy rules:

    first-fit decreasing (FFD)   jobs sorted by size, largest first (size: the largest share of a
                                 node the job asks for in any resource, or the sum of its shares),
                                 each on the first node it fits, a new node when none

and we compare them with the exact optimum found by branch and bound (`optimal_bins`: jobs
largest first, each tried on every open node and on one new node, a branch cut as soon as it
cannot beat the best found; small cases only). Lower bound: in each resource, the total demand
over a node's capacity, rounded up — ⌈max_r Σ_j d_jr / C_r⌉.

With one resource FFD never uses more than 11/9·OPT + 6/9 nodes (Dósa, 2007; tight). With
several, a node can be full in one resource while another idles — the GPUs taken, the memory
left — and greedy packing strands more (`stranded`: the free share of each resource on the
nodes used, the fragmentation across resources).
"""
from __future__ import annotations

import math

import numpy as np

from labkit.checks import check_int

KEYS = ("max", "sum")
MAX_EXACT_JOBS = 14


def check_jobs(fn: str, demands, capacity) -> tuple[np.ndarray, np.ndarray]:
    """(demands as a (jobs, resources) float array, capacity as a (resources,) array); ValueError
    naming the problem: not a 2-D table, a negative demand, a capacity <= 0, or a job bigger
    than a node in some resource (it fits nowhere)."""
    d = np.asarray(demands, dtype=np.float64)
    c = np.asarray(capacity, dtype=np.float64)
    if d.ndim == 1 and c.ndim == 0:
        d, c = d[:, None], c[None]
    if d.ndim != 2 or c.ndim != 1 or d.shape[1] != c.shape[0] or len(d) == 0:
        raise ValueError(f"{fn}: demands must be (jobs, resources) and capacity (resources,), got "
                         f"{d.shape} and {c.shape}")
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(c))) or np.any(d < 0) or np.any(c <= 0):
        raise ValueError(f"{fn}: demands must be finite and >= 0, capacities finite and > 0")
    too_big = np.nonzero(np.any(d > c, axis=1))[0]
    if len(too_big):
        j = int(too_big[0])
        raise ValueError(f"{fn}: job {j} ({d[j].tolist()}) does not fit on an empty node ({c.tolist()})")
    return d, c


def size_order(demands, capacity, key: str = "max") -> list[int]:
    """Job indices, largest first by ``key`` ("max": the largest share of a node in any resource;
    "sum": the sum of the shares); ties by index."""
    d, c = check_jobs("size_order", demands, capacity)
    if key not in KEYS:
        raise ValueError(f"size_order: key must be one of {', '.join(KEYS)}, got {key!r}")
    share = d / c
    size = share.max(1) if key == "max" else share.sum(1)
    return sorted(range(len(d)), key=lambda j: (-size[j], j))


def first_fit(demands, capacity, order=None) -> list[int]:
    """node[j]: the node job j goes to, jobs taken in ``order`` (default: as given), each on the
    lowest-numbered node where it fits in every resource, a new node when none."""
    d, c = check_jobs("first_fit", demands, capacity)
    order = range(len(d)) if order is None else order
    used: list[np.ndarray] = []
    node = [-1] * len(d)
    for j in order:
        for n, u in enumerate(used):
            if np.all(u + d[j] <= c + 1e-12):
                u += d[j]
                node[j] = n
                break
        else:
            used.append(d[j].copy())
            node[j] = len(used) - 1
    return node


def first_fit_decreasing(demands, capacity, key: str = "max") -> list[int]:
    """`first_fit` with the jobs largest first (`size_order`)."""
    return first_fit(demands, capacity, size_order(demands, capacity, key))


def nodes_used(assignment) -> int:
    return max(assignment) + 1


def lower_bound(demands, capacity) -> int:
    """⌈max over resources of total demand / capacity⌉ (at least 1)."""
    d, c = check_jobs("lower_bound", demands, capacity)
    return max(1, math.ceil(float((d.sum(0) / c).max()) - 1e-9))


def optimal_bins(demands, capacity) -> tuple[int, list[int]]:
    """The fewest nodes that hold every job, and one assignment that achieves it (branch and
    bound, module docstring); at most MAX_EXACT_JOBS jobs."""
    d, c = check_jobs("optimal_bins", demands, capacity)
    if len(d) > MAX_EXACT_JOBS:
        raise ValueError(f"optimal_bins: at most {MAX_EXACT_JOBS} jobs (exponential search), got {len(d)}")
    order = size_order(d, c, "sum")
    best = first_fit(d, c, order)
    best_n, floor = nodes_used(best), lower_bound(d, c)
    node = [-1] * len(d)

    def search(k: int, used: list) -> None:
        nonlocal best, best_n
        if best_n == floor:
            return
        if k == len(order):
            best, best_n = list(node), len(used)
            return
        j = order[k]
        for n, u in enumerate(used):
            if np.all(u + d[j] <= c + 1e-12):
                used[n] = u + d[j]
                node[j] = n
                search(k + 1, used)
                used[n] = u
        if len(used) + 1 < best_n:                      # one new node (any new node is the same)
            node[j] = len(used)
            search(k + 1, used + [d[j].copy()])
        node[j] = -1

    search(0, [])
    return best_n, best


def stranded(demands, capacity, assignment) -> np.ndarray:
    """The free share of each resource over the nodes used (0: fully used, per resource)."""
    d, c = check_jobs("stranded", demands, capacity)
    a = np.asarray(assignment)
    if a.shape != (len(d),) or a.min() < 0:
        raise ValueError(f"stranded: assignment must give a node >= 0 for each of the {len(d)} jobs")
    n = int(a.max()) + 1
    used = np.zeros((n, len(c)))
    np.add.at(used, a, d)
    if np.any(used > c + 1e-9):
        raise ValueError("stranded: the assignment overfills a node")
    return 1 - used.sum(0) / (n * c)


def random_jobs(n: int, seed: int, capacity=(8, 64, 512)) -> np.ndarray:
    """n seeded jobs for nodes of ``capacity`` = (GPUs, CPU cores, GB): GPUs from {1, 2, 4, 8}
    (more small ones), CPU cores and memory each a random share of a node, loosely tied to the
    GPUs (data loaders and host memory per GPU) with some jobs CPU- or memory-heavy."""
    n = check_int("random_jobs", "n", n, minimum=1, maximum=10_000)
    rng = np.random.default_rng(check_int("random_jobs", "seed", seed, minimum=0))
    c = np.asarray(capacity, dtype=np.float64)
    gpus = rng.choice([1, 2, 4, 8], size=n, p=[0.4, 0.3, 0.2, 0.1])
    share = gpus / c[0]
    cpu = np.clip(share * rng.uniform(0.3, 2.0, n), 1 / c[1], 1) * c[1]
    mem = np.clip(share * rng.uniform(0.3, 2.0, n), 1 / c[2], 1) * c[2]
    return np.stack([gpus, np.round(cpu), np.round(mem)], axis=1)
