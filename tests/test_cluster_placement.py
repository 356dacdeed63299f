"""Lab 11 placement: cross-node bytes on a hand example, the grid graph's edges, Kernighan–Lin never
worse than its start and optimal (or close) on small instances, and when tp-innermost is optimal."""
import itertools

import numpy as np
import pytest

from labkit.cluster import placement as PL


def _random_graph(n, seed, high=10):
    rng = np.random.default_rng(seed)
    w = np.triu(rng.integers(0, high, (n, n)).astype(float), 1)
    return w + w.T


def test_cross_node_bytes_by_hand():
    w = np.array([[0, 5, 1, 2],
                  [5, 0, 3, 0],
                  [1, 3, 0, 7],
                  [2, 0, 7, 0]], dtype=float)
    assert PL.cross_node_bytes(w, [0, 0, 1, 1]) == 1 + 2 + 3 + 0
    assert PL.cross_node_bytes(w, [0, 1, 0, 1]) == 5 + 2 + 3 + 7
    assert PL.cross_node_bytes(w, [0, 0, 0, 0]) == 0


def test_grid_graph_edges_by_hand():
    # dp=1, tp=2, pp=2, order tp,dp,pp: rank = t + 2·s
    w = PL.grid_graph(1, 2, 2, tp_bytes=8, dp_bytes=2, pp_bytes=1)
    assert w.tolist() == [[0, 8, 1, 0], [8, 0, 0, 1], [1, 0, 0, 8], [0, 1, 8, 0]]
    # dp=2 only: the two replicas exchange dp_bytes
    assert PL.grid_graph(2, 1, 1).tolist() == [[0, 2], [2, 0]]
    assert PL.grid_coords(2, 2, 2, "tp,dp,pp")[:4] == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    assert PL.grid_coords(2, 2, 2, "dp,tp,pp")[:4] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    # total bytes: tp pairs + dp pairs + pp neighbours
    dp, tp, pp = 3, 2, 4
    w = PL.grid_graph(dp, tp, pp)
    assert np.triu(w, 1).sum() == dp * pp * (tp * (tp - 1) // 2) * 8 + tp * pp * (dp * (dp - 1) // 2) * 2 \
        + dp * tp * (pp - 1) * 1


def test_optimal_placement_against_plain_enumeration():
    w = _random_graph(6, seed=3)
    best = min(PL.cross_node_bytes(w, p) for p in set(itertools.permutations([0, 0, 0, 1, 1, 1])))
    assert PL.optimal_placement(w, 3)[1] == best
    placement, cost = PL.optimal_placement(w, 2)
    assert sorted(np.bincount(placement)) == [2, 2, 2] and cost == PL.cross_node_bytes(w, placement)


def test_kl_never_worse_than_its_start():
    for seed in range(12):
        n, cap = (8, 4) if seed % 2 else (12, 3)
        w = _random_graph(n, seed)
        start = PL.random_placement(n, cap, seed)
        r = PL.kernighan_lin(w, cap, start=start)
        assert r.start_cost == PL.cross_node_bytes(w, start)
        assert r.cost <= r.start_cost
        assert r.cost == PL.cross_node_bytes(w, r.placement)
        assert np.all(np.bincount(r.placement) == cap)


def test_kl_finds_the_optimum_on_small_instances():
    # 8 ranks on 2 nodes of 4: KL from the naive start is optimal on each of these 12 random graphs
    for seed in range(12):
        w = _random_graph(8, seed)
        assert PL.kernighan_lin(w, 4).cost == PL.optimal_placement(w, 4)[1]
    # 12 ranks on 3 nodes of 4: the best of KL from the naive start and 4 random starts is optimal
    # on these 8 graphs; a single KL run is always within 5 % (observed worst: 2.9 % over 20 seeds)
    for seed in range(8):
        w = _random_graph(12, seed)
        opt = PL.optimal_placement(w, 4)[1]
        single = PL.kernighan_lin(w, 4).cost
        runs = [single] + [PL.kernighan_lin(w, 4, start=PL.random_placement(12, 4, s)).cost for s in range(4)]
        assert min(runs) == opt
        assert single <= 1.05 * opt


def test_kl_repairs_a_bad_order():
    # dp innermost on 4-GPU nodes puts every tensor-parallel group across nodes
    w = PL.grid_graph(2, 4, 2, order="dp,tp,pp")
    naive = PL.cross_node_bytes(w, PL.naive_placement(16, 4))
    r = PL.kernighan_lin(w, 4)
    assert naive == 136.0 and r.cost == 24.0 and r.swaps > 0
    assert PL.cross_node_bytes(PL.grid_graph(2, 4, 2), PL.naive_placement(16, 4)) == 24.0


@pytest.mark.parametrize("dp,tp,pp,cap", [(2, 2, 2, 4), (2, 2, 3, 4), (4, 2, 2, 8), (2, 3, 2, 6),
                                          (3, 2, 2, 6), (1, 4, 3, 4), (1, 2, 6, 4), (2, 2, 2, 2)])
def test_tp_innermost_order_is_optimal_when_nodes_hold_whole_groups(dp, tp, pp, cap):
    w = PL.grid_graph(dp, tp, pp)                     # order "tp,dp,pp", bytes tp 8 > dp 2 > pp 1
    naive = PL.naive_placement(dp * tp * pp, cap)
    assert PL.cross_node_bytes(w, naive) == PL.optimal_placement(w, cap)[1]
    # and no tensor-parallel pair is split: tp divides the node size
    coords = PL.grid_coords(dp, tp, pp)
    for u, v in itertools.combinations(range(len(coords)), 2):
        if coords[u][0] == coords[v][0] and coords[u][2] == coords[v][2]:
            assert naive[u] == naive[v]


def test_tp_innermost_is_not_always_optimal():
    # tp = 2 divides the node (4) but dp = 3 does not pack: 22 bytes cross, the optimum is 20
    w = PL.grid_graph(3, 2, 2)
    assert PL.cross_node_bytes(w, PL.naive_placement(12, 4)) == 22.0
    assert PL.optimal_placement(w, 4)[1] == 20.0
    # tp = 3 on 4-GPU nodes: groups straddle nodes whatever the order
    w = PL.grid_graph(2, 3, 2)
    assert PL.cross_node_bytes(w, PL.naive_placement(12, 4)) == 46.0
    assert PL.optimal_placement(w, 4)[1] == 39.0


def test_compare_placements_ordering():
    c = PL.compare_placements(PL.grid_graph(2, 2, 3, order="pp,tp,dp"), 4, seeds=range(4))
    assert c.optimum == 8.0 and c.kl_from_naive == 8.0 and c.naive == 46.0
    assert c.optimum <= c.kl_from_random_mean <= c.random_mean <= c.total


def test_random_placement_is_seeded_and_balanced():
    a, b = PL.random_placement(12, 4, 7), PL.random_placement(12, 4, 7)
    assert np.array_equal(a, b) and np.all(np.bincount(a) == 4)
    assert not np.array_equal(a, PL.random_placement(12, 4, 8))


def test_bad_arguments():
    with pytest.raises(ValueError, match="naive_placement: 10 ranks do not fill"):
        PL.naive_placement(10, 4)
    with pytest.raises(ValueError, match="kernighan_lin: the graph must be symmetric"):
        PL.kernighan_lin(np.array([[0, 1], [2, 0]]), 1)
    with pytest.raises(ValueError, match="kernighan_lin: placement must put exactly 2"):
        PL.kernighan_lin(np.zeros((4, 4)), 2, start=[0, 0, 0, 1])
    with pytest.raises(ValueError, match="grid_coords: order"):
        PL.grid_coords(2, 2, 2, "tp,dp")
    with pytest.raises(ValueError, match="optimal_placement: .* placements to try"):
        PL.optimal_placement(np.zeros((24, 24)), 4)
