"""Lab 12: replication with majority voting (TMR / NMR) against parallel spares.

Monte Carlo checks use the standard error of a proportion, SE = √(p(1 − p)/trials), computed from
the closed-form p (not the estimate, so a run that happens to see no failure cannot shrink its
own error bar to zero); with a fixed seed we assert |estimate − p| ≤ 4·SE.
"""
import math
from fractions import Fraction

import numpy as np
import pytest

from labkit.checkpoint import voting as V

TRIALS = 100_000


def _within_4se(result, p):
    se = math.sqrt(p * (1 - p) / result.trials)
    return abs(result.estimate - p) <= 4 * se


@pytest.mark.parametrize("r", [0.2, 0.5, 0.8, 0.95, 0.99])
def test_tmr_closed_form_and_simulation(r):
    assert V.tmr_reliability(r) == pytest.approx(r ** 3 + 3 * r ** 2 * (1 - r), rel=1e-14)
    assert V.nmr_reliability(r, 3) == pytest.approx(V.tmr_reliability(r), rel=1e-14)
    sim = V.simulate_redundancy(r, 3, TRIALS, seed=11)
    assert _within_4se(sim, V.tmr_reliability(r))


@pytest.mark.parametrize("r,n", [(0.7, 1), (0.7, 5), (0.6, 7), (0.9, 4), (0.55, 9)])
def test_nmr_closed_form_and_simulation(r, n):
    # by hand for 5 units: at least 3 of 5
    if n == 5:
        assert V.nmr_reliability(r, 5) == pytest.approx(
            10 * r**3 * (1 - r) ** 2 + 5 * r**4 * (1 - r) + r**5, rel=1e-14)
    assert _within_4se(V.simulate_redundancy(r, n, TRIALS, seed=12), V.nmr_reliability(r, n))


@pytest.mark.parametrize("r,n", [(0.3, 2), (0.7, 3), (0.9, 3)])
def test_parallel_closed_form_and_simulation(r, n):
    assert _within_4se(V.simulate_redundancy(r, n, TRIALS, seed=13, scheme="parallel"),
                       V.parallel_reliability(r, n))


def test_the_parallel_formula_is_not_votings():
    """1 − (1 − R)^3 quoted for TMR: at R = 0.9 it claims 0.999; a real voter gets 0.972, and the
    simulation tells the two apart by far more than 4 standard errors."""
    assert V.parallel_reliability(0.9, 3) == pytest.approx(0.999, abs=1e-12)
    assert V.tmr_reliability(0.9) == pytest.approx(0.972, abs=1e-12)
    sim = V.simulate_redundancy(0.9, 3, TRIALS, seed=14)
    assert _within_4se(sim, 0.972) and not _within_4se(sim, 0.999)


def test_tmr_beats_one_unit_only_above_one_half():
    # exact rational arithmetic: 3R² − 2R³ − R = R(2R − 1)(1 − R)
    for r in [Fraction(k, 20) for k in range(21)]:
        gain = 3 * r**2 - 2 * r**3 - r
        assert gain == r * (2 * r - 1) * (1 - r)
        assert (gain > 0) == (Fraction(0) < r < Fraction(1) and r > Fraction(1, 2))
    assert V.tmr_reliability(0.5) == 0.5                        # the crossing, exactly
    for r in np.linspace(0.01, 0.49, 25):
        assert V.tmr_reliability(r) < r
    for r in np.linspace(0.51, 0.99, 25):
        assert V.tmr_reliability(r) > r
    # and simulated: at R = 0.4 TMR is measurably worse than one unit, at R = 0.6 better
    low, high = V.simulate_redundancy(0.4, 3, TRIALS, seed=15), V.simulate_redundancy(0.6, 3, TRIALS, seed=16)
    assert low.estimate + 4 * low.standard_error < 0.4 and high.estimate - 4 * high.standard_error > 0.6


def test_vote():
    value, ok = V.vote(np.array([[0, 0, 7], [3, 5, 3], [1, 2, 3], [4, 4, 4], [0, 1, 1]]))
    assert ok.tolist() == [True, True, False, True, True]
    assert value[ok].tolist() == [0, 3, 4, 1]
    value, ok = V.vote(np.array([[2, 2, 5, 5]]))                 # a tie is no majority
    assert not ok[0]


def test_agreeing_wrong_units_change_the_kind_of_failure_not_the_reliability():
    """If failed units can agree (a single wrong value), they sometimes outvote the right answer
    (silent corruption) instead of leaving no majority; the strict-majority reliability is the same."""
    agree = V.simulate_redundancy(0.7, 3, TRIALS, seed=17, wrong_values=1)
    apart = V.simulate_redundancy(0.7, 3, TRIALS, seed=17)
    assert agree.successes == apart.successes                  # same draws of working units
    assert _within_4se(agree, V.tmr_reliability(0.7))
    assert apart.wrong_majority == 0
    # with one wrong value, every failed mission is a wrong majority
    assert agree.wrong_majority == TRIALS - agree.successes


@pytest.mark.parametrize("n,ratio", [(1, Fraction(1)), (3, Fraction(5, 6)), (5, Fraction(47, 60))])
def test_mttf_of_voting_is_lower_than_one_units(n, ratio):
    assert V.nmr_mttf(1.0, n) == pytest.approx(float(ratio), rel=1e-14)
    sim = V.simulate_lifetime(1000.0, n, TRIALS, seed=18)
    assert abs(sim.mean_s - V.nmr_mttf(1000.0, n)) <= 4 * sim.se_s
    # the closed form is the integral of R_NMR(e^{-t/M}) dt: check by the trapezoid rule
    t = np.linspace(0, 40, 400_001)
    rel = np.array([V.nmr_reliability(float(x), n) for x in np.exp(-t[::1000])])
    assert rel[0] == 1.0
    r = np.exp(-t)
    k0 = n // 2 + 1
    curve = sum(math.comb(n, k) * r**k * (1 - r) ** (n - k) for k in range(k0, n + 1))
    assert np.allclose(curve[::1000], rel, atol=1e-12)
    assert float(np.sum((curve[1:] + curve[:-1]) / 2 * np.diff(t))) == pytest.approx(float(ratio), abs=1e-8)


def test_tmr_wins_only_for_missions_shorter_than_m_ln2():
    m = 1000.0
    for t, better in [(0.5 * m * math.log(2), True), (1.5 * m * math.log(2), False)]:
        r = math.exp(-t / m)
        assert (V.tmr_reliability(r) > r) == better
    assert V.tmr_reliability(math.exp(-math.log(2))) == pytest.approx(0.5, abs=1e-15)


def test_voting_table():
    t = V.voting_table(trials=50_000)
    assert max(len(line) for line in str(t).splitlines()) <= 100
    assert t.column("TMR 3R²-2R³")[2] == pytest.approx(0.972, abs=1e-12)
    assert t.column("1-(1-R)³ (not voting)")[2] == pytest.approx(0.999, abs=1e-12)
    assert [g > 0 for g in t.column("TMR - R")] == [False, False, True, True, True]
    assert t.column("TMR - R")[1] == 0.0


@pytest.mark.parametrize("call,exc,words", [
    (lambda: V.tmr_reliability(1.5), ValueError, "tmr_reliability: reliability"),
    (lambda: V.nmr_reliability(0.5, 0), ValueError, "nmr_reliability: units"),
    (lambda: V.parallel_reliability("0.5", 2), TypeError, "parallel_reliability: reliability"),
    (lambda: V.simulate_redundancy(0.5, 3, scheme="vote"), ValueError, "simulate_redundancy: scheme"),
    (lambda: V.simulate_lifetime(-1.0, 3), ValueError, "simulate_lifetime: mtbf_s"),
])
def test_bad_arguments_raise_one_line_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value) and "\n" not in str(info.value)
