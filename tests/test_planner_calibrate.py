"""Lab 11: the CPU checks of the cost model's terms (labkit.planner.calibrate) run for real — a small
GEMM sweep, the memory-bound kernels, the ring all-reduce on real gloo ranks through
labkit.dist.launch — with assertions on what they return, never on how fast this machine was (the
notebook prints and checks the timings; timed assertions do not belong in tests)."""
from __future__ import annotations

import math

from labkit.planner import calibrate as C


def test_a_small_gemm_sweep_runs_and_fits():
    shapes = ((1, 256, 256), (8, 256, 256), (64, 64, 64), (128, 128, 128))
    samples = C.cpu_gemm_sweep(shapes, rounds=2)
    assert [(s.m, s.n, s.k) for s in samples] == list(shapes)
    assert all(math.isfinite(s.seconds) and s.seconds > 0 and s.rate > 0 for s in samples)
    dev = C.fit_cpu_device(samples)
    assert dev.peak_flops > 0 and dev.hbm_bandwidth > 0 and dev.kernel_overhead > 0
    assert all(C.model_seconds(dev, s) > 0 for s in samples)


def test_memory_bound_kernels_run():
    got = C.cpu_kernels(n=1 << 16, rounds=2)
    assert set(got) == set(C.KERNEL_BYTES)
    for name, (nbytes, seconds) in got.items():
        assert nbytes == C.KERNEL_BYTES[name] << 16 and seconds > 0


def test_ring_all_reduce_on_real_gloo_ranks():
    # labkit's ring on 2 gloo processes: a 4 KiB and an 8 MiB buffer (the larger is slower on any
    # machine), the model fitted through both (the two largest)
    times, net = C.gloo_ring(2, sizes=(4 << 10, 8 << 20), repeat=3)
    assert sorted(times) == [4 << 10, 8 << 20] and all(t > 0 for t in times.values())
    assert net.gpus_per_node == 2 and net.intra_latency >= 0 and net.nvlink_bandwidth > 0
    lo, hi = min(times), max(times)
    # through both points (a latency clamped at 0 can only lower the large one by the small one's time)
    assert abs(C.ring_model(net, 2, hi) - times[hi]) <= times[lo] * (1 + 1e-9)
    if net.intra_latency > 0:
        assert math.isclose(C.ring_model(net, 2, lo), times[lo], rel_tol=1e-9)
