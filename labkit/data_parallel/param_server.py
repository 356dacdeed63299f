"""A real parameter server on gloo ranks: rank 0 serves the parameters, ranks 1..W are workers.

Each worker repeats: compute a gradient on its own mini-batch with the parameters it last
received, *push* it to the server with its clock (iterations done) and the version of the
parameters it used, and wait for the server's reply — fresh parameters and their version. The
server applies gradients with SGD and decides *when* to reply, which is the consistency model:

- ``"bsp"`` (bulk synchronous): the server sums the W gradients of clock c, applies their mean
  once, and only then releases every worker into clock c + 1. Every gradient is fresh (staleness
  0) and the run equals synchronous data parallelism with W·batch samples per step.
- ``"asp"`` (asynchronous): each gradient is applied the moment it arrives and its worker gets
  the new parameters at once. Fast workers never wait; their gradients may be stale — computed
  on parameters several updates old.
- ``"ssp"`` with bound ``s`` (stale synchronous): like ASP, but a worker that has finished clock
  c is held back until the slowest worker has finished clock c − s. Staleness is bounded by
  about ``s·W`` updates.

*Staleness* of a gradient = updates applied between the version the worker read and the moment
it is applied. Stragglers are injected as extra seconds of sleep per iteration on chosen workers.

The model is least squares on synthetic data, w ∈ R^dim: loss(w) = mean((Xw − y)²)/2, so a
gradient is Xᵀ(Xw − y)/n and the loss curve is exact and cheap; the point is the protocol.
Messages are float64 tensors over ``dist.send``/``dist.recv``; the server counts the bytes on its
links, which all W workers share (see `server_bytes_per_step`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from labkit.checks import check_int, check_real

MODES = ("bsp", "asp", "ssp")
HEADER = 3          # [clock, version read, loss] before the gradient in a push
TAG_PUSH, TAG_REPLY = 1, 2


@dataclass(frozen=True)
class PSConfig:
    """One run: ``mode`` in MODES, ``staleness`` bound s (SSP only), ``steps`` iterations per
    worker, ``dim`` parameters, ``batch`` samples per gradient, ``lr`` SGD step, ``stragglers``
    {worker rank: extra seconds per iteration}, ``compute_s`` base seconds per iteration (a sleep
    that stands in for a bigger model's compute), ``seed`` for the data. ``sleeps``, if given,
    replaces the last three: sleeps[k][c] seconds for worker k + 1's iteration c + 1 (one row per
    worker, ``steps`` each), to play a timeline that the clock rule simulates too."""

    mode: str = "bsp"
    staleness: int = 0
    steps: int = 30
    dim: int = 32
    batch: int = 16
    lr: float = 0.1
    stragglers: dict = field(default_factory=dict)
    compute_s: float = 0.002
    seed: int = 0
    sleeps: tuple = ()

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"PSConfig: mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        check_int("PSConfig", "staleness", self.staleness, minimum=0)
        for name in ("steps", "dim", "batch"):
            check_int("PSConfig", name, getattr(self, name), minimum=1)
        check_real("PSConfig", "lr", self.lr, positive=True)
        check_real("PSConfig", "compute_s", self.compute_s)
        for rank, extra in self.stragglers.items():
            check_int("PSConfig", "straggler rank", rank, minimum=1)
            check_real("PSConfig", f"stragglers[{rank}]", extra)
        if self.sleeps:
            rows = [tuple(check_real("PSConfig", "sleeps[k][c]", x) for x in row) for row in self.sleeps]
            if any(len(r) != self.steps for r in rows) or any(x < 0 for r in rows for x in r):
                raise ValueError(f"PSConfig: sleeps needs one row of {self.steps} seconds >= 0 per worker")
            object.__setattr__(self, "sleeps", tuple(rows))


@dataclass
class PSResult:
    """What the server saw: ``staleness`` of every applied gradient, ``loss`` after each update
    (full-data loss, server side), ``wait_s`` per worker (seconds blocked waiting for replies),
    ``seconds`` wall time, ``bytes_in``/``bytes_out`` on the server's links, ``updates`` applied,
    ``final`` parameters. ``received``: (worker, clock, version read) of every gradient in the
    order the server took them — all a replay needs (`labkit.data_parallel.convergence.replay`);
    ``times``: seconds from the start to each update (``loss[k + 1]`` came at ``times[k]``)."""

    mode: str
    staleness: list
    loss: list
    wait_s: dict
    seconds: float
    bytes_in: int
    bytes_out: int
    updates: int
    final: torch.Tensor
    received: list = field(default_factory=list)
    times: list = field(default_factory=list)


def make_data(cfg: PSConfig, workers: int):
    """(X, y, w_true): ``workers`` shards of 64 samples each, X (workers·64, dim), float64."""
    g = torch.Generator().manual_seed(cfg.seed)
    w_true = torch.randn(cfg.dim, generator=g, dtype=torch.float64)
    X = torch.randn(workers * 64, cfg.dim, generator=g, dtype=torch.float64)
    y = X @ w_true + 0.01 * torch.randn(workers * 64, generator=g, dtype=torch.float64)
    return X, y, w_true


def loss_of(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> float:
    """Least-squares loss mean((Xw − y)²)/2."""
    return float(((X @ w - y) ** 2).mean() / 2)


def server_bytes_per_step(workers: int, dim: int, itemsize: int = 8) -> int:
    """Bytes through the server's links per clock (every worker pushes a gradient and pulls the
    parameters): 2·W·dim·itemsize, plus the small headers — against 2(W−1)/W·dim·itemsize per rank
    for a ring all-reduce, which no single link has to carry for everyone."""
    return 2 * workers * dim * itemsize


def run_rank(rank: int, world: int, cfg: PSConfig):
    """Rank 0 runs the server and returns a PSResult; a worker returns its seconds spent waiting."""
    if world < 2:
        raise ValueError("parameter server: needs at least 2 ranks (rank 0 serves, the rest work)")
    X, y, _ = make_data(cfg, world - 1)
    if rank == 0:
        return _serve(world - 1, cfg, X, y)
    return _work(rank, world - 1, cfg, X, y)


def _serve(workers: int, cfg: PSConfig, X, y) -> PSResult:
    w = torch.zeros(cfg.dim, dtype=torch.float64)
    version, t0 = 0, time.perf_counter()
    done_clock = {k: 0 for k in range(1, workers + 1)}     # iterations each worker has finished
    waiting: dict[int, int] = {}                            # worker -> clock it finished, reply held
    pending_sum = torch.zeros(cfg.dim, dtype=torch.float64)
    pending_n = 0
    staleness, losses, received, times = [], [loss_of(w, X, y)], [], []
    bytes_in = bytes_out = 0
    finished = 0
    bound = math.inf if cfg.mode == "asp" else cfg.staleness

    def reply(k):
        nonlocal bytes_out
        msg = torch.cat([torch.tensor([float(version)], dtype=torch.float64), w])
        dist.send(msg, dst=k, tag=TAG_REPLY)
        bytes_out += msg.numel() * 8

    for k in range(1, workers + 1):                          # everyone starts from version 0
        reply(k)
    buf = torch.empty(HEADER + cfg.dim, dtype=torch.float64)
    while finished < workers:
        k = dist.recv(buf, tag=TAG_PUSH)
        bytes_in += buf.numel() * 8
        clock, read = int(buf[0]), int(buf[1])
        grad = buf[HEADER:].clone()
        done_clock[k] = clock
        received.append((k, clock, read))
        if cfg.mode == "bsp":
            pending_sum += grad
            pending_n += 1
            staleness.append(version - read)
            if pending_n == workers:                         # the clock is complete: one update
                w -= cfg.lr * pending_sum / workers
                version += 1
                losses.append(loss_of(w, X, y))
                times.append(time.perf_counter() - t0)
                pending_sum.zero_()
                pending_n = 0
        else:
            staleness.append(version - read)
            w -= cfg.lr * grad
            version += 1
            losses.append(loss_of(w, X, y))
            times.append(time.perf_counter() - t0)
        if clock >= cfg.steps:
            finished += 1
        else:
            waiting[k] = clock
        slowest = min(done_clock.values())
        for j, c in sorted(waiting.items()):
            ready = (pending_n == 0 and c <= slowest) if cfg.mode == "bsp" else c - slowest <= bound
            if ready:
                reply(j)
                del waiting[j]
    return PSResult(cfg.mode, staleness, losses, {}, time.perf_counter() - t0, bytes_in, bytes_out,
                    version, w, received, times)


def minibatches(cfg: PSConfig, rank: int):
    """Worker ``rank``'s mini-batches, clock 1, 2, ...: indices into its shard of 64 samples."""
    g = torch.Generator().manual_seed(cfg.seed * 1000 + rank)
    while True:
        yield torch.randint(64, (cfg.batch,), generator=g)


def shard_of(rank: int, X, y):
    """Worker ``rank``'s 64 samples (Xs (64, dim), ys (64,))."""
    shard = slice((rank - 1) * 64, rank * 64)
    return X[shard], y[shard]


def gradient(Xs, ys, idx, w):
    """The least-squares gradient on the samples ``idx`` of a shard at parameters ``w``."""
    r = Xs[idx] @ w - ys[idx]
    return Xs[idx].t() @ r / len(idx)


def sleep_s(cfg: PSConfig, rank: int, clock: int) -> float:
    """Seconds worker ``rank`` sleeps in iteration ``clock`` (1-based): ``cfg.sleeps`` if given,
    else ``compute_s`` plus its straggler delay."""
    if cfg.sleeps:
        return cfg.sleeps[rank - 1][clock - 1]
    return cfg.compute_s + cfg.stragglers.get(rank, 0.0)


def _work(rank: int, workers: int, cfg: PSConfig, X, y) -> float:
    Xs, ys = shard_of(rank, X, y)
    batches = minibatches(cfg, rank)
    msg = torch.empty(1 + cfg.dim, dtype=torch.float64)
    dist.recv(msg, src=0, tag=TAG_REPLY)
    waited = 0.0
    for clock in range(1, cfg.steps + 1):
        version, w = int(msg[0]), msg[1:].clone()
        grad = gradient(Xs, ys, next(batches), w)
        time.sleep(sleep_s(cfg, rank, clock))
        push = torch.cat([torch.tensor([float(clock), float(version), 0.0], dtype=torch.float64), grad])
        dist.send(push, dst=0, tag=TAG_PUSH)
        if clock < cfg.steps:
            t0 = time.perf_counter()
            dist.recv(msg, src=0, tag=TAG_REPLY)
            waited += time.perf_counter() - t0
    return waited


def run(cfg: PSConfig, workers: int = 3, timeout: float = 120.0) -> PSResult:
    """Launch the server and ``workers`` workers on gloo ranks; return the server's PSResult."""
    return run_many([cfg], workers, timeout)[0]


def _many_rank(rank: int, world: int, cfgs):
    out = []
    for cfg in cfgs:              # one run after another in the same group; a barrier between
        dist.barrier()
        out.append(run_rank(rank, world, cfg))
    return out


def run_many(cfgs, workers: int = 3, timeout: float = 120.0) -> list[PSResult]:
    """`run` for each config in ``cfgs``, one after another inside a single launch (starting ranks
    costs more than a short run). Returns the server's PSResult of each, in order."""
    from labkit.dist import launch

    check_int("run", "workers", workers, minimum=1)
    cfgs = list(cfgs)
    bad = sorted({k for cfg in cfgs for k in cfg.stragglers if k > workers})
    for cfg in cfgs:
        if cfg.sleeps and len(cfg.sleeps) != workers:
            raise ValueError(f"run: cfg.sleeps has {len(cfg.sleeps)} rows, one per worker is {workers}")
    if bad:
        raise ValueError(f"run: straggler rank(s) {bad} do not exist; workers are ranks 1..{workers}")
    out = launch(_many_rank, workers + 1, cfgs, backend="gloo", timeout=timeout)
    results = out[0]
    for i, result in enumerate(results):
        result.wait_s = {k: out[k][i] for k in range(1, workers + 1)}
    return results
