"""The cost model's terms next to measurements on this machine (Lab 11, §5).

The A100's terms are checked against published figures (tests/test_planner_*.py and the
notebook); here the same *forms* are checked against this CPU:

* **GEMM shape** (`cpu_gemm_sweep`, `fit_cpu_device`): torch.mm on one thread over shapes from a
  matrix-vector product (memory-bound: 2 FLOPs per 4-byte weight) to square GEMMs (compute-bound),
  fitted to `labkit.planner.device`'s roofline + per-kernel overhead (peak FLOP/s, bandwidth,
  overhead: three constants) on half the shapes and compared on the other half. A CPU thread is one
  "SM" with a 1 × 1 tile, so there is no tile or wave quantisation here — that part is the GPU's.
* **Memory-bound kernels** (`cpu_kernels`): copy, add, LayerNorm, softmax, GELU and dropout on
  4-byte elements, each's bytes moved / seconds next to the copy's rate — the model's assumption is
  that such a kernel runs at (close to) the memory bandwidth.
* **Collectives** (`gloo_ring`): labkit's ring all-reduce on real gloo ranks (`labkit.dist.launch`,
  Lab 05's timer), the planner's ring model (`labkit.planner.network`) fitted through the two
  largest buffers and compared on the others.

Timings on a shared 2-core machine are noisy: every number here is the *best* of interleaved
rounds (other processes only ever add time), and the notebook tags these cells as timing.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

from labkit.checks import check_int
from labkit.planner.device import Device, _gemm
from labkit.planner.network import Network, _ring

# (m, n, k): matrix-vector and skinny products (memory-bound) up to square GEMMs (compute-bound)
GEMM_SHAPES = ((1, 2048, 2048), (2, 2048, 2048), (4, 2048, 2048), (8, 2048, 2048), (16, 1024, 1024),
               (32, 1024, 1024), (64, 1024, 1024), (128, 512, 512), (256, 256, 256), (512, 512, 512),
               (384, 384, 384), (16, 16, 16), (32, 32, 32), (64, 64, 64))


def interleaved_best(fns: dict, rounds: int = 5, min_time_s: float = 0.01) -> dict:
    """{name: seconds per call}: each callable timed once per round, the rounds interleaved (so a
    burst of load from other processes hits every name alike), the best round kept. A call shorter
    than ``min_time_s`` is looped to last about that long."""
    rounds = check_int("interleaved_best", "rounds", rounds, minimum=1)
    inner = {}
    for name, fn in fns.items():
        fn()                                             # warm-up
        t0 = time.perf_counter()
        fn()
        one = max(time.perf_counter() - t0, 1e-7)
        inner[name] = max(1, int(min_time_s / one))
    best = {name: math.inf for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / inner[name])
    return best


@dataclass(frozen=True)
class GemmSample:
    """A measured GEMM: shape (m, n, k), ``seconds`` per call (best of rounds), float32."""

    m: int
    n: int
    k: int
    seconds: float

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def rate(self) -> float:
        """Achieved FLOP/s."""
        return self.flops / self.seconds


def cpu_gemm_sweep(shapes=GEMM_SHAPES, rounds: int = 9, threads: int = 1) -> list[GemmSample]:
    """torch.mm (float32) on ``threads`` CPU threads for each (m, n, k), best of ``rounds``."""
    import torch

    from labkit.roofline.measure import threads as threads_block

    gen = torch.Generator().manual_seed(0)
    fns, operands = {}, []
    for m, n, k in shapes:
        a = torch.randn(m, k, generator=gen)
        b = torch.randn(k, n, generator=gen)
        out = torch.empty(m, n)
        operands.append((a, b, out))
        fns[(m, n, k)] = lambda a=a, b=b, out=out: torch.mm(a, b, out=out)
    with threads_block(threads):
        best = interleaved_best(fns, rounds, min_time_s=0.005)
    return [GemmSample(m, n, k, best[(m, n, k)]) for m, n, k in shapes]


def cpu_device(peak_flops: float, bandwidth: float, overhead: float, element_bytes: int = 4) -> Device:
    """This CPU as a `Device`: one "SM", a 1 × 1 tile, the given peak (FLOP/s), memory bandwidth
    (bytes/s) and per-call overhead (s); efficiencies 1 (the fitted rates are the effective ones)."""
    return Device("this CPU (1 thread)", peak_flops, 1, (1, 1), bandwidth, 2.0 ** 34, kernel_overhead=overhead)


def model_seconds(device: Device, sample: GemmSample, element_bytes: int = 4) -> float:
    """The device model's time for ``sample``'s shape."""
    return _gemm(device, sample.m, sample.n, sample.k, 1, element_bytes).seconds


def fit_cpu_device(samples, element_bytes: int = 4) -> Device:
    """The `cpu_device` (peak, bandwidth, overhead) minimising Σ log²(model / measured) over
    ``samples``: a pattern search in log space from rough starts (the best rate seen, bytes of the
    most memory-bound shape over its time, the fastest call), halving the step to 1 %."""
    samples = list(samples)
    if len(samples) < 3:
        raise ValueError(f"fit_cpu_device: need at least 3 samples, got {len(samples)}")

    def loss(x):
        dev = cpu_device(*(math.exp(v) for v in x))
        return math.fsum(math.log(model_seconds(dev, s, element_bytes) / s.seconds) ** 2 for s in samples)

    skinny = min(samples, key=lambda s: s.flops / ((s.m * s.k + s.k * s.n + s.m * s.n) * element_bytes))
    start = [math.log(max(s.rate for s in samples)),
             math.log((skinny.m * skinny.k + skinny.k * skinny.n + skinny.m * skinny.n) * element_bytes
                      / skinny.seconds),
             math.log(min(s.seconds for s in samples) / 2)]
    x, f, step = start, loss(start), 1.0
    while step > 0.01:
        moved = False
        for i in range(3):
            for d in (step, -step):
                y = list(x)
                y[i] += d
                fy = loss(y)
                if fy < f:
                    x, f, moved = y, fy, True
        if not moved:
            step /= 2
    return cpu_device(*(math.exp(v) for v in x))


@dataclass(frozen=True)
class SweepCheck:
    """The GEMM sweep split in two: the device fitted on ``fitted`` samples, compared on ``held``.
    ``model_error`` and ``constant_error``: median |model / measured − 1| of the held-out times for
    the roofline device and for one constant FLOP/s (the fitted half's median rate)."""

    device: Device
    fitted: tuple
    held: tuple
    model_error: float
    constant_error: float
    constant_rate: float


def check_sweep(samples, element_bytes: int = 4) -> SweepCheck:
    """Fit on every other sample (the even-numbered), compare on the rest (`SweepCheck`)."""
    samples = list(samples)
    fitted, held = tuple(samples[0::2]), tuple(samples[1::2])
    dev = fit_cpu_device(fitted, element_bytes)
    rate = statistics.median(s.rate for s in fitted)
    model = statistics.median(abs(model_seconds(dev, s, element_bytes) / s.seconds - 1) for s in held)
    const = statistics.median(abs(s.flops / rate / s.seconds - 1) for s in held)
    return SweepCheck(dev, fitted, held, model, const, rate)


# bytes per element each kernel moves (4-byte elements): what it must read and write once
KERNEL_BYTES = {"copy": 8, "add": 12, "LayerNorm": 8, "softmax": 8, "GELU": 8, "dropout": 9}


def cpu_kernels(n: int = 1 << 22, rounds: int = 9, threads: int = 1) -> dict:
    """{kernel: (bytes moved, seconds)} for memory-bound kernels on ``n`` float32 elements (rows of
    1024 for LayerNorm and softmax; dropout also writes a 1-byte mask), best of ``rounds``."""
    import torch
    import torch.nn.functional as F

    from labkit.roofline.measure import threads as threads_block

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    out = torch.empty(n)
    rows = x.view(-1, 1024)
    fns = {"copy": lambda: out.copy_(x), "add": lambda: torch.add(x, y, out=out),
           "LayerNorm": lambda: F.layer_norm(rows, (1024,)), "softmax": lambda: torch.softmax(rows, -1),
           "GELU": lambda: F.gelu(x), "dropout": lambda: F.dropout(x, 0.1, True)}
    with threads_block(threads):
        best = interleaved_best(fns, rounds)
    return {k: (KERNEL_BYTES[k] * n, best[k]) for k in fns}


def gloo_ring(world: int = 4, sizes=(4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20),
              repeat: int = 12):
    """Labkit's ring all-reduce on ``world`` real gloo ranks (Lab 05's timer: the slowest rank, the
    best of ``repeat`` calls), and the planner's ring model fitted through the two largest buffers
    (`fit_ring`): returns ({bytes: measured s}, the fitted one-node `Network`)."""
    from labkit.collectives.timing import time_all_reduces

    measured = time_all_reduces(world, sizes=tuple(sizes), algorithms=("ring_all_reduce",), repeat=repeat)
    times = {n: t for (_, n), t in measured.items()}
    return times, fit_ring(world, times)


def fit_ring(world: int, times: dict) -> Network:
    """The one-node `Network` whose ring all-reduce, 2(n−1)·α + 2(n−1)/n·S/bw, passes through the
    two largest buffers' measured times (where the bytes term dominates and a stalled process
    matters least; α clamped at 0): α in s, bw in bytes/s."""
    if len(times) < 2:
        raise ValueError(f"fit_ring: need at least two buffer sizes, got {len(times)}")
    lo, hi = sorted(times)[-2:]
    c = 2 * (world - 1) / world
    beta = (times[hi] - times[lo]) / (c * (hi - lo))
    if beta <= 0:
        raise ValueError(f"fit_ring: the larger buffer was not slower ({times[lo]:.3g} s, {times[hi]:.3g} s)")
    alpha = max(0.0, (times[lo] - c * lo * beta) / (2 * (world - 1)))
    return Network(world, 1 / beta, 1, 1 / beta, intra_latency=alpha, inter_latency=alpha)


def ring_model(net: Network, world: int, nbytes: float) -> float:
    """The planner's ring all-reduce time on one node of ``net``."""
    return _ring(net, world, float(nbytes), 1)


__all__ = ["GEMM_SHAPES", "interleaved_best", "GemmSample", "cpu_gemm_sweep", "cpu_device", "model_seconds",
           "fit_cpu_device", "SweepCheck", "check_sweep", "KERNEL_BYTES", "cpu_kernels", "gloo_ring", "fit_ring",
           "ring_model"]
