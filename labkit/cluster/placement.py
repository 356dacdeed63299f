"""Placement as graph partitioning: put ranks on nodes so that few bytes cross nodes.

A job's communication graph is a symmetric matrix W (bytes): W[u, v] = bytes ranks u and v
exchange per step. A placement maps each rank to a node; every node holds exactly
``capacity`` ranks (GPUs per node). Its cost is the bytes that cross nodes,

    cross_node_bytes = Σ_{u < v, node(u) ≠ node(v)} W[u, v].

Minimising it is balanced graph partitioning (NP-hard in general). Here:

- `naive_placement`: rank r on node r // capacity (ranks in order);
- `random_placement`: a seeded random balanced placement;
- `kernighan_lin`: pairwise-swap refinement of Kernighan & Lin ("An efficient heuristic
  procedure for partitioning graphs", Bell System Technical Journal, 1970), extended from two
  parts to many by allowing swaps between any two nodes (see its docstring);
- `optimal_placement`: the exact optimum by enumerating every balanced placement (small jobs only).

`grid_graph` builds the graph of a dp × tp × pp training job: ranks in the same tensor-parallel
group exchange the most (activations every layer), ranks in the same data-parallel group
exchange gradients once a step, and neighbouring pipeline stages pass activations at the stage
boundary (little). Collectives are modelled as cliques: each pair in a TP (or DP) group is
charged the given bytes, since the ring order inside a group is chosen after placement.

Numbering ranks tp innermost (then dp, then pp) and filling nodes in order keeps every TP group
inside one node when tp divides the node size G. On every grid in the tests where in addition
dp·tp is a multiple of G or G a multiple of dp·tp, it is optimal too; but it is a rule of
thumb, not a theorem: dp = 3, tp = 2, pp = 2 on 4-GPU nodes gives 22 cross-node bytes against
an optimum of 20.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.checks import MAX_ENUMERATED, check_count, check_int, check_real

ORDERS = ("tp", "dp", "pp")
MAX_OPTIMAL_PLACEMENTS = 2_000_000


def grid_coords(dp: int, tp: int, pp: int, order: str = "tp,dp,pp") -> list[tuple[int, int, int]]:
    """The (d, t, s) coordinate of each rank, rank = position in this list. ``order`` names the
    three axes from innermost (fastest-varying) to outermost; "tp,dp,pp" (Megatron-LM's default
    family: tensor-parallel ranks adjacent, pipeline stages farthest apart) numbers rank
    r = t + tp·(d + dp·s)."""
    dp = check_int("grid_coords", "dp", dp, minimum=1)
    tp = check_int("grid_coords", "tp", tp, minimum=1)
    pp = check_int("grid_coords", "pp", pp, minimum=1)
    check_count("grid_coords", "dp·tp·pp", dp * tp * pp)
    if not isinstance(order, str):
        raise TypeError(f"grid_coords: order must be a string like 'tp,dp,pp', got {type(order).__name__}")
    axes = [a.strip() for a in order.split(",")]
    if sorted(axes) != sorted(ORDERS):
        raise ValueError(f"grid_coords: order must name tp, dp, pp once each (innermost first), got {order!r}")
    size = {"dp": dp, "tp": tp, "pp": pp}
    out = []
    for r in range(dp * tp * pp):
        c, rest = {}, r
        for a in axes:
            rest, c[a] = divmod(rest, size[a])
        out.append((c["dp"], c["tp"], c["pp"]))
    return out


def grid_graph(dp: int, tp: int, pp: int, tp_bytes: float = 8.0, dp_bytes: float = 2.0,
               pp_bytes: float = 1.0, order: str = "tp,dp,pp") -> np.ndarray:
    """Communication matrix (bytes, float64, shape (n, n), n = dp·tp·pp) of a 3-D parallel job.

    W[u, v] += tp_bytes if u, v are in the same TP group (same d and s), += dp_bytes if in the
    same DP group (same t and s), += pp_bytes if they are adjacent pipeline stages (same d, t,
    stages s and s + 1). Ranks are numbered by `grid_coords(dp, tp, pp, order)`.
    """
    for name, v in (("tp_bytes", tp_bytes), ("dp_bytes", dp_bytes), ("pp_bytes", pp_bytes)):
        if check_real("grid_graph", name, v) < 0:
            raise ValueError(f"grid_graph: {name} must be >= 0, got {v}")
    coords = grid_coords(dp, tp, pp, order)
    n = len(coords)
    w = np.zeros((n, n))
    for u in range(n):
        du, tu, su = coords[u]
        for v in range(u + 1, n):
            dv, tv, sv = coords[v]
            b = 0.0
            if du == dv and su == sv:
                b += tp_bytes
            if tu == tv and su == sv:
                b += dp_bytes
            if du == dv and tu == tv and abs(su - sv) == 1:
                b += pp_bytes
            w[u, v] = w[v, u] = b
    return w


def _check_graph(fn: str, w) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"{fn}: the graph must be a square matrix, got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.array_equal(w, w.T):
        raise ValueError(f"{fn}: the graph must be symmetric, finite and >= 0")
    return w


def _check_placement(fn: str, placement, n: int, capacity: int) -> np.ndarray:
    p = np.asarray(placement)
    if p.shape != (n,) or not np.issubdtype(p.dtype, np.integer):
        raise ValueError(f"{fn}: placement must be {n} integer node ids, got {placement!r}")
    counts = np.bincount(p, minlength=n // capacity) if p.min() >= 0 else None
    if counts is None or len(counts) != n // capacity or np.any(counts != capacity):
        raise ValueError(f"{fn}: placement must put exactly {capacity} ranks on each of nodes 0..{n // capacity - 1}")
    return p.astype(np.int64)


def _check_capacity(fn: str, n: int, capacity) -> int:
    capacity = check_int(fn, "capacity", capacity, minimum=1)
    if n % capacity:
        raise ValueError(f"{fn}: {n} ranks do not fill nodes of capacity {capacity} exactly")
    return capacity


def cross_node_bytes(w, placement) -> float:
    """Σ over rank pairs u < v on different nodes of w[u, v] (bytes)."""
    w = np.asarray(w, dtype=np.float64)
    p = np.asarray(placement)
    differ = p[:, None] != p[None, :]
    return float(np.triu(w * differ, 1).sum())


def naive_placement(n: int, capacity: int) -> np.ndarray:
    """Rank r on node r // capacity."""
    n = check_int("naive_placement", "n", n, minimum=1, maximum=MAX_ENUMERATED)
    capacity = _check_capacity("naive_placement", n, capacity)
    return np.arange(n) // capacity


def random_placement(n: int, capacity: int, seed: int) -> np.ndarray:
    """A uniformly random balanced placement (numpy Generator seeded with ``seed``)."""
    n = check_int("random_placement", "n", n, minimum=1, maximum=MAX_ENUMERATED)
    capacity = _check_capacity("random_placement", n, capacity)
    rng = np.random.default_rng(check_int("random_placement", "seed", seed, minimum=0))
    return rng.permutation(np.arange(n) // capacity)


@dataclass(frozen=True)
class KLResult:
    """placement: node of each rank; cost: its cross-node bytes; start_cost: the start's;
    passes: KL passes run (the last one found no improvement); swaps: swaps kept."""

    placement: np.ndarray
    cost: float
    start_cost: float
    passes: int
    swaps: int


def kernighan_lin(w, capacity: int, start=None, max_passes: int = 50) -> KLResult:
    """Kernighan–Lin refinement of a balanced placement (``start``; default `naive_placement`).

    For each rank u and node X let E[u, X] = bytes from u to the ranks on X. Swapping u (on A)
    with v (on B) lowers the cross-node bytes by the gain

        g(u, v) = E[u, B] − E[u, A] + E[v, A] − E[v, B] − 2·w[u, v]

    (w[u, v] stays cut after the swap, but both E terms counted it). One pass: repeatedly make
    the swap of largest gain among ranks not yet moved in this pass — even a negative one — and
    lock both ranks, until no pair is left; then keep the prefix of those swaps whose summed
    gain is largest, if that sum is positive. Passes repeat until one keeps nothing. Ties go to
    the lowest (u, v). The result is never worse than the start (a pass keeps a prefix only when
    its gain is > 0). Each pass is O(n³) with numpy over the n × n gain matrix.
    """
    w = _check_graph("kernighan_lin", w)
    n = w.shape[0]
    capacity = _check_capacity("kernighan_lin", n, capacity)
    max_passes = check_int("kernighan_lin", "max_passes", max_passes, minimum=1)
    part = naive_placement(n, capacity) if start is None else _check_placement("kernighan_lin", start, n, capacity)
    part = part.copy()
    start_cost = cross_node_bytes(w, part)
    k = n // capacity
    passes = kept = 0
    iu = np.arange(n)
    while passes < max_passes:
        passes += 1
        trial = part.copy()
        ext = w @ np.eye(k)[trial]                              # (n, k): E[u, X]
        locked = np.zeros(n, dtype=bool)
        gains, swaps = [], []
        while True:
            own = ext[iu, trial]                                # (n,) E[u, node(u)]
            # gain[u, v] = E[u, node v] − E[u, node u] + E[v, node u] − E[v, node v] − 2 w[u, v]
            gain = ext[:, trial] - own[:, None] + ext[:, trial].T - own[None, :] - 2 * w
            ok = (trial[:, None] != trial[None, :]) & ~locked[:, None] & ~locked[None, :]
            ok &= iu[:, None] < iu[None, :]
            if not ok.any():
                break
            flat = np.where(ok, gain, -np.inf).argmax()
            u, v = divmod(int(flat), n)
            a, b = trial[u], trial[v]
            gains.append(gain[u, v])
            swaps.append((u, v))
            for x, src, dst in ((u, a, b), (v, b, a)):         # move x from src to dst
                ext[:, src] -= w[:, x]
                ext[:, dst] += w[:, x]
                trial[x] = dst
            locked[u] = locked[v] = True
        if not gains:
            break
        prefix = np.cumsum(gains)
        best = int(np.argmax(prefix))
        if prefix[best] <= 1e-12 * max(1.0, float(np.abs(w).sum())):
            break
        for u, v in swaps[:best + 1]:
            part[u], part[v] = part[v], part[u]
        kept += best + 1
    return KLResult(part, cross_node_bytes(w, part), start_cost, passes, kept)


def _balanced_placements(n: int, capacity: int):
    """Every balanced placement once up to renaming the nodes: rank r joins an open node or opens
    the next one (the lowest unassigned rank always opens a new node)."""
    k = n // capacity
    part = [-1] * n
    counts = [0] * k

    def rec(r: int, opened: int):
        if r == n:
            yield list(part)
            return
        for node in range(min(opened + 1, k)):
            if counts[node] < capacity:
                part[r] = node
                counts[node] += 1
                yield from rec(r + 1, max(opened, node + 1))
                counts[node] -= 1
        part[r] = -1

    yield from rec(0, 0)


def optimal_placement(w, capacity: int) -> tuple[np.ndarray, float]:
    """(placement, cost): a minimum cross-node-bytes balanced placement, by enumerating all
    n! / (capacity!^k · k!) of them (the first found in the enumeration order wins ties).
    ValueError above MAX_OPTIMAL_PLACEMENTS."""
    w = _check_graph("optimal_placement", w)
    n = w.shape[0]
    capacity = _check_capacity("optimal_placement", n, capacity)
    k = n // capacity
    from math import factorial
    count = factorial(n) // (factorial(capacity) ** k * factorial(k))
    if count > MAX_OPTIMAL_PLACEMENTS:
        raise ValueError(f"optimal_placement: {count} placements to try, more than {MAX_OPTIMAL_PLACEMENTS}")
    all_p = np.array(list(_balanced_placements(n, capacity)), dtype=np.int64)   # (count, n)
    iu, iv = np.triu_indices(n, 1)
    weights = w[iu, iv]                                                            # (E,)
    costs = np.zeros(len(all_p))
    for start in range(0, len(all_p), 4096):                                       # (chunk, E) at a time
        block = all_p[start:start + 4096]
        costs[start:start + 4096] = (block[:, iu] != block[:, iv]) @ weights
    best = int(np.argmin(costs))
    return all_p[best], float(costs[best])


@dataclass(frozen=True)
class PlacementComparison:
    """Cross-node bytes of each strategy on one graph: naive, random_mean (over ``seeds``),
    kl_from_random_mean (KL started from each of those random placements), kl_from_naive, and
    optimum (None when too many placements to enumerate); total: all bytes in the graph."""

    naive: float
    random_mean: float
    kl_from_random_mean: float
    kl_from_naive: float
    optimum: float | None
    total: float


def compare_placements(w, capacity: int, seeds=range(5)) -> PlacementComparison:
    """Run every strategy of this module on ``w`` (see `PlacementComparison`)."""
    w = _check_graph("compare_placements", w)
    n = w.shape[0]
    capacity = _check_capacity("compare_placements", n, capacity)
    seeds = list(seeds)
    if not seeds:
        raise ValueError("compare_placements: seeds must not be empty")
    rand = [random_placement(n, capacity, s) for s in seeds]
    try:
        optimum = optimal_placement(w, capacity)[1]
    except ValueError:
        optimum = None
    return PlacementComparison(
        naive=cross_node_bytes(w, naive_placement(n, capacity)),
        random_mean=float(np.mean([cross_node_bytes(w, p) for p in rand])),
        kl_from_random_mean=float(np.mean([kernighan_lin(w, capacity, start=p).cost for p in rand])),
        kl_from_naive=kernighan_lin(w, capacity).cost,
        optimum=optimum,
        total=float(np.triu(w, 1).sum()),
    )
