"""Graded tests for lab 08 (pipeline parallelism). Run: python -m labkit.grade --lab 08.

``optimal_slicing`` is compared exactly (Fraction times) with labkit's brute force over all
2^(L-1) slicings for L <= 10, and with labkit's `optimal_slicing` for L = 16 to 32, under the default
cost model, two extreme ones (large overhead; none) and draws from the grading seed."""
from fractions import Fraction

import pytest
import torch

from labkit.grading.generate import references
from labkit.grading.static import Policy
from labkit.pipeline import Action, check_schedule, schedule, time_schedule
from labkit.pipeline.executor import MLPConfig, reference_step
from labkit.pipeline.terapipe import SliceCost, brute_force_slicing, latency_formula, optimal_slicing

POLICY = Policy(labkit_allowed=frozenset({"labkit.pipeline.schedules.Action", "labkit.pipeline.Action"}),
                references=references("lab08_pipeline"))


def random_p_m(seed, n=6):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        p = int(torch.randint(1, 8, (), generator=g))
        out.append((p, p + int(torch.randint(0, 10, (), generator=g))))
    return out

# sizes chosen to break near-misses: a single rank, m == p, m a non-multiple of p, long pipelines
P_M = [(1, 1), (1, 3), (2, 2), (2, 5), (3, 3), (3, 4), (4, 7), (5, 12), (6, 6)]


@pytest.mark.graded(points=2, exercise="schedule_1f1b")
def test_1f1b_is_valid(impl, seed):
    for p, m in P_M + random_p_m(seed, 3):
        got = impl.schedule_1f1b(p, m)
        assert sorted(got) == list(range(p)), f"p={p}, m={m}: ranks must be 0..{p - 1}"
        check_schedule({r: [Action(*a) for a in acts] for r, acts in got.items()})  # names the first violated dependency


@pytest.mark.graded(points=2, exercise="schedule_1f1b")
def test_1f1b_matches_reference_order(impl, seed):
    for p, m in P_M + random_p_m(seed):
        got = impl.schedule_1f1b(p, m)
        want = schedule("1f1b", p, m)  # equal to what PyTorch's Schedule1F1B executes (tests/test_pipeline_torch.py)
        for r in range(p):
            assert [Action(*a) for a in got[r]] == want[r], f"p={p}, m={m}, rank {r}"


@pytest.mark.graded(points=1, exercise="schedule_1f1b")
def test_1f1b_memory_and_refusal(impl, seed):
    for p, m in [(4, 9)] + random_p_m(seed, 3):
        res = time_schedule({r: [Action(*a) for a in acts] for r, acts in impl.schedule_1f1b(p, m).items()}, 1, 2)
        assert res.peak_inflight[0] == p, f"p={p}, m={m}: 1F1B keeps at most p microbatches in flight on rank 0"
    for p, m in [(4, 3)] + [(p + 1, p) for p, _ in random_p_m(seed, 2)]:
        with pytest.raises(ValueError):
            impl.schedule_1f1b(p, m)


@pytest.mark.graded(points=2, exercise="bubble_fraction")
def test_bubble_formula_values(impl, seed):
    assert impl.bubble_fraction(4, 8) == Fraction(3, 11)
    assert impl.bubble_fraction(1, 5) == 0
    assert impl.bubble_fraction(3, 1) == Fraction(2, 3)
    assert impl.bubble_fraction(4, 8, 2) == Fraction(3, 19)
    assert impl.bubble_fraction(5, 7, 3) == Fraction(4, 25)
    with pytest.raises(ValueError):
        impl.bubble_fraction(0, 4)
    g = torch.Generator().manual_seed(seed)   # never only public inputs
    for p, extra, v in torch.randint(1, 30, (5, 3), generator=g).tolist():
        m = p + extra                          # the formula's domain: m >= p
        assert impl.bubble_fraction(p, m, v) == Fraction(p - 1, v * m + p - 1), (p, m, v)


@pytest.mark.graded(points=2, exercise="bubble_fraction")
def test_bubble_formula_matches_simulation(impl, seed):
    for p, m in [(2, 3), (3, 6), (4, 5), (5, 9)] + random_p_m(seed, 3):
        for kind, v in [("gpipe", 1), ("1f1b", 1), ("interleaved_1f1b", 2), ("interleaved_1f1b", 3)]:
            if kind == "interleaved_1f1b" and m % max(1, m // p):
                continue
            res = time_schedule(schedule(kind, p, m, v), Fraction(1, v), Fraction(2, v))
            assert impl.bubble_fraction(p, m, v) == res.bubble_fraction, (kind, p, m, v)


def _check_backward(impl, kind, p, m, v, seed):
    """One real pipeline step with the submission's stage_backward (in its worker) vs one process here."""
    config = dict(num_stages=p * v, num_microbatches=m, width=6, batch=3 * m, layers_per_stage=1, seed=seed % 10007)
    sched = {r: [tuple(a) for a in acts] for r, acts in schedule(kind, p, m, v).items()}
    run = impl.harness("lab08_stage_backward", sched, config, timeout=25.0)
    loss, grads = reference_step(MLPConfig(**config))
    assert abs(run["loss"] - loss) < 1e-12, f"{kind} p={p} m={m}: loss {run['loss']} != {loss}"
    for s in range(p * v):
        assert len(run["grads"][s]) == len(grads[s]), f"stage {s}: wrong number of gradients"
        for a, b in zip(run["grads"][s], grads[s]):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0, msg=f"{kind} p={p} m={m}: stage {s} gradient differs")


@pytest.mark.graded(points=2, exercise="stage_backward")
def test_stage_backward_gpipe_two_ranks(impl, seed):
    _check_backward(impl, "gpipe", 2, 3, 1, seed)


@pytest.mark.graded(points=2, exercise="stage_backward")
def test_stage_backward_1f1b_and_interleaved(impl, seed):
    _check_backward(impl, "1f1b", 3, 4, 1, seed)
    _check_backward(impl, "interleaved_1f1b", 2, 4, 2, seed)


# ---- optimal_slicing (TeraPipe, section 8.3) ---------------------------------------------------
# Exact times (Fractions): the latency must equal the optimum exactly, and the slicing returned must
# have that latency (several slicings may tie; any of them is right).

def _slice_costs(seed, n=3):
    g = torch.Generator().manual_seed(seed)
    draws = [SliceCost(int(torch.randint(0, 20, (), generator=g)), int(torch.randint(0, 5, (), generator=g)),
                       Fraction(int(torch.randint(1, 9, (), generator=g)), 4)) for _ in range(n)]
    return [SliceCost(), SliceCost(40, 1, Fraction(1, 8)), SliceCost(0, 1, 1)] + draws


def _check_slicing(got, L, K, cost, want):
    assert isinstance(got, tuple) and len(got) == 2, f"L={L}, K={K}: return (latency, slices), got {got!r}"
    latency, slices = got
    assert isinstance(slices, list) and all(isinstance(x, int) and x >= 1 for x in slices) and sum(slices) == L, \
        f"L={L}, K={K}, {cost}: slices must be positive ints summing to {L}, got {slices}"
    assert latency == want, f"L={L}, K={K}, {cost}: latency {latency}, the least is {want}"
    assert latency_formula(slices, K, cost) == want, \
        f"L={L}, K={K}, {cost}: your slices {slices} take {latency_formula(slices, K, cost)}, not the {latency} returned"


def _run_slicing(impl, cases, reference):
    """The submission's optimal_slicing on each (L, K, cost) in its worker (harness.lab08_slicing),
    checked against ``reference(L, K, cost)``'s latency."""
    runs = impl.harness("lab08_slicing", [(L, K, (c.overhead, c.per_token, c.per_pair)) for L, K, c in cases])
    for (L, K, cost), res in zip(cases, runs):
        assert res["error"] is None, f"L={L}, K={K}, {cost}: raised {res['error']}"
        _check_slicing(res["result"], L, K, cost, reference(L, K, cost)[0])


@pytest.mark.graded(points=3, exercise="optimal_slicing")
def test_optimal_slicing_matches_brute_force(impl, seed):
    cases = [(L, K, c) for c in _slice_costs(seed) for L, K in [(1, 1), (1, 4), (3, 1), (5, 2), (7, 4), (9, 8), (10, 4)]]
    _run_slicing(impl, cases, brute_force_slicing)


@pytest.mark.graded(points=2, exercise="optimal_slicing")
def test_optimal_slicing_long_sequences(impl, seed):
    cases = [(L, K, c) for c in _slice_costs(seed, 1) for L, K in [(16, 4), (24, 8), (32, 8)]]
    _run_slicing(impl, cases, optimal_slicing)
