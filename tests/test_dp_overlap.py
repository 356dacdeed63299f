"""The overlap model and simulator (exact, on hand-computed cases) and the real step timings'
structure (what must hold whatever the machine's speed; no timing thresholds)."""
import random

import pytest

from labkit.data_parallel import assign_buckets
from labkit.data_parallel.overlap import (exact_step_time, naive_step_time, overlap_step_time, replay_channel,
                                          simulate_overlap)
from labkit.data_parallel.step_timing import VARIANTS, time_ddp_steps
from labkit.dist import launch
from labkit.model import GPT, GPTConfig


def test_overlap_formula_hides_comm_up_to_the_tail():
    # T = T_fwd + max(T_bwd, T_comm - t_last) + t_last
    assert overlap_step_time(1.0, 10.0, [3.0, 4.0, 2.0]) == 1.0 + 10.0 + 2.0       # hidden: 7 <= 10
    assert overlap_step_time(1.0, 10.0, [6.0, 6.0, 2.0]) == 1.0 + 12.0 + 2.0       # 12 > 10: 2 s show
    assert overlap_step_time(1.0, 10.0, []) == 11.0
    assert naive_step_time(1.0, 10.0, [3.0, 4.0, 2.0]) == 20.0


def test_the_formula_is_a_lower_bound_and_the_replay_is_exact():
    # ready at 0.9 and 1.0 (backward ends at 1.0), all-reduces of 0.5 and 0.1: the channel is busy
    # until 1.4, so the last bucket runs 1.4 .. 1.5; the formula says max(1.0, 0.5) + 0.1 = 1.1
    assert replay_channel([0.9, 1.0], [0.5, 0.1]) == [(0.9, 1.4), (1.4, 1.5)]
    assert exact_step_time(0.0, 1.0, [0.9, 1.0], [0.5, 0.1]) == 1.5
    assert overlap_step_time(0.0, 1.0, [0.5, 0.1]) == pytest.approx(1.1)
    # the notebook's Problem 2: ready at 15, 30, 45, 60 ms; 10, 15, 20, 15 ms: 30 + 80 = 110, bound 105
    assert replay_channel([15, 30, 45, 60], [10, 15, 20, 15]) == [(15, 25), (30, 45), (45, 65), (65, 80)]
    assert exact_step_time(30, 60, [15, 30, 45, 60], [10, 15, 20, 15]) == 110
    assert overlap_step_time(30, 60, [10, 15, 20, 15]) == 105
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randint(1, 8)
        t_bwd = rng.uniform(0.1, 5)
        ready = sorted(rng.uniform(0, t_bwd) for _ in range(n - 1)) + [t_bwd]
        if rng.random() < 0.5:
            ready = [0.0] * (n - 1) + [t_bwd]
        comm = [rng.uniform(0, 2) for _ in range(n)]
        exact, bound = exact_step_time(0.3, t_bwd, ready, comm), overlap_step_time(0.3, t_bwd, comm)
        assert exact >= bound - 1e-12
        if all(r == 0.0 for r in ready[:-1]):                   # nothing to wait for: exact
            assert exact == pytest.approx(bound)
    with pytest.raises(ValueError, match="one ready time per"):
        replay_channel([1.0], [1.0, 2.0])


def test_simulator_on_a_hand_timeline():
    # 3 parameters; backward makes their gradients at 3, 2, 1 s (last layer first); each
    # all-reduce of 100 bytes on 2 ranks takes 2(p-1)/p * 100 * 0.01 = 1 s.
    r = simulate_overlap([3.0, 2.0, 1.0], [100, 100, 100], None, world=2, alpha=0.0, beta=0.01, t_fwd=0.5)
    assert [(s.params, s.ready, s.start, s.end) for s in r.spans] == [
        ((2,), 1.0, 1.0, 2.0), ((1,), 2.0, 2.0, 3.0), ((0,), 3.0, 3.0, 4.0)]
    assert (r.t_bwd, r.step, r.exposed) == (3.0, 4.5, 1.0)
    naive = simulate_overlap([3.0, 2.0, 1.0], [100, 100, 100], None, 2, 0.0, 0.01, 0.5, overlap=False)
    assert [s.start for s in naive.spans] == [3.0, 4.0, 5.0] and naive.exposed == 3.0
    one = simulate_overlap([3.0, 2.0, 1.0], [100, 100, 100], 10**6, 2, 0.0, 0.01, 0.5)   # one bucket
    assert [(s.params, s.start, s.end) for s in one.spans] == [((2, 1, 0), 3.0, 6.0)]
    alpha = simulate_overlap([1.0], [0], None, world=4, alpha=0.25, beta=1.0)           # 2(p-1) alphas
    assert alpha.spans[0].end - alpha.spans[0].start == 1.5


def test_simulator_agrees_with_the_closed_forms():
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 12)
        ready = [rng.uniform(0, 5) for _ in range(n)]
        nbytes = [rng.randint(0, 400) for _ in range(n)]
        sim = simulate_overlap(ready, nbytes, None, 2, 0.01, 0.002, t_fwd=0.3, overlap=False)
        comm = [s.end - s.start for s in sim.spans]
        assert sim.step == pytest.approx(naive_step_time(0.3, max(ready), comm), abs=1e-12)
        # when all gradients but the last bucket's are ready at once, the closed form is exact
        flat = [0.0] * (n - 1) + [max(ready)]
        sim = simulate_overlap(flat, nbytes, None, 2, 0.01, 0.002, t_fwd=0.3)
        comm = [s.end - s.start for s in sim.spans]
        assert sim.step == pytest.approx(overlap_step_time(0.3, max(ready), comm), abs=1e-12)


def test_simulated_buckets_are_ddps():
    params = list(GPT(GPTConfig(layers=3, hidden=32, heads=2, seq_len=8, vocab=64)).parameters())
    nbytes = [p.numel() * p.element_size() for p in params]
    for cap in (1, 5000, 20000, 10**9):
        sim = simulate_overlap(list(range(len(params), 0, -1)), nbytes, cap, 2, 0.0, 1e-9)
        assert sorted(s.params for s in sim.spans) == sorted(tuple(b) for b in assign_buckets(params, cap))


def test_bad_arguments():
    with pytest.raises(ValueError, match="one entry per parameter"):
        simulate_overlap([1.0, 2.0], [8], None, 2, 0.0, 1.0)
    with pytest.raises(ValueError, match=">= 0 seconds"):
        overlap_step_time(-1.0, 1.0, [1.0])
    with pytest.raises(ValueError, match="world must be an int >= 1"):
        simulate_overlap([1.0], [8], None, 0, 0.0, 1.0)


def test_real_step_timings_have_the_shape_the_model_needs():
    cfg = GPTConfig(layers=2, hidden=32, heads=2, seq_len=16, vocab=64)
    m = launch(time_ddp_steps, 2, cfg, 2, 0.01, 2, backend="gloo", timeout=120)[0]
    assert set(m.variants) == set(VARIANTS)
    params = list(GPT(cfg).parameters())
    assert m.buckets == assign_buckets(params, int(0.01 * 2**20))
    assert m.nbytes == [p.numel() * p.element_size() for p in params]
    assert set(m.comm) == set(m.nbytes) | {sum(m.nbytes[i] for i in b) for b in m.buckets}
    assert all(t > 0 for t in [m.fwd, m.bwd, *m.comm.values()]) and 0 < max(m.ready) <= m.bwd
    for name, v in m.variants.items():
        assert v.step >= v.fwd + v.bwd + v.wait - 1e-9 > 0
        assert sorted(e[0] for e in v.events) == list(range(len(params) if name != "bucketed" else len(m.buckets)))
        for bucket, nbytes, ready, start, end in v.events:
            assert ready <= start <= end
            if VARIANTS[name][1]:
                assert start - ready < 0.05          # overlapped: the all-reduce starts in the hook
        if not VARIANTS[name][1]:                    # naive: nothing starts before backward ends
            assert min(e[3] for e in v.events) >= max(e[2] for e in v.events)
