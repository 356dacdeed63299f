"""The planner on this machine: its constants measured here, its predictions next to real runs.

The planner (`labkit.planner.cost.predict`) was built for GPU clusters. Here we hand it a
`Cluster` that describes *this* computer, measured with the course's own tools, and compare what
it predicts with `labkit.parallel3d.time_grid` — real dp × tp × pp training of `labkit.model`'s
GPT on gloo ranks — for every grid that fits a world size.

**The machine** (`measure_machine`, one "node": every rank on one host, gloo over loopback):

- FLOP/s of one thread on the model's own matrix multiplications (the four GEMMs of a block and
  the logit layer, at one micro-batch's token count), timed like Lab 01 does
  (`labkit.roofline.measure.measure` with `labkit.roofline.model.matmul`, inside
  ``threads(1)``): a forked rank of `labkit.dist.launch` computes with one thread.
- **Cores are shared.** W ranks on C cores: while W ≤ C each rank has a core to itself; with
  W > C the operating system time-slices, and each rank gets about C/W of one. The planner's
  per-rank peak is therefore ``thread_flops · min(1, C/W)`` (`LocalMachine.peak_flops`).
- α and β of gloo's own `dist.all_reduce` on all W ranks at once (the run's oversubscription),
  timed by Lab 05's `labkit.collectives.timing.time_all_reduces` and fitted to the ring model by
  `labkit.collectives.alpha_beta.fit_alpha_beta`. The planner uses the same α, β for its
  point-to-point pipeline messages.
- The run's element size: `TrainSetup` trains in float64 by default, so activations (tp, pp
  messages) and gradients (dp all-reduce) are 8 bytes — passed to `predict` as
  ``bytes_per_element`` and ``grad_bytes``.

**One fitted constant.** The share of the measured matmul rate a training step reaches (the CPU
device's gemm_efficiency) — fitted once for all grids (of every world size given) by least
squares on the relative error (`fit_efficiency`). Nothing is fitted per grid. Memory-bound kernels
and per-kernel overheads are left out of this comparison's device (they fold into the one
efficiency, as in the planner this benchmark first validated).

**What the planner leaves out**, and this machine has: Python and autograd overhead per layer and
per micro-batch, element-wise work (LayerNorm, GELU, softmax, the loss, the optimizer step) that
tensor parallelism replicates rather than splits, the embedding and cross-entropy all-reduces,
pipeline messages that carry the whole activation on every tp rank (Megatron sends 1/tp of it;
`labkit.parallel3d` does not), and processes waiting for a peer that the scheduler has not
run yet. The benchmark (benchmarks/planner_cpu.py) says how much that matters.

    local_model()                       the small GPT the benchmark trains (a planner Model)
    measure_machine(world, ...)         -> LocalMachine (its .cluster(efficiency) is a Cluster)
    feasible_grids(model, world, B, m)  -> [(dp, tp, pp)] the planner and the real run both accept
    measure_grids(world, ...)           -> {(dp, tp, pp): measured seconds per step}
    predict_grid(model, machine, grid, B, m, efficiency) -> Prediction
    fit_efficiency(model, cases, B, m)  the one fitted constant
    validate(world, ...)                -> [GridRow]: predicted parts and total next to measured
    spearman(xs, ys)                    rank correlation (average ranks for ties)
    median_abs_error(rows)              median |predicted/measured − 1| (`labkit.planner.published`'s)
"""
from __future__ import annotations

import dataclasses
import math
import os
import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from labkit.checks import check_int, check_real
from labkit.planner.cost import Cluster, Prediction, Software, predict
from labkit.planner.device import Device
from labkit.planner.network import Network
from labkit.planner.grid import Plan, problems
from labkit.planner.model import Model
from labkit.planner.published import median_abs_error, ranks, spearman  # noqa: F401 (re-exported)

__all__ = ["local_model", "LocalMachine", "run_dtype", "cores", "matmul_shapes", "thread_flops",
           "measure_machine", "feasible_grids", "measure_grids", "predict_grid", "fit_efficiency",
           "GridRow", "validate", "spearman", "ranks", "median_abs_error"]

GLOBAL_BATCH = 32       # sequences per step, for every grid
MICRO_BATCHES = 4       # per data-parallel replica: >= the deepest pipeline (1F1B needs m >= pp)
ALL_REDUCE_SIZES = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)   # bytes


def local_model() -> Model:
    """A GPT small enough that every grid of 4 and 8 gloo ranks trains a step in about a second on
    a 2-core CPU, big enough that its matmuls are not all call overhead: 4 layers, hidden 128,
    4 heads, 64 tokens, vocabulary 128 (0.8 M parameters)."""
    return Model(layers=4, hidden=128, heads=4, seq_len=64, vocab=128)


def run_dtype() -> torch.dtype:
    """The dtype `labkit.parallel3d.TrainSetup` (and so `time_grid`) trains in by default."""
    from labkit.parallel3d.train import TrainSetup

    return next(f.default for f in dataclasses.fields(TrainSetup) if f.name == "dtype")


def cores() -> int:
    """CPU cores this process may run on (its affinity mask; os.cpu_count() where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:       # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class LocalMachine:
    """This computer, as the planner needs it, for ``ranks`` gloo ranks on ``cores`` cores.

    thread_flops  FLOP/s one thread reaches on the model's matmul shapes (measured)
    alpha, beta   gloo all-reduce latency (s) and inverse bandwidth (s/byte), ring model, fitted
                  on ``ranks`` ranks at once
    dtype         the run's element type ("float64"); bytes_per_element its size
    samples       the all-reduce timings α, β were fitted to: [(model, p, bytes, seconds)]
    """

    ranks: int
    cores: int
    thread_flops: float
    alpha: float
    beta: float
    dtype: str
    bytes_per_element: int
    samples: tuple = ()

    @property
    def share(self) -> float:
        """Fraction of one core a rank gets: 1 while ranks ≤ cores, else cores/ranks."""
        return min(1.0, self.cores / self.ranks)

    @property
    def peak_flops(self) -> float:
        """Per-rank FLOP/s the planner uses: ``thread_flops · share``."""
        return self.thread_flops * self.share

    @property
    def bandwidth(self) -> float:
        """1/β in bytes/s."""
        return 1.0 / self.beta

    def cluster(self, flops_efficiency: float = 1.0) -> Cluster:
        """The planner's `Cluster`: ``ranks`` "GPUs" on one node, the link = gloo over loopback
        (α, 1/β), per-rank peak `peak_flops` with ``flops_efficiency`` as the device's
        gemm_efficiency; one core is one "SM" and a 1 × 1 tile (no quantisation); memory-bound
        kernels and per-kernel overheads are left out (an unbounded bandwidth, no overhead), as
        this comparison's model always did; memory = the host's RAM (not used for time)."""
        try:
            ram = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            ram = float(2 ** 34)
        device = Device(f"CPU thread × {self.share:.2f}", self.peak_flops, 1, (1, 1), 1e18, ram,
                        gemm_efficiency=flops_efficiency, kernel_overhead=0.0)
        net = Network(self.ranks, self.bandwidth, 1, self.bandwidth, intra_latency=self.alpha,
                      inter_latency=self.alpha)
        return Cluster(self.ranks, device, net, name=f"this CPU, {self.ranks} gloo ranks on {self.cores} cores",
                       reserved_bytes=0.0, fragmentation=0.0)

    def software(self) -> Software:
        """What `labkit.parallel3d` does: whole activations sent (no scatter/gather), gradients and
        activations of `run_dtype` (8 bytes for float64), no overlap; the optimizer step left out."""
        w = self.bytes_per_element
        return Software("labkit.parallel3d", scatter_gather=False, grad_bytes=float(w), element_bytes=w,
                        optimizer_bytes=1e-9)


def matmul_shapes(model: Model, tokens: int) -> list[tuple[int, int, int]]:
    """(m, k, n) of the forward matrix multiplications of one block, and of the logit layer, for
    ``tokens`` rows (= micro-batch · seq_len): qkv, attention output projection, MLP up, MLP down,
    logits. The attention scores (batched, s × s per head) are left out: they are small here."""
    h, f, v = model.hidden, model.ffn, model.vocab
    return [(tokens, h, 3 * h), (tokens, h, h), (tokens, h, f), (tokens, f, h), (tokens, h, v)]


def thread_flops(model: Model, tokens: int, dtype: torch.dtype, repeat: int = 5) -> float:
    """FLOP/s of one thread on `matmul_shapes`: total FLOPs / total median seconds, each shape timed
    by Lab 01's `labkit.roofline.measure.measure` (the course timer, `labkit.bench.median_time`)."""
    from labkit.roofline import measure as R
    from labkit.roofline import model as RM

    flops = seconds = 0.0
    gen = torch.Generator().manual_seed(0)
    with R.threads(1):
        for m, k, n in matmul_shapes(model, tokens):
            a = torch.randn(m, k, generator=gen, dtype=dtype)
            b = torch.randn(k, n, generator=gen, dtype=dtype)
            out = torch.empty(m, n, dtype=dtype)
            cost = RM.matmul(m, k, n, a.element_size())
            one = R.measure(cost, lambda a=a, b=b, out=out: torch.mm(a, b, out=out), repeat=repeat,
                            min_time_s=0.01)
            flops += one.flops
            seconds += one.seconds
    return flops / seconds


def measure_machine(world: int, model: Model | None = None, *, micro_batch: int = 2,
                    sizes=ALL_REDUCE_SIZES, repeat: int = 5, dtype: torch.dtype | None = None,
                    flops: float | None = None) -> LocalMachine:
    """Measure this machine for ``world`` gloo ranks (module docstring): one thread's matmul rate on
    ``model``'s shapes at ``micro_batch`` sequences (`thread_flops`; pass ``flops`` to reuse a rate
    already measured), and α, β of gloo's all-reduce on ``world`` ranks over buffers of ``sizes``
    bytes (minimum of ``repeat`` calls each, Lab 05's method)."""
    from labkit.collectives import alpha_beta
    from labkit.collectives.timing import samples_of, time_all_reduces

    fn = "measure_machine"
    world = check_int(fn, "world", world, minimum=2)
    check_int(fn, "micro_batch", micro_batch, minimum=1)
    model = local_model() if model is None else model
    dtype = run_dtype() if dtype is None else dtype
    if flops is None:
        rate = thread_flops(model, micro_batch * model.seq_len, dtype, repeat=repeat)
    else:
        rate = check_real(fn, "flops", flops, positive=True)
    measured = time_all_reduces(world, sizes=tuple(sizes), algorithms=("gloo_all_reduce",), repeat=repeat)
    # gloo's algorithm is its own; we fit it to the ring model because that is what the planner uses
    samples = [("ring_all_reduce", p, n, t) for _, p, n, t in samples_of(measured, world, ("gloo_all_reduce",))]
    alpha, beta = alpha_beta.fit_alpha_beta(samples)
    if alpha <= 0 or beta <= 0:
        raise RuntimeError(f"{fn}: the all-reduce fit gave α = {alpha:.3g} s, β = {beta:.3g} s/B; "
                           "a busy machine? measure again with more repeats")
    return LocalMachine(world, cores(), rate, alpha, beta, str(dtype).removeprefix("torch."),
                        torch.empty((), dtype=dtype).element_size(), tuple(samples))


# --------------------------------------------------------------------------- grids

def feasible_grids(model: Model, world: int, global_batch: int = GLOBAL_BATCH,
                   micro_batches: int = MICRO_BATCHES) -> list[tuple[int, int, int]]:
    """Every (dp, tp, pp) with dp·tp·pp = world that both the planner (`grid.problems`: tp | heads,
    pp | layers, dp·b | B) and the real run (`parallel3d.train.check_setup`: also tp | vocab and
    m ≥ pp for 1F1B) accept, with ``micro_batches`` per replica; in order of dp, then tp, falling."""
    from labkit.parallel3d.train import TrainSetup, check_setup

    world = check_int("feasible_grids", "world", world, minimum=1)
    B = check_int("feasible_grids", "global_batch", global_batch, minimum=1)
    m = check_int("feasible_grids", "micro_batches", micro_batches, minimum=1)
    out = []
    for dp in range(world, 0, -1):
        for tp in range(world // dp, 0, -1):
            if world % (dp * tp):
                continue
            pp = world // (dp * tp)
            if B % (dp * m):
                continue
            if problems(model, Plan(dp, tp, pp, micro_batch=B // (dp * m), recompute="none"), B, world):
                continue
            try:
                check_setup("feasible_grids", model, TrainSetup(dp, tp, pp, B, m), world)
            except (ValueError, TypeError):
                continue
            out.append((dp, tp, pp))
    return out


def measure_grids(world: int, model: Model | None = None, *, global_batch: int = GLOBAL_BATCH,
                  micro_batches: int = MICRO_BATCHES, steps: int = 5,
                  measure: Callable | None = None) -> dict[tuple[int, int, int], float]:
    """{(dp, tp, pp): seconds per step} for every `feasible_grids` grid. ``measure`` has
    `labkit.parallel3d.time_grid`'s signature (cfg, world, dp, tp, pp, global_batch, micro_batches,
    steps=...) and is that function unless given (a test passes a fake one)."""
    if measure is None:
        from labkit.parallel3d.train import time_grid as measure
    model = local_model() if model is None else model
    return {g: float(measure(model, world, *g, global_batch, micro_batches, steps=steps))
            for g in feasible_grids(model, world, global_batch, micro_batches)}


def predict_grid(model: Model, machine: LocalMachine, grid: tuple[int, int, int], global_batch: int = GLOBAL_BATCH,
                 micro_batches: int = MICRO_BATCHES, efficiency: float = 1.0) -> Prediction:
    """The planner's `Prediction` for ``grid`` = (dp, tp, pp) on ``machine``: plain 1F1B, no
    recomputation, no ZeRO, micro-batch B/(dp·m), elements of ``machine.bytes_per_element``."""
    dp, tp, pp = grid
    plan = Plan(dp, tp, pp, micro_batch=global_batch // (dp * micro_batches), recompute="none")
    return predict(model, machine.cluster(efficiency), plan, global_batch, software=machine.software())


def fit_efficiency(model: Model, cases, global_batch: int = GLOBAL_BATCH,
                   micro_batches: int = MICRO_BATCHES, tol: float = 1e-7) -> float:
    """The one efficiency e (the device's gemm_efficiency) for all grids of all ``cases`` =
    [(LocalMachine, {grid: measured s})]: least squares on the relative error, Σ(T(e)/t − 1)²,
    minimised by golden-section search over e in (0, 1] (T falls as e grows: compute scales with
    1/e, communication does not). 1 when even e = 1 predicts slower than measured: a machine cannot
    beat its measured matmul rate."""
    data = []
    for machine, measured in cases:
        for grid, t in measured.items():
            data.append((machine, grid, check_real("fit_efficiency", "measured seconds", t, positive=True)))
    if not data:
        raise ValueError("fit_efficiency: no measured grids")

    def loss(e: float) -> float:
        return math.fsum((predict_grid(model, m, g, global_batch, micro_batches, e).step_time / t - 1) ** 2
                         for m, g, t in data)

    golden = (math.sqrt(5) - 1) / 2
    lo, hi = 1e-4, 1.0
    x1, x2 = hi - golden * (hi - lo), lo + golden * (hi - lo)
    f1, f2 = loss(x1), loss(x2)
    while hi - lo > tol:
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - golden * (hi - lo)
            f1 = loss(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + golden * (hi - lo)
            f2 = loss(x2)
    e = (lo + hi) / 2
    return 1.0 if loss(1.0) <= loss(e) else e


# --------------------------------------------------------------------------- the comparison

@dataclass(frozen=True)
class GridRow:
    """One grid: the planner's ``parts`` (seconds: compute, bubble, tp, pp, dp) and their sum
    ``predicted``, next to the ``measured`` median seconds per step."""

    dp: int
    tp: int
    pp: int
    micro_batch: int
    micro_batches: int
    parts: dict
    predicted: float
    measured: float

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.dp, self.tp, self.pp

    @property
    def ratio(self) -> float:
        """measured / predicted (> 1: the real step is slower than the planner says)."""
        return self.measured / self.predicted

    @property
    def error(self) -> float:
        """predicted / measured − 1 (the planner's relative error, signed)."""
        return self.predicted / self.measured - 1


def validate(world: int, machine: LocalMachine | None = None, *, model: Model | None = None,
             global_batch: int = GLOBAL_BATCH, micro_batches: int = MICRO_BATCHES,
             efficiency: float | None = None, measured: dict | None = None, measure: Callable | None = None,
             steps: int = 5) -> list[GridRow]:
    """The planner's prediction next to a measurement for every `feasible_grids` grid of ``world``
    ranks. ``machine``: `measure_machine(world, model)` unless given. ``measured``: {(dp, tp, pp):
    seconds}, else `measure_grids` with ``measure`` (default `time_grid`). ``efficiency``: the
    fitted constant, else `fit_efficiency` on these grids alone."""
    model = local_model() if model is None else model
    machine = measure_machine(world, model) if machine is None else machine
    if machine.ranks != world:
        raise ValueError(f"validate: machine was measured for {machine.ranks} ranks, not {world}")
    grids = feasible_grids(model, world, global_batch, micro_batches)
    if measured is None:
        measured = measure_grids(world, model, global_batch=global_batch, micro_batches=micro_batches,
                                 steps=steps, measure=measure)
    missing = [g for g in grids if g not in measured]
    if missing:
        raise ValueError(f"validate: no measurement for grid(s) {missing}")
    measured = {g: measured[g] for g in grids}
    if efficiency is None:
        efficiency = fit_efficiency(model, [(machine, measured)], global_batch, micro_batches)
    rows = []
    for g in grids:
        p = predict_grid(model, machine, g, global_batch, micro_batches, efficiency)
        parts = {"compute": p.gemm + p.elementwise + p.optimizer, "bubble": p.bubble, "tp": p.tp_comm,
                 "pp": p.pp_comm, "dp": p.dp_comm}
        rows.append(GridRow(*g, p.plan.micro_batch, p.micro_batches, parts, p.step_time, float(measured[g])))
    return rows
