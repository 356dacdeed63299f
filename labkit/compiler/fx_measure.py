"""Measure what a graph pass buys: nodes, aten ops (kernel launches), time, and output change.

``measure_pass(model, pass_fn, inputs)`` traces ``model`` with ``torch.fx.symbolic_trace`` (a
GraphModule is used as it is), applies ``pass_fn`` to get the rewritten module, runs both on the
same inputs and returns a `PassMeasurement`:

    nodes_before, nodes_after         graph nodes that compute or fetch something (`count_nodes`)
    launches_before, launches_after   aten ops that ran in one call (`count_launches`)
    seconds_before, seconds_after     median wall time of one call, s (``labkit.bench.median_time``)
    max_abs_diff                      largest |before − after| over all output elements

**Launches.** Every aten op that runs on a tensor is, on a GPU, one kernel launch (on a CPU one
call into a kernel library) and one pass over its operands in memory. `count_launches` counts the
ops seen by a `TorchDispatchMode` during one call, leaving out view ops (``aten.t``, ``aten.view``,
``aten.split_with_sizes``, ...) and the ops in `NO_KERNEL_OPS` (``aten.empty``, ``aten._unsafe_view``,
...), which only allocate memory or make new tensor metadata and run no kernel. A fused
group from `fx_passes.fuse_elementwise` is one op (``labkit.fused_elementwise``) there.

Both modules run under ``torch.no_grad()``: these are inference measurements.
"""
from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import torch
from torch import fx, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from labkit.bench import median_time
from labkit.checks import check_int, check_real

__all__ = ["PassMeasurement", "count_nodes", "LaunchCounter", "count_launches", "launch_counts",
           "max_abs_diff", "measure_pass", "cpp_compiler", "NO_KERNEL_OPS"]

# Ops that allocate or relabel memory without running a kernel (besides those flagged as views).
NO_KERNEL_OPS = frozenset({"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
                           "aten.new_empty_strided", "aten._unsafe_view", "aten.detach", "aten.alias",
                           "aten.lift_fresh"})


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


class LaunchCounter(TorchDispatchMode):
    """A dispatch mode that counts the ops that run inside it by name (``ops``), leaving out views
    and `NO_KERNEL_OPS`."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if not func.is_view and name not in NO_KERNEL_OPS:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def launch_counts(fn: Callable, *inputs) -> Counter:
    """Which ops (``aten.addmm``, ...) ``fn(*inputs)`` runs and how often (no views, no `NO_KERNEL_OPS`)."""
    with torch.no_grad(), LaunchCounter() as counter:
        fn(*inputs)
    return counter.ops


def count_launches(fn: Callable, *inputs) -> int:
    """Number of non-view ops (kernel launches) one call ``fn(*inputs)`` runs, under no_grad."""
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
