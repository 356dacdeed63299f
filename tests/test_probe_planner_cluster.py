"""Probe: the planner and the cluster helpers of Lab 11 (search, 3D byte counts, rank grids,
topologies, placement, scheduling, load balance) given bad input.

Each bad input gets a one-line error of the stated type naming the argument, within a second or
two: sizes that would be enumerated one by one (10¹⁸ ranks, a 10¹⁶-layer model's divisors) are
refused with their stated limit, in seconds (`labkit.checks.MAX_ENUMERATED`, `planner.search.MAX_DIVIDED`).
Inputs that used to be accepted silently — "no" for a bool, a 1.5-GPU job, dp = 0 — are refused;
bytes_per_step gives the same totals as the rank-by-rank sum, fast on any grid.
"""
import time

import pytest

from labkit.checks import MAX_ENUMERATED
from labkit.cluster import balance, hierarchical, placement, scheduler, topology
from labkit.cluster.autoparallel import megatron_rule
from labkit.cluster.scheduler import Job, simulate_cluster
from labkit.model import GPTConfig
from labkit.parallel3d.comm_bytes import bytes_per_step, rank_bytes_per_step, ring_bytes
from labkit.parallel3d.grid import groups
from labkit.planner import Model, Plan, selene, why_not
from labkit.planner.search import search
from labkit.planner.memory import layers_in_flight, micro_batches_in_flight
from labkit.planner.search import divisors

M = Model(layers=8, hidden=256, heads=8, seq_len=128, vocab=1024)
CFG = GPTConfig(layers=4, hidden=16, heads=4, seq_len=8, vocab=32)
NAN, INF = float("nan"), float("inf")
HUGE = 10 ** 18

BAD = [
    # planner
    ("search cross-node 'no'", lambda: search(M, selene(16), 64, allow_cross_node_tp="no"), TypeError,
     "search: allow_cross_node_tp must be True or False"),
    ("search sequence_parallel 1", lambda: search(M, selene(16), 64, sequence_parallel=1), TypeError,
     "search: sequence_parallel must be a sequence"),
    ("why_not cross-node 'no'", lambda: why_not(M, selene(16), Plan(2, 8, 1), 64, allow_cross_node_tp="no"),
     TypeError, "why_not: allow_cross_node_tp"),
    ("search 1e16 layers", lambda: search(Model(layers=10 ** 16, hidden=256, heads=8, seq_len=128, vocab=1024),
                                          selene(16), 64), ValueError, "search: model.layers must be an int <= "),
    ("search model", lambda: search("gpt", selene(16), 64), TypeError, "search: model"),
    ("search batch", lambda: search(M, selene(16), 0), ValueError, "search: global_batch"),
    ("search micro_batches", lambda: search(M, selene(16), 64, micro_batches=2), TypeError, "search: micro_batches"),
    ("divisors negative", lambda: divisors(-4), ValueError, "divisors: n"),
    ("divisors huge", lambda: divisors(10 ** 16), ValueError, "divisors: n must be an int in 1..1000000000000"),
    ("groups huge", lambda: groups(HUGE, 8, 8), ValueError, "groups: dp·tp·pp"),
    ("in flight pp 0", lambda: micro_batches_in_flight(0, 4), ValueError, "micro_batches_in_flight: pp"),
    ("in flight rank", lambda: micro_batches_in_flight(4, 4, rank=4), ValueError, "micro_batches_in_flight: rank"),
    ("layers in flight pp 0", lambda: layers_in_flight(8, 0, 4), ValueError, "micro_batches_in_flight: pp"),
    ("Model hidden % heads", lambda: Model(layers=2, hidden=10, heads=3, seq_len=4, vocab=8), ValueError, "GPTConfig: hidden"),
    # 3D byte counts
    ("bytes dp 0", lambda: bytes_per_step(CFG, 0, 1, 1, 16, 4, 8), ValueError, "bytes_per_step: dp"),
    ("bytes tp float", lambda: bytes_per_step(CFG, 1, 2.0, 1, 16, 4, 8), TypeError, "bytes_per_step: tp"),
    ("rank bytes rank", lambda: rank_bytes_per_step(CFG, 2, 1, 1, 16, 4, 8, 5), ValueError, "rank"),
    ("ring p 0", lambda: ring_bytes(0, 10, 4), ValueError, "ring_bytes: p"),
    ("ring itemsize", lambda: ring_bytes(2, 10, 0.5), TypeError, "ring_bytes: itemsize"),
    # topology, hierarchy, placement
    ("ring huge", lambda: topology.ring(10 ** 9), ValueError, "ring: n"),
    ("torus huge", lambda: topology.torus2d(10 ** 5, 10 ** 5), ValueError, "torus2d: rows·cols"),
    ("rank_groups huge", lambda: hierarchical.rank_groups(HUGE, 8), ValueError, "rank_groups: nodes·per_node"),
    ("hierarchical per_node huge", lambda: hierarchical.hierarchical_bytes(0, 2, HUGE, 100, 4), ValueError,
     "hierarchical_bytes: per_node"),
    ("flat ring rank str", lambda: hierarchical.flat_ring_link_bytes(8, "0", 4, 2), TypeError,
     "flat_ring_link_bytes: rank"),
    ("flat ring rank out", lambda: hierarchical.flat_ring_link_bytes(8, 4, 4, 2), ValueError,
     "flat_ring_link_bytes: rank"),
    ("grid_coords huge", lambda: placement.grid_coords(HUGE, 2, 2), ValueError, "grid_coords: dp·tp·pp"),
    ("grid_coords order", lambda: placement.grid_coords(2, 2, 2, order=1), TypeError, "grid_coords: order"),
    ("naive placement huge", lambda: placement.naive_placement(HUGE, 8), ValueError, "naive_placement: n"),
    ("random placement seed", lambda: placement.random_placement(8, 4, -1), ValueError, "random_placement: seed"),
    ("megatron_rule huge", lambda: megatron_rule(HUGE), ValueError, "megatron_rule: layers"),
    # scheduling and balance
    ("job gpus 1.5", lambda: Job(0, 0.0, 1.5, 10.0), TypeError, "Job: gpus"),
    ("job arrival inf", lambda: Job(0, INF, 1, 10.0), ValueError, "Job: arrival"),
    ("job duration nan", lambda: Job(0, 0.0, 1, NAN), ValueError, "Job: duration"),
    ("job duration negative", lambda: Job(0, 0.0, 1, -1.0), ValueError, "Job: duration"),
    ("job id str", lambda: Job("a", 0.0, 1, 1.0), TypeError, "Job: id"),
    ("cluster jobs tuples", lambda: simulate_cluster([(0, 0.0, 1, 1.0)], 2, 8, "best_fit"), TypeError,
     "simulate_cluster: jobs must be a list of scheduler.Job"),
    ("cluster job too big", lambda: simulate_cluster([Job(0, 0.0, 64, 1.0)], 2, 8, "best_fit"), ValueError,
     "simulate_cluster: job 0 cannot run here"),
    ("cluster policy", lambda: simulate_cluster([Job(0, 0.0, 1, 1.0)], 2, 8, "fifo"), ValueError,
     "simulate_cluster: policy"),
    ("job_stream huge", lambda: scheduler.job_stream(HUGE, 0), ValueError, "job_stream: n_jobs"),
    ("job_stream seed", lambda: scheduler.job_stream(10, -1), ValueError, "job_stream: seed"),
    ("job_stream sizes int", lambda: scheduler.job_stream(10, 0, sizes=8), TypeError, "job_stream: sizes"),
    ("skewed huge", lambda: balance.skewed_times(HUGE, 0), ValueError, "skewed_times: n"),
    ("skewed seed", lambda: balance.skewed_times(10, -1), ValueError, "skewed_times: seed"),
]


@pytest.mark.parametrize("name,call,exc,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_fast_one_line_error(name, call, exc, words):
    t0 = time.monotonic()
    with pytest.raises(exc) as e:
        call()
    assert words in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
    assert time.monotonic() - t0 < 15.0              # refused up front: the inputs that hung ran for hours


def test_bytes_per_step_counts_each_stage_once_per_rank_of_it():
    for dp, tp, pp in [(2, 2, 2), (1, 4, 2), (2, 1, 4)]:
        by_rank = dict.fromkeys(("dp", "tp", "pp", "embedding"), 0.0)
        for r in range(dp * tp * pp):
            for k, v in rank_bytes_per_step(CFG, dp, tp, pp, 16, 2, 8, r).items():
                by_rank[k] += v
        assert bytes_per_step(CFG, dp, tp, pp, 16, 2, 8) == pytest.approx(by_rank, rel=1e-15)
    t0 = time.monotonic()
    big = bytes_per_step(CFG, 4096, 4, 4, 4096 * 4, 4, 2)                  # 65 536 ranks
    assert time.monotonic() - t0 < 1.0 and big["dp"] > 0
    assert MAX_ENUMERATED == 1_000_000
