"""A parameter server that survives the loss of one of its replicas, on real ranks.

The server of `labkit.data_parallel.param_server` is a single point of failure: if its process
dies, every worker waits for a reply that never comes, and the job falls back to its last
checkpoint. Replicating the whole job would double every device; replicating only the server
(*selective replication*) adds one process. Ranks: 0 is the **primary**, 1 the **backup**,
2..W+1 the workers; the run is synchronous (BSP), as `PSConfig(mode="bsp")`.

Primary–backup replication:

- each worker pushes its gradient of clock c to the primary and waits for the new parameters;
- the primary sums the W gradients *in worker order* (so every run computes the same bits),
  updates, **forwards the new parameters to the backup and waits for its acknowledgement**, and
  only then replies to the workers. So whatever a worker has seen, the backup has too;
- when the primary dies (here it kills itself, with SIGKILL, at a chosen clock and moment), the
  sockets to it close: the workers' and the backup's pending operations fail at once (gloo says
  "Connection closed by peer"). The backup becomes the server, with the parameters of the last
  clock the primary forwarded. A worker resends its last push to the backup; a push for a clock
  the backup already has (the primary died after forwarding, before replying) is answered at once
  with the current parameters — applying it again would count that gradient twice.

The result is the run that never failed, to the last bit: no clock is lost or repeated. Without
the backup the same kill ends the job (`labkit.dist.RankError`).
"""
from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist

from labkit.checks import check_int
from labkit.data_parallel.param_server import PSConfig, gradient, make_data, minibatches, shard_of

MOMENTS = ("after_forward", "before_forward")
PRIMARY, BACKUP = 0, 1


def _send(t, dst):
    dist.send(t, dst)


def _params_msg(clock: int, w: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.tensor([float(clock)], dtype=torch.float64), w])


def _collect(workers: int, dim: int, want: int, w: torch.Tensor, clock_of_w: int):
    """Receive one push of clock ``want`` from every worker, in worker order; a push of an older
    clock (resent after a failover) is answered with the current parameters first."""
    grads = []
    for k in range(2, workers + 2):
        buf = torch.empty(1 + dim, dtype=torch.float64)
        while True:
            dist.recv(buf, k)
            clock = int(buf[0])
            if clock == want:
                grads.append(buf[1:].clone())
                break
            if clock <= clock_of_w:                      # already applied: just reply again
                _send(_params_msg(clock_of_w, w), k)
                continue
            raise RuntimeError(f"replicated server: worker {k} pushed clock {clock}, expected {want}")
    return grads


def _step(w: torch.Tensor, grads, cfg: PSConfig) -> torch.Tensor:
    total = torch.zeros_like(w)
    for g in grads:                                       # worker order: the same bits every run
        total += g
    return w - cfg.lr * total / len(grads)


def _primary(workers: int, cfg: PSConfig, kill, backup: bool) -> dict:
    w = torch.zeros(cfg.dim, dtype=torch.float64)
    for k in range(2, workers + 2):
        _send(_params_msg(0, w), k)
    for clock in range(1, cfg.steps + 1):
        grads = _collect(workers, cfg.dim, clock, w, clock - 1)
        w = _step(w, grads, cfg)
        if kill == (clock, "before_forward"):
            os.kill(os.getpid(), signal.SIGKILL)
        if backup:
            _send(_params_msg(clock, w), BACKUP)
            ack = torch.zeros(1, dtype=torch.float64)
            dist.recv(ack, BACKUP)
        if kill == (clock, "after_forward"):
            os.kill(os.getpid(), signal.SIGKILL)
        for k in range(2, workers + 2):
            _send(_params_msg(clock, w), k)
    if backup:
        _send(_params_msg(-1, w), BACKUP)                 # done: the backup can stop
    return {"role": "primary", "final": w, "served_from": 0, "failover_s": None}


def _backup(workers: int, cfg: PSConfig) -> dict:
    w, clock = torch.zeros(cfg.dim, dtype=torch.float64), 0
    msg = torch.empty(1 + cfg.dim, dtype=torch.float64)
    try:
        while True:
            dist.recv(msg, PRIMARY)
            if int(msg[0]) < 0:
                return {"role": "backup", "final": msg[1:].clone(), "served_from": None, "failover_s": None}
            clock, w = int(msg[0]), msg[1:].clone()
            _send(torch.ones(1, dtype=torch.float64), PRIMARY)
    except RuntimeError:                                  # the primary is gone: take over
        t0 = time.perf_counter()
    served_from = clock
    first_reply = None
    for c in range(clock + 1, cfg.steps + 1):
        grads = _collect(workers, cfg.dim, c, w, c - 1)
        w = _step(w, grads, cfg)
        for k in range(2, workers + 2):
            _send(_params_msg(c, w), k)
        if first_reply is None:
            first_reply = time.perf_counter() - t0
    return {"role": "backup", "final": w, "served_from": served_from, "failover_s": first_reply}


def _worker(rank: int, workers: int, cfg: PSConfig, backup: bool) -> dict:
    X, y, _ = make_data(cfg, workers)
    Xs, ys = shard_of(rank - 1, X, y)
    batches = minibatches(cfg, rank - 1)
    server, switched_at = PRIMARY, None
    msg = torch.empty(1 + cfg.dim, dtype=torch.float64)

    def ask(push):
        """Send ``push`` (None: only wait) and receive the reply, failing over once."""
        nonlocal server, switched_at
        try:
            if push is not None:
                _send(push, server)
            dist.recv(msg, server)
        except RuntimeError:
            if server == BACKUP or not backup:
                raise
            server, switched_at = BACKUP, int(push[0]) if push is not None else 0
            if push is not None:
                _send(push, server)
            dist.recv(msg, server)

    ask(None)
    for clock in range(1, cfg.steps + 1):
        g = gradient(Xs, ys, next(batches), msg[1:].clone())
        time.sleep(cfg.compute_s)
        ask(torch.cat([torch.tensor([float(clock)], dtype=torch.float64), g]))
    return {"role": "worker", "final": msg[1:].clone(), "switched_at": switched_at}


def replicated_rank(rank: int, world: int, cfg: PSConfig, kill=None, backup: bool = True):
    """One rank of the replicated server (module docstring); ``kill`` = (clock, moment): the
    primary dies at that clock, "before_forward" (its update of that clock is lost with it and
    the backup redoes it) or "after_forward" (the backup has it; the workers have not).
    ``backup=False``: rank 1 stays idle and nobody fails over — the unreplicated server."""
    if world < 3:
        raise ValueError("replicated server: needs at least 3 ranks (primary, backup, a worker)")
    if cfg.mode != "bsp":
        raise ValueError(f"replicated server: runs BSP, got mode {cfg.mode!r}")
    workers = world - 2
    if rank == PRIMARY:
        return _primary(workers, cfg, kill, backup)
    if rank == BACKUP:
        return _backup(workers, cfg) if backup else {"role": "idle", "final": None}
    return _worker(rank, workers, cfg, backup)


def bsp_in_one_process(cfg: PSConfig, workers: int) -> torch.Tensor:
    """The same synchronous SGD in one process, gradients summed in worker order: what every
    replicated run must end with, bit for bit."""
    X, y, _ = make_data(cfg, workers)
    w = torch.zeros(cfg.dim, dtype=torch.float64)
    batches = {k: minibatches(cfg, k) for k in range(1, workers + 1)}
    for _ in range(cfg.steps):
        w = _step(w, [gradient(*shard_of(k, X, y), next(batches[k]), w) for k in range(1, workers + 1)], cfg)
    return w


def run_replicated(cfg: PSConfig, workers: int = 3, kill=None, backup: bool = True, timeout: float = 60.0) -> list:
    """Launch primary, backup and ``workers`` workers; the primary may die (``kill``). Returns
    every rank's result (None for a dead primary). Without a backup a killed primary ends the
    launch with `labkit.dist.RankError` from a worker whose reply never came."""
    from labkit.dist import launch

    check_int("run_replicated", "workers", workers, minimum=1)
    if kill is not None:
        clock, moment = kill
        check_int("run_replicated", "kill clock", clock, minimum=1, maximum=cfg.steps)
        if moment not in MOMENTS:
            raise ValueError(f"run_replicated: moment must be one of {', '.join(MOMENTS)}, got {moment!r}")
    return launch(replicated_rank, workers + 2, cfg, kill, backup, backend="gloo", timeout=timeout, quiet=True,
                  may_die=(PRIMARY,) if kill is not None else ())
