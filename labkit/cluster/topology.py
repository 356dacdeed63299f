"""Network topologies as graphs, and their metrics computed from the graph.

    t = torus2d(4, 4)
    measure(t)      # TopologyMetrics(diameter=4, min_degree=4, max_degree=4, bisection=8):
                    # BFS for the diameter, brute force over all splits for the bisection
    formulas(t)     # the same numbers from the closed forms below

A `Topology` is an undirected *multigraph*: ``adjacency[u]`` lists u's neighbours once per
link, so two links between the same pair appear twice. That is what makes the closed forms
hold at small sizes: ring(2) has two links between its nodes (degree 2, bisection 2), and a
torus dimension of size 2 has two links between the pair (one direct, one wrap-around).

Closed forms (n nodes; for the fat tree n counts hosts):

    topology        nodes         diameter (hops)    degree (ports)   bisection (links)
    ring(n)         n             ⌊n/2⌋              2                2   (not 1: any cut crosses a ring twice)
    torus2d(r, c)   r·c           ⌊r/2⌋ + ⌊c/2⌋      4                2·min(r, c)   (r and c even)
    hypercube(d)    2^d           d                  d                2^(d-1) = n/2
    fat_tree(k)     k³/4 hosts    6 host to host     k (every switch) k³/8 = n/2 host links

Which nodes the metrics range over: direct networks (ring, torus, hypercube) have no switches,
every node is a host, and all metrics are over all nodes. The fat tree (Al-Fares, Loukissas,
Vahdat, "A scalable, commodity data center network architecture", SIGCOMM 2008) is indirect:
k pods of k/2 edge and k/2 aggregation switches, (k/2)² core switches, k/2 hosts per edge
switch. Its diameter is the longest host-to-host shortest path (6 hops: host, edge, aggregation,
core, aggregation, edge, host; between switches it is 4, `diameter(t, among="switches")`), its
degree is over switches (all have exactly k ports; hosts have one), and its bisection splits
the *hosts* into two equal halves while switches may sit on either side: the fewest links whose
removal disconnects the halves, minimised over all host splits (a min-cut per split, by
max-flow). "Full bisection bandwidth" means that this is n/2: no split is
worse than cutting the hosts' own links.

Bisection width, exactly: the minimum, over all ways of splitting the nodes into halves of
⌊n/2⌋ and ⌈n/2⌉, of the number of links with one end in each half. `bisection_width` enumerates
all splits (node 0 fixed on one side) with numpy, up to `MAX_BRUTE_FORCE_NODES` nodes.
"""
from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from labkit.checks import check_int

MAX_NODES = 100_000   # ring / torus2d: nodes of a topology graph built here

MAX_BRUTE_FORCE_NODES = 22   # 2^21 candidate splits: ~0.5 s of numpy
MAX_HOST_SPLITS = 200_000    # host-split classes tried by the fat tree's exact bisection


@dataclass(frozen=True)
class Topology:
    """An undirected multigraph of ``n`` nodes.

    kind, params: how it was built (e.g. "torus2d", {"rows": 4, "cols": 4}).
    adjacency: adjacency[u] = the neighbours of u, one entry per link (sorted).
    hosts: the nodes that compute (all nodes for direct networks).
    roles: a word per node: "node" (direct networks), "host", "edge", "aggregation", "core".
    """

    kind: str
    params: tuple
    adjacency: tuple[tuple[int, ...], ...]
    hosts: tuple[int, ...]
    roles: tuple[str, ...]

    @property
    def n(self) -> int:
        """Number of nodes (hosts and switches)."""
        return len(self.adjacency)

    def links(self) -> list[tuple[int, int]]:
        """Every link once, as (u, v) with u < v; a doubled link appears twice."""
        out = []
        for u, nbrs in enumerate(self.adjacency):
            out.extend((u, v) for v in nbrs if u < v)
        return out


@dataclass(frozen=True)
class TopologyMetrics:
    """diameter: hops; min_degree, max_degree: links per node (see the module docstring for
    which nodes); bisection: links cut by the best split into halves."""

    diameter: int
    min_degree: int
    max_degree: int
    bisection: int


def _build(kind: str, params: dict, n: int, links, hosts=None, roles=None) -> Topology:
    adj: list[list[int]] = [[] for _ in range(n)]
    for u, v in links:
        adj[u].append(v)
        adj[v].append(u)
    return Topology(kind, tuple(sorted(params.items())), tuple(tuple(sorted(a)) for a in adj),
                    tuple(range(n)) if hosts is None else tuple(hosts),
                    ("node",) * n if roles is None else tuple(roles))


def ring(n: int) -> Topology:
    """n nodes in a cycle: node i linked to (i + 1) mod n (n >= 2; ring(2) has two links)."""
    n = check_int("ring", "n", n, minimum=2, maximum=MAX_NODES)
    return _build("ring", {"n": n}, n, [(i, (i + 1) % n) for i in range(n)])


def torus2d(rows: int, cols: int) -> Topology:
    """A rows × cols 2-D torus: node (i, j) = i·cols + j, linked to (i, j+1) and (i+1, j), both
    wrapping around (rows, cols >= 2). Every node has 4 links."""
    rows = check_int("torus2d", "rows", rows, minimum=2)
    cols = check_int("torus2d", "cols", cols, minimum=2)
    if rows * cols > MAX_NODES:
        raise ValueError(f"torus2d: rows·cols = {rows * cols} nodes is more than {MAX_NODES}")
    links = []
    for i in range(rows):
        for j in range(cols):
            links.append((i * cols + j, i * cols + (j + 1) % cols))
            links.append((i * cols + j, ((i + 1) % rows) * cols + j))
    return _build("torus2d", {"rows": rows, "cols": cols}, rows * cols, links)


def hypercube(dim: int) -> Topology:
    """2^dim nodes; u and v are linked when their binary labels differ in exactly one bit (dim >= 1)."""
    dim = check_int("hypercube", "dim", dim, minimum=1, maximum=20)
    n = 1 << dim
    return _build("hypercube", {"dim": dim}, n, [(u, u ^ (1 << b)) for u in range(n) for b in range(dim)
                                                  if u < u ^ (1 << b)])


def fat_tree(k: int) -> Topology:
    """The k-ary fat tree of Al-Fares et al. (k even >= 2), built from identical k-port switches.

    Node numbering: hosts first (k³/4 of them; host h sits under edge switch h // (k/2)), then
    edge switches (pod p owns p·k/2 .. p·k/2 + k/2 - 1), then aggregation switches (same
    layout), then the (k/2)² core switches. In each pod every edge switch links to every
    aggregation switch; aggregation switch j of each pod links to core switches
    j·k/2 .. j·k/2 + k/2 - 1 (so each core switch reaches every pod once).
    """
    k = check_int("fat_tree", "k", k, minimum=2, maximum=64)
    if k % 2:
        raise ValueError(f"fat_tree: k must be even, got {k}")
    half = k // 2
    n_hosts, n_edge, n_core = k ** 3 // 4, k * half, half * half
    edge0, agg0, core0 = n_hosts, n_hosts + n_edge, n_hosts + 2 * n_edge
    links = [(h, edge0 + h // half) for h in range(n_hosts)]
    for pod in range(k):
        for e in range(half):
            for a in range(half):
                links.append((edge0 + pod * half + e, agg0 + pod * half + a))
        for a in range(half):
            for c in range(half):
                links.append((agg0 + pod * half + a, core0 + a * half + c))
    roles = ["host"] * n_hosts + ["edge"] * n_edge + ["aggregation"] * n_edge + ["core"] * n_core
    return _build("fat_tree", {"k": k}, core0 + n_core, links, hosts=range(n_hosts), roles=roles)


# ------------------------------------------------------------------ metrics from the graph

def bfs_distances(topo: Topology, source: int) -> list[int]:
    """Hops from ``source`` to every node (breadth-first search); -1 where unreachable."""
    dist = [-1] * topo.n
    dist[source] = 0
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for v in topo.adjacency[u]:
            if dist[v] < 0:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def diameter(topo: Topology, among: str = "hosts") -> int:
    """The longest shortest path, in hops, between two of the hosts (``among="hosts"``), two
    switches (``"switches"``, indirect networks) or any two nodes (``"all"``); BFS from each
    (paths may pass through any node). ValueError if those nodes are not all connected."""
    if among not in ("hosts", "switches", "all"):
        raise ValueError(f"diameter: among must be 'hosts', 'switches' or 'all', got {among!r}")
    targets = {"hosts": list(topo.hosts), "all": list(range(topo.n)),
               "switches": [u for u in range(topo.n) if topo.roles[u] not in ("host", "node")]}[among]
    if not targets:
        raise ValueError(f"diameter: {topo.kind} has no {among}")
    best = 0
    for s in targets:
        d = bfs_distances(topo, s)
        far = max(d[t] for t in targets) if min(d[t] for t in targets) >= 0 else -1
        if far < 0:
            raise ValueError(f"diameter: {topo.kind} is disconnected")
        best = max(best, far)
    return best


def degree_range(topo: Topology, role: str | None = None) -> tuple[int, int]:
    """(min, max) links per node, over nodes of ``role`` (None: over the switches of an indirect
    network, over all nodes of a direct one)."""
    if role is None:
        nodes = [u for u in range(topo.n) if topo.roles[u] != "host"]
    else:
        nodes = [u for u in range(topo.n) if topo.roles[u] == role]
    if not nodes:
        raise ValueError(f"degree_range: {topo.kind} has no nodes with role {role!r}")
    degs = [len(topo.adjacency[u]) for u in nodes]
    return min(degs), max(degs)


def cut_size(topo: Topology, side) -> int:
    """Links with exactly one end in ``side`` (a set of nodes)."""
    side = set(side)
    return sum((u in side) != (v in side) for u, v in topo.links())


def _popcount(x: np.ndarray) -> np.ndarray:
    count = np.zeros_like(x)
    while np.any(x):
        count += x & 1
        x = x >> 1
    return count


def bisection_width(topo: Topology) -> int:
    """Exact bisection width by brute force (see the module docstring for the definition).

    Direct networks (all nodes are hosts, n <= MAX_BRUTE_FORCE_NODES): every split of the nodes
    into halves is tried, node 0 fixed on one side (the mirror split cuts the same links), and
    each split's cut is counted with bit operations on all splits at once.
    Indirect networks (the fat tree): see `host_bisection_width`.
    """
    if len(topo.hosts) != topo.n:
        return host_bisection_width(topo)
    n = topo.n
    if n > MAX_BRUTE_FORCE_NODES:
        raise ValueError(f"bisection_width: brute force is limited to {MAX_BRUTE_FORCE_NODES} nodes, "
                         f"{topo.kind} has {n}; use formulas() for larger sizes")
    half = n // 2
    masks = np.arange(1 << (n - 1), dtype=np.int64) << 1     # node 0 always on side 0
    masks = masks[_popcount(masks) == half]                  # side 1 holds floor(n/2) nodes
    cuts = np.zeros(len(masks), dtype=np.int64)
    for u, v in topo.links():
        cuts += ((masks >> u) ^ (masks >> v)) & 1
    return int(cuts.min())


def _max_flow(cap: dict, s, t) -> int:
    """Edmonds–Karp on a residual-capacity dict {u: {v: c}} (modified in place); returns the flow."""
    flow = 0
    while True:
        parent = {s: None}
        queue = deque([s])
        while queue and t not in parent:
            u = queue.popleft()
            for v, c in cap[u].items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    queue.append(v)
        if t not in parent:
            return flow
        push, v = math.inf, t
        while parent[v] is not None:
            push = min(push, cap[parent[v]][v])
            v = parent[v]
        v = t
        while parent[v] is not None:
            u = parent[v]
            cap[u][v] -= push
            cap[v][u] = cap[v].get(u, 0) + push
            v = u
        flow += push


def host_bisection_width(topo: Topology) -> int:
    """Exact bisection width over the hosts of an indirect network whose hosts have one link each.

    For a split of the hosts into A and B (|A| = ⌊n/2⌋), the fewest links to remove so that no
    path joins A to B, switches free to fall on either side, is a minimum s–t cut (max-flow,
    Edmonds–Karp, unit link capacities). Hosts under the same switch are interchangeable (swapping
    two of them is a symmetry of the graph), so a split is described by how many of each switch's
    hosts are in A; every such count vector is tried, each as one max-flow.
    """
    attach: dict[int, int] = {}
    for h in topo.hosts:
        if len(topo.adjacency[h]) != 1:
            raise ValueError(f"host_bisection_width: host {h} of {topo.kind} has "
                             f"{len(topo.adjacency[h])} links; hosts must have exactly one")
        attach[topo.adjacency[h][0]] = attach.get(topo.adjacency[h][0], 0) + 1
    switches = sorted(attach)
    hosts = set(topo.hosts)
    switch_links = [(u, v) for u, v in topo.links() if u not in hosts and v not in hosts]
    half = len(topo.hosts) // 2
    ranges = [range(attach[s] + 1) for s in switches]
    best, tried = math.inf, 0
    for counts in itertools.product(*ranges):
        if sum(counts) != half:
            continue
        if 2 * half == len(topo.hosts) and 2 * counts[0] > attach[switches[0]]:
            continue    # the mirror image (A and B swapped) of a split that is tried: same cut
        tried += 1
        if tried > MAX_HOST_SPLITS:
            raise ValueError(f"host_bisection_width: more than {MAX_HOST_SPLITS} host splits for {topo.kind}")
        cap: dict = {"s": {}, "t": {}}
        for u, v in switch_links:
            cap.setdefault(u, {})
            cap.setdefault(v, {})
            cap[u][v] = cap[u].get(v, 0) + 1
            cap[v][u] = cap[v].get(u, 0) + 1
        for sw, a in zip(switches, counts):     # host links: a of them from A, the rest to B
            cap.setdefault(sw, {})
            if a:
                cap["s"][sw] = a
                cap[sw]["s"] = 0
            if attach[sw] - a:
                cap[sw]["t"] = attach[sw] - a
                cap["t"][sw] = 0
        best = min(best, _max_flow(cap, "s", "t"))
    return int(best)


def measure(topo: Topology) -> TopologyMetrics:
    """Diameter (BFS, over hosts), degree range (over switches, or all nodes of a direct network)
    and exact bisection width, all computed from the graph."""
    lo, hi = degree_range(topo)
    return TopologyMetrics(diameter(topo), lo, hi, bisection_width(topo))


def formulas(topo: Topology) -> TopologyMetrics:
    """The closed forms of the module docstring for ``topo``'s kind and sizes.

    ValueError for a torus with an odd side: the 2·min(r, c) bisection is stated for even sides
    only (compute odd ones from the graph with `bisection_width`).
    """
    p = dict(topo.params)
    if topo.kind == "ring":
        return TopologyMetrics(p["n"] // 2, 2, 2, 2)
    if topo.kind == "torus2d":
        r, c = p["rows"], p["cols"]
        if r % 2 or c % 2:
            raise ValueError(f"formulas: the torus bisection 2·min(r, c) needs even sides, got {r}×{c}")
        return TopologyMetrics(r // 2 + c // 2, 4, 4, 2 * min(r, c))
    if topo.kind == "hypercube":
        d = p["dim"]
        return TopologyMetrics(d, d, d, 1 << (d - 1))
    if topo.kind == "fat_tree":
        k = p["k"]
        return TopologyMetrics(6, k, k, k ** 3 // 8)
    raise ValueError(f"formulas: no closed form for kind {topo.kind!r}")
