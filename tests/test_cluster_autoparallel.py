"""Lab 11 auto-parallel: pipeline stage partitioning (the DP against brute force, the tie rule, the
contract's errors), measured GPT layer costs, and per-layer sharding by DP against all 3ⁿ choices,
recovering Megatron's column-then-row MLP."""
import itertools
import math
import random

import pytest

from labkit.cluster import autoparallel as A
from labkit.collectives.alpha_beta import predict_time

# ---------------------------------------------------------------- stage partitioning


def test_partition_by_hand():
    assert A.partition_stages([1, 2, 3, 4, 5], 2) == ([3, 2], 9.0)     # [1,2,3] = 6 | [4,5] = 9
    assert A.partition_stages([3, 1, 1, 1, 3], 3) == ([1, 3, 1], 3.0)
    assert A.partition_stages([5, 1, 1, 1], 4) == ([1, 1, 1, 1], 5.0)
    assert A.partition_stages([2.5], 1) == ([1], 2.5)
    assert A.partition_stages([1, 1, 9, 1, 1], 2) == ([3, 2], 11.0)


def test_ties_prefer_long_early_stages():
    assert A.partition_stages([1] * 5, 2) == ([3, 2], 3.0)             # not [2, 3]
    assert A.partition_stages([1] * 6, 4) == ([2, 2, 1, 1], 2.0)
    assert A.partition_stages([2, 1, 1, 2], 2) == ([2, 2], 3.0)
    assert A.partition_stages([1, 1, 1, 1, 4], 3) == ([3, 1, 1], 4.0)


def test_partition_against_brute_force():
    rng = random.Random(0)
    pool = [1, 2, 3, 0.5, 0.25, 0.1, 0.2, 0.3]                          # many ties, some inexact sums
    for _ in range(400):
        n = rng.randint(1, 9)
        p = rng.randint(1, n)
        costs = [rng.choice(pool + [rng.random() + 1e-3]) for _ in range(n)]
        got = A.partition_stages(costs, p)
        assert got == A.brute_force_stages(costs, p), (costs, p)
        sizes, bottleneck = got
        assert len(sizes) == p and sum(sizes) == n and min(sizes) >= 1
        bounds = list(itertools.accumulate([0] + sizes))
        assert bottleneck == max(math.fsum(costs[bounds[k]:bounds[k + 1]]) for k in range(p))


def test_bisection_gives_the_plain_dps_answer_on_long_chains():
    # labkit's partition_stages finds each min over the first stage's end by bisection; the plain
    # O(p·n²) DP of solutions/lab11_parallel3d.py scans every end. Same sizes, same bottleneck, on
    # chains too long for brute force (ties included: many equal layers, as in a transformer)
    from solutions.lab11_parallel3d import partition_stages as plain
    rng = random.Random(1)
    for _ in range(60):
        n = rng.randint(10, 70)
        p = rng.randint(1, n)
        kind = rng.random()
        if kind < 0.4:                                   # a transformer: equal layers, heavier ends
            costs = [1.0 + rng.random()] + [1.0] * (n - 2) + [1.0 + 2 * rng.random()]
        else:
            costs = [rng.choice([1, 2, 3, 0.5, 0.1, 0.2, 0.3, rng.random() + 1e-3]) for _ in range(n)]
        assert A.partition_stages(costs, p) == plain(costs, p), (costs, p)


def test_fsum_makes_stage_costs_order_free():
    # 0.1 + 0.2 + 0.3 summed left to right is 0.6000000000000001; fsum gives 0.6
    sizes, bottleneck = A.partition_stages([0.1, 0.2, 0.3, 0.6], 2)
    assert (sizes, bottleneck) == ([3, 1], 0.6)


def test_plan_stages_spells_out_the_partition():
    plan = A.plan_stages(iter([4, 1, 1, 1, 1, 4]), 3)          # any iterable, read once
    assert plan.sizes == [1, 4, 1] and plan.bounds == [0, 1, 5, 6]
    assert plan.stage_costs == [4.0, 4.0, 4.0] and plan.bottleneck == 4.0 and plan.balance == 1.0


def test_partition_contract_errors():
    with pytest.raises(ValueError, match=r"partition_stages: stages \(4\) must be <= len\(costs\) \(3\)"):
        A.partition_stages([1, 2, 3], 4)
    with pytest.raises(ValueError, match="partition_stages: stages must be an int >= 1"):
        A.partition_stages([1, 2, 3], 0)
    with pytest.raises(TypeError, match="partition_stages: stages must be an int"):
        A.partition_stages([1, 2, 3], 2.0)
    with pytest.raises(ValueError, match=r"partition_stages: costs\[1\] must be a finite positive"):
        A.partition_stages([1, 0, 3], 2)
    with pytest.raises(ValueError, match=r"partition_stages: costs\[0\]"):
        A.partition_stages([math.nan], 1)
    with pytest.raises(TypeError, match=r"partition_stages: costs\[0\] must be a real number"):
        A.partition_stages([True, 1], 1)
    with pytest.raises(ValueError, match="partition_stages: costs must not be empty"):
        A.partition_stages([], 1)


def test_measured_gpt_layer_costs_partition():
    from labkit.model import GPTConfig

    cfg = GPTConfig(layers=3, hidden=32, heads=2, seq_len=16, vocab=64)
    lc = A.measure_layer_costs(cfg, batch_size=2, repeats=2)
    assert lc.names == ["embed", "block0", "block1", "block2", "head"]
    assert all(s > 0 for s in lc.seconds)
    sizes, bottleneck = A.partition_stages(lc.seconds, 2)
    assert sum(sizes) == 5 and bottleneck >= max(lc.seconds) and bottleneck >= sum(lc.seconds) / 2


# ---------------------------------------------------------------- sharding a linear chain

def _dyadic_problem(dims, devices, training=True):
    # α, β, flop rate powers of two and dims powers of two: every term is a short dyadic number,
    # so all sums are exact and DP and brute force compare with ==
    return A.ShardingProblem(dims=dims, tokens=1024, devices=devices, alpha=2.0 ** -17, beta=2.0 ** -33,
                             flops_per_s=2.0 ** 42, bytes_per_element=2, training=training)


def test_sharding_dp_against_brute_force():
    rng = random.Random(1)
    for _ in range(40):
        n = rng.randint(1, 6)
        dims = tuple(2 ** rng.randint(5, 12) for _ in range(n + 1))
        prob = _dyadic_problem(dims, 2 ** rng.randint(1, 3), training=rng.random() < 0.7)
        dp, bf = A.plan_sharding(prob), A.brute_force_sharding(prob)
        assert dp.choices == bf.choices and dp.cost_s == bf.cost_s, dims
        assert dp.cost_s == pytest.approx(dp.comm_s + dp.compute_s, rel=1e-12)


def test_megatron_mlp_is_column_then_row():
    h, tokens, t = 1024, 4096, 4
    alpha, beta, flops = 5e-6, 1 / 100e9, 100e12
    for training in (False, True):
        prob = A.ShardingProblem((h, 4 * h, h), tokens, t, alpha, beta, flops, 2, training)
        plan = A.plan_sharding(prob)
        assert plan.choices == ("column", "row") == A.megatron_rule(2)
        ops = [op for _, op, _, _ in plan.collectives if op != "compute"]
        # one all-reduce of the (tokens, h) output forward (g); with backward one more on the
        # input gradient (f): 2 all-reduces per MLP in training, not 1 and not 4
        assert ops == (["all_reduce", "all_reduce"] if training else ["all_reduce"])
        ar = predict_time("ring_all_reduce", t, tokens * h * 2, alpha, beta)
        compute = 2 * tokens * h * 4 * h * 2 * (3 if training else 1) / flops / t
        assert plan.cost_s == pytest.approx((2 if training else 1) * ar + compute, rel=1e-12)


def test_all_reduce_moves_twice_an_all_gather():
    # the common mistake "row- and column-parallel move the same volume": in the ring model an
    # all-reduce of M bytes sends 2(t-1)/t·M per rank, an all-gather (t-1)/t·M
    prob = _dyadic_problem((256, 256), 4, training=False)
    row_out = [c for c in A.sharding_cost(prob, ["row"]).collectives if c[1] == "all_reduce"]
    col_out = [c for c in A.sharding_cost(prob, ["column"]).collectives if c[1] == "all_gather"]
    a, b = row_out[0][3] - 2 * 3 * prob.alpha, col_out[0][3] - 3 * prob.alpha
    assert row_out[0][2] == col_out[0][2] and a == 2 * b


def test_dp_against_the_simple_rule():
    kw = dict(tokens=4096, devices=8, alpha=5e-6, beta=1 / 100e9, flops_per_s=100e12)
    h = 1024
    cases = {
        (h, 4 * h, h, 4 * h, h): ("column", "row", "column", "row"),     # two MLPs: the rule is optimal
        (h, 4 * h, 4 * h, h): ("column", "column", "row"),               # odd chain: the rule gathers
        (64, 64, 64): ("replicate", "replicate"),                         # too small to shard
    }
    for dims, want in cases.items():
        prob = A.ShardingProblem(dims, **kw)
        plan, rule = A.plan_sharding(prob), A.sharding_cost(prob, A.megatron_rule(prob.layers))
        assert plan.choices == want
        assert plan.cost_s <= rule.cost_s
        assert (plan.cost_s == rule.cost_s) == (want == rule.choices)
    assert A.megatron_rule(3) == ("column", "row", "column")


def test_sharding_bad_arguments():
    with pytest.raises(ValueError, match="ShardingProblem: dims must list at least 2"):
        A.ShardingProblem((8,), 1, 2, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="sharding_cost: choices must be 2 of"):
        A.sharding_cost(_dyadic_problem((8, 8, 8), 2), ["column"])
    with pytest.raises(ValueError, match="brute_force_sharding: 3"):
        A.brute_force_sharding(_dyadic_problem((8,) * 12, 2))
