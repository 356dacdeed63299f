"""Routing on a `labkit.cluster.topology` graph: several paths, a message in flits, a dead link.

**Paths and link loads.** Between two hosts a fat tree has many shortest paths: (k/2)² between
pods, k/2 inside a pod under different edge switches, 1 under the same edge switch. A *flow*
(src, dst, amount) is routed on them by one of three rules:

    hash       ECMP: the whole flow on one shortest path picked by a hash of the flow (here a
               seeded random choice); two flows can land on the same link while others idle
    balanced   link balancing: flows one after another, each on the shortest path whose busiest
               link is least loaded so far (ties: the first path found)
    stripe     multi-path striping: the flow split into equal parts, one on every shortest path

Links are full duplex: the load of direction u→v counts the amounts crossing it, divided by the
number of parallel links between u and v. With unit flows and unit link bandwidth, a transfer in
which every flow moves together finishes after the largest load (the bottleneck link's). A
permutation (every host sends one unit and receives one) striped over a k-ary fat tree loads
no link above 1 — full bisection bandwidth: each edge switch splits its ≤ k/2 outgoing units
over k/2 uplinks, each aggregation switch its share over k/2 core links.

**Store-and-forward against worm-hole routing** (`simulate_flits`, a cycle-by-cycle simulation of
one message of L flits over h links, one flit per link per cycle, r cycles for the router to
route the head at each hop):

    store-and-forward   a node forwards only once the whole message is in   h·(r + L)
    worm-hole           the head is routed, the body follows it in a         h·(r + 1) + L − 1
                        pipeline, each router holding one flit of buffer

Worm-hole routing makes the latency nearly independent of the hops for long messages; the price
is that a blocked head holds every link its worm spans (`simulate_flits(blocked_at=...)`).

**A dead link** (`without_links`): the graph with links removed; BFS re-routes around it, and
`topology.diameter` / `topology.bisection_width` measure what the loss costs. A ring of n (even)
loses half its bisection (2 → 1) and its diameter grows from n/2 to n − 1 (it is a line); an r×r
torus (r even) loses one link of its 2r; a d-cube one of its 2^(d−1).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from labkit.checks import check_int, check_real, check_sequence
from labkit.cluster.topology import Topology, _build, bfs_distances

ROUTINGS = ("hash", "balanced", "stripe")
MAX_PATHS = 10_000


def _node(fn: str, topo: Topology, name: str, u) -> int:
    return check_int(fn, name, u, minimum=0, maximum=topo.n - 1)


def shortest_paths(topo: Topology, src: int, dst: int) -> list[tuple[int, ...]]:
    """Every shortest path from ``src`` to ``dst`` as a tuple of nodes (BFS distances, then every
    way down them; parallel links give one path, not several). ValueError if ``dst`` is
    unreachable or there are more than MAX_PATHS."""
    fn = "shortest_paths"
    src, dst = _node(fn, topo, "src", src), _node(fn, topo, "dst", dst)
    to_dst = bfs_distances(topo, dst)
    if to_dst[src] < 0:
        raise ValueError(f"{fn}: node {dst} cannot be reached from {src}")
    paths, stack = [], [(src,)]
    while stack:
        path = stack.pop()
        u = path[-1]
        if u == dst:
            paths.append(path)
            if len(paths) > MAX_PATHS:
                raise ValueError(f"{fn}: more than {MAX_PATHS} shortest paths from {src} to {dst}")
            continue
        for v in sorted(set(topo.adjacency[u]), reverse=True):
            if to_dst[v] == to_dst[u] - 1:
                stack.append(path + (v,))
    return paths


def _links_of(path) -> list[tuple[int, int]]:
    return list(zip(path[:-1], path[1:]))


def link_loads(topo: Topology, flows, routing: str = "stripe", seed: int = 0) -> dict:
    """{(u, v): load} for every link direction a flow crosses, with ``flows`` a list of
    (src, dst, amount) routed by ``routing`` (module docstring); a load is the amount over the
    direction divided by the number of parallel links between u and v. ``seed`` drives "hash"."""
    fn = "link_loads"
    if routing not in ROUTINGS:
        raise ValueError(f"{fn}: routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
    rng = np.random.default_rng(check_int(fn, "seed", seed, minimum=0))
    parallel = Counter((u, v) for u in range(topo.n) for v in topo.adjacency[u])
    load: dict = {}

    def add(path, amount):
        for u, v in _links_of(path):
            load[(u, v)] = load.get((u, v), 0.0) + amount / parallel[(u, v)]

    for flow in check_sequence(fn, "flows", flows, minimum=0):
        if len(flow) != 3:
            raise ValueError(f"{fn}: each flow must be (src, dst, amount), got {flow!r}")
        src, dst = _node(fn, topo, "src", flow[0]), _node(fn, topo, "dst", flow[1])
        amount = check_real(fn, "amount", flow[2])
        if amount < 0:
            raise ValueError(f"{fn}: a flow's amount must be >= 0, got {amount}")
        if src == dst:
            continue
        paths = shortest_paths(topo, src, dst)
        if routing == "stripe":
            for p in paths:
                add(p, amount / len(paths))
        elif routing == "hash":
            add(paths[int(rng.integers(len(paths)))], amount)
        else:
            busiest = [max(load.get(l, 0.0) for l in _links_of(p)) for p in paths]
            add(paths[int(np.argmin(busiest))], amount)
    return load


def permutation_flows(hosts, seed: int, amount: float = 1.0) -> list[tuple[int, int, float]]:
    """A seeded random permutation traffic: every host sends ``amount`` to one other host and
    receives ``amount`` from one (a derangement: nobody sends to itself)."""
    hosts = list(check_sequence("permutation_flows", "hosts", hosts, minimum=2))
    rng = np.random.default_rng(check_int("permutation_flows", "seed", seed, minimum=0))
    while True:
        order = rng.permutation(len(hosts))
        if not np.any(order == np.arange(len(hosts))):
            return [(hosts[i], hosts[int(j)], amount) for i, j in enumerate(order)]


def all_to_all_flows(hosts, amount: float = 1.0) -> list[tuple[int, int, float]]:
    """Every host sends ``amount`` to every other host."""
    hosts = list(check_sequence("all_to_all_flows", "hosts", hosts, minimum=2))
    return [(a, b, amount) for a in hosts for b in hosts if a != b]


# ---------------------------------------------------------------- flits

def saf_cycles(hops: int, flits: int, router_cycles: int = 0) -> int:
    """Store-and-forward latency in cycles: h·(r + L)."""
    return hops * (router_cycles + flits)


def wormhole_cycles(hops: int, flits: int, router_cycles: int = 0) -> int:
    """Worm-hole (and cut-through) latency in cycles, no contention: h·(r + 1) + L − 1."""
    return hops * (router_cycles + 1) + flits - 1


def simulate_flits(hops: int, flits: int, mode: str = "wormhole", router_cycles: int = 0,
                   blocked_at: int | None = None, blocked_cycles: int = 0) -> dict:
    """One message of ``flits`` flits crossing ``hops`` links, cycle by cycle. Node 0 (the source)
    holds the message, node ``hops`` (the destination) takes a flit every cycle. Each cycle a link
    carries at most one flit, and flits keep their order. A node's router needs ``router_cycles``
    before flits may leave it, counted from the head's arrival (worm-hole: the body follows the
    head) or the tail's (store-and-forward: the whole message is received, then forwarded).
    Worm-hole routers buffer one flit: a flit enters a node only if that buffer is empty (or is
    emptied this cycle: flits move head first). ``blocked_at`` = j: the link out of node j is
    busy (another message holds it) for ``blocked_cycles`` more cycles once node j is ready.
    Returns {"cycles": cycles until the tail arrives, "links_held": links spanned from the tail
    to the head when the blocked link frees (None without ``blocked_at``)}."""
    fn = "simulate_flits"
    h = check_int(fn, "hops", hops, minimum=1, maximum=10_000)
    L = check_int(fn, "flits", flits, minimum=1, maximum=100_000)
    r = check_int(fn, "router_cycles", router_cycles, minimum=0)
    if mode not in ("wormhole", "store_and_forward"):
        raise ValueError(f"{fn}: mode must be 'wormhole' or 'store_and_forward', got {mode!r}")
    block = check_int(fn, "blocked_cycles", blocked_cycles, minimum=0)
    if blocked_at is not None:
        blocked_at = check_int(fn, "blocked_at", blocked_at, minimum=0, maximum=h - 1)
    saf = mode == "store_and_forward"
    pos = [0] * L                                    # node of each flit; flit 0 is the head
    ready = {}                                       # node -> first cycle at which a flit may leave

    def arrive(node: int, cycle: int) -> None:
        ready[node] = cycle + r + (block if node == blocked_at else 0)

    arrive(0, 0)
    cycle, held, limit = 0, None, 2 * (h * (r + L + 1) + block) + 10
    while pos[-1] < h:
        cycle += 1
        used = set()
        for i in range(L):                           # head first
            p = pos[i]
            if p == h or p not in ready or cycle <= ready[p] or p in used or (i > 0 and pos[i - 1] == p):
                continue                             # not ready, link busy, or the flit ahead goes first
            if i > 0 and pos[i - 1] == p + 1 and p + 1 < h and not saf:
                continue                             # the one-flit buffer ahead is taken
            pos[i] = p + 1
            used.add(p)
            if p + 1 < h and ((not saf and i == 0) or (saf and i == L - 1)):
                arrive(p + 1, cycle)
        if blocked_at is not None and held is None and cycle == ready.get(blocked_at):
            held = pos[0] - pos[-1]
        if cycle > limit:
            raise RuntimeError(f"{fn}: no progress after {cycle} cycles (a bug)")
    return {"cycles": cycle, "links_held": held}


# ---------------------------------------------------------------- dead links

def without_links(topo: Topology, dead) -> Topology:
    """``topo`` with one instance of each link (u, v) in ``dead`` removed (either order);
    ValueError naming a link that is not there."""
    fn = "without_links"
    links = Counter(tuple(sorted(l)) for l in topo.links())
    for link in check_sequence(fn, "dead", dead, minimum=0):
        if len(link) != 2:
            raise ValueError(f"{fn}: each dead link must be a pair of nodes, got {link!r}")
        key = tuple(sorted((_node(fn, topo, "u", link[0]), _node(fn, topo, "v", link[1]))))
        if links[key] == 0:
            raise ValueError(f"{fn}: there is no link {key[0]}-{key[1]} in {topo.kind}")
        links[key] -= 1
    kept = [l for l, c in links.items() for _ in range(c)]
    return _build(topo.kind, dict(topo.params), topo.n, kept, hosts=topo.hosts, roles=topo.roles)


def dead_link_closed_form(topo: Topology) -> dict:
    """Bisection (links) and diameter (hops) after one dead link, from the closed forms of the
    module docstring: ring(n) and r×r tori and hypercubes, n or r even."""
    p = dict(topo.params)
    if topo.kind == "ring" and p["n"] % 2 == 0 and p["n"] > 2:
        return {"bisection": 1, "diameter": p["n"] - 1}
    if topo.kind == "torus2d" and p["rows"] == p["cols"] and p["rows"] % 2 == 0:
        return {"bisection": 2 * p["rows"] - 1}
    if topo.kind == "hypercube":
        return {"bisection": (1 << (p["dim"] - 1)) - 1}
    raise ValueError(f"dead_link_closed_form: no closed form for {topo.kind} {p}")


def mean_hops(topo: Topology) -> float:
    """Mean shortest-path hops over ordered pairs of distinct hosts."""
    hosts = list(topo.hosts)
    total = 0
    for s in hosts:
        d = bfs_distances(topo, s)
        if min(d[t] for t in hosts) < 0:
            raise ValueError(f"mean_hops: {topo.kind} is disconnected")
        total += sum(d[t] for t in hosts)
    return total / (len(hosts) * (len(hosts) - 1))


