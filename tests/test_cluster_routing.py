"""labkit.cluster.routing, packing and threshold rebalancing: every closed form of Lab 11
section 7.1-7.2 against the simulation or the graph, and bad inputs as one-line errors."""
import itertools
import math

import numpy as np
import pytest

from labkit.cluster import balance as B
from labkit.cluster import lab as CL
from labkit.cluster import packing as P
from labkit.cluster import routing as R
from labkit.cluster import topology as T


# ---- paths, striping ----------------------------------------------------------------------------
@pytest.mark.parametrize("k", [2, 4, 6])
def test_fat_tree_shortest_paths_count(k):
    t = T.fat_tree(k)
    half = k // 2
    hosts = len(t.hosts)
    assert len(R.shortest_paths(t, 0, 1)) == 1 if half > 1 else True          # same edge switch
    if half > 1:
        assert len(R.shortest_paths(t, 0, half)) == half                       # same pod, other edge
    far = R.shortest_paths(t, 0, hosts - 1)                                      # another pod
    assert len(far) == half ** 2 and len(set(far)) == half ** 2
    assert all(len(p) - 1 == 6 for p in far)


@pytest.mark.parametrize("k", [4, 6])
def test_striping_a_permutation_loads_no_link_above_one(k):
    t = T.fat_tree(k)
    for seed in range(15 if k == 4 else 4):
        flows = R.permutation_flows(t.hosts, seed)
        assert sorted(s for s, _, _ in flows) == sorted(d for _, d, _ in flows) == list(t.hosts)
        loads = R.link_loads(t, flows, "stripe")
        assert max(loads.values()) == pytest.approx(1.0)             # host links carry exactly 1


def test_hashing_collides_and_link_loads_conserve_the_traffic():
    t = T.fat_tree(4)
    flows = R.permutation_flows(t.hosts, 3)
    hops = sum(len(R.shortest_paths(t, s, d)[0]) - 1 for s, d, _ in flows)
    for routing in R.ROUTINGS:
        # every unit crosses as many links as its path has hops, whatever the path
        assert sum(R.link_loads(t, flows, routing, seed=1).values()) == pytest.approx(hops)
    table = CL.striping_table(seeds=range(30))
    row = {r[0]: r for r in table.rows}
    assert row["stripe"][1] == 1.0 and row["hash"][1] > row["balanced"][1] > 1.0


def test_parallel_links_share_the_load():
    two = T.ring(2)                                   # two links between the same pair
    assert R.link_loads(two, [(0, 1, 1.0)]) == {(0, 1): 0.5}


# ---- flits --------------------------------------------------------------------------------------
@pytest.mark.parametrize("r", [0, 1, 3])
def test_flit_simulation_equals_both_closed_forms(r):
    for h, L in itertools.product((1, 2, 3, 7), (1, 2, 5, 33)):
        assert R.simulate_flits(h, L, "store_and_forward", r)["cycles"] == R.saf_cycles(h, L, r) == h * (r + L)
        assert R.simulate_flits(h, L, "wormhole", r)["cycles"] == R.wormhole_cycles(h, L, r) == h * (r + 1) + L - 1


def test_a_blocked_worm_holds_the_links_behind_its_head():
    for j, L in ((4, 16), (6, 3), (1, 8), (0, 5)):
        wh = R.simulate_flits(8, L, "wormhole", 0, blocked_at=j, blocked_cycles=10)
        saf = R.simulate_flits(8, L, "store_and_forward", 0, blocked_at=j, blocked_cycles=10)
        assert wh["cycles"] == R.wormhole_cycles(8, L) + 10 and saf["cycles"] == R.saf_cycles(8, L) + 10
        assert wh["links_held"] == min(j, L - 1) and saf["links_held"] == 0


# ---- dead links ---------------------------------------------------------------------------------
def test_one_dead_link_matches_the_closed_forms():
    cases = [T.ring(n) for n in (4, 6, 8, 12)] + [T.torus2d(r, r) for r in (4,)] + [T.hypercube(d) for d in (2, 3, 4)]
    for t in cases:
        for link in {t.links()[0], t.links()[-1]}:
            dead = R.without_links(t, [link])
            want = R.dead_link_closed_form(t)
            assert T.bisection_width(dead) == want["bisection"], (t.kind, t.params, link)
            if "diameter" in want:
                assert T.diameter(dead) == want["diameter"]
    assert len(R.without_links(T.torus2d(4, 4), [(0, 1)]).links()) == 31
    # mean distance: n²/4 / (n − 1) on a ring of even n, (n + 1)/3 on the line it becomes
    assert R.mean_hops(T.ring(8)) == pytest.approx(16 / 7)
    assert R.mean_hops(R.without_links(T.ring(8), [(0, 7)])) == pytest.approx(3.0)
    row = {r[0]: r for r in CL.dead_link_table().rows}
    assert row["ring(8)"][6] == 2.0 and row["torus 4×4"][5] == 12.5


# ---- packing ------------------------------------------------------------------------------------
def _brute_force_bins(d, c):
    n = len(d)
    for bins in range(1, n + 1):
        for assign in itertools.product(range(bins), repeat=n):
            used = np.zeros((bins, len(c)))
            np.add.at(used, list(assign), d)
            if np.all(used <= np.asarray(c) + 1e-12):
                return bins
    raise AssertionError("unreachable")


def test_branch_and_bound_is_the_optimum_and_ffd_never_beats_it():
    cap = (8, 64, 512)
    for seed in range(25):
        d = P.random_jobs(6, seed, cap)
        opt, assign = P.optimal_bins(d, cap)
        assert opt == _brute_force_bins(d, cap)
        assert P.stranded(d, cap, assign).min() >= 0                     # a valid assignment
        assert P.lower_bound(d, cap) <= opt <= P.nodes_used(P.first_fit_decreasing(d, cap))


def test_ffd_one_dimension_bounds():
    rng = np.random.default_rng(0)
    for _ in range(60):
        d = rng.integers(1, 9, size=10).astype(float)
        opt = P.optimal_bins(d, 10.0)[0]
        ffd = P.nodes_used(P.first_fit_decreasing(d, 10.0))
        assert opt <= ffd <= 11 / 9 * opt + 6 / 9                           # Dósa's tight bound
        divisible = rng.choice([1, 2, 4, 8], size=12).astype(float)        # sizes dividing each other
        assert P.nodes_used(P.first_fit_decreasing(divisible, 8.0)) == P.optimal_bins(divisible, 8.0)[0]


def test_a_second_resource_makes_ffd_miss():
    # with GPU counts that divide a node FFD is optimal; cores and memory add nodes and misses
    table, free = CL.packing_table(seeds=range(40))
    row = {r[0]: r for r in table.rows}
    assert row["GPUs only: FFD"][2] == 0.0 and row["optimum"][1] > row["GPUs only: optimum"][1]
    assert row["first fit"][1] >= row["FFD, largest share"][1] >= row["optimum"][1] >= row["lower bound"][1]
    assert set(free) == {"GPUs", "cores", "memory"} and all(0 < v < 1 for v in free.values())


def test_packing_rejects_bad_jobs():
    with pytest.raises(ValueError, match="does not fit on an empty node"):
        P.first_fit([[9, 1, 1]], (8, 64, 512))
    with pytest.raises(ValueError, match="demands must be"):
        P.first_fit([[1, 2]], (8, 64, 512))
    with pytest.raises(ValueError, match=">= 0"):
        P.optimal_bins([[-1, 1, 1]], (8, 64, 512))
    with pytest.raises(ValueError, match="at most 14 jobs"):
        P.optimal_bins(np.ones((15, 1)), (8,))
    with pytest.raises(ValueError, match="key must be"):
        P.first_fit_decreasing([[1]], (8,), key="area")


# ---- threshold rebalancing ---------------------------------------------------------------------
def test_threshold_rebalancing_bounds_the_imbalance_and_the_extremes():
    for th in (0.05, 0.3, 1.0):
        run = B.threshold_rebalancing(8, 200, th, 0.5, 0.1, seed=2)
        assert run.max_over_mean.max() <= 1 + th + 1e-12
        assert run.steps_s <= (1 + th) * run.ideal_s + 1e-9
        assert run.total_s == pytest.approx(run.steps_s + 0.5 * run.rebalances)
    always = B.threshold_rebalancing(8, 200, 0.0, 0.5, 0.1, seed=2)
    assert always.rebalances == 200 and always.steps_s == pytest.approx(always.ideal_s)
    never = B.threshold_rebalancing(8, 200, math.inf, 0.5, 0.1, seed=2)
    assert never.rebalances == 0 and never.max_over_mean.max() > 2
    table = CL.rebalance_table(steps=200)
    totals = {r[0]: r[4] for r in table.rows}
    best = min(totals, key=totals.get)
    assert best not in ("0", "never")


# ---- errors -------------------------------------------------------------------------------------
def test_bad_inputs_are_one_line_errors():
    t = T.ring(4)
    with pytest.raises(ValueError, match="no link 0-2"):
        R.without_links(t, [(0, 2)])
    with pytest.raises(ValueError, match="cannot be reached"):
        R.shortest_paths(R.without_links(T.ring(2), [(0, 1), (0, 1)]), 0, 1)
    with pytest.raises(ValueError, match="routing must be one of"):
        R.link_loads(t, [(0, 1, 1.0)], "random")
    with pytest.raises(ValueError, match=r"\(src, dst, amount\)"):
        R.link_loads(t, [(0, 1)])
    with pytest.raises(ValueError, match="dst must be an int in 0..3"):
        R.link_loads(t, [(0, 7, 1.0)])
    with pytest.raises(ValueError, match="mode must be"):
        R.simulate_flits(2, 2, "virtual-cut")
    with pytest.raises(ValueError, match="blocked_at must be an int in 0..1"):
        R.simulate_flits(2, 2, blocked_at=2)
    with pytest.raises(ValueError, match="threshold must be"):
        B.threshold_rebalancing(4, 10, -0.1, 0.5)
    with pytest.raises(ValueError, match="rebalance_s must be >= 0"):
        B.threshold_rebalancing(4, 10, 0.1, -1.0)
