"""Lab 11's placement / topology / balance one-liners: each table builds, its key numbers are the
underlying functions' own, and every printed line fits in 100 characters."""
import math

import pytest

from labkit.cluster import autoparallel as A
from labkit.cluster import balance as B
from labkit.cluster import hierarchical as H
from labkit.cluster import lab
from labkit.cluster import placement as PL
from labkit.cluster import scheduler as S
from labkit.cluster import topology as T
from labkit.collectives.formulas import ring_all_reduce_bytes


def _fits(table, capsys):
    print(table)
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(len(line) for line in lines) <= 100, max(lines, key=len)
    return table


def test_topology_table(capsys):
    t = _fits(lab.topology_table(), capsys)
    topos = lab.default_topologies()
    assert len(t.rows) == len(topos)
    assert t.column("diameter") == [T.diameter(x) for x in topos]
    assert t.column("bisection") == [T.bisection_width(x) for x in topos]
    assert t.column("formula") == [T.formulas(x).diameter for x in topos]
    assert t.column("closed form") == [T.formulas(x).bisection for x in topos]
    assert t.column("nodes") == [x.n for x in topos] and t.column("hosts") == [len(x.hosts) for x in topos]
    # the row people get wrong: a ring's bisection is 2 links, not 1
    rings = [b for name, b in zip(t.column("topology"), t.column("bisection")) if name.startswith("ring")]
    assert rings and set(rings) == {2}


def test_hierarchical_table_on_four_ranks(capsys):
    t = _fits(lab.hierarchical_table(nodes=2, per_node=2, n_elements=1000), capsys)
    assert t.column("algorithm") == ["hierarchical"] * 4 + ["flat ring"] * 4
    assert t.column("max |diff|") == [0.0] * 8          # dyadic values: every summation order is exact
    hier = [row for row in t.rows if row[0] == "hierarchical"]
    for _, rank, node, _, intra, inter, f_intra, f_inter in hier:
        want = H.hierarchical_bytes(rank, 2, 2, 1000, 8)
        assert (intra, inter) == (want.intra, want.inter) == (f_intra, f_inter)   # g | L, N | L/g: exact
        assert node == rank // 2
    flat = [row for row in t.rows if row[0] == "flat ring"]
    for _, rank, _, _, intra, inter, f_intra, f_inter in flat:
        want = H.flat_ring_link_bytes(ring_all_reduce_bytes(rank, 4, 1000, 8)[0], rank, 4, 2)
        assert (intra, inter) == (want.intra, want.inter) == (f_intra, f_inter)
    # across machines: each hierarchical rank sends S/2, the flat ring's crossing ranks 3S/2
    assert sum(r[5] for r in hier) < sum(r[5] for r in flat)


def test_all_reduce_model_table(capsys):
    sizes, shapes = (64e3, 16e6, 1e9), ((2, 8), (8, 8))
    t = _fits(lab.all_reduce_model_table(sizes, shapes), capsys)
    assert len(t.rows) == len(sizes) * len(shapes) * 2
    k = 0
    for nodes, g in shapes:
        for nics in (g, 1):
            cross = H.crossover_bytes(nodes, g, lab.NVLINK, lab.IB_HDR, nics)
            for n in sizes:
                row = dict(zip(t.columns, t.rows[k]))
                k += 1
                assert row["hier ms"] == H.hierarchical_time(n, nodes, g, lab.NVLINK, lab.IB_HDR, nics) * 1e3
                # the flat all-reduce runs one ring per network card, as NCCL does
                assert row["flat ms"] == H.flat_ring_time(n, nodes, g, lab.NVLINK, lab.IB_HDR, rings=nics) * 1e3
                assert row["faster"] == H.compare_all_reduce(n, nodes, g, lab.NVLINK, lab.IB_HDR, nics).winner
                assert (row["crossover"] == "never") == math.isinf(cross)
                if not math.isinf(cross):   # the winner flips at the crossover
                    assert (row["faster"] == "flat") == (n > cross)
    # a card per GPU: hierarchical for small buffers (fewer slow latency steps), NCCL's flat rings for
    # 1 GB (they keep NVLink and all 8 cards busy at once); one card per node: hierarchical throughout
    per_gpu = [(row[2], row[6]) for row in t.rows if row[1] == "per GPU"]
    assert {f for m, f in per_gpu if m == "64 KB"} == {"hierarchical"} and {f for m, f in per_gpu if m == "1 GB"} == {"flat"}
    assert all(row[6] == "hierarchical" for row in t.rows if row[1] == "per node")


def test_placement_table(capsys):
    t = _fits(lab.placement_table(3, 2, 2, 4, seeds=range(3)), capsys)
    assert len(t.rows) == 6 and len(set(t.column("rank order"))) == 6
    for row in t.rows:
        c = PL.compare_placements(PL.grid_graph(3, 2, 2, order=row[0]), 4, seeds=range(3))
        assert row[1:] == (c.naive, c.kl_from_naive, c.random_mean, c.kl_from_random_mean, c.optimum, c.total)
    assert set(t.column("optimum")) == {PL.optimal_placement(PL.grid_graph(3, 2, 2), 4)[1]}
    assert all(o <= k <= n for o, k, n in zip(t.column("optimum"), t.column("KL from naive"), t.column("naive")))
    # too many placements to enumerate: the optimum column says so
    assert set(lab.placement_table(2, 4, 2, 4, seeds=range(1)).column("optimum")) == {"-"}


def test_scheduler_table(capsys):
    t = _fits(lab.scheduler_table(n_jobs=120, nodes=4, gpus_per_node=8, seed=3), capsys)
    assert len(t.rows) == 2 * len(S.POLICIES)
    jobs = S.job_stream(120, 3, mean_interarrival=30.0)
    for row in t.rows:
        r = S.simulate_cluster(jobs, 4, 8, row[0], row[1])
        assert row[2:] == (r.mean_wait_s, r.stranded_gpus, r.utilisation, r.makespan, r.mean_span_excess)
    assert str(t) == str(lab.scheduler_table(n_jobs=120, nodes=4, gpus_per_node=8, seed=3))   # seeded


def test_balance_table(capsys):
    t = _fits(lab.balance_table(n_tasks=40, workers=4, seed=2, steal_seeds=range(2)), capsys)
    times = B.skewed_times(40, 2, "lognormal", sigma=1.5)
    c = B.compare_balancing(times, 4, 0.01, range(2))
    got = dict(zip(t.column("schedule"), t.column("makespan s")))
    assert list(got.values())[:7] == [c.round_robin, c.block, c.greedy, c.lpt, c.stealing, c.t1_over_p,
                                      c.lower_bound]
    graham = B.graham_bound(times, 4)
    assert t.column("makespan s")[-1] == graham and got["greedy, given order"] <= graham
    assert all(m >= c.lower_bound for m in list(got.values())[:5])
    assert t.column("÷ lower bound") == [m / c.lower_bound for m in t.column("makespan s")]


def test_stage_partition_table_from_given_costs(capsys):
    costs = [0.0002, 0.0026, 0.0023, 0.0025, 0.0025, 0.0013]
    names = ["embed", "block0", "block1", "block2", "block3", "head"]
    t = _fits(lab.stage_partition_table(costs, stages=4, names=names), capsys)
    plan = A.plan_stages(costs, 4)
    assert t.column("stage") == ["stage 0", "stage 1", "stage 2", "stage 3", "bottleneck"]
    assert t.column("DP ms")[:4] == [c * 1e3 for c in plan.stage_costs]
    assert t.column("DP ms")[-1] == A.partition_stages(costs, 4)[1] * 1e3
    assert t.column("DP layers")[:4] == ["embed..block0", "block1", "block2", "block3..head"]
    assert t.column("equal-count layers")[:4] == ["embed..block0", "block1..block2", "block3", "head"]
    assert t.column("equal ms")[-1] == max(t.column("equal ms")[:4]) == (0.0023 + 0.0025) * 1e3
    assert t.column("DP ms")[-1] <= t.column("equal ms")[-1]
    # a LayerCosts carries its own names
    lc = A.LayerCosts(names, costs)
    assert str(lab.stage_partition_table(lc, stages=4)) == str(t)
    with pytest.raises(ValueError, match="stage_partition_table: stages"):
        lab.stage_partition_table(costs, stages=7)


def test_stage_partition_table_from_measured_costs(capsys):
    from labkit.model import GPTConfig

    lc = lab.measured_layer_costs(GPTConfig(layers=3, hidden=32, heads=2, seq_len=16, vocab=64), batch_size=2,
                                  repeats=1)
    t = _fits(lab.stage_partition_table(lc, stages=2), capsys)
    assert t.column("DP ms")[-1] == A.partition_stages(lc.seconds, 2)[1] * 1e3


def test_sharding_table(capsys):
    t = _fits(lab.sharding_table(), capsys)
    chains = lab.sharding_chains(1024)
    assert len(t.rows) == 3 * len(chains)
    short = {"replicate": "rep", "column": "col", "row": "row"}
    for k, (name, dims) in enumerate(chains.items()):
        prob = A.ShardingProblem(dims, 4096, 8, *lab.NVLINK, 100e12, 2, True)
        dp, bf, rule = t.rows[3 * k:3 * k + 3]
        want = A.plan_sharding(prob)
        assert dp[:3] == (name, "DP", ",".join(short[c] for c in want.choices))
        assert dp[6] == want.cost_s * 1e3 == bf[6] == A.brute_force_sharding(prob).cost_s * 1e3
        assert rule[6] == A.sharding_cost(prob, A.megatron_rule(prob.layers)).cost_s * 1e3 >= dp[6]
    mlp = t.rows[0]
    assert mlp[2:4] == ("col,row", "AR,AR")            # Megatron's MLP: one all-reduce forward, one backward


def test_default_tables_fit_and_repeat(capsys):
    for make in (lab.all_reduce_model_table, lab.placement_table, lab.scheduler_table, lab.balance_table):
        t = _fits(make(), capsys)
        assert t.title and str(t) == str(make())          # seeded: the same text every time
