"""Lab 11 topologies: diameter, degree and bisection width computed from the graph equal the closed
forms (ring bisection is 2, not 1), checked by an independent brute force and by networkx."""
import itertools

import pytest

from labkit.cluster import topology as T


def _bisection_by_combinations(topo):
    """Independent brute force: every set of floor(n/2) nodes, counted link by link."""
    n = topo.n
    return min(T.cut_size(topo, side) for side in itertools.combinations(range(n), n // 2))


SMALL = [T.ring(n) for n in range(2, 10)] + [T.torus2d(r, c) for r, c in ((2, 2), (2, 3), (3, 3), (2, 4), (3, 4))] \
    + [T.hypercube(d) for d in (1, 2, 3)]


@pytest.mark.parametrize("topo", SMALL, ids=lambda t: f"{t.kind}{dict(t.params)}")
def test_numpy_bisection_equals_plain_enumeration(topo):
    assert T.bisection_width(topo) == _bisection_by_combinations(topo)


CLOSED = [T.ring(n) for n in (2, 3, 4, 5, 8, 9, 16)] \
    + [T.torus2d(r, c) for r, c in ((2, 2), (2, 4), (4, 2), (2, 6), (4, 4), (2, 8))] \
    + [T.hypercube(d) for d in (1, 2, 3, 4)] + [T.fat_tree(k) for k in (2, 4)]


@pytest.mark.parametrize("topo", CLOSED, ids=lambda t: f"{t.kind}{dict(t.params)}")
def test_graph_metrics_equal_closed_forms(topo):
    assert T.measure(topo) == T.formulas(topo)


def test_ring_bisection_is_two_not_one():
    for n in (4, 6, 8, 16):
        r = T.ring(n)
        assert T.bisection_width(r) == 2
        assert T.cut_size(r, range(n // 2)) == 2          # the obvious cut crosses the ring twice
        assert all(T.cut_size(r, s) >= 2 for s in itertools.combinations(range(n), n // 2))


def test_torus_bisection_is_twice_the_short_side_not_2_sqrt_n():
    # a non-square torus: cutting across the long dimension cuts 2 links per row of the short one
    assert T.bisection_width(T.torus2d(2, 8)) == 4      # 2*sqrt(16) would say 8
    assert T.bisection_width(T.torus2d(4, 4)) == 8
    with pytest.raises(ValueError, match="formulas: .*even sides"):
        T.formulas(T.torus2d(3, 4))
    assert T.bisection_width(T.torus2d(3, 4)) == 6      # odd side: computed from the graph only


def test_multigraph_convention_at_small_sizes():
    assert T.ring(2).adjacency == ((1, 1), (0, 0))      # two links between the pair
    assert T.degree_range(T.torus2d(2, 2)) == (4, 4)
    assert len(T.hypercube(3).links()) == 12


def test_fat_tree_structure():
    for k in (2, 4, 6):
        t = T.fat_tree(k)
        hosts, half = k ** 3 // 4, k // 2
        assert len(t.hosts) == hosts and t.n == hosts + 5 * k * k // 4
        assert len(t.links()) == 3 * k ** 3 // 4          # host links + edge-agg + agg-core, k³/4 each
        assert T.degree_range(t) == (k, k)                 # identical k-port switches
        assert T.degree_range(t, "host") == (1, 1)
        assert T.diameter(t) == 6 and T.diameter(t, among="switches") == 4
        cores = [u for u in range(t.n) if t.roles[u] == "core"]
        pod_of_agg = {hosts + k * half + p * half + a: p for p in range(k) for a in range(half)}
        for c in cores:                                    # each core switch reaches every pod exactly once
            assert sorted(pod_of_agg[a] for a in t.adjacency[c]) == list(range(k))


def test_fat_tree_bisection_cuts():
    k = 4
    t = T.fat_tree(k)
    n_hosts = len(t.hosts)
    # cutting the hosts' own links of half the hosts: n/2 links
    assert T.cut_size(t, range(n_hosts // 2)) == n_hosts // 2
    # splitting by pods (hosts, edge and aggregation switches of pods 0..k/2-1): the aggregation-core
    # links of those pods, (k/2)·(k/2)·(k/2) = k³/8 = n/2
    pods = {u for u in range(t.n) if t.roles[u] != "core" and _pod(t, u, k) < k // 2}
    assert T.cut_size(t, pods) == k ** 3 // 8
    assert T.host_bisection_width(t) == n_hosts // 2     # and no host split does better


def _pod(t, u, k):
    hosts, half = len(t.hosts), k // 2
    if t.roles[u] == "host":
        return u // (half * half)
    return (u - hosts) % (k * half) // half


def test_diameters_agree_with_networkx():
    nx = pytest.importorskip("networkx")
    for topo in CLOSED + [T.torus2d(3, 5), T.fat_tree(6)]:
        g = nx.MultiGraph()
        g.add_nodes_from(range(topo.n))
        g.add_edges_from(topo.links())
        assert T.diameter(topo, among="all") == nx.diameter(g)
        lengths = dict(nx.all_pairs_shortest_path_length(g))
        assert T.diameter(topo) == max(lengths[a][b] for a in topo.hosts for b in topo.hosts)


def test_bad_arguments():
    with pytest.raises(ValueError, match="ring: n"):
        T.ring(1)
    with pytest.raises(TypeError, match="torus2d: rows"):
        T.torus2d(2.0, 2)
    with pytest.raises(ValueError, match="fat_tree: k must be even"):
        T.fat_tree(3)
    with pytest.raises(ValueError, match="bisection_width: brute force"):
        T.bisection_width(T.ring(40))
    with pytest.raises(ValueError, match="diameter: among"):
        T.diameter(T.ring(4), among="links")
