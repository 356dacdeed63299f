"""CUDA graphs: launch many small kernels with one call.

Every eager PyTorch op on a GPU is one kernel launch issued by the CPU: a few microseconds of
Python, dispatcher and driver work each. A kernel on a small tensor finishes in about that time
or less, so a chain of small ops is bound by the CPU's launch rate, not by the GPU.

A CUDA graph records a sequence of launches once (``torch.cuda.graph`` capturing into a
``torch.cuda.CUDAGraph``) and ``replay()`` submits the whole recorded sequence with one call. The
kernels, their arguments and their memory addresses are frozen at capture: new data must be
copied into the captured input tensors, and the outputs live in the graph's private memory pool.
Shapes cannot change without capturing again. (``torch.compile(mode="reduce-overhead")`` uses
CUDA graphs this way under Inductor; it also fuses the chain, which is a different saving.)

    measure(kernels=200, size=1024)   # LaunchResult: eager vs graph replay, per-kernel microseconds
    demo()                            # a printable summary, or the reason it cannot run here

GPU only. On a CPU `demo` returns `GPU_MESSAGE` and `measure` raises RuntimeError with it.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Callable

import torch

from labkit.checks import check_int

__all__ = ["GPU_MESSAGE", "available", "small_kernels", "capture", "LaunchResult", "measure", "demo"]

GPU_MESSAGE = ("cuda_graphs needs a CUDA GPU; on one, this shows the time of a chain of tiny kernels "
               "launched one by one vs replayed from one captured CUDA graph, i.e. the launch "
               "overhead per kernel that the graph removes")


def available() -> bool:
    """True when a CUDA device is present (CUDA graphs exist only there)."""
    return torch.cuda.is_available()


def small_kernels(x: torch.Tensor, kernels: int) -> torch.Tensor:
    """``kernels`` tiny elementwise ops in a row, one kernel each when run eagerly: y * 1.0001,
    y + 1e-4 and relu(y) in turn. (``y * 1.0001 + 1e-4`` in one line would be two kernels.)"""
    y = x
    for i in range(kernels):
        y = y * 1.0001 if i % 3 == 0 else y + 1e-4 if i % 3 == 1 else torch.relu(y)
    return y


def capture(fn: Callable[[], torch.Tensor], warmup: int = 3) -> Callable[[], torch.Tensor]:
    """Capture ``fn()`` (no arguments: it reads tensors allocated beforehand) into a CUDA graph;
    return ``replay()``, which reruns the recorded kernels and returns the captured output tensor.

    Warm-up runs happen on a side stream first, as PyTorch's documentation asks (lazy
    initialisation such as cuBLAS handles must not happen during capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay


@dataclass
class LaunchResult:
    """Eager vs graph replay of ``kernels`` small kernels on ``size`` elements: seconds per whole
    chain, microseconds per kernel, the speed-up eager/graph, and max |graph - eager|."""

    kernels: int
    size: int
    eager_s: float
    graph_s: float
    max_error: float
    launches: int = 0          # CUDA kernels torch.profiler counted in one eager run of the chain

    @property
    def eager_us_per_kernel(self) -> float:
        return self.eager_s / self.kernels * 1e6

    @property
    def graph_us_per_kernel(self) -> float:
        return self.graph_s / self.kernels * 1e6

    @property
    def speedup(self) -> float:
        return self.eager_s / self.graph_s


def measure(kernels: int = 200, size: int = 1024, repeat: int = 20, device: str = "cuda") -> LaunchResult:
    """Time `small_kernels` eagerly and as a replayed CUDA graph (labkit.bench.median_time, which
    synchronises the GPU). Raises RuntimeError with `GPU_MESSAGE` when no CUDA device exists."""
    if not available():
        raise RuntimeError(GPU_MESSAGE)
    from labkit.bench import median_time

    kernels = check_int("cuda_graphs.measure", "kernels", kernels, minimum=1)
    size = check_int("cuda_graphs.measure", "size", size, minimum=1)
    x = torch.randn(size, device=device)          # the static input every replay reads

    def chain():
        return small_kernels(x, kernels)

    from labkit.compiler.fx_measure import count_launches

    eager_out = chain()
    launches = count_launches(lambda _: chain(), x)
    replay = capture(chain)
    graph_out = replay()
    err = float((graph_out - eager_out).abs().max())
    eager_s = median_time(chain, repeat=repeat, warmup=2)
    graph_s = median_time(replay, repeat=repeat, warmup=2)
    return LaunchResult(kernels, size, eager_s, graph_s, err, launches)


def demo(kernels: int = 200, size: int = 1024) -> str:
    """A short report of `measure`, or `GPU_MESSAGE` on a machine without CUDA."""
    if not available():
        return textwrap.fill(GPU_MESSAGE, 100)
    r = measure(kernels, size)
    return (f"{r.kernels} small ops on {r.size} elements, {r.launches} kernels (profiler): "
            f"eager {r.eager_s * 1e3:.3f} ms "
            f"({r.eager_us_per_kernel:.1f} us/kernel),\nCUDA graph {r.graph_s * 1e3:.3f} ms "
            f"({r.graph_us_per_kernel:.1f} us/kernel): {r.speedup:.1f}x, max diff {r.max_error:.1e}")
