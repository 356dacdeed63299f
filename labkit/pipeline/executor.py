"""A real pipeline executor: any valid schedule, on N ranks, for an MLP split into stages.

Inside a rank (started by ``labkit.dist.launch``), ``run_step`` walks that
rank's list of actions:

- F(s, i): take microbatch i's input (stage 0) or receive the activation from
  the rank of stage s-1, run the stage, keep (input, output) for the backward,
  and send the output to the rank of stage s+1 (or, on the last stage, compute
  the loss, divided by the number of microbatches).
- B(s, i): receive d(loss)/d(output) from the rank of stage s+1 (or start from
  the loss on the last stage), backpropagate through the stage (parameter
  gradients accumulate over microbatches), and send d(loss)/d(input) to the
  rank of stage s-1.

Each action kind is one function (`_forward`, `_backward`, `_input_grad`, `_weight_grad`); the
messages between stages are `labkit.pipeline.comm`'s (`StageLinks`): sends are ``dist.isend``
(waited at the end of the step) and receives are blocking ``dist.recv`` with a tag per (boundary,
microbatch, direction), so a schedule that passes ``check_schedule`` cannot deadlock. Every
action's start and end are recorded with `labkit.bench.now` (``time.perf_counter``,
CLOCK_MONOTONIC: one clock for all processes of the machine; on a GPU it first waits for the
queued kernels, so an interval is the action's compute).

NCCL ignores tags: it matches a pair's messages in the order they were posted, and a send
and a receive between two ranks on one stream, each side sending first, deadlock. With
``order=message_order(schedule)`` (`labkit.pipeline.comm`; what `run_pipeline` and Lab 11 pass
under NCCL) a rank receives from each peer in the order that peer sends.

Inside a bigger job (3D parallelism, Lab 11) the pipeline is a sub-group: pass ``group=`` and
stage s lives on that group's rank s % group_size, whose global rank
``dist.get_global_rank(group, ·)`` is the peer of every send and receive. ``loss_fn=`` replaces
the default mean squared error on the last stage.

``run_pipeline(sched, cfg)`` launches the ranks and gathers the result;
``reference_step(cfg)`` computes the same loss and gradients in one process.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from labkit.bench import now
from labkit.dist import backend, device
from labkit.pipeline.comm import StageLinks, message_order
from labkit.pipeline.schedules import Action, check_schedule, normalized, num_microbatches_of, num_stages_of

__all__ = ["MLPConfig", "build_stages", "make_batch", "reference_step", "run_step", "run_pipeline",
           "StepRecord", "PipelineRun", "measured_bubble"]


# --------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class MLPConfig:
    """An MLP of Linear(width, width) + tanh blocks, cut into stages.

    layers_per_stage: one int (same for every stage) or one int per stage
    (uneven stages model an unbalanced pipeline). batch rows are split into
    num_microbatches equal microbatches. dtype float64 makes gradient checks
    tight.
    """

    num_stages: int = 4
    num_microbatches: int = 4
    width: int = 16
    layers_per_stage: int | tuple[int, ...] = 2
    batch: int = 8
    seed: int = 0
    dtype: torch.dtype = torch.float64

    def layers(self) -> list[int]:
        lps = self.layers_per_stage
        out = [lps] * self.num_stages if isinstance(lps, int) else list(lps)
        if len(out) != self.num_stages or any(n < 1 for n in out):
            raise ValueError(f"layers_per_stage must be a positive int or {self.num_stages} positive ints, got {lps!r}")
        return out

    def microbatch_rows(self) -> int:
        if self.batch % self.num_microbatches:
            raise ValueError(f"batch={self.batch} rows do not split into {self.num_microbatches} equal microbatches")
        return self.batch // self.num_microbatches


def build_stages(cfg: MLPConfig) -> list[nn.Sequential]:
    """All stages of the seeded MLP (every rank builds the same weights, then keeps its own)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    stages = []
    for n in cfg.layers():
        blocks = []
        for _ in range(n):
            lin = nn.Linear(cfg.width, cfg.width, dtype=cfg.dtype)
            with torch.no_grad():
                lin.weight.copy_(torch.randn(cfg.width, cfg.width, generator=gen, dtype=cfg.dtype) / cfg.width ** 0.5)
                lin.bias.copy_(0.1 * torch.randn(cfg.width, generator=gen, dtype=cfg.dtype))
            blocks += [lin, nn.Tanh()]
        stages.append(nn.Sequential(*blocks))
    return stages


def make_batch(cfg: MLPConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded (inputs, targets), each (batch, width)."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    x = torch.randn(cfg.batch, cfg.width, generator=gen, dtype=cfg.dtype)
    y = torch.randn(cfg.batch, cfg.width, generator=gen, dtype=cfg.dtype)
    return x, y


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error (mean over all elements of the microbatch)."""
    return torch.nn.functional.mse_loss(output, target)


_mse = loss_fn   # the default of run_step's ``loss_fn`` argument, which shadows the name there


def reference_step(cfg: MLPConfig) -> tuple[float, list[list[torch.Tensor]]]:
    """One process, full batch: (loss, per-stage list of parameter gradients).

    With equal microbatches, the mean of per-microbatch MSE losses equals the
    full-batch MSE, so these are exactly what the pipeline must produce.
    """
    stages = build_stages(cfg)
    x, y = make_batch(cfg)
    out = x
    for st in stages:
        out = st(out)
    loss = loss_fn(out, y)
    loss.backward()
    return loss.item(), [[p.grad.clone() for p in st.parameters()] for st in stages]


# --------------------------------------------------------------------------- one step on one rank

@dataclass
class StepRecord:
    """What one rank did in one step: per-microbatch losses (last stage only), its stages'
    gradients {stage: [grad per parameter]}, and [(action, start_s, end_s)] on the shared clock."""

    rank: int
    losses: dict[int, float]
    grads: dict[int, list[torch.Tensor]]
    timeline: list[tuple[Action, float, float]]
    t0: float


def run_step(actions: Sequence[Action], stages: dict[int, nn.Module], num_stages: int,
             num_microbatches: int, inputs: Sequence[torch.Tensor] | None,
             targets: Sequence[torch.Tensor] | None,
             boundary_shape: tuple[int, ...], dtype: torch.dtype,
             backward_fn: Callable | None = None, group=None,
             loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
             order: dict | None = None, grad_group=None) -> StepRecord:
    """Run this rank's ``actions`` for one step (inside an initialised process group).

    stages: {stage index: module} for the stages this rank owns (stage s on rank
    s % world_size). inputs / targets: per-microbatch tensors, needed on the
    ranks owning the first / last stage. boundary_shape: shape of every
    activation crossing a stage boundary (one microbatch). backward_fn: a
    function with the signature of exercises/lab08_pipeline.stage_backward (a learner's
    version) used for every B; by default the same steps run inline, with the gradient
    received before the B interval starts so intervals are compute time only.
    group: the pipeline's process group (None: the default group); ranks and peers above are
    ranks of this group. loss_fn(output, target) -> scalar: the last stage's loss per
    microbatch (None: mean squared error); it is divided by num_microbatches before backward.
    A one-stage pipeline (num_stages = 1 on one rank) is plain gradient accumulation.
    order: `message_order` of the whole schedule: receive in each sender's order (NCCL matches by
    order; gloo by tag, so None will do there). grad_group: the group gradients travel in (None:
    ``group``). Tensors are made on the device of the stages' parameters.
    """
    if backward_fn is not None and order is not None:
        raise ValueError("run_step: a plugged-in backward_fn receives by tag itself; run it with "
                         "order=None on gloo (NCCL ignores tags)")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if world < 2 and num_stages > 1:
        raise ValueError("run_step needs at least 2 ranks: neighbouring stages must live on "
                         "different ranks")
    for a in actions:
        if a.stage % world != rank or a.stage not in stages:
            raise ValueError(f"rank {rank} was given {a!r}, but stage {a.stage} is not one of "
                             f"its stages {sorted(stages)}")
        if a.kind not in _RUN:
            raise ValueError(f"the executor runs F, B, I and W actions, got {a!r}")
    device = next((p.device for m in stages.values() for p in m.parameters()), torch.device("cpu"))
    step = _Step(stages, num_stages, num_microbatches, inputs, targets, boundary_shape, dtype, device,
                 _mse if loss_fn is None else loss_fn, backward_fn,
                 StageLinks(num_microbatches, group, grad_group, order))
    timeline = []
    dist.barrier(group=group)
    t0 = now()
    for a in actions:
        start, end = _RUN[a.kind](step, a.stage, a.microbatch)
        timeline.append((a, start, end))
    step.links.wait_sends()
    grads = {s: [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                 for p in m.parameters()] for s, m in stages.items()}
    return StepRecord(rank, step.losses, grads, timeline, t0)


@dataclass
class _Step:
    """One rank's state while it runs a step: its stages, the step's sizes, its links to the
    neighbouring stages' ranks, and what the actions hand on to each other."""

    stages: dict[int, nn.Module]
    num_stages: int
    num_microbatches: int
    inputs: Sequence[torch.Tensor] | None
    targets: Sequence[torch.Tensor] | None
    boundary_shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    backward_fn: Callable | None
    links: StageLinks
    saved: dict = field(default_factory=dict)       # (s, i) -> (input, output, loss or None), F to B/I/W
    pending_w: dict = field(default_factory=dict)   # (s, i) -> (root, upstream gradient), I to W
    losses: dict = field(default_factory=dict)      # microbatch -> loss (last stage)


def _forward(step: _Step, s: int, i: int) -> tuple[float, float]:
    """F(s, i): the input (stage 0) or the received activation, through the stage; the last stage's
    loss (divided by the number of microbatches), or the output sent on."""
    S, M = step.num_stages, step.num_microbatches
    if s == 0:
        x = step.inputs[i]
    else:
        x = torch.empty(step.boundary_shape, dtype=step.dtype, device=step.device)
        step.links.recv_activation(x, s, i)
        x.requires_grad_(True)
    start = now()
    out = step.stages[s](x)
    loss = None
    if s == S - 1:
        loss = step.loss_fn(out, step.targets[i]) / M
        step.losses[i] = loss.item() * M
    else:
        step.links.send_activation(out.detach().contiguous(), s, i)
    end = now()
    step.saved[(s, i)] = (x, out, loss)
    return start, end


def _input_grad(step: _Step, s: int, i: int) -> tuple[float, float]:
    """I(s, i): the input gradient only, sent back; the graph is kept for W(s, i)."""
    x, out, loss = step.saved[(s, i)]
    last = s == step.num_stages - 1
    grad = None
    if not last:
        grad = torch.empty_like(out)
        step.links.recv_gradient(grad, s, i)
    start = now()
    root = loss if last else out
    if s > 0:
        (gx,) = torch.autograd.grad(root, [x], grad, retain_graph=True)
        step.links.send_gradient(gx.contiguous(), s, i)
    step.pending_w[(s, i)] = (root, grad)
    return start, now()


def _weight_grad(step: _Step, s: int, i: int) -> tuple[float, float]:
    """W(s, i): the stage's weight gradients, accumulated into .grad."""
    start = now()
    root, grad = step.pending_w.pop((s, i))
    step.saved.pop((s, i))
    params = list(step.stages[s].parameters())
    for prm, g in zip(params, torch.autograd.grad(root, params, grad)):
        prm.grad = g if prm.grad is None else prm.grad + g
    return start, now()


def _backward(step: _Step, s: int, i: int) -> tuple[float, float]:
    """B(s, i): backward through the stage (weight gradients accumulate) and the input gradient
    sent back. Our own path receives first, so the interval is compute only; a plugged-in
    ``backward_fn`` (a learner's stage_backward) receives itself, inside its interval."""
    x, out, loss = step.saved.pop((s, i))
    links, first, last = step.links, s == 0, s == step.num_stages - 1
    if step.backward_fn is not None:
        start = now()
        work = step.backward_fn(x, out, loss, None if last else links.peer(s + 1), None if first else links.peer(s - 1),
                                links.grad_tag(s, i), links.grad_tag(s - 1, i))
        if work is not None:
            links.sends.append(work)
        return start, now()
    grad = None
    if not last:
        grad = torch.empty_like(out)
        links.recv_gradient(grad, s, i)
    start = now()
    if grad is None:
        loss.backward()
    else:
        out.backward(grad)
    if not first:
        links.send_gradient(x.grad.contiguous(), s, i)
    return start, now()


_RUN = {"F": _forward, "I": _input_grad, "W": _weight_grad, "B": _backward}


# --------------------------------------------------------------------------- launching

@dataclass
class PipelineRun:
    """Gathered result of `run_pipeline`: loss (mean over microbatches), gradients per stage,
    per-rank [(action, start_s, end_s)] of the last repeat with 0 = the earliest rank's start,
    and rank 0's wall time of each repeat (seconds, barrier to barrier)."""

    loss: float
    grads: list[list[torch.Tensor]]
    timeline: dict[int, list[tuple[Action, float, float]]] = field(repr=False)
    step_times: list[float] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return max(e for tl in self.timeline.values() for _, _, e in tl)


def measured_bubble(timeline: dict[int, list[tuple[Action, float, float]]]) -> float:
    """Idle share of a recorded timeline: 1 - busy / (ranks * makespan), makespan from 0 to the last end."""
    makespan = max(e for tl in timeline.values() for _, _, e in tl)
    busy = sum(e - s for tl in timeline.values() for _, s, e in tl)
    return 1.0 - busy / (len(timeline) * makespan)


def _worker(rank, world, sched, cfg, backward_fn, repeats):
    torch.manual_seed(0)
    all_stages = build_stages(cfg)
    mine = {s: all_stages[s] for s in range(cfg.num_stages) if s % world == rank}
    dev = device()
    mine = {s: m.to(dev) for s, m in mine.items()}
    x, y = (t.to(dev) for t in make_batch(cfg))
    rows = cfg.microbatch_rows()
    xs, ys = list(x.split(rows)), list(y.split(rows))
    ordered = ordered_p2p()
    order = message_order(sched) if ordered else None
    grad_group = dist.new_group(list(range(world))) if ordered else None
    rec, times = None, []
    for _ in range(repeats):  # the last repeat is kept (earlier ones warm up)
        for m in mine.values():
            m.zero_grad(set_to_none=True)
        dist.barrier()
        t = now()
        rec = run_step(sched[rank], mine, cfg.num_stages, cfg.num_microbatches,
                       xs if 0 in mine else None, ys if cfg.num_stages - 1 in mine else None,
                       (rows, cfg.width), cfg.dtype, backward_fn, order=order, grad_group=grad_group)
        dist.barrier()
        times.append(now() - t)
    return rec, times


def ordered_p2p() -> bool:
    """Whether this group matches point-to-point messages by order rather than by tag (NCCL)."""
    return backend() == "nccl"


def run_pipeline(sched: dict[int, list[Action]], cfg: MLPConfig, backward_fn: Callable | None = None,
                 repeats: int = 1, timeout: float = 60.0) -> PipelineRun:
    """Launch len(sched) ranks, run one step of ``sched`` for ``cfg``'s MLP, gather the result.

    repeats > 1 runs the step several times and keeps the last (steadier timings). NCCL when
    there is a GPU per rank, except with a learner's ``backward_fn`` (it receives by tag: gloo).
    """
    from labkit.dist import launch

    check_schedule(sched)
    sched = normalized(sched)   # plain (stage, kind, microbatch) tuples become Actions
    if num_stages_of(sched) != cfg.num_stages or num_microbatches_of(sched) != cfg.num_microbatches:
        raise ValueError(f"schedule has {num_stages_of(sched)} stages x {num_microbatches_of(sched)} microbatches, "
                         f"config has {cfg.num_stages} x {cfg.num_microbatches}")
    cfg.microbatch_rows()
    out = launch(_worker, len(sched), sched, cfg, backward_fn, repeats, timeout=timeout,
                 backend="auto" if backward_fn is None else "gloo")
    recs = [r for r, _ in out]
    t0 = min(r.t0 for r in recs)
    timeline = {r.rank: [(a, s - t0, e - t0) for a, s, e in r.timeline] for r in recs}
    losses = {i: v for r in recs for i, v in r.losses.items()}
    grads = [None] * cfg.num_stages
    for r in recs:
        for s, g in r.grads.items():
            grads[s] = g
    return PipelineRun(sum(losses.values()) / len(losses), grads, timeline, out[0][1])


def stage_backward(stage_input: torch.Tensor, stage_output: torch.Tensor, loss: torch.Tensor | None,
                   recv_from: int | None, send_to: int | None, recv_tag: int, send_tag: int):
    """Backward of one stage for one microbatch, with its real receive and send.

    Last stage (``loss`` given, ``recv_from`` None): ``loss.backward()``.
    Otherwise: receive d(loss)/d(stage_output) - a tensor shaped and typed like
    ``stage_output`` - from rank ``recv_from`` with tag ``recv_tag``, then
    backpropagate it through the stage. Parameter .grad accumulate.
    Then, unless this is the first stage (``send_to`` None), send
    ``stage_input.grad`` to rank ``send_to`` with tag ``send_tag`` using
    ``dist.isend`` and return its Work (the caller waits on it); else return None.
    """
    # BEGIN SOLUTION
    # HINT: the last stage calls loss.backward(); the others dist.recv a gradient shaped like the
    # HINT: output and pass it to torch.autograd.backward; then dist.isend the input's .grad (contiguous).
    if loss is not None:
        loss.backward()
    else:
        grad_out = torch.empty_like(stage_output)
        dist.recv(grad_out, src=recv_from, tag=recv_tag)
        torch.autograd.backward(stage_output, grad_out)
    if send_to is None:
        return None
    return dist.isend(stage_input.grad.contiguous(), dst=send_to, tag=send_tag)
    # END SOLUTION
