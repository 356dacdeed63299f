"""One accelerator as the cost model sees it: how long a matrix multiply of a given shape takes, and
how long a memory-bound kernel takes for the bytes it moves.

**A GEMM** C (m × n) = A (m × k) · B (k × n), ``batch`` of them side by side (attention's per-head
products), in 16-bit elements of ``element_bytes``. cuBLAS gives each thread block one output tile
of ``tile`` = (rows, cols) elements and runs one tile per streaming multiprocessor (SM) at a time,
so (NVIDIA, *Matrix Multiplication Background User's Guide*, "tile and wave quantization"):

    tiles  = batch · ⌈m / rows⌉ · ⌈n / cols⌉          (a partial tile costs a whole one)
    waves  = ⌈tiles / sms⌉                             (the last wave may leave SMs idle)
    compute_s = waves · 2·rows·cols·k / (peak_flops / sms · gemm_efficiency)
    memory_s  = (m·k + k·n + m·n) · batch · element_bytes / (hbm_bandwidth · hbm_efficiency)
    seconds   = max(compute_s, memory_s) + kernel_overhead

The max is the roofline (Lab 01): a GEMM whose arithmetic intensity 2mnk / bytes is below the
device's ridge point is limited by memory, not by its FLOPs. The tile is laid either way round
(rows × cols or cols × rows), whichever needs fewer waves. There is one tile shape, cuBLAS's
large-GEMM tile: a GEMM thinner than a tile is charged a whole tile row (cuBLAS would switch to a
smaller tile or a GEMV kernel there — a transformer layer never multiplies fewer than b·s rows).
``gemm_efficiency`` is the share of the per-SM peak one full tile's main loop sustains: the only
constant of this term that is fitted (`labkit.planner.published.fit_constants`).

**A memory-bound kernel** (LayerNorm, softmax, dropout, GELU, bias and residual additions, the
optimizer step) moves ``nbytes`` and does too little arithmetic per byte for its FLOPs to matter:

    seconds = nbytes / (hbm_bandwidth · hbm_efficiency) + kernels · kernel_overhead

``hbm_efficiency`` (the share of the data-sheet bandwidth such kernels reach) is the second fitted
constant. ``kernel_overhead`` (seconds per kernel: launch and the ramp up and down of one kernel)
is stated, not fitted.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from labkit.checks import check_int, check_real

GiB = 2 ** 30


@dataclass(frozen=True)
class Device:
    """An accelerator (units in each field's comment; module docstring for the model).

    peak_flops       dense 16-bit matmul peak, FLOP/s (tensor cores)
    sms              streaming multiprocessors: output tiles that run at once (one wave)
    tile             (rows, cols) of the output tile one thread block computes
    hbm_bandwidth    memory bandwidth, bytes/s
    memory_bytes     memory capacity, bytes
    gemm_efficiency  share of the per-SM peak a full tile's main loop reaches, in (0, 1]
    hbm_efficiency   share of hbm_bandwidth memory-bound kernels reach, in (0, 1]
    kernel_overhead  seconds added to every kernel (launch, ramp up and down)
    """

    name: str
    peak_flops: float
    sms: int
    tile: tuple
    hbm_bandwidth: float
    memory_bytes: float
    gemm_efficiency: float = 1.0
    hbm_efficiency: float = 1.0
    kernel_overhead: float = 4e-6

    def __post_init__(self):
        fn = "Device"
        for name in ("peak_flops", "hbm_bandwidth", "memory_bytes"):
            check_real(fn, name, getattr(self, name), positive=True)
        check_int(fn, "sms", self.sms, minimum=1)
        if not isinstance(self.tile, tuple) or len(self.tile) != 2:
            raise TypeError(f"{fn}: tile must be a (rows, cols) tuple, got {self.tile!r}")
        for i, x in enumerate(self.tile):
            check_int(fn, f"tile[{i}]", x, minimum=1)
        for name in ("gemm_efficiency", "hbm_efficiency"):
            e = check_real(fn, name, getattr(self, name), positive=True)
            if e > 1:
                raise ValueError(f"{fn}: {name} must be in (0, 1], got {e}")
        if check_real(fn, "kernel_overhead", self.kernel_overhead) < 0:
            raise ValueError(f"{fn}: kernel_overhead must be >= 0 s, got {self.kernel_overhead}")

    @property
    def ridge(self) -> float:
        """FLOP per byte above which a kernel is compute-bound on this device (with its efficiencies)."""
        return self.peak_flops * self.gemm_efficiency / (self.hbm_bandwidth * self.hbm_efficiency)

    def with_efficiency(self, gemm: float | None = None, hbm: float | None = None) -> "Device":
        """The same device with other fitted efficiencies."""
        return dataclasses.replace(self, gemm_efficiency=self.gemm_efficiency if gemm is None else gemm,
                                   hbm_efficiency=self.hbm_efficiency if hbm is None else hbm)


@dataclass(frozen=True)
class GemmTime:
    """The modelled time of one (batched) GEMM: ``seconds`` = max(``compute_s``, ``memory_s``) +
    overhead; ``tiles`` and ``waves`` as in the module docstring; ``flops`` = 2·m·n·k·batch and
    ``bytes`` moved; ``bound`` "compute" or "memory"."""

    m: int
    n: int
    k: int
    batch: int
    flops: float
    bytes: float
    tiles: int
    waves: int
    compute_s: float
    memory_s: float
    seconds: float

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def achieved_flops(self) -> float:
        """FLOP/s this GEMM reaches: flops / seconds."""
        return self.flops / self.seconds


def gemm_time(device: Device, m: int, n: int, k: int, batch: int = 1, element_bytes: int = 2) -> GemmTime:
    """Modelled time of ``batch`` GEMMs of (m × k)·(k × n) on ``device`` (module docstring)."""
    fn = "gemm_time"
    if not isinstance(device, Device):
        raise TypeError(f"{fn}: device must be a labkit.planner.Device, got {type(device).__name__}")
    for name, v in (("m", m), ("n", n), ("k", k), ("batch", batch), ("element_bytes", element_bytes)):
        check_int(fn, name, v, minimum=1)
    return _gemm(device, m, n, k, batch, element_bytes)


def _gemm(device: Device, m: int, n: int, k: int, batch: int = 1, element_bytes: int = 2) -> GemmTime:
    rows, cols = device.tile
    per_sm = device.peak_flops / device.sms * device.gemm_efficiency
    best = None
    for r, c in ((rows, cols), (cols, rows)):
        tiles = batch * -(-m // r) * -(-n // c)
        waves = -(-tiles // device.sms)
        compute = waves * 2 * r * c * k / per_sm
        if best is None or compute < best[2]:
            best = (tiles, waves, compute)
    tiles, waves, compute = best
    nbytes = batch * (m * k + k * n + m * n) * element_bytes
    memory = nbytes / (device.hbm_bandwidth * device.hbm_efficiency)
    return GemmTime(m, n, k, batch, 2.0 * m * n * k * batch, float(nbytes), tiles, waves, compute, memory,
                    max(compute, memory) + device.kernel_overhead)


def memory_op_time(device: Device, nbytes: float, kernels: int = 1) -> float:
    """Seconds for memory-bound kernels that move ``nbytes`` in all: bytes at the device's effective
    bandwidth plus ``kernels`` × kernel_overhead."""
    return nbytes / (device.hbm_bandwidth * device.hbm_efficiency) + kernels * device.kernel_overhead


def waves(device: Device, tiles: int) -> int:
    """⌈tiles / sms⌉: how many rounds of one tile per SM ``tiles`` tiles take."""
    return -(-check_int("waves", "tiles", tiles, minimum=0) // device.sms)


# NVIDIA A100-SXM4 (data sheet): 312 TFLOP/s dense bf16/fp16 on tensor cores, 108 SMs, HBM2e
# 2.039 TB/s (80 GB) or HBM2 1.555 TB/s (40 GB). Tile 256 × 128: cuBLAS's large-GEMM tile on
# Ampere (the user's guide above). The efficiencies are the values fitted to Narayanan et al.'s
# Table 1 (`labkit.planner.published.fit_constants`; tests/test_planner_published.py refits them).
A100_GEMM_EFFICIENCY = 0.69
A100_HBM_EFFICIENCY = 0.69
A100_80GB = Device("A100-SXM4-80GB", 312e12, 108, (256, 128), 2.039e12, 80 * GiB,
                   A100_GEMM_EFFICIENCY, A100_HBM_EFFICIENCY)
A100_40GB = dataclasses.replace(A100_80GB, name="A100-SXM4-40GB", hbm_bandwidth=1.555e12, memory_bytes=40 * GiB)
# NVIDIA H100-SXM5 (data sheet): 989 TFLOP/s dense bf16, 132 SMs, HBM3 3.35 TB/s. Not fitted: the
# A100's efficiencies are carried over, so its predictions are a sketch, not a validated model.
H100_80GB = dataclasses.replace(A100_80GB, name="H100-SXM5-80GB", peak_flops=989e12, sms=132,
                                hbm_bandwidth=3.35e12)

__all__ = ["Device", "GemmTime", "gemm_time", "memory_op_time", "waves", "A100_80GB", "A100_40GB", "H100_80GB",
           "A100_GEMM_EFFICIENCY", "A100_HBM_EFFICIENCY", "GiB"]
