"""labkit.checkpoint.multilevel: the multi-level simulator reduces to Lab 12's single-level one,
agrees with its first-order formula where failures are rare, and selective replication's cost."""
import math

import pytest

from labkit.checkpoint import interval as I
from labkit.checkpoint import lab
from labkit.checkpoint import multilevel as M

JOB = (4 * 3600.0, 1200.0, 60.0, 300.0, 3 * 3600.0)     # work, τ, C, R, M (s)


def _one_level(job):
    work, tau, c, r, m = job
    return work, tau, [M.Level("disk", 1, c, r)], [M.Failure("any", m, ("disk",))]


def test_one_level_is_lab12s_simulator_and_closed_form():
    work, tau, levels, kinds = _one_level(JOB)
    sim = M.simulate_multilevel(work, tau, levels, kinds, runs=3000, seed=4)
    ref = I.simulate_job(*JOB, runs=3000, seed=5)
    closed = I.expected_wall_time(*JOB).wall_s
    assert abs(sim.wall_mean_s - closed) < 4 * sim.wall_se_s
    assert abs(sim.wall_mean_s - ref.wall_mean_s) < 4 * math.hypot(sim.wall_se_s, ref.wall_se_s)
    assert sim.wall_se_s == pytest.approx(ref.wall_se_s, rel=0.2)
    assert sim.checkpoint_s == ref.checkpoint_s == 12 * 60.0             # 12 segments of 20 min
    assert sim.failures["any"] == pytest.approx(closed / JOB[4], rel=0.1)


def test_first_order_waste_is_youngs_with_one_level():
    work, tau, levels, kinds = _one_level(JOB)
    c, r, m = JOB[2:]
    assert M.first_order_waste(tau, levels, kinds) == pytest.approx(c / tau + tau / (2 * m) + r / m)


def test_first_order_agrees_with_the_simulation_when_failures_are_rare():
    levels, kinds = lab.scenario()
    work = 48 * 3600.0
    sim = M.simulate_multilevel(work, 150.0, levels, kinds, runs=1500, seed=1)
    assert sim.wall_mean_s / work == pytest.approx(1 + M.first_order_waste(150.0, levels, kinds), rel=0.02)
    assert sim.failures["process"] > sim.failures["node"] > sim.failures["job"]


def test_three_levels_beat_the_disk_alone_and_youngs_interval_per_level():
    levels, kinds = lab.scenario()
    young = M.young_per_level(levels, kinds)
    assert young["memory"] == pytest.approx(math.sqrt(2 * 1.0 * 3 * 3600.0))
    assert young["disk"] == pytest.approx(math.sqrt(2 * 120.0 * 48 * 3600.0))
    table = lab.multilevel_table(work_h=12.0, runs=400)
    wall = {r[0]: r[2] for r in table.rows}
    assert wall["memory + peer + disk"] < wall["memory + disk"] < wall["disk only, closed form"]
    # with more checkpoint levels, each failure falls back less far: the first order says the same
    assert M.first_order_waste(150.0, levels, kinds) < M.first_order_waste(150.0, levels[::2], [
        M.Failure(k.name, k.mtbf_s, tuple(s for s in k.survives if s != "peer")) for k in kinds])


def test_a_failure_during_a_restart_is_counted_and_can_fall_back_further():
    levels = [M.Level("memory", 1, 0.0, 50.0), M.Level("disk", 4, 0.0, 50.0)]
    kinds = [M.Failure("process", 100.0, ("memory", "disk")), M.Failure("job", 100.0, ("disk",))]
    sim = M.simulate_multilevel(500.0, 10.0, levels, kinds, runs=500, seed=0)
    assert sim.restart_mean_s > 0 and sim.wall_mean_s > 500.0
    assert sim.failures["process"] == pytest.approx(sim.failures["job"], rel=0.15)


def test_fallback_picks_the_most_frequent_surviving_level():
    levels, kinds = lab.scenario()
    assert [M.fallback(levels, k).name for k in kinds] == ["memory", "peer", "disk"]


def test_bad_levels_and_failures_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown level"):
        M.first_order_waste(10.0, [M.Level("disk", 1, 1.0, 1.0)], [M.Failure("x", 10.0, ("tape",))])
    with pytest.raises(ValueError, match="at least one level intact"):
        M.Failure("x", 10.0, ())
    with pytest.raises(ValueError, match="names must differ"):
        M.first_order_waste(10.0, [M.Level("a", 1, 1.0, 1.0)] * 2, [M.Failure("x", 10.0, ("a",))])
    with pytest.raises(ValueError, match="far too frequent"):
        M.simulate_multilevel(1e6, 10.0, [M.Level("a", 1, 1.0, 1.0)], [M.Failure("x", 1.0, ("a",))])


def test_replicating_a_stage_costs_its_devices_and_removes_its_rollbacks():
    comps = lab.pipeline_components()
    none = M.replication_cost(comps, (), 3600.0, 120.0, 30.0)
    emb = M.replication_cost(comps, ("embedding",), 3600.0, 120.0, 30.0)
    assert none["devices"] == 16 and emb["devices"] == 20
    rate = 4 / comps[0].mtbf_s
    assert none["wall"] - emb["wall"] == pytest.approx(rate * (1800 + 1800 - 30))
    assert M.best_replication(comps, 3600.0, 120.0, 30.0, 4)[0] == ("embedding",)
    assert M.best_replication(comps, 3600.0, 120.0, 30.0, 16)[0] == tuple(c.name for c in comps)
    assert M.best_replication(comps, 3600.0, 120.0, 30.0, 0)[0] == ()
    with pytest.raises(ValueError, match="no component named"):
        M.replication_cost(comps, ("decoder",), 3600.0, 120.0, 30.0)


def test_recovery_and_replication_tables():
    rec = {r[0]: r for r in lab.recovery_table().rows}
    assert [round(rec[k][5]) for k in ("process", "node", "job")] == [135, 390, 3300]
    daly = I.daly_interval(120.0, 1 / (1 / 10800 + 1 / 43200 + 1 / 172800))
    assert rec["process"][6] == pytest.approx(300 + daly / 2)
    rep = {r[0]: r for r in lab.replication_table().rows}
    assert rep["none"][1] == 0 and rep["embedding"][1] == 4 and rep["embedding, stage 1, stage 2, stage 3"][1] == 16
    assert rep["embedding"][3] > rep["stage 1"][3] > 0
