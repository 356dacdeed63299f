"""Host/device asynchrony and pinned memory (needs a CUDA GPU).

Three things a learner measures on a GPU box:

1. A kernel launch returns before the kernel ends: the host queues work on a CUDA stream and
   goes on. `launch_vs_completion` times the launch call of a long kernel and the time until
   ``torch.cuda.synchronize()`` returns (seconds); the ratio is typically hundreds to thousands.
2. Some calls synchronise implicitly: anything that needs a GPU value on the host waits for
   all queued work — ``.item()``, ``.cpu()``, printing a CUDA tensor, ``torch.nonzero`` (its
   output shape depends on the data), ``torch.cuda.synchronize()``. Queuing another kernel or a
   ``non_blocking=True`` copy into pinned host memory does not. `find_implicit_syncs` launches
   a long kernel, then times each call: a call that takes most of the kernel's time waited for it.
3. Host-to-device copies from pinned (page-locked) memory run as direct DMA and can overlap
   with the host; from ordinary (pageable) memory the driver stages them through a pinned
   buffer and the call blocks. `h2d_bandwidth` times both with CUDA events (GB/s, 1 GB = 1e9
   bytes) and the host time of the ``copy_(..., non_blocking=True)`` call itself.

On a machine without CUDA every function returns a `NeedsCuda` naming what it would measure.
The measurement logic talks to the GPU only through a small backend (`TorchCuda`), so it is
tested on CPU with a fake backend that keeps a virtual clock.

Timing: the launch and call times are host wall-clock differences of a single call
(``time.perf_counter``): `labkit.bench.median_time` cannot do this, since it synchronises after
each sample, which is the very thing being measured here. GPU durations use CUDA events.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from labkit.checks import check_int, check_real

__all__ = ["NeedsCuda", "AsyncLaunch", "SyncProbe", "H2DTransfer", "TorchCuda", "launch_vs_completion",
           "find_implicit_syncs", "h2d_bandwidth", "waited", "WAIT_FRACTION"]

WAIT_FRACTION = 0.5   # a call that lasts at least this fraction of the queued kernel waited for it


@dataclass(frozen=True)
class NeedsCuda:
    """Returned instead of a measurement where there is no CUDA GPU."""
    measures: str

    @property
    def message(self) -> str:
        return f"needs a CUDA GPU; on one this measures {self.measures}"

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class AsyncLaunch:
    """``launch_s``: host seconds the launch call took; ``complete_s``: seconds from the launch
    until ``synchronize()`` returned (the kernel's end); ``ratio`` = complete / launch."""
    kernel_s: float
    launch_s: float
    complete_s: float

    @property
    def ratio(self) -> float:
        return self.complete_s / self.launch_s if self.launch_s > 0 else float("inf")

    @property
    def asynchronous(self) -> bool:
        return self.launch_s < WAIT_FRACTION * self.complete_s


@dataclass(frozen=True)
class SyncProbe:
    """One call timed right after a ``kernel_s``-second kernel was queued: ``call_s`` host
    seconds; ``waits``: it lasted at least WAIT_FRACTION of the kernel (it synchronised)."""
    name: str
    kernel_s: float
    call_s: float
    waits: bool


@dataclass(frozen=True)
class H2DTransfer:
    """Host-to-device copy of ``nbytes`` bytes, median over repeats: GB/s (1e9 bytes/s) from CUDA
    events for pinned and pageable sources, and the host seconds the ``copy_`` call took."""
    nbytes: int
    pinned_gbps: float
    pageable_gbps: float
    pinned_call_s: float
    pageable_call_s: float
    pinned_gpu_s: float
    pageable_gpu_s: float

    @property
    def ratio(self) -> float:
        """pinned / pageable bandwidth."""
        return self.pinned_gbps / self.pageable_gbps

    @property
    def pinned_call_returns_early(self) -> bool:
        """The pinned, non_blocking copy call returned before the copy was done."""
        return self.pinned_call_s < WAIT_FRACTION * self.pinned_gpu_s


def waited(call_s: float, kernel_s: float) -> bool:
    """Did a call that took ``call_s`` seconds, issued behind a ``kernel_s``-second kernel, wait for it?"""
    return call_s >= WAIT_FRACTION * kernel_s


# ---------------------------------------------------------------------------- the real backend
class TorchCuda:
    """The GPU as the measurements see it: a host clock, a kernel of a chosen length, a
    synchronisation, named calls to probe, and one timed H2D copy."""

    def __init__(self, device: str = "cuda"):
        import torch

        self.torch = torch
        self.device = device
        self._cycles_per_s: float | None = None
        self._bufs: tuple | None = None      # ((nbytes, pinned), host source, device destination)

    def available(self) -> bool:
        return bool(self.torch.cuda.is_available())

    def clock(self) -> float:
        return time.perf_counter()

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def _gpu_seconds(self, fn: Callable[[], None]) -> float:
        ev0, ev1 = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        ev0.record()
        fn()
        ev1.record()
        ev1.synchronize()
        return ev0.elapsed_time(ev1) / 1e3

    def spin(self, seconds: float) -> None:
        """Queue a kernel that keeps the GPU busy for about ``seconds`` and return at once
        (``torch.cuda._sleep`` spins for a number of GPU clock cycles, calibrated once)."""
        if self._cycles_per_s is None:
            cycles = 10_000_000
            self.torch.cuda._sleep(cycles)       # warm-up
            self.synchronize()
            self._cycles_per_s = cycles / self._gpu_seconds(lambda: self.torch.cuda._sleep(cycles))
        self.torch.cuda._sleep(max(1, int(seconds * self._cycles_per_s)))

    def probes(self) -> dict[str, Callable[[], object]]:
        """Calls to time after a long kernel, on a small CUDA tensor."""
        torch = self.torch
        t = torch.ones(1024, device=self.device)
        host = torch.empty(1024, pin_memory=True)
        return {
            "t + 1 (another kernel)": lambda: t + 1,
            "copy_ to pinned, non_blocking": lambda: host.copy_(t, non_blocking=True),
            "t.sum().item()": lambda: t.sum().item(),
            "t.cpu()": lambda: t.cpu(),
            "repr(t) (printing)": lambda: repr(t),
            "torch.nonzero(t)": lambda: torch.nonzero(t),
            "torch.cuda.synchronize()": lambda: torch.cuda.synchronize(self.device),
        }

    def copy_h2d(self, nbytes: int, pinned: bool) -> tuple[float, float]:
        """One ``dst.copy_(src, non_blocking=True)`` of ``nbytes`` bytes from a pinned or pageable
        host buffer: (host seconds of the call, GPU seconds between CUDA events around it)."""
        torch = self.torch
        key = (nbytes, pinned)
        if self._bufs is None or self._bufs[0] != key:
            src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
            src.fill_(1)
            self._bufs = (key, src, torch.empty(nbytes, dtype=torch.uint8, device=self.device))
        _, src, dst = self._bufs
        self.synchronize()
        ev0, ev1 = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        ev0.record()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        call_s = time.perf_counter() - t0
        ev1.record()
        ev1.synchronize()
        return call_s, ev0.elapsed_time(ev1) / 1e3


def _backend(backend):
    return TorchCuda() if backend is None else backend


# ---------------------------------------------------------------------------- the measurements
def launch_vs_completion(kernel_s: float = 0.05, repeat: int = 3, backend=None) -> AsyncLaunch | NeedsCuda:
    """Time queuing a ``kernel_s``-second kernel vs its completion (medians over ``repeat``)."""
    kernel_s = check_real("launch_vs_completion", "kernel_s", kernel_s, positive=True)
    repeat = check_int("launch_vs_completion", "repeat", repeat, minimum=1)
    b = _backend(backend)
    if not b.available():
        return NeedsCuda("how long launching a long kernel takes on the host vs until it finishes")
    b.spin(kernel_s)                    # warm-up (and calibration)
    b.synchronize()
    launch, complete = [], []
    for _ in range(repeat):
        t0 = b.clock()
        b.spin(kernel_s)
        t1 = b.clock()
        b.synchronize()
        t2 = b.clock()
        launch.append(t1 - t0)
        complete.append(t2 - t0)
    return AsyncLaunch(kernel_s, statistics.median(launch), statistics.median(complete))


def find_implicit_syncs(kernel_s: float = 0.05, backend=None) -> list[SyncProbe] | NeedsCuda:
    """For each of the backend's probe calls: queue a ``kernel_s``-second kernel, time the call,
    and say whether it waited for the kernel (an implicit synchronisation)."""
    kernel_s = check_real("find_implicit_syncs", "kernel_s", kernel_s, positive=True)
    b = _backend(backend)
    if not b.available():
        return NeedsCuda("which calls (.item(), .cpu(), printing, ...) wait for queued GPU work")
    out = []
    for name, call in b.probes().items():
        call()                          # warm-up: first calls allocate, load kernels
        b.synchronize()                 # an empty queue, then exactly one long kernel in it
        b.spin(kernel_s)
        t0 = b.clock()
        call()
        dt = b.clock() - t0
        b.synchronize()
        out.append(SyncProbe(name, kernel_s, dt, waited(dt, kernel_s)))
    return out


def h2d_bandwidth(nbytes: int = 256 << 20, repeat: int = 5, backend=None) -> H2DTransfer | NeedsCuda:
    """Host-to-device bandwidth (GB/s) from pinned and from pageable memory, ``nbytes`` bytes per
    copy, medians over ``repeat`` copies after one warm-up each."""
    nbytes = check_int("h2d_bandwidth", "nbytes", nbytes, minimum=1)
    repeat = check_int("h2d_bandwidth", "repeat", repeat, minimum=1)
    b = _backend(backend)
    if not b.available():
        return NeedsCuda("host-to-device copy bandwidth (GB/s) from pinned vs pageable memory")
    res = {}
    for pinned in (True, False):
        b.copy_h2d(nbytes, pinned)      # warm-up
        calls, gpus = zip(*(b.copy_h2d(nbytes, pinned) for _ in range(repeat)))
        res[pinned] = (statistics.median(calls), statistics.median(gpus))
    (pc, pg), (qc, qg) = res[True], res[False]
    return H2DTransfer(nbytes, nbytes / pg / 1e9, nbytes / qg / 1e9, pc, qc, pg, qg)
