"""How parallel SGD converges under BSP, ASP and SSP: the server's SGD replayed and simulated,
and what the theory bounds.

The parameter server of `labkit.data_parallel.param_server` applies gradients in an order that
timing decides. Given that order — (worker, clock, version the worker read) for every gradient,
which the real server records as ``PSResult.received`` — the run is fully determined: worker k's
gradient of clock c is the least-squares gradient of its c-th mini-batch at the parameters of the
version it read. `replay` recomputes the run from the order alone with the same float64
operations, so it gives the real run's losses to the last bit (tests/test_dp_convergence.py).

`simulate` gets the order from the clock rule instead (`labkit.data_parallel.ssp`): iteration
times in, start and finish of every iteration out; a worker reads the version current when it
starts (updates applied at the same moment count as earlier) and its gradient is applied when it
finishes. So loss against updates *and* against time comes out of one deterministic function,
for any staleness bound and any timeline of stragglers.

What the theory says:

- **SSP** (Ho et al., NeurIPS 2013, Theorem 1): for a convex loss whose gradients are bounded by
  L, parameters within distance F of each other, P workers, staleness bound s and step sizes
  η_t = σ/√t with σ = F/(L·√(2(s+1)P)), the regret after T updates is at most
  4FL·√(2(s+1)P·T): the average regret falls as 1/√T, and staleness costs a factor √(s+1)
  (`ssp_regret_bound`). An upper bound: it says how the guarantee degrades, not the measured
  slowdown.
- **Delay and the learning rate.** Gradient descent on a quadratic of curvature λ whose gradient
  is τ updates stale, x_{t+1} = x_t − η·λ·x_{t−τ}, converges exactly when
  η·λ < 2·sin(π / (2·(2τ + 1))) (`delay_step_limit`; τ = 0 gives the familiar 2, τ = 1 gives 1).
  So the largest stable step shrinks roughly as π/(2τ + 1): a run at a step that is safe for
  fresh gradients diverges once staleness grows. `spectral_radius` computes the iteration's
  growth factor from its companion matrix, an independent check of the closed form.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from labkit.checks import check_int, check_real
from labkit.data_parallel.param_server import (PSConfig, gradient, loss_of, make_data, minibatches,
                                               shard_of)
from labkit.data_parallel.ssp import check_durations, ssp_start_times


@dataclass(frozen=True)
class Run:
    """One run of the server's SGD: ``loss`` before and after each update (full data),
    ``times`` of each update (seconds or time units; ``loss[k + 1]`` at ``times[k]``),
    ``staleness`` of each gradient (updates between its read and its application), ``gradients``
    applied by the k-th update (BSP: W per update; ASP/SSP: 1), and ``received`` (the order)."""

    mode: str
    staleness_bound: int | None
    loss: list
    times: list
    staleness: list
    gradients: list
    received: list

    def gradients_applied(self) -> list:
        """Cumulative gradients applied after each update (an x axis that counts samples)."""
        return list(np.cumsum(self.gradients).tolist())

    def first_below(self, target: float, axis: str = "time") -> float:
        """The time (``axis="time"``) or gradients applied (``"gradients"``) when the loss first
        falls to ``target`` or below; inf if it never does."""
        xs = self.times if axis == "time" else self.gradients_applied()
        return next((x for x, l in zip(xs, self.loss[1:]) if l <= target), math.inf)


def _mode(fn: str, mode: str) -> str:
    if mode not in ("bsp", "asp", "ssp"):
        raise ValueError(f"{fn}: mode must be 'bsp', 'asp' or 'ssp', got {mode!r}")
    return mode


def replay(cfg: PSConfig, workers: int, received, times=None) -> Run:
    """The server's run recomputed from the order in which it took the gradients (``received``:
    (worker, clock, version read) per gradient, as `PSResult.received`). The same float64
    operations in the same order as the server: the losses equal the real run's bit for bit."""
    fn = "replay"
    workers = check_int(fn, "workers", workers, minimum=1)
    received = [tuple(int(v) for v in r) for r in received]
    X, y, _ = make_data(cfg, workers)
    shards = {k: shard_of(k, X, y) for k in range(1, workers + 1)}
    batches = {k: minibatches(cfg, k) for k in shards}
    drawn = {k: [] for k in shards}
    w = torch.zeros(cfg.dim, dtype=torch.float64)
    history = [w.clone()]                              # parameters of every version
    losses, staleness, grads = [loss_of(w, X, y)], [], []
    pending_sum, pending_n = torch.zeros(cfg.dim, dtype=torch.float64), 0
    for k, clock, read in received:
        if k not in shards or clock < 1 or not 0 <= read < len(history):
            raise ValueError(f"{fn}: gradient (worker {k}, clock {clock}, version {read}) is impossible here "
                             f"({workers} workers, {len(history)} versions so far)")
        while len(drawn[k]) < clock:
            drawn[k].append(next(batches[k]))
        g = gradient(*shards[k], drawn[k][clock - 1], history[read])
        staleness.append(len(history) - 1 - read)
        if cfg.mode == "bsp":
            pending_sum += g
            pending_n += 1
            if pending_n == workers:
                w -= cfg.lr * pending_sum / workers
                pending_sum.zero_()
                pending_n = 0
                history.append(w.clone())
                losses.append(loss_of(w, X, y))
                grads.append(workers)
        else:
            w -= cfg.lr * g
            history.append(w.clone())
            losses.append(loss_of(w, X, y))
            grads.append(1)
    bound = None if cfg.mode == "asp" else (0 if cfg.mode == "bsp" else cfg.staleness)
    return Run(cfg.mode, bound, losses, list(times) if times is not None else [], staleness, grads, received)


def schedule(durations, mode: str, staleness: int = 0) -> tuple[list, list]:
    """The order in which the server takes the gradients when worker k's iteration c lasts
    ``durations[k][c]`` (the clock rule of `labkit.data_parallel.ssp`), and the time of each
    update. Returns (received, times): received as `replay` takes it (workers numbered from 1),
    times one per update (BSP: when a clock's last gradient arrives)."""
    fn = "schedule"
    rows = check_durations(fn, durations)
    if any(d <= 0 for r in rows for d in r):
        raise ValueError(f"{fn}: durations must be > 0 (a read and its own update need an order)")
    mode = _mode(fn, mode)
    s = {"bsp": 0, "asp": None, "ssp": check_int(fn, "staleness", staleness, minimum=0)}[mode]
    start = ssp_start_times(rows, s)
    events = []                                             # (time, 0 = arrival / 1 = read, worker, clock)
    for k, row in enumerate(rows):
        for c, d in enumerate(row):
            events.append((start[k][c] + d, 0, k, c))
            events.append((start[k][c], 1, k, c))
    version, arrived, read, received, times = 0, 0, {}, [], []
    for t, kind, k, c in sorted(events):
        if kind == 1:
            read[(k, c)] = version
            continue
        received.append((k + 1, c + 1, read[(k, c)]))
        arrived += 1
        if mode != "bsp" or arrived % len(rows) == 0:      # BSP: one update when the clock is complete
            version += 1
            times.append(t)
    return received, times


def simulate(cfg: PSConfig, durations) -> Run:
    """The server's SGD on the timeline ``durations`` (one row per worker, ``cfg.steps`` each),
    under ``cfg.mode`` and ``cfg.staleness``: `schedule`, then `replay`."""
    rows = check_durations("simulate", durations)
    if len(rows[0]) != cfg.steps:
        raise ValueError(f"simulate: durations have {len(rows[0])} iterations per worker, cfg.steps is {cfg.steps}")
    received, times = schedule(rows, cfg.mode, cfg.staleness)
    return replay(cfg, len(rows), received, times)


def jittery_durations(workers: int, steps: int, seed: int, base: float = 1.0, slow: float = 4.0,
                      p_slow: float = 0.15) -> list[list[float]]:
    """Iteration times (units of ``base``) where any iteration of any worker is ``slow`` times
    longer with probability ``p_slow`` (a machine that is busy now and then), plus ±5 % jitter so
    that no two events coincide. Seeded (numpy)."""
    fn = "jittery_durations"
    workers = check_int(fn, "workers", workers, minimum=1)
    steps = check_int(fn, "steps", steps, minimum=1)
    rng = np.random.default_rng(check_int(fn, "seed", seed, minimum=0))
    base = check_real(fn, "base", base, positive=True)
    slow = check_real(fn, "slow", slow, positive=True)
    p = check_real(fn, "p_slow", p_slow)
    if not 0 <= p <= 1:
        raise ValueError(f"{fn}: p_slow must be a probability in [0, 1], got {p}")
    factor = np.where(rng.random((workers, steps)) < p, slow, 1.0) * rng.uniform(0.95, 1.05, (workers, steps))
    return (base * factor).round(6).tolist()


# ------------------------------------------------------------------------------ theory

def ssp_regret_bound(F: float, L: float, staleness: int, workers: int, T: int) -> float:
    """Ho et al.'s SSP regret bound 4·F·L·√(2(s+1)·P·T) (module docstring): F the largest
    distance between two parameter vectors, L the largest gradient norm, s the staleness bound,
    P the workers, T the updates."""
    fn = "ssp_regret_bound"
    F = check_real(fn, "F", F, positive=True)
    L = check_real(fn, "L", L, positive=True)
    s = check_int(fn, "staleness", staleness, minimum=0)
    P = check_int(fn, "workers", workers, minimum=1)
    T = check_int(fn, "T", T, minimum=1)
    return 4 * F * L * math.sqrt(2 * (s + 1) * P * T)


def delay_step_limit(tau: int) -> float:
    """The largest η·λ for which x_{t+1} = x_t − η·λ·x_{t−τ} converges: 2·sin(π/(2(2τ+1)))."""
    tau = check_int("delay_step_limit", "tau", tau, minimum=0)
    return 2 * math.sin(math.pi / (2 * (2 * tau + 1)))


def spectral_radius(step: float, tau: int) -> float:
    """The growth factor per update of x_{t+1} = x_t − step·x_{t−τ}: the largest |root| of
    z^{τ+1} − z^τ + step (the eigenvalues of its companion matrix). Below 1: converges."""
    step = check_real("spectral_radius", "step", step)
    tau = check_int("spectral_radius", "tau", tau, minimum=0, maximum=1000)
    if tau == 0:
        return abs(1.0 - step)
    coeffs = np.zeros(tau + 2)
    coeffs[:2] = 1.0, -1.0
    coeffs[-1] = step
    return float(np.abs(np.roots(coeffs)).max())


def largest_stable_step(tau: int, tol: float = 1e-10) -> float:
    """The largest η·λ with spectral radius < 1, found by bisection on `spectral_radius` (no
    closed form used): the check of `delay_step_limit`."""
    tau = check_int("largest_stable_step", "tau", tau, minimum=0)
    lo, hi = 0.0, 2.0
    while hi - lo > check_real("largest_stable_step", "tol", tol, positive=True):
        mid = (lo + hi) / 2
        if spectral_radius(mid, tau) < 1.0:
            lo = mid
        else:
            hi = mid
    return lo


def delayed_descent(step: float, tau: int, updates: int, x0: float = 1.0) -> list[float]:
    """|x_t| of x_{t+1} = x_t − step·x_{t−τ} (x_t = x0 for t <= 0), t = 0..updates: a quadratic's
    distance from its minimum when every gradient is τ updates stale."""
    step = check_real("delayed_descent", "step", step)
    tau = check_int("delayed_descent", "tau", tau, minimum=0)
    updates = check_int("delayed_descent", "updates", updates, minimum=0, maximum=10**6)
    xs = [float(x0)] * (tau + 1)
    for _ in range(updates):
        xs.append(xs[-1] - step * xs[-1 - tau])
        if not math.isfinite(xs[-1]):
            break
    return [abs(x) for x in xs[tau:]]


def tolerated_delay(step: float, max_tau: int = 10_000) -> int:
    """The largest delay τ at which a step η·λ = ``step`` still converges (`delay_step_limit` above
    it); -1 if not even fresh gradients do (step >= 2)."""
    step = check_real("tolerated_delay", "step", step, positive=True)
    tau = -1
    while tau + 1 <= max_tau and delay_step_limit(tau + 1) > step:
        tau += 1
    return tau


def curvature(cfg: PSConfig, workers: int) -> float:
    """λ_max of the full-data least-squares Hessian XᵀX/n of the server's problem."""
    X, _, _ = make_data(cfg, check_int("curvature", "workers", workers, minimum=1))
    return float(torch.linalg.eigvalsh(X.T @ X / X.shape[0]).max())
