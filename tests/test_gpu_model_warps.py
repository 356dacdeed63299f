"""labkit.gpu_model.warps: the warp simulator's slot counts equal the divergence closed forms."""
import numpy as np
import pytest

from labkit.gpu_model import warps as W


def test_mod4_branch_runs_both_sides_one_after_the_other():
    run = W.simulate_warp(W.divergent_branch(3, 5, period=4))
    assert run.issued == 3 + 5                                   # both sides taken: a + b slots
    assert run.labels == ("A",) * 3 + ("B",) * 5                 # then-side first, then the rest
    assert run.active_per_slot == (8,) * 3 + (24,) * 5           # 32/4 lanes take A, 24 take B
    assert run.useful == 8 * 3 + 24 * 5 == sum(run.per_lane)
    assert run.efficiency == pytest.approx((8 * 3 + 24 * 5) / (32 * 8))
    assert run.cost() == W.branch_formula(3, 5, lanes_then=8)
    assert run.alone == 5 and run.issued / run.alone == pytest.approx(8 / 5)


@pytest.mark.parametrize("taken", [True, False])
def test_uniform_branch_costs_one_side(taken):
    prog = [W.If(lambda v: taken, [W.Op("A", 3)], [W.Op("B", 5)])]
    run = W.simulate_warp(prog)
    assert run.issued == (3 if taken else 5) and run.efficiency == 1.0
    assert run.cost() == W.branch_formula(3, 5, 32 if taken else 0)
    # uniform because of the data, not the code: every lane's value is a multiple of 4
    run = W.simulate_warp(W.divergent_branch(3, 5), lane_values=[4 * i for i in range(32)])
    assert run.issued == 3 and run.active_per_slot == (32, 32, 32)


@pytest.mark.parametrize("seed", range(6))
def test_random_branch_matches_formula(seed):
    rng = np.random.default_rng(seed)
    a, b = (int(v) for v in rng.integers(0, 7, 2))
    flags = rng.random(32) < rng.random()
    run = W.simulate_warp([W.If(lambda v: flags[v], [W.Op("A", a)], [W.Op("B", b)])])
    assert run.cost() == W.branch_formula(a, b, int(flags.sum()))
    assert run.useful == int(flags.sum()) * a + int((~flags).sum()) * b


@pytest.mark.parametrize("seed", range(5))
def test_loop_costs_its_slowest_lane(seed):
    trips = [int(t) for t in np.random.default_rng(seed).integers(0, 10, 32)]
    run = W.simulate_warp(W.trip_loop(body_cost=2), lane_values=trips)
    assert run.issued == 2 * max(trips)
    assert run.efficiency == pytest.approx(sum(trips) / (32 * max(trips)))
    assert run.cost() == W.loop_formula(trips, body_cost=2)
    # slot 2k (and 2k+1) is iteration k: the lanes with more than k trips are active
    assert run.active_per_slot[::2] == tuple(sum(t > k for t in trips) for k in range(max(trips)))
    assert run.per_lane == tuple(2 * t for t in trips)


def test_empty_loop_and_nested_control_flow():
    run = W.simulate_warp(W.trip_loop(), lane_values=[0] * 32)
    assert run.issued == 0 and run.efficiency == 1.0 and W.loop_formula([0] * 32).issued == 0
    # for _ in range(lane % 3): if lane even: X(2) else: Y(1)
    prog = [W.Op("pre"), W.Loop(lambda v: v % 3, [W.If(lambda v: v % 2 == 0, [W.Op("X", 2)], [W.Op("Y", 1)])])]
    run = W.simulate_warp(prog)
    iters = max(v % 3 for v in range(32))
    assert run.issued == 1 + iters * (2 + 1)                     # both sides diverge in every iteration
    assert run.per_lane == tuple(1 + (v % 3) * (2 if v % 2 == 0 else 1) for v in range(32))
    assert run.useful == sum(run.per_lane)


def test_divergence_is_per_warp():
    prog = [W.If(lambda t: (t // 32) % 2 == 0, [W.Op("A", 3)], [W.Op("B", 5)])]
    warp_aligned = W.simulate_threads(prog, range(128))
    assert [w.issued for w in warp_aligned.warps] == [3, 5, 3, 5]
    assert warp_aligned.cost().efficiency == 1.0
    odd_even = W.simulate_threads([W.If(lambda t: t % 2 == 0, [W.Op("A", 3)], [W.Op("B", 5)])], range(128))
    assert [w.issued for w in odd_even.warps] == [8] * 4 and odd_even.cost().efficiency == pytest.approx(0.5)
    partial = W.simulate_threads([W.Op("x", 4)], range(40))      # 40 threads: the second warp has 8 lanes
    assert [w.active_per_slot for w in partial.warps] == [(32,) * 4, (8,) * 4]
    assert partial.cost() == W.WarpCost(8, 40 * 4, 40 * 4 / (32 * 8))


def test_pseudocode_and_checks():
    text = W.pseudocode(W.divergent_branch(3, 5))
    assert text.splitlines() == ["if v % 4 == 0:", "    A  # 3 slots", "else:", "    B  # 5 slots"]
    with pytest.raises(ValueError, match="lane_values must have warp_size=32"):
        W.simulate_warp([W.Op("a")], lane_values=range(8))
    with pytest.raises(ValueError, match="trips of lane 0"):
        W.simulate_warp([W.Loop(lambda v: -1, [W.Op("a")])])
    with pytest.raises(ValueError, match="Op: cost"):
        W.Op("a", -1)
    with pytest.raises(TypeError, match="Op: cost"):
        W.Op("a", 1.5)
    with pytest.raises(TypeError, match="If: cond must be callable"):
        W.If(True, [W.Op("a")])
    with pytest.raises(TypeError, match="Op/If/Loop"):
        W.simulate_warp(["A"])
    with pytest.raises(ValueError, match="lanes_then"):
        W.branch_formula(1, 1, 33)
