"""Measure what a graph pass buys: nodes, aten ops (kernel launches), time, and output change.

``measure_pass(model, pass_fn, inputs)`` traces ``model`` with ``torch.fx.symbolic_trace`` (a
GraphModule is used as it is), applies ``pass_fn`` to get the rewritten module, runs both on the
same inputs and returns a `PassMeasurement`:

    nodes_before, nodes_after         graph nodes that compute or fetch something (`count_nodes`)
    launches_before, launches_after   aten ops that ran in one call (`count_launches`)
    seconds_before, seconds_after     median wall time of one call, s (``labkit.bench.median_time``)
    max_abs_diff                      largest |before − after| over all output elements

**Launches** are counted with ``torch.profiler`` during one call (after a warm-up call, so that
any compilation happens outside it). On a GPU each CUDA kernel the device ran is a launch. On a
CPU nothing is launched; the count is the calls into the kernel library: every aten op called
from outside aten — by Python, by a custom op such as ``labkit::fused_elementwise``, or by
compiled code — not counting the aten ops it calls itself (``aten::relu`` calls
``aten::clamp_min``; ``aten::linear`` calls ``aten::addmm``), views (``aten::t``,
``aten::view``, ...) and the ops in `NO_KERNEL_OPS` (``aten::empty``, ...), which only allocate
memory or make new tensor metadata; plus each kernel Inductor generated (recorded as
``graph_<k>_cpp_fused_...`` when compiled with ``cpp.enable_kernel_profile``, as
`fx_passes.fuse_elementwise` does). A profiler sees inside a custom op, where a
``TorchDispatchMode`` cannot (the mode is off while its own handler runs): an eagerly fused group
still runs every op of its body.

Both modules run under ``torch.no_grad()``: these are inference measurements.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import torch
from torch import fx, nn
from torch.utils._pytree import tree_leaves

from labkit.bench import median_time
from labkit.checks import check_int, check_real

__all__ = ["PassMeasurement", "count_nodes", "count_launches", "launch_counts", "max_abs_diff", "measure_pass",
           "cpp_compiler", "NO_KERNEL_OPS"]

# Ops that allocate or relabel memory without running a kernel (besides those flagged as views).
NO_KERNEL_OPS = frozenset({"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
                           "aten.new_empty_strided", "aten._unsafe_view", "aten.detach", "aten.alias",
                           "aten.lift_fresh", "aten.resize_", "aten.set_"})


@dataclass(frozen=True)
class PassMeasurement:
    """One pass on one model and input (times in seconds, differences in the outputs' units)."""
    name: str
    nodes_before: int
    nodes_after: int
    launches_before: int
    launches_after: int
    seconds_before: float
    seconds_after: float
    max_abs_diff: float

    @property
    def speedup(self) -> float:
        """seconds_before / seconds_after (> 1: the rewritten module is faster)."""
        return self.seconds_before / self.seconds_after

    def row(self) -> list:
        """The fields as one table row: name, nodes, launches, microseconds, speed-up, diff."""
        return [self.name, f"{self.nodes_before} -> {self.nodes_after}",
                f"{self.launches_before} -> {self.launches_after}",
                f"{self.seconds_before * 1e6:.0f} -> {self.seconds_after * 1e6:.0f}",
                round(self.speedup, 2), f"{self.max_abs_diff:.1e}"]


def count_nodes(gm: fx.GraphModule) -> int:
    """Nodes of ``gm``'s graph other than placeholders and the output (the ones that do work)."""
    if not isinstance(gm, fx.GraphModule):
        raise TypeError(f"count_nodes: gm must be a torch.fx.GraphModule, got {type(gm).__name__}")
    return sum(n.op not in ("placeholder", "output") for n in gm.graph.nodes)


def _is_view(name: str) -> bool:
    """Whether every overload of the aten op ``name`` ("aten.t") is a view (no kernel runs)."""
    packet = getattr(torch.ops.aten, name.split(".", 1)[1], None)
    if packet is None:
        return False
    overloads = [getattr(packet, o) for o in packet.overloads()]
    return bool(overloads) and all(o.is_view for o in overloads)


def _inputs_on_cuda(inputs) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in tree_leaves(inputs))


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ side logs "profiler_start/stop" lines there,
    which a notebook would show) for the duration of the block."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def launch_counts(fn: Callable, *inputs) -> Counter:
    """Launches of one call ``fn(*inputs)`` under no_grad, by name, from ``torch.profiler`` (module
    docstring): CUDA kernels when an input is on a GPU; else calls into aten from outside it
    ("aten.addmm" style names, no views, no `NO_KERNEL_OPS`) and Inductor's CPU kernels. ``fn`` is
    called once before, unprofiled, so that compiling is not counted."""
    from torch.profiler import ProfilerActivity, profile

    cuda = _inputs_on_cuda(inputs)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.no_grad():
        fn(*inputs)
        if cuda:
            torch.cuda.synchronize()
        with _quiet_stderr(), profile(activities=activities) as prof:
            fn(*inputs)
            if cuda:
                torch.cuda.synchronize()
    counts: Counter = Counter()
    for e in prof.events():
        if cuda:
            if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset")):
                counts[e.name] += 1
            continue
        if "cpp_fused" in e.name or e.name.startswith("graph_"):       # an Inductor kernel
            counts[e.name] += 1
            continue
        if not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        name = e.name.replace("::", ".", 1)
        if parent is None and name not in NO_KERNEL_OPS and not _is_view(name):
            counts[name] += 1
    return counts


def count_launches(fn: Callable, *inputs) -> int:
    """Number of launches (`launch_counts`) of one call ``fn(*inputs)``."""
    return sum(launch_counts(fn, *inputs).values())


def max_abs_diff(a, b) -> float:
    """Largest absolute difference between two outputs (tensors or nested tuples/lists/dicts of
    them, compared leaf by leaf, in float64); ValueError if their structure or shapes differ."""
    la, lb = tree_leaves(a), tree_leaves(b)
    if len(la) != len(lb):
        raise ValueError(f"max_abs_diff: outputs have {len(la)} and {len(lb)} leaves")
    worst = 0.0
    for x, y in zip(la, lb):
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        if x.shape != y.shape:
            raise ValueError(f"max_abs_diff: shapes differ, {tuple(x.shape)} vs {tuple(y.shape)}")
        if x.numel():
            worst = max(worst, (x.double() - y.double()).abs().max().item())
    return worst


def _as_inputs(inputs) -> tuple:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


ROUNDS = 3   # alternating before/after timing rounds in `measure_pass`


def measure_pass(model: nn.Module, pass_fn: Callable, inputs, *, name: str | None = None,
                 repeat: int = 5, min_time_s: float = 0.0) -> PassMeasurement:
    """Apply ``pass_fn`` (GraphModule -> GraphModule) to ``model`` traced by ``symbolic_trace``
    and measure both on ``inputs`` (a tensor or a tuple of them) under ``torch.no_grad()``.

    Times are medians of ``repeat`` calls after one warm-up (``labkit.bench.median_time``;
    ``min_time_s`` loops short calls), the lower of ``ROUNDS`` alternating before/after rounds (a
    first round alone once showed a 10x outlier: 958 µs for a 90 µs graph); ``name`` defaults to
    the pass function's name.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"measure_pass: model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(pass_fn):
        raise TypeError(f"measure_pass: pass_fn must be callable, got {type(pass_fn).__name__}")
    repeat = check_int("measure_pass", "repeat", repeat, minimum=1)
    min_time_s = check_real("measure_pass", "min_time_s", min_time_s)
    inputs = _as_inputs(inputs)
    before = model if isinstance(model, fx.GraphModule) else fx.symbolic_trace(model)
    with torch.no_grad():
        out_before = before(*inputs)
        after = pass_fn(before)
        if not isinstance(after, fx.GraphModule):
            raise TypeError(f"measure_pass: pass_fn must return a GraphModule, got {type(after).__name__}")
        out_after = after(*inputs)
        rounds = [(median_time(lambda: before(*inputs), repeat=repeat, min_time_s=min_time_s),
                   median_time(lambda: after(*inputs), repeat=repeat, min_time_s=min_time_s))
                  for _ in range(ROUNDS)]
        seconds_before, seconds_after = min(r[0] for r in rounds), min(r[1] for r in rounds)
    return PassMeasurement(
        name=name or getattr(pass_fn, "__name__", type(pass_fn).__name__),
        nodes_before=count_nodes(before), nodes_after=count_nodes(after),
        launches_before=count_launches(before, *inputs), launches_after=count_launches(after, *inputs),
        seconds_before=seconds_before, seconds_after=seconds_after,
        max_abs_diff=max_abs_diff(out_before, out_after))


def cpp_compiler() -> str | None:
    """Path of the C++ compiler ``torch.compile`` would use on a CPU (``$CXX``, else g++, c++ or
    clang++ on the PATH), or None if there is none (then CPU compilation cannot run)."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None
