"""Lab 11 on this machine (labkit.planner.local): the rank correlation, the measured constants, and
the predicted-vs-measured rows — built on a fake measurement so no 8-rank run is timed here."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from labkit.collectives.alpha_beta import predict_time
from labkit.planner import Model, Plan, predict
from labkit.planner import local as L
from labkit.planner.local import (GridRow, LocalMachine, feasible_grids, fit_efficiency, local_model,
                                  measure_grids, median_abs_error, predict_grid, ranks, spearman, validate)

MODEL = Model(layers=4, hidden=64, heads=4, seq_len=32, vocab=128)
MACHINE = LocalMachine(ranks=8, cores=2, thread_flops=40e9, alpha=500e-6, beta=1e-9, dtype="float64",
                       bytes_per_element=8)
EIGHT = [(8, 1, 1), (4, 2, 1), (4, 1, 2), (2, 4, 1), (2, 2, 2), (2, 1, 4), (1, 4, 2), (1, 2, 4)]


# -- spearman ---------------------------------------------------------------------------------------

def test_spearman_hand_examples():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [9, 7, 5, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [1, 100, 1000]) == pytest.approx(1.0)     # only the order counts
    # ties share the mean of their ranks: x ranks (1, 2.5, 2.5, 4) against y ranks (1, 2, 3, 4)
    assert ranks([10, 20, 20, 30]) == [1, 2.5, 2.5, 4]
    rx, ry = [1, 2.5, 2.5, 4], [1, 2, 3, 4]
    mx = my = 2.5
    want = sum((a - mx) * (b - my) for a, b in zip(rx, ry)) / math.sqrt(
        sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    assert spearman([10, 20, 20, 30], [1, 2, 3, 4]) == pytest.approx(want) == pytest.approx(0.9486833)
    # d² form (no ties): 1 − 6Σd²/(n(n²−1)); ranks (1,2,3,4,5) vs (2,1,4,3,5): Σd² = 4 → 0.8
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError):
        spearman([1, 2], [1, 2, 3])


# -- the machine ------------------------------------------------------------------------------------

def test_machine_constants_from_the_course_measurements(monkeypatch):
    from labkit.collectives import timing as collectives_timing
    from labkit.roofline import measure as roofline_measure

    calls = {"all_reduce": 0, "matmul": 0}
    real_ar, real_measure = collectives_timing.time_all_reduces, roofline_measure.measure

    def counted_ar(*a, **k):
        calls["all_reduce"] += 1
        return real_ar(*a, **k)

    def counted_measure(*a, **k):
        calls["matmul"] += 1
        return real_measure(*a, **k)

    monkeypatch.setattr(collectives_timing, "time_all_reduces", counted_ar)
    monkeypatch.setattr(roofline_measure, "measure", counted_measure)
    m = L.measure_machine(2, MODEL, micro_batch=1, sizes=(4 << 10, 1 << 20, 4 << 20), repeat=3)
    assert calls == {"all_reduce": 1, "matmul": len(L.matmul_shapes(MODEL, 32))}
    for v in (m.thread_flops, m.alpha, m.beta, m.peak_flops, m.bandwidth):
        assert math.isfinite(v) and v > 0
    assert m.ranks == 2 and m.cores >= 1 and len(m.samples) == 3
    # the dtype is the one the real run trains in
    from labkit.parallel3d.train import TrainSetup
    assert m.dtype == str(TrainSetup(1, 1, 1, 1, 1).dtype).removeprefix("torch.")
    assert m.bytes_per_element == torch.empty((), dtype=TrainSetup(1, 1, 1, 1, 1).dtype).element_size()


def test_cores_are_shared_between_ranks():
    assert MACHINE.share == 0.25 and MACHINE.peak_flops == pytest.approx(10e9)
    two = LocalMachine(2, 2, 40e9, 1e-4, 1e-9, "float64", 8)
    assert two.share == 1.0 and two.peak_flops == 40e9
    c = MACHINE.cluster(0.5)
    assert (c.gpus, c.gpus_per_node, c.peak_flops, c.device.gemm_efficiency) == (8, 8, 10e9, 0.5)
    assert (c.network.intra_latency, c.network.nvlink_bus) == (500e-6, pytest.approx(1e9))


def test_predict_uses_the_runs_element_size():
    # labkit.parallel3d trains in float64 and sends whole activations: 8-byte elements, no scatter/gather
    c = MACHINE.cluster()
    plan = Plan(2, 2, 2, micro_batch=4, recompute="none")
    soft = MACHINE.software()
    assert (soft.element_bytes, soft.grad_bytes, soft.scatter_gather) == (8, 8.0, False)
    narrow = predict(MODEL, c, plan, 32, software=dataclasses.replace(soft, element_bytes=2))
    wide = predict(MODEL, c, plan, 32, software=soft)
    b, s, h = 4, MODEL.seq_len, MODEL.hidden
    ar = predict_time("ring_all_reduce", 2, 8 * b * s * h, 500e-6, 1e-9)
    # m = 4 micro-batches × (2 layers × (2 forward + 2 backward) all-reduces, + the vocab-parallel
    # embedding's 1 when the slowest stage is the first)
    first = wide.stage_times[0] >= wide.stage_times[1]
    assert wide.tp_comm == pytest.approx(4 * (2 * 4 + first) * ar, rel=1e-9)
    assert wide.pp_comm == pytest.approx(4 * 2 * (500e-6 + 8 * b * s * h * 1e-9), rel=1e-9)
    assert wide.tp_comm > narrow.tp_comm and wide.gemm == narrow.gemm      # compute-bound: FLOPs alone


# -- grids and rows ---------------------------------------------------------------------------------

def test_feasible_grids():
    assert feasible_grids(MODEL, 8, 32, 4) == EIGHT     # tp | 4 heads, pp | 4 layers, m = 4 ≥ pp
    assert feasible_grids(MODEL, 4, 32, 4) == [(4, 1, 1), (2, 2, 1), (2, 1, 2), (1, 4, 1), (1, 2, 2), (1, 1, 4)]
    assert (1, 1, 4) not in feasible_grids(MODEL, 4, 32, 2)          # 1F1B needs m ≥ pp
    assert feasible_grids(MODEL, 8, 16, 4) == [g for g in EIGHT if g[0] <= 4]   # dp·m | B
    assert (1, 8, 1) not in feasible_grids(local_model(), 8) and (1, 1, 8) not in feasible_grids(local_model(), 8)


def _fake(times):
    seen = []

    def measure(cfg, world, dp, tp, pp, global_batch, micro_batches, steps=5):
        seen.append((world, dp, tp, pp, global_batch, micro_batches, cfg.hidden))
        return times[(dp, tp, pp)]
    return measure, seen


def test_validate_rows_on_fake_measurements():
    fake = {g: 0.1 * (k + 1) for k, g in enumerate(EIGHT)}
    measure, seen = _fake(fake)
    rows = validate(8, MACHINE, model=MODEL, efficiency=0.5, measure=measure)
    assert [r.grid for r in rows] == EIGHT
    assert sorted(seen) == sorted((8, *g, 32, 4, 64) for g in EIGHT)
    for r in rows:
        assert isinstance(r, GridRow)
        assert sum(r.parts.values()) == pytest.approx(r.predicted)
        assert set(r.parts) == {"compute", "bubble", "tp", "pp", "dp"}
        assert r.measured == fake[r.grid]
        assert r.micro_batch == 32 // (r.dp * 4) and r.micro_batches == 4
        assert r.predicted == pytest.approx(predict_grid(MODEL, MACHINE, r.grid, 32, 4, 0.5).step_time)
        assert r.ratio == pytest.approx(r.measured / r.predicted)
        assert r.error == pytest.approx(r.predicted / r.measured - 1)
        assert (r.parts["tp"] == 0) == (r.tp == 1) and (r.parts["bubble"] == 0) == (r.pp == 1)
        assert (r.parts["dp"] == 0) == (r.dp == 1 and r.pp == 1)   # pp > 1: the tied embedding's all-reduce
    errs = sorted(abs(r.predicted / fake[r.grid] - 1) for r in rows)
    assert median_abs_error(rows) == pytest.approx((errs[3] + errs[4]) / 2)
    # the same rows from a dict of measurements; a missing grid is an error
    again = validate(8, MACHINE, model=MODEL, efficiency=0.5, measured=measure_grids(8, MODEL, measure=measure))
    assert again == rows
    with pytest.raises(ValueError, match="no measurement"):
        validate(8, MACHINE, model=MODEL, efficiency=0.5, measured={EIGHT[0]: 1.0})
    with pytest.raises(ValueError, match="measured for 8 ranks"):
        validate(4, MACHINE, model=MODEL, efficiency=0.5, measured=fake)


def test_efficiency_fit_recovers_a_planted_value():
    planted = 0.3
    truth = {g: predict_grid(MODEL, MACHINE, g, 32, 4, planted).step_time for g in EIGHT}
    assert fit_efficiency(MODEL, [(MACHINE, truth)], 32, 4) == pytest.approx(planted, rel=1e-5)
    rows = validate(8, MACHINE, model=MODEL, measured=truth)      # efficiency fitted on these rows
    assert median_abs_error(rows) == pytest.approx(0, abs=1e-6)          # the fit stops at e ± 1e-7
    assert spearman([r.predicted for r in rows], [r.measured for r in rows]) == pytest.approx(1.0)
    # measured faster than the matmul rate allows: clamped to 1
    fast = {g: t / 10 for g, t in predict_grid_all(1.0).items()}
    assert fit_efficiency(MODEL, [(MACHINE, fast)], 32, 4) == 1.0


def predict_grid_all(e):
    return {g: predict_grid(MODEL, MACHINE, g, 32, 4, e).step_time for g in EIGHT}
