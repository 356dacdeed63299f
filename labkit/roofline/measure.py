"""Measure this machine: peak matmul FLOP/s, memory bandwidth, and ops as roofline points.

Everything is timed with ``labkit.bench.median_time`` (median of repeats after
warm-up; CUDA is synchronised). Bytes and FLOPs come from the cost models in
``labkit.roofline.model`` (compulsory traffic), never from the timer.

On a CPU, thread count matters a lot when the machine is shared: two OpenMP
threads on two busy cores wait for each other. ``threads(n)`` pins torch's
intra-op thread count for a block; the notebook and benchmark say which count
they used.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch

from labkit.bench import median_time
from labkit.roofline import model as M

__all__ = ["Measurement", "threads", "default_device", "measure", "peak_matmul", "bandwidth",
           "chain_unfused", "make_fused_chain", "chain_inputs", "linear_sweep"]


@dataclass(frozen=True)
class Measurement:
    """One timed op: ``flops`` and ``bytes`` (from its cost model), ``seconds`` per call (median)."""

    name: str
    flops: int
    bytes: int
    seconds: float

    @property
    def intensity(self) -> float:
        """FLOP per byte."""
        return self.flops / self.bytes

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds


@contextlib.contextmanager
def threads(n: int | None):
    """Run a block with ``torch.set_num_threads(n)`` (None: leave as is), then restore."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"threads must be a positive int or None, got {n!r}")
    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def measure(cost: M.OpCost, fn: Callable[[], object], repeat: int = 5, warmup: int = 1,
            min_time_s: float = 0.0) -> Measurement:
    """Time ``fn`` and attach ``cost``'s FLOPs and bytes."""
    return Measurement(cost.name, cost.flops, cost.bytes, median_time(fn, repeat, warmup, min_time_s))


def peak_matmul(sizes=(512, 1024, 2048), dtype=torch.float32, device=None, repeat: int = 5) -> Measurement:
    """Best FLOP/s of square ``torch.mm`` over ``sizes``: 2*n^3 FLOPs per call.

    This is a *measured* peak (what the BLAS reaches), not the datasheet one.
    """
    device = device or default_device()
    best = None
    for n in sizes:
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        out = torch.empty(n, n, dtype=dtype, device=device)
        m = measure(M.matmul(n, n, n, a.element_size()), lambda: torch.mm(a, b, out=out), repeat=repeat)
        if best is None or m.flops_per_s > best.flops_per_s:
            best = m
    return best


def bandwidth(n: int = 1 << 24, kind: str = "copy", dtype=torch.float32, device=None,
              repeat: int = 5) -> Measurement:
    """Memory bandwidth from a STREAM-style kernel on ``n`` elements (pick n*4 bytes >> last-level
    cache).

    kind="copy": dst.copy_(src), bytes = 2*n*size (read + write).
    kind="triad": a = b + 2*c, bytes = 3*n*size, 2*n FLOPs.
    """
    if kind not in ("copy", "triad"):
        raise ValueError(f"kind must be 'copy' or 'triad', got {kind!r}")
    device = device or default_device()
    b = torch.randn(n, dtype=dtype, device=device)
    c = torch.randn(n, dtype=dtype, device=device)
    a = torch.empty(n, dtype=dtype, device=device)
    size = a.element_size()
    if kind == "copy":
        return measure(M.copy(n, size), lambda: a.copy_(b), repeat=repeat)
    return measure(M.triad(n, size), lambda: torch.add(b, c, alpha=2.0, out=a), repeat=repeat)


def chain_inputs(n: int, dtype=torch.float32, device=None, seed: int = 0):
    """Four inputs a, b, c, d and two scratch buffers for the chain e = d + (a + b) * c."""
    g = torch.Generator().manual_seed(seed)
    device = device or default_device()
    a, b, c, d = (torch.randn(n, generator=g, dtype=dtype).to(device) for _ in range(4))
    return a, b, c, d


def chain_unfused(a, b, c, d, out=None, tmp=None):
    """e = d + (a + b) * c as three separate kernels (9 arrays of traffic).

    ``out`` and ``tmp`` (two buffers of a's shape) avoid allocating inside the
    timed region; without them torch allocates the two intermediates.
    """
    if out is None:
        return d + (a + b) * c
    t1, t2 = tmp
    torch.add(a, b, out=t1)
    torch.mul(t1, c, out=t2)
    return torch.add(t2, d, out=out)


def _chain_into(a, b, c, d, out):
    out.copy_(d + (a + b) * c)
    return out


def make_fused_chain():
    """(fn(a, b, c, d, out), arrays_moved, how) computing e = d + (a + b) * c in ONE pass (5 arrays of traffic).

    Uses ``torch.compile`` (Inductor fuses the three element-wise ops into one
    loop and writes straight into ``out``). If compiling fails here, falls back
    to ``torch.addcmul`` after one add: two kernels, 7 arrays of traffic, and
    says so in ``how``.
    """
    try:
        fused = torch.compile(_chain_into, dynamic=False)
        x = torch.ones(8)
        o = torch.empty(8)
        fused(x, x, x, x, o)
        if not torch.equal(o, torch.full((8,), 3.0)):
            raise RuntimeError("compiled chain gave a wrong result")
        return fused, 5, "torch.compile (one fused loop: reads a, b, c, d, writes e = 5 arrays)"
    except Exception as exc:  # no compiler toolchain etc.
        def fallback(a, b, c, d, out):
            tmp = torch.add(a, b)
            return torch.addcmul(d, tmp, c, out=out)
        return fallback, 7, f"torch.addcmul fallback (2 kernels, 7 arrays; torch.compile failed: {type(exc).__name__})"


def linear_sweep(batches=(1, 2, 4, 8, 16, 32, 64, 256, 1024), d: int = 4096, dtype=torch.float32,
                 device=None, repeat: int = 3) -> list[Measurement]:
    """Time y = x @ W, x (B x d), W (d x d), for each batch B: the roofline points of one layer.

    W (d·d elements) is read once per call whatever B is, so small batches are memory-bound and
    large ones compute-bound (see `model.compute_bound_batch`). Pick d so that W is larger than
    the last-level cache (d = 4096 in float32: 64 MiB), or W stays in cache between calls and the
    small batches beat the DRAM roof.
    """
    device = device or default_device()
    w = torch.randn(d, d, dtype=dtype, device=device)
    out = []
    for b in batches:
        x = torch.randn(b, d, dtype=dtype, device=device)
        y = torch.empty(b, d, dtype=dtype, device=device)
        out.append(measure(M.matmul(b, d, d, x.element_size()), lambda x=x, y=y: torch.mm(x, w, out=y),
                           repeat=repeat, min_time_s=0.005))
    return out


def count_passes(fn: Callable[..., object], *args, numel: int) -> dict:
    """Run ``fn(*args)`` eagerly and count, per ATen op, how many tensors of ``numel`` elements it
    reads and writes: the "array passes" over memory of an unfused chain (each op a kernel).

    Returns {"reads": int, "writes": int, "ops": [(op name, reads, writes), ...]}; smaller tensors
    (per-row maxima and sums) are not counted. Uses a TorchDispatchMode, so views are not ops.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args_=(), kwargs=None):
            out = func(*args_, **(kwargs or {}))
            if torch.Tag.view_copy not in func.tags and not func._schema.is_mutable and \
                    func.__name__.split(".")[0] not in ("view", "expand", "t", "detach", "_unsafe_view"):
                flat = [a for a in torch.utils._pytree.tree_leaves((args_, kwargs or {}))
                        if isinstance(a, torch.Tensor) and a.numel() == numel]
                outs = [o for o in torch.utils._pytree.tree_leaves(out)
                        if isinstance(o, torch.Tensor) and o.numel() == numel]
                if flat or outs:
                    ops.append((func.__name__, len(flat), len(outs)))
            return out

    with Count():
        fn(*args)
    return {"reads": sum(r for _, r, _ in ops), "writes": sum(w for _, _, w in ops), "ops": ops}
