"""Lab 11 cluster scheduling: a hand-made sequence where best-fit beats first-fit, GPU-seconds
conserved, no node ever over-full, FIFO order kept, locality rules obeyed, and seeded determinism."""
import math

import numpy as np
import pytest

from labkit.cluster import scheduler as S

HAND = [S.Job(0, 0, 2, 10), S.Job(1, 0, 3, 10), S.Job(2, 1, 1, 10), S.Job(3, 2, 2, 5)]


def test_best_fit_beats_first_fit_by_hand():
    # 2 nodes × 4. After jobs 0 (2 GPUs) and 1 (3 GPUs) the free GPUs are [2, 1]. Job 2 (1 GPU):
    # first-fit takes node 0 -> [1, 1], and job 3 (2 GPUs, one node) waits until t = 10;
    # best-fit takes node 1 (tightest) -> [2, 0], and job 3 starts at once on node 0.
    ff = S.simulate_cluster(HAND, 2, 4, "first_fit")
    bf = S.simulate_cluster(HAND, 2, 4, "best_fit")
    assert [r.placement for r in ff.records] == [{0: 2}, {1: 3}, {0: 1}, {0: 2}]
    assert [r.placement for r in bf.records] == [{0: 2}, {1: 3}, {1: 1}, {0: 2}]
    assert [r.start for r in ff.records] == [0, 0, 1, 10] and [r.start for r in bf.records] == [0, 0, 1, 2]
    assert ff.mean_wait_s == 2.0 and bf.mean_wait_s == 0.0
    # first-fit: 2 GPUs free but split 1 + 1 from t = 2 to 10 while job 3 waits: 16 GPU-seconds stranded
    assert ff.stranded_gpus * ff.makespan == 16.0 and bf.stranded_gpus == 0.0
    assert ff.makespan == 15.0 and bf.makespan == 11.0
    assert ff.busy_gpu_seconds == bf.busy_gpu_seconds == 2 * 10 + 3 * 10 + 1 * 10 + 2 * 5
    assert ff.utilisation == 70 / (8 * 15)


def test_place_rules():
    free = [3, 1, 4, 2]
    assert S.place(free, 1, 4, "first_fit") == {0: 1}
    assert S.place(free, 1, 4, "best_fit") == {1: 1}
    assert S.place(free, 2, 4, "best_fit") == S.place(free, 2, 4, "topology_aware") == {3: 2}
    assert S.place(free, 4, 4, "first_fit") == {2: 4}
    assert S.place([3, 3], 4, 4, "first_fit") is None          # a 4-GPU job must sit in one node
    assert S.place(free, 6, 4, "first_fit") == {0: 3, 1: 1, 2: 2}
    assert S.place(free, 6, 4, "best_fit") == {1: 1, 3: 2, 0: 3}
    assert S.place(free, 6, 4, "topology_aware") is None        # needs 2 empty nodes, has 1
    assert S.place([4, 1, 4], 8, 4, "topology_aware") == {0: 4, 2: 4}
    assert S.place(free, 11, 4, "first_fit") is None            # only 10 free


def test_span_penalty_slows_spread_jobs():
    # 3 nodes × 4. Jobs 0 and 1 (3 GPUs each) leave [1, 1, 4] free; job 2 wants 6 GPUs (2 nodes at least)
    jobs = [S.Job(0, 0, 3, 100), S.Job(1, 0, 3, 100), S.Job(2, 1, 6, 10)]
    ff = S.simulate_cluster(jobs, 3, 4, "first_fit", span_penalty=0.5)
    bf = S.simulate_cluster(jobs, 3, 4, "best_fit", span_penalty=0.5)
    ta = S.simulate_cluster(jobs, 3, 4, "topology_aware", span_penalty=0.5)
    # first-fit and best-fit start it at once over 3 nodes: one more than needed, 1.5 × 10 s
    for r in (ff, bf):
        assert r.records[2].placement == {0: 1, 1: 1, 2: 4}
        assert (r.records[2].start, r.records[2].end) == (1, 16)
        assert r.mean_span_excess == pytest.approx(1 / 3)
    # topology-aware waits for two empty nodes (t = 100) and runs it compactly
    assert ta.records[2].placement == {0: 4, 1: 2} and (ta.records[2].start, ta.records[2].end) == (100, 110)
    assert ta.mean_span_excess == 0
    # while it waits, 6 GPUs are free (1 + 1 + 4): enough in number, in the wrong places
    assert ta.stranded_gpus * ta.makespan == 6 * 99


def _check_invariants(result, G):
    jobs = [r.job for r in result.records]
    events = []
    for r in result.records:
        assert sum(r.placement.values()) == r.job.gpus and all(k > 0 for k in r.placement.values())
        assert r.start >= r.job.arrival and r.end >= r.start
        if r.job.gpus <= G:
            assert len(r.placement) == 1                          # small jobs never cross nodes
        if result.policy == "topology_aware" and r.job.gpus > G:
            assert len(r.placement) == -(-r.job.gpus // G)
        for node, k in r.placement.items():
            events += [(r.start, 1, node, k), (r.end, 0, node, -k)]   # ends before starts at equal times
    used = [0] * result.nodes
    for _, _, node, k in sorted(events):
        used[node] += k
        assert 0 <= used[node] <= G                               # never more GPUs than the node has
    starts = [r.start for r in sorted(result.records, key=lambda r: (r.job.arrival, r.job.id))]
    assert starts == sorted(starts)                               # FIFO: nobody overtakes the head
    return jobs


@pytest.mark.parametrize("policy", S.POLICIES)
def test_invariants_and_conservation_on_a_random_stream(policy):
    jobs = S.job_stream(150, seed=3, mean_interarrival=30.0)
    r = S.simulate_cluster(jobs, 8, 8, policy)
    _check_invariants(r, 8)
    # busy GPU-seconds integrated over time == Σ GPUs × (end − start) == Σ GPUs × duration
    # (floats summed in different orders: relative 1e-12)
    by_records = sum(x.job.gpus * (x.end - x.start) for x in r.records)
    assert r.busy_gpu_seconds == pytest.approx(by_records, rel=1e-12)
    assert r.busy_gpu_seconds == pytest.approx(sum(j.gpus * j.duration for j in jobs), rel=1e-12)
    assert 0 < r.utilisation <= 1 and r.stranded_gpus <= r.blocked_free_gpus


@pytest.mark.parametrize("policy", S.POLICIES)
def test_conservation_exact_with_integer_times(policy):
    stream = S.job_stream(80, seed=5, mean_interarrival=20.0, mean_duration=300.0)
    jobs = [S.Job(j.id, float(round(j.arrival)), j.gpus, float(max(1, round(j.duration)))) for j in stream]
    r = S.simulate_cluster(jobs, 4, 8, policy, span_penalty=0.25)
    _check_invariants(r, 8)
    assert r.busy_gpu_seconds == sum(x.job.gpus * (x.end - x.start) for x in r.records)
    spans = [len(x.placement) - -(-x.job.gpus // 8) for x in r.records]
    assert [x.end - x.start for x in r.records] == [x.job.duration * (1 + 0.25 * s) for x, s in zip(r.records, spans)]


def test_deterministic_with_a_seed():
    a = S.compare_policies(S.job_stream(60, seed=11), 4, 8)
    b = S.compare_policies(S.job_stream(60, seed=11), 4, 8)
    c = S.compare_policies(S.job_stream(60, seed=12), 4, 8)
    for p in S.POLICIES:
        assert a[p] == b[p]
        assert [(x.start, x.placement) for x in a[p].records] == [(x.start, x.placement) for x in b[p].records]
    assert a["first_fit"].records != c["first_fit"].records


def test_job_stream():
    jobs = S.job_stream(4000, seed=0, mean_interarrival=10.0, mean_duration=100.0)
    assert jobs[0].arrival == 0.0 and all(a.arrival <= b.arrival for a, b in zip(jobs, jobs[1:]))
    assert {j.gpus for j in jobs} == set(S.DEFAULT_SIZES)
    assert np.mean([j.duration for j in jobs]) == pytest.approx(100.0, rel=0.1)      # sampling error ~3 %
    assert jobs[-1].arrival / 3999 == pytest.approx(10.0, rel=0.1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="simulate_cluster: policy"):
        S.simulate_cluster(HAND, 2, 4, "worst_fit")
    with pytest.raises(ValueError, match="simulate_cluster: job 0 cannot run here"):
        S.simulate_cluster([S.Job(0, 0, 9, 1)], 2, 4, "first_fit")
    with pytest.raises(ValueError, match="simulate_cluster: jobs must not be empty"):
        S.simulate_cluster([], 2, 4, "best_fit")
    with pytest.raises(ValueError, match="simulate_cluster: job ids must be distinct"):
        S.simulate_cluster([S.Job(0, 0, 1, 1), S.Job(0, 1, 1, 1)], 2, 4, "best_fit")
    with pytest.raises(ValueError, match="job_stream: weights"):
        S.job_stream(3, 0, sizes=(1, 2), weights=(1,))


# ---- data locality under delay scheduling -------------------------------------------------------
def test_local_probability_equals_the_monte_carlo_and_its_edges():
    from labkit.cluster.scheduler import local_probability, simulate_locality

    for n, r, f, d in ((100, 3, 5, 0), (100, 3, 5, 20), (20, 1, 3, 5), (30, 5, 2, 10), (10, 2, 4, 6)):
        p = local_probability(n, r, f, d)
        sim = simulate_locality(n, r, f, d, trials=6000, seed=n + d)
        assert abs(sim["local"] - p) <= 4 * math.sqrt(p * (1 - p) / 6000) + 1e-12, (n, r, f, d)
        assert 0 <= sim["waited"] <= d
    assert local_probability(10, 1, 1) == pytest.approx(0.1)              # one copy, one free node
    assert local_probability(10, 3, 8) == 1.0                              # 8 free of 10: a copy is free
    assert local_probability(10, 2, 4, 6) == 1.0                           # every busy node released
    assert local_probability(100, 3, 5, 40) > local_probability(100, 3, 5, 10) > local_probability(100, 3, 5)
    with pytest.raises(ValueError, match="replicas must be an int in 1..10"):
        local_probability(10, 11, 2)
    with pytest.raises(ValueError, match="waits must be an int in 0..8"):
        local_probability(10, 1, 2, 9)
