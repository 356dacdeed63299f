"""Lab 11: the device term of the cost model (labkit.planner.device) — a GEMM's time from its shape
(tiles, waves, roofline, overhead) and a memory-bound kernel's from its bytes — by hand, against the
published A100 figures and a CUTLASS maintainer's wave example, and on planted CPU measurements
(labkit.planner.calibrate; the live CPU sweep is the notebook's, as timings are not asserted)."""
from __future__ import annotations

import dataclasses
import math

import pytest

from labkit.planner import calibrate as C
from labkit.planner.device import A100_40GB, A100_80GB, H100_80GB, Device, gemm_time, memory_op_time, waves

PER_SM = 312e12 / 108


def test_a100_data_sheet():
    assert (A100_80GB.peak_flops, A100_80GB.sms, A100_80GB.tile) == (312e12, 108, (256, 128))
    assert (A100_80GB.hbm_bandwidth, A100_40GB.hbm_bandwidth) == (2.039e12, 1.555e12)
    assert (H100_80GB.peak_flops, H100_80GB.sms) == (989e12, 132)
    assert A100_80GB.memory_bytes == 80 * 2 ** 30


def test_waves_as_a_cutlass_maintainer_counts_them():
    # NVIDIA/cutlass issue #335: 210 thread blocks on the A100's 108 SMs take ceil(210/108) = 2
    # waves; restricted to 100 SMs, 3 waves; to 105 SMs, still 2
    assert waves(A100_80GB, 210) == 2
    assert waves(dataclasses.replace(A100_80GB, sms=100), 210) == 3
    assert waves(dataclasses.replace(A100_80GB, sms=105), 210) == 2
    assert [waves(A100_80GB, t) for t in (0, 1, 108, 109, 216, 217)] == [0, 1, 1, 2, 2, 3]


def test_compute_bound_gemm_by_hand():
    # 8192 × 8192 × 8192: 32 × 64 = 2048 tiles of 256 × 128 (either way round) = 19 waves of 108
    dev = A100_80GB.with_efficiency(gemm=1.0, hbm=1.0)
    t = gemm_time(dev, 8192, 8192, 8192)
    assert (t.tiles, t.waves) == (2048, 19)
    assert t.compute_s == pytest.approx(19 * 2 * 256 * 128 * 8192 / PER_SM, rel=1e-12)
    assert t.memory_s == pytest.approx(3 * 8192 ** 2 * 2 / 2.039e12, rel=1e-12)
    assert t.bound == "compute" and t.seconds == pytest.approx(t.compute_s + 4e-6, rel=1e-12)
    # the last wave is 2048 − 18·108 = 104 tiles: 96 % full, so 19 waves do 2048/2052 of the peak's work
    assert t.achieved_flops < 312e12 * 2048 / 2052
    assert t.achieved_flops == pytest.approx(t.flops / t.seconds)


def test_wave_quantisation_one_tile_more_costs_a_wave():
    # 108 tiles fill one wave; 109 need two: the time doubles for 1 % more work
    dev = A100_80GB
    one = gemm_time(dev, 256 * 108, 128, 4096)
    two = gemm_time(dev, 256 * 109, 128, 4096)
    assert (one.tiles, one.waves, two.tiles, two.waves) == (108, 1, 109, 2)
    assert two.compute_s == pytest.approx(2 * one.compute_s, rel=1e-12)


def test_tile_quantisation_a_partial_tile_costs_a_whole_one():
    a = gemm_time(A100_80GB, 256, 128, 4096)
    b = gemm_time(A100_80GB, 200, 100, 4096)
    assert a.tiles == b.tiles == 1 and a.compute_s == b.compute_s
    assert b.flops < a.flops and b.achieved_flops < a.achieved_flops


def test_the_tile_is_laid_the_way_that_needs_fewer_waves():
    # 128 × 27648 outputs: as 256 × 128 tiles 1 × 216 = 216 tiles (2 waves), as 128 × 256: 108 (1 wave)
    t = gemm_time(A100_80GB, 128, 27648, 1024)
    assert (t.tiles, t.waves) == (108, 1)


def test_roofline_attention_scores_are_memory_bound():
    # attention scores of a head of 128: 2·s²·d FLOPs for 2·(2·s·d + s²) bytes = 114 FLOP/byte, below
    # the A100's ridge of 312/2.039 = 153; fc1 of the same layer is far above it
    dev = A100_80GB.with_efficiency(gemm=1.0, hbm=1.0)
    assert dev.ridge == pytest.approx(312e12 / 2.039e12)
    scores = gemm_time(dev, 2048, 2048, 128, batch=8)
    assert scores.flops / scores.bytes == pytest.approx(2 * 2048 ** 2 * 128 / (2 * (2 * 2048 * 128 + 2048 ** 2)))
    assert scores.flops / scores.bytes < dev.ridge and scores.bound == "memory"
    assert scores.memory_s == pytest.approx(8 * (2 * 2048 * 128 + 2048 ** 2) * 2 / 2.039e12, rel=1e-12)
    fc1 = gemm_time(dev, 8192, 3072, 6144)
    assert fc1.flops / fc1.bytes > dev.ridge and fc1.bound == "compute"


def test_one_tile_shape_charges_a_thin_gemm_a_whole_tile_row():
    # the model has cuBLAS's large-GEMM tile only: one output row costs a whole 128-row tile's work
    # (cuBLAS would pick a smaller tile or a GEMV kernel; transformer layers never multiply fewer
    # rows than b·s >= 256)
    one, full = gemm_time(A100_80GB, 1, 8192, 8192), gemm_time(A100_80GB, 128, 8192, 8192)
    assert one.compute_s == full.compute_s and one.tiles == full.tiles == 64 and one.waves == 1


def test_memory_op_time_and_efficiencies():
    assert memory_op_time(A100_80GB, 1e9) == pytest.approx(1e9 / (2.039e12 * A100_80GB.hbm_efficiency) + 4e-6)
    assert memory_op_time(A100_80GB, 0, kernels=3) == pytest.approx(12e-6)
    slow = A100_80GB.with_efficiency(gemm=0.5)
    assert gemm_time(slow, 8192, 8192, 8192).compute_s == pytest.approx(
        gemm_time(A100_80GB, 8192, 8192, 8192).compute_s * A100_80GB.gemm_efficiency / 0.5, rel=1e-12)


def test_device_bad_input():
    with pytest.raises(ValueError, match=r"^Device: sms must be an int >= 1, got 0$"):
        dataclasses.replace(A100_80GB, sms=0)
    with pytest.raises(TypeError, match=r"^Device: tile must be a \(rows, cols\) tuple"):
        dataclasses.replace(A100_80GB, tile=[256, 128])
    with pytest.raises(ValueError, match=r"^Device: hbm_efficiency must be in \(0, 1\], got 2.0$"):
        A100_80GB.with_efficiency(hbm=2.0)
    with pytest.raises(ValueError, match=r"^Device: kernel_overhead must be >= 0 s"):
        dataclasses.replace(A100_80GB, kernel_overhead=-1e-6)
    with pytest.raises(ValueError, match=r"^gemm_time: m must be an int >= 1, got 0$"):
        gemm_time(A100_80GB, 0, 1, 1)
    with pytest.raises(TypeError, match=r"^gemm_time: device must be a labkit.planner.Device"):
        gemm_time("A100", 1, 1, 1)


# -- this CPU: the roofline's form on planted measurements ---------------------------------------

def _planted(device, noise=()):
    out = []
    for i, (m, n, k) in enumerate(C.GEMM_SHAPES):
        t = C.model_seconds(device, C.GemmSample(m, n, k, 1.0))
        out.append(C.GemmSample(m, n, k, t * (noise[i % len(noise)] if noise else 1.0)))
    return out


def test_cpu_fit_recovers_a_planted_device():
    truth = C.cpu_device(60e9, 12e9, 3e-6)
    fit = C.fit_cpu_device(_planted(truth))
    assert fit.peak_flops == pytest.approx(60e9, rel=0.02)
    assert fit.hbm_bandwidth == pytest.approx(12e9, rel=0.02)
    assert fit.kernel_overhead == pytest.approx(3e-6, rel=0.05)
    assert (fit.sms, fit.tile) == (1, (1, 1))


def test_sweep_check_beats_a_constant_rate_on_a_roofline():
    # ±10 % noise on a planted roofline: the fitted device stays within ~10 % on the held-out half, a
    # constant rate is off by far more (skinny GEMMs are memory-bound, tiny ones overhead-bound)
    check = C.check_sweep(_planted(C.cpu_device(60e9, 12e9, 3e-6), noise=(1.1, 1.1, 0.9, 0.9)))
    assert len(check.fitted) + len(check.held) == len(C.GEMM_SHAPES)
    assert check.model_error < 0.12 and check.constant_error > check.model_error + 0.1


def test_interleaved_best_keeps_the_fastest_round():
    calls = {"a": 0}

    def fn():
        calls["a"] += 1
    best = C.interleaved_best({"a": fn}, rounds=3, min_time_s=0.0)
    assert set(best) == {"a"} and math.isfinite(best["a"]) and best["a"] >= 0
    assert calls["a"] == 2 + 3                 # warm-up, one probe, then one call per round
    with pytest.raises(ValueError, match=r"^interleaved_best: rounds must be an int >= 1, got 0$"):
        C.interleaved_best({"a": fn}, rounds=0)


def test_device_is_a_dataclass_of_the_planner():
    assert isinstance(A100_80GB, Device) and dataclasses.is_dataclass(A100_80GB)
