"""The same pipelines through PyTorch's own ``torch.distributed.pipelining``, for cross-checks.

- ``torch_pipeline_order(kind, p, m, v)``: PyTorch's ``pipeline_order`` (its
  schedule IR, idle slots dropped) as our `Action` lists.
- ``torch_executed_order(kind, p, m, v)``: the order PyTorch's executor
  actually runs forwards and backwards, recorded from a real run on p gloo
  ranks (each stage logs its forward calls, and its backward through an
  autograd function on its output). For the single-stage schedules (GPipe,
  1F1B) this - not the printed helper order - is the ground truth.
- ``torch_step(kind, cfg)``: one training step of the `MLPConfig` model through
  PyTorch's schedule, returning loss and per-stage gradients.
Every function launches real ranks with ``labkit.dist.launch``.
"""
from __future__ import annotations

import torch
import torch.distributed.pipelining  # noqa: F401  (imported once here, not in every launched rank)
from torch import nn

from labkit.bench import now
from labkit.dist import device
from labkit.pipeline.executor import MLPConfig, build_stages, loss_fn, make_batch
from labkit.pipeline.schedules import KINDS, Action

__all__ = ["torch_schedule_class", "torch_pipeline_order", "torch_pipeline_orders", "torch_executed_order",
           "torch_executed_orders", "torch_step"]

_KIND_TO_CLASS = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B",
                  "interleaved_zb": "ScheduleInterleavedZeroBubble"}
_MULTI = ("interleaved_1f1b", "interleaved_zb")


def torch_schedule_class(kind: str):
    """PyTorch's schedule class for one of our kinds."""
    if kind not in KINDS:
        raise ValueError(f"unknown schedule kind {kind!r}; expected one of {KINDS}")
    from torch.distributed import pipelining

    return getattr(pipelining, _KIND_TO_CLASS[kind])


def _compute_kind(a) -> str | None:
    """Our kind letter for a PyTorch compute action, None for communication / bookkeeping actions."""
    from torch.distributed.pipelining.schedules import _ComputationType as C

    return {C.FORWARD: "F", C.FULL_BACKWARD: "B", C.BACKWARD_INPUT: "I", C.BACKWARD_WEIGHT: "W"}.get(a.computation_type)


def _to_action(a) -> Action:
    return Action(a.stage_index, _compute_kind(a), a.microbatch_index)


def _make_torch_schedule(kind, rank, world, modules: dict[int, nn.Module], num_stages, m, loss):
    from torch.distributed.pipelining import PipelineStage

    stages = [PipelineStage(mod, s, num_stages, device()) for s, mod in sorted(modules.items())]
    cls = torch_schedule_class(kind)
    if kind in _MULTI:
        return cls(stages, m, loss_fn=loss)
    return cls(stages[0], m, loss_fn=loss)


def _check_kind_shape(kind, p, v):
    if kind not in KINDS:
        raise ValueError(f"unknown schedule kind {kind!r}; expected one of {KINDS}")
    if kind not in _MULTI and v != 1:
        raise ValueError(f"{kind!r} runs one stage per rank: virtual_stages must be 1, got {v}")
    if p < 2:
        raise ValueError(f"PyTorch's schedules need at least 2 ranks here, got {p}")


def _order_worker(rank, world, configs):
    out = []
    for kind, m, v in configs:
        modules = {s: nn.Identity() for s in range(world * v) if s % world == rank}
        try:
            sched = _make_torch_schedule(kind, rank, world, modules, world * v, m, None)
        except ValueError as e:  # PyTorch refuses this combination
            out.append(ValueError(f"PyTorch refuses {kind} with p={world}, m={m}, v={v}: {e}"))
            continue
        out.append({r: [_to_action(a) for a in acts if a is not None and _compute_kind(a)]
                    for r, acts in sched.pipeline_order.items()})
    return out


def torch_pipeline_orders(num_ranks: int, configs) -> list:
    """`torch_pipeline_order` for many (kind, num_microbatches, virtual_stages) at once (one launch).

    Each entry is the order, or the ValueError PyTorch raised for that combination.
    """
    from labkit.dist import launch

    configs = [tuple(c) for c in configs]
    for kind, _, v in configs:
        _check_kind_shape(kind, num_ranks, v)
    return launch(_order_worker, num_ranks, configs, backend="gloo")[0]


def torch_pipeline_order(kind: str, num_ranks: int, num_microbatches: int, virtual_stages: int = 1) -> dict[int, list[Action]]:
    """PyTorch's ``pipeline_order`` for this configuration (compute actions only, idle slots dropped).

    Raises ValueError with PyTorch's message when PyTorch refuses the combination.
    """
    res = torch_pipeline_orders(num_ranks, [(kind, num_microbatches, virtual_stages)])[0]
    if isinstance(res, ValueError):
        raise res
    return res


class _Mark(torch.autograd.Function):
    """Identity whose backward appends ("B", stage, microbatch) to a log when the gradient arrives."""

    @staticmethod
    def forward(ctx, y, log, stage, mb):
        ctx.log, ctx.stage, ctx.mb = log, stage, mb
        return y.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.log.append(Action(ctx.stage, "B", ctx.mb))
        return grad, None, None, None


class _RecordingStage(nn.Module):
    """Linear+tanh on columns 1.., column 0 carries the microbatch index through unchanged."""

    def __init__(self, stage, width, log):
        super().__init__()
        self.stage, self.log, self.recording = stage, log, False
        self.lin = nn.Linear(width - 1, width - 1, dtype=torch.float64)

    def forward(self, x):
        y = torch.cat([x[:, :1], torch.tanh(self.lin(x[:, 1:]))], dim=1)
        if not self.recording:  # PyTorch's set-up forwards (shape inference) are not part of the order
            return y
        mb = int(x[0, 0].item())
        self.log.append(Action(self.stage, "F", mb))
        return _Mark.apply(y, self.log, self.stage, mb)


def _executed_worker(rank, world, configs):
    return [_record_one(rank, world, kind, m, v) for kind, m, v in configs]


def _record_one(rank, world, kind, m, v):
    width, rows = 4, 2
    log: list[Action] = []
    modules = {s: _RecordingStage(s, width, log) for s in range(world * v) if s % world == rank}
    sched = _make_torch_schedule(kind, rank, world, modules, world * v, m,
                                 lambda out, tgt: ((out[:, 1:] - tgt[:, 1:]) ** 2).mean())
    x = torch.randn(m * rows, width, dtype=torch.float64)
    x[:, 0] = torch.arange(m, dtype=torch.float64).repeat_interleave(rows)
    y = torch.zeros_like(x)
    first, last = 0 in modules, world * v - 1 in modules
    args = (x,) if first else ()
    kw = {"target": y} if last else {}
    sched.step(*args, **kw)  # first step: PyTorch also runs shape inference / set-up forwards
    for mod in modules.values():
        mod.recording = True
    sched.step(*args, **kw)  # second step: the steady-state order, recorded
    return log


def torch_executed_order(kind: str, num_ranks: int, num_microbatches: int, virtual_stages: int = 1) -> dict[int, list[Action]]:
    """The order PyTorch's executor really runs F and B on each rank, recorded from a real step."""
    return torch_executed_orders(num_ranks, [(kind, num_microbatches, virtual_stages)])[0]


def torch_executed_orders(num_ranks: int, configs) -> list[dict[int, list[Action]]]:
    """`torch_executed_order` for many (kind, num_microbatches, virtual_stages) at once (one launch)."""
    from labkit.dist import launch

    configs = [tuple(c) for c in configs]
    for kind, _, v in configs:
        _check_kind_shape(kind, num_ranks, v)
    per_rank = launch(_executed_worker, num_ranks, configs, backend="gloo", timeout=120.0)
    return [{r: per_rank[r][k] for r in range(num_ranks)} for k in range(len(configs))]


def _step_worker(rank, world, kind, cfg: MLPConfig, repeats):
    all_stages = build_stages(cfg)
    modules = {s: all_stages[s].to(device()) for s in range(cfg.num_stages) if s % world == rank}
    sched = _make_torch_schedule(kind, rank, world, modules, cfg.num_stages, cfg.num_microbatches, loss_fn)
    x, y = (t.to(device()) for t in make_batch(cfg))
    first, last = 0 in modules, cfg.num_stages - 1 in modules
    times = []
    losses: list = []
    for _ in range(repeats):
        for mod in modules.values():
            mod.zero_grad(set_to_none=True)
        losses = []
        torch.distributed.barrier()
        t = now()
        sched.step(*((x,) if first else ()), **({"target": y, "losses": losses} if last else {}))
        torch.distributed.barrier()
        times.append(now() - t)
    grads = {s: [p.grad.clone() for p in mod.parameters()] for s, mod in modules.items()}
    loss = float(torch.stack([l.detach() for l in losses]).mean()) if last else None
    return loss, grads, times


def torch_step(kind: str, cfg: MLPConfig, repeats: int = 1, num_ranks: int | None = None):
    """One step (or ``repeats`` steps) of ``cfg``'s MLP through PyTorch's schedule.

    num_ranks defaults to cfg.num_stages (one stage per rank) for gpipe/1f1b;
    for interleaved_1f1b pass it (stages per rank = num_stages / num_ranks).
    Returns (loss, per-stage gradient lists, per-repeat step times in seconds
    from rank 0, measured between barriers).
    """
    from labkit.dist import launch

    p = num_ranks or cfg.num_stages
    if cfg.num_stages % p:
        raise ValueError(f"{cfg.num_stages} stages do not spread evenly over {p} ranks")
    _check_kind_shape(kind, p, cfg.num_stages // p)
    cfg.microbatch_rows()
    res = launch(_step_worker, p, kind, cfg, repeats)
    grads = [None] * cfg.num_stages
    loss = next(r[0] for r in res if r[0] is not None)
    for _, g, _ in res:
        for s, gs in g.items():
            grads[s] = gs
    return loss, grads, res[0][2]
