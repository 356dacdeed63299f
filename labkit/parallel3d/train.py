"""Training `labkit.model.GPT` on a dp × tp × pp grid of real ranks (3D parallelism, Lab 11).

One step (`train_step`), on every rank:

1. its data-parallel replica takes its B/dp sequences of the global batch and cuts them into m
   micro-batches;
2. Lab 08's executor runs a pipeline schedule (1F1B by default, or GPipe) over the rank's pipeline
   group; inside each stage the layers are tensor-parallel over the tp group (Lab 07) — the
   operators f and g all-reduce within that group only;
3. every gradient is averaged over the dp group (one flat all-reduce, as Lab 06's DDP with one
   bucket), and the tied embedding's gradient is summed over the embedding group (first and last
   stage of the pipeline, `stages`);
4. the optimizer (SGD or AdamW) steps on this rank's shard.

Every collective and send is recorded (`labkit.collectives.counting`) and sorted by dimension;
`comm_bytes` gives the same numbers in closed form.

Launching: `train_3d(cfg, setup)` runs one grid, `train_3d_many(cfg, setups, world)` several
grids of the same world size in one launch (one process start-up). `reference_training` is the
same training in one process on the whole batch; the two agree to rounding (float64: ~1e-15
relative). They are not bit-identical: a sharded matmul adds its partial sums in another order,
and all-reduces add ranks' contributions in their own order. `timeline_3d` and `time_grid`
measure. `train_on_rank` is the body a rank runs (also under torchrun: `torchrun_3d`).
"""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from labkit.bench import now
from labkit.checks import check_int, check_real
from labkit.collectives.counting import count_collectives, record_collective
from labkit.dist import device
from labkit.model import DTYPES, GPT, GPTConfig, batch
from labkit.parallel3d.comm_bytes import DIMENSIONS, bytes_by_dimension
from labkit.parallel3d.grid import Coord, Grid, build_grid, check_grid
from labkit.parallel3d.stages import GPTStage, gather_full_state, shard_state
from labkit.pipeline.comm import message_order
from labkit.pipeline.executor import run_step
from labkit.pipeline.schedules import Action, schedule
from labkit.tensor_parallel.comm import tp_group

__all__ = ["TrainSetup", "check_setup", "make_optimizer", "replica_batch", "train_step", "StepInfo",
           "train_on_rank", "RankResult", "Run3D", "assemble", "train_3d", "train_3d_many",
           "reference_training", "Timeline3D", "timeline_3d", "time_grid", "max_abs_diff"]

SCHEDULES = ("1f1b", "gpipe")
OPTIMIZERS = ("sgd", "adamw")


@dataclass(frozen=True)
class TrainSetup:
    """How to train: grid sizes dp, tp, pp; ``global_batch`` sequences per step, cut into dp replicas
    of ``micro_batches`` micro-batches each; ``steps`` steps of ``schedule`` ("1f1b" or "gpipe")
    with ``optimizer`` ("sgd" or "adamw", weight decay 0.01) at learning rate ``lr``. ``seed``
    initialises the model; step k's batch is ``labkit.model.batch(cfg, global_batch,
    data_seed + k)``. ``dtype``: float64 makes the equivalence check tight."""

    dp: int
    tp: int
    pp: int
    global_batch: int
    micro_batches: int
    steps: int = 3
    schedule: str = "1f1b"
    optimizer: str = "sgd"
    lr: float = 0.1
    seed: int = 0
    data_seed: int = 1
    dtype: torch.dtype = torch.float64

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def micro_batch_size(self) -> int:
        """Sequences per micro-batch: global_batch / (dp · micro_batches)."""
        return self.global_batch // (self.dp * self.micro_batches)


def check_setup(fn: str, cfg: GPTConfig, setup: TrainSetup, world: int | None = None) -> TrainSetup:
    """One-line errors for a setup that cannot run (``world``: the launched ranks, if known)."""
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"{fn}: cfg must be a labkit.model.GPTConfig, got {type(cfg).__name__}")
    if not isinstance(setup, TrainSetup):
        raise TypeError(f"{fn}: setup must be a TrainSetup, got {type(setup).__name__}")
    dp, tp, pp = check_grid(fn, setup.world if world is None else world, setup.dp, setup.tp, setup.pp)
    m = check_int(fn, "micro_batches", setup.micro_batches, minimum=1)
    B = check_int(fn, "global_batch", setup.global_batch, minimum=1)
    check_int(fn, "steps", setup.steps, minimum=1)
    check_real(fn, "lr", setup.lr, positive=True)
    if cfg.heads % tp:
        raise ValueError(f"{fn}: heads ({cfg.heads}) must be divisible by tp ({tp})")
    if cfg.vocab % tp:
        raise ValueError(f"{fn}: vocab ({cfg.vocab}) must be divisible by tp ({tp})")
    if cfg.layers % pp:
        raise ValueError(f"{fn}: layers ({cfg.layers}) must be divisible by pp ({pp})")
    if B % (dp * m):
        raise ValueError(f"{fn}: global_batch ({B}) must be divisible by dp·micro_batches ({dp}·{m} = {dp * m})")
    if setup.schedule not in SCHEDULES:
        raise ValueError(f"{fn}: schedule must be one of {', '.join(SCHEDULES)}, got {setup.schedule!r}")
    if setup.schedule == "1f1b" and m < pp:
        raise ValueError(f"{fn}: 1f1b needs micro_batches >= pp, got {m} micro-batches for pp={pp}")
    if setup.optimizer not in OPTIMIZERS:
        raise ValueError(f"{fn}: optimizer must be one of {', '.join(OPTIMIZERS)}, got {setup.optimizer!r}")
    if setup.dtype not in DTYPES:
        raise TypeError(f"{fn}: dtype must be one of {', '.join(map(str, DTYPES))}, got {setup.dtype}")
    if cfg.dropout:
        raise ValueError(f"{fn}: dropout must be 0 (each rank would draw its own masks), got {cfg.dropout}")
    return setup


def make_optimizer(setup: TrainSetup, params) -> torch.optim.Optimizer:
    """SGD (no momentum) or AdamW (β = (0.9, 0.999), weight decay 0.01) at ``setup.lr``."""
    params = list(params)
    if setup.optimizer == "sgd":
        return torch.optim.SGD(params, lr=setup.lr)
    return torch.optim.AdamW(params, lr=setup.lr, weight_decay=0.01)


def replica_batch(cfg: GPTConfig, setup: TrainSetup, step: int, dp_index: int, device="cpu"):
    """(tokens, targets), each (global_batch/dp, seq_len) int64 on ``device``: replica ``dp_index``'s
    rows of step ``step``'s global batch."""
    tokens, targets = batch(cfg, setup.global_batch, seed=setup.data_seed + step)
    rows = setup.global_batch // setup.dp
    mine = slice(dp_index * rows, (dp_index + 1) * rows)
    return tokens[mine].to(device), targets[mine].to(device)


# --------------------------------------------------------------------------- one step on one rank

@dataclass
class StepInfo:
    """One rank's step: ``losses`` {micro-batch: loss} (last stage only) and ``timeline``
    [(label, start_s, end_s)] on the machine's monotonic clock (`labkit.bench.now`): "F3@s1" /
    "B3@s1" for the pipeline actions, then "dp all-reduce", "embedding all-reduce", "optimizer"."""

    losses: dict[int, float]
    timeline: list[tuple[str, float, float]]


def _sync_data_parallel(stage: GPTStage, grid: Grid) -> None:
    """Average every gradient of this rank over its dp group: one flat all-reduce."""
    if grid.dp == 1:
        return
    params = list(stage.parameters())
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params]).div_(grid.dp)
    record_collective("all_reduce", "after backward", flat, grid.dp_group)
    dist.all_reduce(flat, group=grid.dp_group)
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def _sync_tied(stage: GPTStage, grid: Grid) -> None:
    """Sum the tied embedding/output weight's gradient over the embedding group (pp > 1)."""
    tied = stage.tied
    if grid.embedding is None or tied is None:
        return
    grad = tied.weight.grad
    record_collective("all_reduce", "after backward", grad, grid.embedding)
    dist.all_reduce(grad, group=grid.embedding)


def train_step(stage: GPTStage, grid: Grid, tokens: torch.Tensor, targets: torch.Tensor,
               actions: list[Action], micro_batches: int,
               optimizer: torch.optim.Optimizer, order: dict | None = None) -> StepInfo:
    """One training step on this rank (module docstring). tokens, targets: this replica's
    (B/dp, s) rows; actions: this rank's part of the pipeline schedule; order: the whole
    schedule's `message_order` where messages are matched by order (NCCL)."""
    optimizer.zero_grad(set_to_none=True)
    m, cfg = micro_batches, stage.cfg
    xs, ys = tokens.chunk(m), targets.chunk(m)
    dtype = next(stage.parameters()).dtype
    with tp_group(grid.tp_group):
        boundary = (xs[0].shape[0], xs[0].shape[1], cfg.hidden)          # (b, s, h)
        rec = run_step(actions, {stage.stage: stage}, grid.pp, m, xs if stage.first else None,
                       ys if stage.last else None, boundary, dtype,
                       group=grid.pp_group, loss_fn=stage.loss,
                       order=order, grad_group=grid.pp_grad_group)   # NCCL matches by order
    timeline = [(repr(a), s, e) for a, s, e in rec.timeline]
    syncs = (("dp all-reduce", _sync_data_parallel), ("embedding all-reduce", _sync_tied))
    for label, sync in syncs:
        t = now()
        sync(stage, grid)
        timeline.append((label, t, now()))
    t = now()
    optimizer.step()
    timeline.append(("optimizer", t, now()))
    return StepInfo(rec.losses, timeline)


@dataclass
class RankResult:
    """What one rank sends home: its coordinates, its parameters named as the full model's
    (`stages.shard_state`), per step its mean loss (last stage only, else None), its bytes per
    dimension, its timeline, and the barrier-to-barrier step time (seconds)."""

    rank: int
    coord: Coord
    shards: dict[str, torch.Tensor]
    losses: list[float | None]
    bytes: list[dict[str, float]]
    timelines: list[list[tuple[str, float, float]]]
    step_times: list[float]


def train_on_rank(cfg: GPTConfig, setup: TrainSetup, record: bool = True) -> RankResult:
    """Run ``setup.steps`` steps on this rank of an initialised default group whose world size is
    dp·tp·pp (every rank calls this with the same arguments). record=False skips the counting."""
    check_setup("train_3d", cfg, setup, dist.get_world_size())
    grid = build_grid(setup.dp, setup.tp, setup.pp, fn="train_3d")
    if dist.get_rank(grid.pp_group) != grid.coord.pp:
        raise RuntimeError("train_3d: the pipeline group's ranks are not in stage order")
    model = GPT(cfg, seed=setup.seed, dtype=setup.dtype)        # every rank: the same full model
    with tp_group(grid.tp_group):
        stage = GPTStage(model, grid.coord.pp, setup.pp).to(device())   # ... of which it keeps its share
    del model
    optimizer = make_optimizer(setup, stage.parameters())
    sched = schedule(setup.schedule, setup.pp, setup.micro_batches)
    actions = sched[grid.coord.pp]
    order = message_order(sched) if grid.pp_grad_group is not None else None
    dims = {d: grid.ranks(d) for d in ("dp", "tp", "embedding")}
    losses, counted, timelines, times = [], [], [], []
    for step in range(setup.steps):
        tokens, targets = replica_batch(cfg, setup, step, grid.coord.dp, device())
        dist.barrier()
        t = now()
        with (count_collectives() if record else contextlib.nullcontext()) as recs:
            info = train_step(stage, grid, tokens, targets, actions, setup.micro_batches, optimizer, order)
        dist.barrier()
        times.append(now() - t)
        losses.append(sum(info.losses.values()) / len(info.losses) if info.losses else None)
        counted.append(bytes_by_dimension(recs, dims) if recs is not None else {})
        timelines.append(info.timeline)
    return RankResult(dist.get_rank(), grid.coord, shard_state(stage), losses, counted, timelines, times)


# --------------------------------------------------------------------------- on the host

def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """max |a[k] − b[k]| over all parameters (they must have the same names and shapes)."""
    if a.keys() != b.keys():
        raise ValueError(f"max_abs_diff: different parameters: {sorted(a.keys() ^ b.keys())}")
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@dataclass
class Run3D:
    """A finished run. ``params``: the trained model in ``GPT(cfg).state_dict()`` names and shapes
    (dp replica 0); ``losses``: per step, mean cross-entropy over the global batch;
    ``rank_bytes``: {rank: {dimension: bytes sent}} in the last step; ``step_times``: rank 0's
    seconds per step (barrier to barrier); ``timeline``: the last step's {rank: [(label, start_s,
    end_s)]} with 0 = the earliest start; ``replica_spread``: the largest |difference| between
    dp replicas of a shard, or between the two copies of the tied weight (should be 0)."""

    setup: TrainSetup
    params: dict[str, torch.Tensor] = field(repr=False)
    losses: list[float]
    rank_bytes: dict[int, dict[str, float]] = field(repr=False)
    step_times: list[float]
    timeline: dict[int, list[tuple[str, float, float]]] = field(repr=False)
    replica_spread: float
    coords: dict[int, Coord] = field(repr=False, default_factory=dict)

    @property
    def total_bytes(self) -> dict[str, float]:
        """Bytes all ranks sent in the last step, per dimension (compare `comm_bytes.bytes_per_step`)."""
        return {d: sum(b.get(d, 0.0) for b in self.rank_bytes.values()) for d in DIMENSIONS}


def assemble(cfg: GPTConfig, setup: TrainSetup, results: list[RankResult]) -> Run3D:
    """Put the ranks' results together (see `Run3D`)."""
    by_coord = {r.coord: r for r in results}
    spread = 0.0
    shards = {}
    for r in results:
        base = by_coord[Coord(0, r.coord.tp, r.coord.pp)].shards
        spread = max(spread, max_abs_diff(r.shards, base))
        if "tok_emb.weight@last" in r.shards:
            first = by_coord[Coord(r.coord.dp, r.coord.tp, 0)].shards["tok_emb.weight"]
            spread = max(spread, float((r.shards["tok_emb.weight@last"] - first).abs().max()))
        if r.coord.dp == 0:
            shards[(r.coord.pp, r.coord.tp)] = r.shards
    params = gather_full_state(cfg, setup.tp, shards)
    last = [r for r in results if r.coord.pp == setup.pp - 1 and r.coord.tp == 0]
    losses = [sum(r.losses[k] for r in last) / len(last) for k in range(setup.steps)]
    t0 = min(s for r in results for _, s, _ in r.timelines[-1])
    timeline = {r.rank: [(lab, s - t0, e - t0) for lab, s, e in r.timelines[-1]] for r in results}
    rank0 = next(r for r in results if r.rank == 0)
    return Run3D(setup, params, losses, {r.rank: r.bytes[-1] for r in results}, rank0.step_times, timeline,
                 spread, {r.rank: r.coord for r in results})


def _ranks_main(rank: int, world: int, cfg: GPTConfig, setups: list[TrainSetup], record: bool):
    return [train_on_rank(cfg, s, record) for s in setups]


def train_3d_many(cfg: GPTConfig, setups: list[TrainSetup], world: int, record: bool = True,
                  timeout: float = 120.0) -> list[Run3D]:
    """Run several setups one after the other in one launch of ``world`` ranks (gloo; NCCL with a
    GPU per rank; each setup's dp·tp·pp must equal ``world``); returns one `Run3D` per setup."""
    from labkit.dist import launch

    world = check_int("train_3d", "world", world, minimum=1)
    setups = list(setups)
    if not setups:
        raise ValueError("train_3d: no setups given")
    for s in setups:
        check_setup("train_3d", cfg, s, world)
    # Building a torch optimizer imports torch._dynamo (seconds of CPU). Import it here, once:
    # the forked ranks inherit it instead of each importing it again on a shared CPU.
    import torch._dynamo  # noqa: F401
    out = launch(_ranks_main, world, cfg, setups, record, timeout=timeout)
    return [assemble(cfg, s, [out[r][k] for r in range(world)]) for k, s in enumerate(setups)]


def train_3d(cfg: GPTConfig, setup: TrainSetup, timeout: float = 120.0) -> Run3D:
    """Train on dp·tp·pp ranks (see the module docstring); returns the `Run3D`."""
    check_setup("train_3d", cfg, setup)
    return train_3d_many(cfg, [setup], setup.world, timeout=timeout)[0]


def reference_training(cfg: GPTConfig, setup: TrainSetup) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The same steps in one process on the whole global batch: (state_dict, loss per step)."""
    check_setup("reference_training", cfg, setup)
    model = GPT(cfg, seed=setup.seed, dtype=setup.dtype)
    optimizer = make_optimizer(setup, model.parameters())
    losses = []
    for step in range(setup.steps):
        tokens, targets = batch(cfg, setup.global_batch, seed=setup.data_seed + step)
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(tokens, targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, losses


# --------------------------------------------------------------------------- measuring

@dataclass
class Timeline3D:
    """One measured step: ``timeline`` {rank: [(label, start_s, end_s)]} (labels as in `StepInfo`;
    0 = the earliest start on any rank), ``step_time_s`` (rank 0, barrier to barrier),
    ``coords`` {rank: Coord}, and the `TrainSetup`."""

    timeline: dict[int, list[tuple[str, float, float]]]
    step_time_s: float
    coords: dict[int, Coord]
    setup: TrainSetup


def timeline_3d(cfg: GPTConfig, dp: int = 2, tp: int = 2, pp: int = 2, global_batch: int = 16,
                micro_batches: int = 4, schedule: str = "1f1b", timeout: float = 120.0) -> Timeline3D:
    """Run two steps on dp·tp·pp ranks and return the second one's per-rank timeline."""
    setup = TrainSetup(dp, tp, pp, global_batch, micro_batches, steps=2, schedule=schedule)
    run = train_3d_many(cfg, [setup], setup.world, record=False, timeout=timeout)[0]
    return Timeline3D(run.timeline, run.step_times[-1], run.coords, setup)


def time_grid(cfg: GPTConfig, world: int, dp: int, tp: int, pp: int, global_batch: int, micro_batches: int,
              steps: int = 5, schedule: str = "1f1b", timeout: float = 300.0) -> float:
    """Median seconds per training step (rank 0, barrier to barrier) of ``steps`` steps on
    ``world`` ranks, after one warm-up step that is not counted."""
    steps = check_int("time_grid", "steps", steps, minimum=1)
    setup = TrainSetup(dp, tp, pp, global_batch, micro_batches, steps=steps + 1, schedule=schedule)
    check_setup("time_grid", cfg, setup, world)
    run = train_3d_many(cfg, [setup], world, record=False, timeout=timeout)[0]
    return statistics.median(run.step_times[1:])
