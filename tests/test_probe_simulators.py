"""Probe: the simulators and closed forms of Labs 03, 08 and 12 (checkpoint intervals, voting, ABFT,
the domino effect, warps, pipeline schedules: Chimera, DualPipe, TeraPipe, staleness) given bad input.

Each bad input gets a one-line error of the stated type naming the argument, fast: inputs that used
to hang (a 10⁹-trip loop, a restart that never succeeds, L = 2048 slicing) are refused up front, so
every call here must return in seconds (15 s allows a loaded machine). Inputs that used to give a wrong answer
(inf for a representable √(2CM), an interval off by 10²³⁹) are checked against the right one.
"""
import math
import time

import numpy as np
import pytest

from labkit.checkpoint import abft, domino, interval as I, voting as V
from labkit.checkpoint.state import ResumableSampler
from labkit.gpu_model import warps as W
from labkit.pipeline import chimera, dualpipe, schedules, staleness, terapipe
from labkit.pipeline.simulate import stage_times

NAN, INF = float("nan"), float("inf")

BAD = [
    # checkpoint intervals (Young/Daly, the job simulator)
    ("young nan", lambda: I.young_interval(NAN, 10.0), ValueError, "young_interval: checkpoint_s"),
    ("young str", lambda: I.young_interval(60.0, "1h"), TypeError, "young_interval: mtbf_s"),
    ("daly zero", lambda: I.daly_interval(0.0, 10.0), ValueError, "daly_interval: checkpoint_s"),
    ("exact inf", lambda: I.exact_interval(60.0, INF), ValueError, "exact_interval: mtbf_s"),
    ("waste overflow", lambda: I.first_order_waste(1e-300, 1e300, 1e-300), ValueError,
     "first_order_waste: C/τ + τ/(2M) overflows"),
    ("wall per work overflow", lambda: I.wall_time_per_work(1.0, 1.0, 1e6, 1.0), ValueError,
     "wall_time_per_work: the wall time per work overflows float64"),
    ("expected wall overflow", lambda: I.expected_wall_time(100.0, 10.0, 1e3, 0.0, 1.0), ValueError,
     "expected_wall_time: the expected wall time overflows"),
    ("segments inf", lambda: I.segment_lengths(1e300, 1e-300), ValueError, "segment_lengths: W/τ = inf"),
    ("timeline restart never succeeds", lambda: I.simulate_timeline(100, 10, 1, 1e6, 1.0), ValueError,
     "simulate_timeline: about"),
    ("timeline max_events", lambda: I.simulate_timeline(100, 10, 1, 1, 1.0, max_events=0), ValueError,
     "simulate_timeline: max_events"),
    ("job runs", lambda: I.simulate_job(100, 10, 1, 1, 50.0, runs=1), ValueError, "simulate_job: runs"),
    ("job draws", lambda: I.simulate_job(100, 10, 1, 1e6, 1.0), ValueError, "simulate_job: about inf random draws"),
    # voting
    ("nmr units huge", lambda: V.nmr_reliability(0.9, 10 ** 12), ValueError, "nmr_reliability: units"),
    ("nmr reliability", lambda: V.nmr_reliability(1.5, 3), ValueError, "nmr_reliability: reliability"),
    ("mttf units float", lambda: V.nmr_mttf(100.0, 3.0), TypeError, "nmr_mttf: units"),
    ("vote no units", lambda: V.vote(np.zeros((3, 0), dtype=int)), ValueError, "vote: outputs must have"),
    ("vote strings", lambda: V.vote(np.array([["a", "b", "a"]])), TypeError, "vote: outputs must be numbers"),
    ("vote nan", lambda: V.vote(np.array([[1.0, NAN, 1.0]])), ValueError, "vote: outputs contain NaN"),
    ("lifetime draws", lambda: V.simulate_lifetime(10.0, 10 ** 9), ValueError, "simulate_lifetime: trials · units"),
    ("redundancy draws", lambda: V.simulate_redundancy(0.9, 10 ** 6), ValueError, "simulate_redundancy: trials · units"),
    ("voting_table not a list", lambda: V.voting_table(0.9), TypeError, "voting_table: reliabilities"),
    ("voting_table seed", lambda: V.voting_table(seed="s"), TypeError, "voting_table: seed"),
    # ABFT
    ("abft overflow", lambda: abft.abft_matmul(np.full((2, 2), 1e200), np.full((2, 2), 1e200)), ValueError,
     "abft_matmul: A·B or its checksums overflow float64"),
    ("abft nan", lambda: abft.abft_matmul(np.array([[NAN]]), np.ones((1, 1))), ValueError, "abft_matmul: A must be finite"),
    ("abft shapes", lambda: abft.abft_matmul(np.ones((2, 3)), np.ones((2, 3))), ValueError, "abft_matmul: A is (2, 3)"),
    ("abft_flops str", lambda: abft.abft_flops("8", 8, 8), TypeError, "abft_flops: m"),
    # the domino effect
    ("coordinated too many", lambda: domino.coordinated_checkpoints(3, 1e-300, 1e300), ValueError,
     "coordinated_checkpoints: processes · end_s / period_s"),
    ("independent too many", lambda: domino.independent_checkpoints(10 ** 6, 1.0, 10.0), ValueError,
     "independent_checkpoints: processes · end_s / period_s"),
    ("messages too many", lambda: domino.random_messages(3, 10 ** 9, 10.0, 1.0), ValueError, "random_messages: count"),
    ("experiment seed", lambda: domino.domino_experiment(2, seed=-1), ValueError, "domino_experiment: seed"),
    ("experiment seed float", lambda: domino.domino_experiment(2, seed=1.5), TypeError, "domino_experiment: seed"),
    ("domino_table counts", lambda: domino.domino_table(message_counts=15), TypeError, "domino_table: message_counts"),
    ("sampler seed huge", lambda: ResumableSampler(10, 2, seed=10 ** 18), ValueError, "ResumableSampler: seed"),
    # warps (Lab 03)
    ("warp 1e9 trips", lambda: W.simulate_warp([W.Loop(lambda v: 10 ** 9, [W.Op("body")])]), ValueError,
     "simulate_warp: trips of lane 0 must be an int in 0..1000000"),
    ("warp huge op", lambda: W.simulate_warp([W.Op("x", 10 ** 9)]), ValueError, "simulate_warp: the program issues"),
    ("warp trips float", lambda: W.simulate_warp([W.Loop(lambda v: 1.5, [W.Op("b")])]), TypeError,
     "simulate_warp: trips of lane 0"),
    ("warp size", lambda: W.simulate_warp([W.Op("a")], warp_size=0), ValueError, "simulate_warp: warp_size"),
    # pipeline schedules and simulators (Lab 08)
    ("terapipe L=2048", lambda: terapipe.optimal_slicing(2048, 4), ValueError,
     "optimal_slicing: seq_len must be an int <= 128"),
    ("uniform huge", lambda: terapipe.best_uniform_slicing(10 ** 9, 4), ValueError, "best_uniform_slicing: seq_len"),
    ("dualpipe 2000x4000", lambda: dualpipe.dualpipe_schedule(2000, 4000), ValueError,
     "dualpipe_schedule: num_ranks * num_microbatches must be <= 16384"),
    ("dualpipe odd", lambda: dualpipe.simulate_dualpipe(3, 6, 1, 2, 1), ValueError, "simulate_dualpipe: DualPipe needs an even"),
    ("schedule huge", lambda: schedules.schedule("1f1b", 10 ** 4, 10 ** 4), ValueError,
     "schedule: num_ranks · virtual_stages · num_microbatches"),
    ("schedule float", lambda: schedules.schedule("1f1b", 4.0, 8), TypeError, "schedule: num_ranks must be an int"),
    ("chimera huge", lambda: chimera.chimera_schedule(1000, 10 ** 6), ValueError, "chimera_schedule: num_ranks · num_microbatches"),
    ("chimera slots huge", lambda: chimera.chimera_slots(10 ** 9), ValueError, "chimera_slots: num_ranks"),
    ("chimera memory huge", lambda: chimera.chimera_memory(10 ** 9), ValueError, "chimera_memory: num_ranks"),
    ("looped huge", lambda: chimera.looped_layout(10 ** 6, 10 ** 6), ValueError, "looped_layout: num_ranks · virtual_stages"),
    ("bidirectional huge", lambda: chimera.bidirectional_layout(10 ** 6, 10 ** 6), ValueError, "bidirectional_layout: 2 · num_ranks"),
    ("chimera idle nan", lambda: chimera.chimera_idle(4, 4, NAN, 1), ValueError, "forward_time must be a finite"),
    ("stage_times float", lambda: stage_times(1.0, 2.5, "x"), TypeError, "stage_times: num_stages"),
    ("staleness table int", lambda: staleness.staleness_table(update_every=2), TypeError, "staleness_table: update_every"),
    ("training table lrs", lambda: staleness.training_table(lrs=0.4), TypeError, "training_table: lrs"),
    ("training table stages", lambda: staleness.training_table(num_stages=10 ** 6), ValueError, "training_table: num_stages"),
    ("staleness huge N", lambda: staleness.staleness("1f1b", 4, update_every=10 ** 9), ValueError,
     "stage_events: num_microbatches must be <= 100000"),
    ("train steps", lambda: staleness.train([0, 0], steps=10 ** 9), ValueError, "train: steps"),
]


@pytest.mark.parametrize("name,call,exc,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_fast_one_line_error(name, call, exc, words):
    t0 = time.monotonic()
    with pytest.raises(exc) as e:
        call()
    assert words in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
    assert time.monotonic() - t0 < 15.0              # refused up front: the inputs that hung ran for hours


def test_intervals_that_fit_a_float_are_returned():
    assert I.young_interval(1e300, 1e300) == pytest.approx(math.sqrt(2) * 1e300, rel=1e-15)
    assert math.isfinite(I.daly_interval(1e300, 1e300))
    # C/M = 1e-600: e^{(τ+C)/M} rounds to 1; the exact optimum is Young's √(2CM) to within √(C/M)
    assert I.exact_interval(1e-300, 1e300) == pytest.approx(math.sqrt(2), rel=1e-12)
    assert I.exact_interval(1e-9, 1.0) == pytest.approx(math.sqrt(2e-9) * (1 - math.sqrt(2e-9) / 3), rel=1e-9)
    assert I.exact_interval(1e300, 1e-300) == pytest.approx(1e-300)          # C ≫ M: τ → M


def test_voting_over_many_units_is_fast_and_right():
    import mpmath

    t0 = time.monotonic()
    for n, r in [(1001, 0.6), (2000, 0.3), (5001, 0.51)]:
        with mpmath.workdps(30):                 # P(X >= N/2 + 1), X ~ Binomial(N, R)
            want = float(mpmath.betainc(n // 2 + 1, n - n // 2, 0, r, regularized=True))
        assert V.nmr_reliability(r, n) == pytest.approx(want, rel=1e-9, abs=1e-300)
    assert V.nmr_reliability(0.5, 10 ** 7) == pytest.approx(0.5 - 0.5 * math.sqrt(2 / (math.pi * 10 ** 7)), rel=1e-6)
    # MTTF = M·(H_N − H_{N/2}) → M·ln 2; exact sum and series agree where both run
    assert V.nmr_mttf(100, 100_001) == pytest.approx(100 * sum(1 / j for j in range(50_001, 100_002)), rel=1e-14)
    assert V.nmr_mttf(100, 10 ** 10) == pytest.approx(100 * math.log(2), rel=1e-9)
    assert time.monotonic() - t0 < 15.0              # refused up front: the inputs that hung ran for hours
