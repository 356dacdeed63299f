"""Lab 12: Young/Daly checkpoint intervals, the closed-form expected wall time, and the Monte Carlo job.

Monte Carlo checks: each simulated mean has a standard error SE = sample std / √runs; with a
fixed seed we assert |simulated − closed form| ≤ 4·SE (a correct formula fails this with
probability about 6e-5 per check, and the seeds are fixed, so the test is deterministic).
"""
import math

import pytest

from labkit.checkpoint import interval as I

HOUR, MIN = 3600.0, 60.0


# ---- worked numbers ---------------------------------------------------------------------------

def test_system_mtbf_is_device_mtbf_over_n():
    assert I.system_mtbf(1000.0, 1) == 1000.0
    assert I.system_mtbf(1000.0, 8) == 125.0
    # 10 000 GPUs, each failing once in 5 (365-day) years: the job sees a failure every 4.38 h
    m = I.system_mtbf(5 * I.YEAR_S, 10_000)
    assert I.YEAR_S == 31_536_000.0
    assert m == 15_768.0
    assert round(m / HOUR, 2) == 4.38


def test_worked_numbers_for_a_10000_gpu_job():
    m = I.system_mtbf(5 * I.YEAR_S, 10_000)
    young = I.young_interval(60.0, m)
    assert young == math.sqrt(2 * 60.0 * 15_768.0)
    assert round(young, 2) == 1375.56 and round(young / MIN, 1) == 22.9
    daly = I.daly_interval(60.0, m)
    assert round(daly, 2) == 1335.85 and round(daly / MIN, 1) == 22.3
    assert round(I.exact_interval(60.0, m), 2) == 1335.85
    # Young's first-order waste at its optimum is √(2C/M): 8.7 % of the time
    assert I.first_order_waste(young, 60.0, m) == pytest.approx(math.sqrt(2 * 60.0 / m), rel=1e-12)
    assert round(100 * math.sqrt(2 * 60.0 / m), 1) == 8.7


def test_daly_reproduces_the_papers_worked_cases():
    # Daly (2006): C = 5 min and M = 24 h, 6 h, 15 min give 117, 57 and 9.1 minutes
    assert round(I.daly_interval(5 * MIN, 24 * HOUR) / MIN) == 117
    assert round(I.daly_interval(5 * MIN, 6 * HOUR) / MIN) == 57
    assert round(I.daly_interval(5 * MIN, 15 * MIN) / MIN, 1) == 9.1
    # and by hand: M = 24 h, √(2·5·1440) = 120 min, ξ = 5/2880
    xi = 5 / 2880
    by_hand = 120 * MIN * (1 + math.sqrt(xi) / 3 + xi / 9) - 300
    assert I.daly_interval(300.0, 86_400.0) == pytest.approx(by_hand, rel=1e-14)


def test_daly_is_m_when_c_at_least_2m():
    assert I.daly_interval(200.0, 100.0) == 100.0
    assert I.daly_interval(500.0, 100.0) == 100.0
    # just below C = 2M the series gives 2M(1 + 1/3 + 1/9) − 2M = 8M/9: the formula jumps at 2M
    assert I.daly_interval(200.0 * (1 - 1e-12), 100.0) == pytest.approx(800.0 / 9, rel=1e-9)


def test_exact_interval_minimises_the_long_job_cost():
    for c, m in [(60.0, 15_768.0), (300.0, 900.0), (600.0, 900.0), (5000.0, 900.0)]:
        tau = I.exact_interval(c, m)
        assert 0 < tau < m
        assert math.exp((tau + c) / m) * (1 - tau / m) == pytest.approx(1.0, abs=1e-12)
        f = lambda t: I.wall_time_per_work(t, c, 600.0, m)  # noqa: E731
        assert f(tau) < f(tau * (1 - 1e-3)) and f(tau) < f(tau * (1 + 1e-3))
    # Daly's series is within 0.3 % of the exact optimum while C ≤ M/3; Young drifts away
    for c, m in [(60.0, 15_768.0), (300.0, 6 * HOUR), (300.0, 900.0)]:
        ex = I.exact_interval(c, m)
        assert abs(I.daly_interval(c, m) / ex - 1) < 3e-3
    assert I.young_interval(300.0, 900.0) / I.exact_interval(300.0, 900.0) > 1.3


# ---- closed form ------------------------------------------------------------------------------

def test_expected_wall_time_parts_and_limits():
    e = I.expected_wall_time(10 * HOUR, 1 * HOUR, 300.0, 600.0, 6 * HOUR)
    assert e.segments == 10 and e.checkpoint_s == 3000.0
    assert e.wall_s == pytest.approx(e.work_s + e.checkpoint_s + e.lost_s + e.restart_s, rel=1e-12)
    assert e.failures == pytest.approx(e.wall_s / (6 * HOUR), rel=1e-12)
    assert e.waste_fraction == pytest.approx(1 - 10 * HOUR / e.wall_s, rel=1e-12)
    # one segment, by hand: M e^{R/M}(e^{(τ+C)/M} − 1)
    one = I.expected_wall_time(HOUR, HOUR, 300.0, 600.0, 6 * HOUR)
    m = 6 * HOUR
    assert one.wall_s == pytest.approx(m * math.exp(600 / m) * (math.exp(3900 / m) - 1), rel=1e-12)
    # W a multiple of τ: wall / W is the long-job rate exactly
    assert e.wall_s / e.work_s == pytest.approx(I.wall_time_per_work(HOUR, 300.0, 600.0, 6 * HOUR), rel=1e-12)
    # failures vanishingly rare: wall → W + n·C, nothing lost
    rare = I.expected_wall_time(10 * HOUR, HOUR, 300.0, 600.0, 1e15)
    assert rare.wall_s == pytest.approx(10 * HOUR + 3000.0, rel=1e-9) and rare.lost_s < 1e-3
    # a partial last segment: 2.5 h of work in 1 h intervals is 1 h + 1 h + 0.5 h
    assert I.segment_lengths(2.5 * HOUR, HOUR) == [HOUR, HOUR, 0.5 * HOUR]
    assert I.segment_lengths(3 * HOUR, HOUR) == [HOUR] * 3


CASES = [  # (work, interval, C, R, M): rare failures, a partial last segment, R = 0, C ≈ M
    (20 * 15_768.0, 1335.85, 60.0, 600.0, 15_768.0),
    (10 * HOUR, 0.7 * HOUR, 300.0, 600.0, 2 * HOUR),
    (5 * HOUR, 1000.0, 120.0, 0.0, 3000.0),
    (4 * HOUR, 900.0, 600.0, 900.0, 900.0),
]


@pytest.mark.parametrize("case", CASES)
def test_simulated_mean_matches_closed_form(case):
    e = I.expected_wall_time(*case)
    s = I.simulate_job(*case, runs=4000, seed=7)
    assert s.checkpoint_s == e.checkpoint_s
    # every mean within 4 standard errors of its closed form (fixed seed)
    assert abs(s.wall_mean_s - e.wall_s) <= 4 * s.wall_se_s
    assert abs(s.lost_mean_s - e.lost_s) <= 4 * s.lost_se_s
    if case[3] > 0:
        assert abs(s.restart_mean_s - e.restart_s) <= 4 * s.restart_se_s
    assert abs(s.failures_mean - e.failures) <= 4 * s.failures_se
    assert s.wall_mean_s == pytest.approx(s.work_s + s.checkpoint_s + s.lost_mean_s + s.restart_mean_s, rel=1e-12)


def test_simulation_rejects_a_wrong_model():
    """Power check: the 4-SE test above would fail if the model ignored failures during restarts
    (wall = M(e^{L/M} − 1) + failures·R per segment), a common simplification."""
    work, tau, c, r, m = CASES[3]
    e = I.expected_wall_time(*CASES[3])
    segs = I.segment_lengths(work, tau)
    naive = sum(m * math.expm1((w + c) / m) + math.expm1((w + c) / m) * r for w in segs)
    s = I.simulate_job(*CASES[3], runs=4000, seed=7)
    assert naive < e.wall_s
    assert abs(s.wall_mean_s - naive) > 4 * s.wall_se_s


def test_simulation_is_seeded():
    a = I.simulate_job(*CASES[1], runs=200, seed=3)
    assert a == I.simulate_job(*CASES[1], runs=200, seed=3)
    assert a != I.simulate_job(*CASES[1], runs=200, seed=4)


# ---- the optimum ------------------------------------------------------------------------------

def _sim(tau, seed, c=300.0, m=900.0, r=600.0):
    return I.simulate_job(20 * m, tau, c, r, m, runs=6000, seed=seed)


def test_simulated_optimum_is_at_daly_and_not_at_young_when_c_is_a_third_of_m():
    """C = 5 min, M = 15 min. Grid τ = τ_Daly·2^(k/8), k = −8..8 (9 % steps), each point its own seed.
    Decision rule: Daly's τ is "at the optimum" if its simulated wall time is within 4 standard
    errors of the difference above the grid's best (the best of 17 noisy means is biased low by
    about 1.8 SE, which 4 SE covers); a τ is "worse" if it is more than 4 SE above Daly's.
    Here Young's τ (12.2 min vs Daly's 9.1) costs 2.8 % more wall time in the closed form, which the
    simulation resolves: the rule is not one that any τ would pass."""
    c, m = 300.0, 900.0
    daly = I.daly_interval(c, m)
    grid = [daly * 2 ** (k / 8) for k in range(-8, 9)]
    sims = [_sim(t, 100 + j) for j, t in enumerate(grid)]
    best = min(sims, key=lambda s: s.wall_mean_s)
    at = sims[8]
    assert at.wall_mean_s - best.wall_mean_s <= 4 * math.hypot(at.wall_se_s, best.wall_se_s)
    for wrong in (I.young_interval(c, m), 2 * daly, daly / 2):
        s = _sim(wrong, 999)
        assert s.wall_mean_s - at.wall_mean_s > 4 * math.hypot(s.wall_se_s, at.wall_se_s)
    # the simulated best lies within the grid step of Daly's τ
    assert abs(math.log2(best.interval_s / daly)) <= 1 / 8 + 1e-9


def test_optimum_table_for_the_notebook():
    t = I.optimum_table(runs=2000)
    lines = str(t).splitlines()
    assert max(map(len, lines)) <= 100 and len(t.rows) == 3
    assert [round(x, 1) for x in t.column("Young")] == [22.9, 60.0, 12.2]
    assert [round(x, 1) for x in t.column("Daly")] == [22.3, 56.7, 9.1]
    for best, exact in zip(t.column("sim best"), t.column("exact")):
        assert round(8 * math.log2(best), 9) % 1 == 0 and best != exact   # no formula chose the grid
        assert abs(math.log2(best / exact)) <= 0.5                        # ... and its best lies near
    assert all(z <= 3.0 for z in t.column("z Daly"))
    assert all(abs(d) <= 3.0 for d in t.column("sim - closed"))
    assert t.column("z Young")[2] > 4.0                                   # C = 5 min, M = 15 min
    assert t.column("Young +%")[2] == pytest.approx(2.77, abs=0.01)


# ---- one run, for the picture ----------------------------------------------------------------

def test_timeline_is_contiguous_and_adds_up():
    tl = I.simulate_timeline(10 * HOUR, 0.7 * HOUR, 300.0, 600.0, 2 * HOUR, seed=5)
    now = 0.0
    for ev in tl.events:
        assert ev.start_s == pytest.approx(now, abs=1e-6) and ev.end_s >= ev.start_s
        now = ev.end_s
        assert (ev.kind == "failure") == (ev.start_s == ev.end_s) or ev.kind == "restart"
    assert now == pytest.approx(tl.wall_s, rel=1e-12)
    total = lambda kind: sum(e.end_s - e.start_s for e in tl.events if e.kind == kind)  # noqa: E731
    assert total("work") == pytest.approx(10 * HOUR, rel=1e-12)
    assert total("checkpoint") == pytest.approx(tl.checkpoint_s, rel=1e-12)
    assert total("lost") == pytest.approx(tl.lost_s, rel=1e-12)
    assert total("restart") == pytest.approx(tl.restart_s, rel=1e-12)
    assert sum(e.kind == "failure" for e in tl.events) == tl.failures > 0
    assert sum(e.kind == "checkpoint" for e in tl.events) == 15
    assert tl.wall_s == pytest.approx(tl.work_s + tl.checkpoint_s + tl.lost_s + tl.restart_s, rel=1e-12)
    assert tl == I.simulate_timeline(10 * HOUR, 0.7 * HOUR, 300.0, 600.0, 2 * HOUR, seed=5)


def test_timeline_mean_matches_closed_form():
    """The event-by-event simulator is a second, independent implementation: its mean over 1500 seeds
    is within 4 standard errors of the closed form."""
    case = (4 * HOUR, 900.0, 600.0, 900.0, 900.0)
    walls = [I.simulate_timeline(*case, seed=s).wall_s for s in range(1500)]
    mean = sum(walls) / len(walls)
    se = math.sqrt(sum((w - mean) ** 2 for w in walls) / (len(walls) - 1) / len(walls))
    assert abs(mean - I.expected_wall_time(*case).wall_s) <= 4 * se


# ---- argument checks --------------------------------------------------------------------------

@pytest.mark.parametrize("call,exc,words", [
    (lambda: I.young_interval(0, 10), ValueError, "young_interval: checkpoint_s"),
    (lambda: I.daly_interval(1, -1), ValueError, "daly_interval: mtbf_s"),
    (lambda: I.system_mtbf(10.0, 0), ValueError, "system_mtbf: devices"),
    (lambda: I.system_mtbf(10.0, 2.0), TypeError, "system_mtbf: devices"),
    (lambda: I.expected_wall_time(10, 1, -1, 0, 5), ValueError, "expected_wall_time: checkpoint_s"),
    (lambda: I.simulate_job(10, 1, 0, 0, 5, runs=1), ValueError, "simulate_job: runs"),
    (lambda: I.simulate_job(1e6, 1e5, 0, 0, 1.0), ValueError, "simulate_job: about"),
    (lambda: I.simulate_timeline(10, "1", 0, 0, 5), TypeError, "simulate_timeline: interval_s"),
])
def test_bad_arguments_raise_one_line_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value) and "\n" not in str(info.value)
