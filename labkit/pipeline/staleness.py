"""Asynchronous pipelines without a flush (AMPNet, Gaunt et al. 2017; PipeMare, Yang et al. 2021):
how stale are the weights, and what does it do to training?

Without a flush, each stage applies its update as soon as its gradient for a micro-batch is ready
and keeps going. A micro-batch's forward on stage s then uses weights that are several updates
behind the weights its backward finds. We count that *staleness* (updates of stage s that land
between the micro-batch's forward on s and its backward on s) from timed runs, for two
machines:

* ``"1f1b"``: one processor per stage alternating forward and backward (PipeDream's order,
  the lab's ``schedule("1f1b", ...)`` run for many micro-batches and timed by `time_schedule`):
  staleness p-1-s on stage s (0-indexed), whatever the forward/backward times — the order on a
  stage alone decides it (`async_sim.weight_versions` counts the same p-s versions).
* ``"fully_pipelined"``: every stage runs a forward and a backward at the same time (separate
  units, AMPNet's and PipeMare's setting), one tick each: staleness 2(p-s)-1, i.e. PipeMare's
  delay 2(P-i)+1 with stages numbered i = 1..P from the input... written for i = s + 1.

With an update only every N micro-batches (gradients accumulated over N), the staleness is at
most ceil(τ/N) for the per-micro-batch staleness τ above.

`train` then runs a small network (numpy, float64) through those delays: forward of micro-batch
k on stage s with the weights of k - τ_s updates, backward with the current weights (no
stashing; `stash=True` gives PipeDream's stashed weights instead), and PipeMare's two remedies as
options: *learning-rate rescheduling* (a stage with delay τ takes steps divided by τ^(1-k/K)
during the first K micro-batches, growing to the full step) and *discrepancy correction* (the
backward uses the current weights moved back by τ times a running average of the recent
per-update change, an estimate of the weights the forward saw).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit.checks import check_int, check_real, check_sequence
from labkit.pipeline.schedules import schedule
from labkit.pipeline.simulate import check_seconds, time_schedule
from labkit.table import Table

__all__ = ["MACHINES", "stage_events", "staleness_from_events", "staleness", "closed_form",
           "staleness_table", "TrainResult", "train", "training_table"]

MACHINES = ("1f1b", "fully_pipelined")


def stage_events(machine: str, num_stages: int, num_microbatches: int, forward_time=1, backward_time=1) -> dict:
    """{stage: [(kind, microbatch, start, end)]} of a long non-flushed run on ``machine``."""
    fn = "stage_events"
    if machine not in MACHINES:
        raise ValueError(f"{fn}: unknown machine {machine!r}; expected one of {MACHINES}")
    p = check_int(fn, "num_stages", num_stages, minimum=1, maximum=1024)
    m = check_int(fn, "num_microbatches", num_microbatches, minimum=p)
    if m > 100_000:
        raise ValueError(f"{fn}: num_microbatches must be <= 100000 (simulated one by one), got {m}")
    F, B = check_seconds(forward_time, "forward_time"), check_seconds(backward_time, "backward_time")
    if machine == "fully_pipelined" and F != B:
        raise ValueError(f"{fn}: the fully pipelined machine runs a forward and a backward per tick: "
                         f"forward_time must equal backward_time, got {F} and {B}")
    if machine == "1f1b":
        res = time_schedule(schedule("1f1b", p, m), F, B)   # stage s on rank s
        return {s: [(iv.action.kind, iv.action.microbatch, iv.start, iv.end) for iv in res.timeline[s]]
                for s in range(p)}
    fe, be = {}, {}
    for k in range(m):                              # forward units: a flow shop
        for s in range(p):
            start = max(fe.get((s - 1, k), 0), fe.get((s, k - 1), 0))
            fe[(s, k)] = start + F
    for k in range(m):                              # backward units, each after its own forward
        for s in range(p - 1, -1, -1):
            start = max(be.get((s + 1, k), fe[(p - 1, k)]), be.get((s, k - 1), 0), fe[(s, k)])
            be[(s, k)] = start + B
    return {s: sorted([("F", k, fe[(s, k)] - F, fe[(s, k)]) for k in range(m)]
                      + [("B", k, be[(s, k)] - B, be[(s, k)]) for k in range(m)], key=lambda e: e[2])
            for s in range(p)}


def staleness_from_events(events: list, update_every: int = 1) -> list:
    """Per micro-batch of one stage: updates that landed between its forward's start and its
    backward's start. An update lands when the backward of micro-batch k ends, for every k with
    (k + 1) % update_every == 0; one that lands exactly when an action starts is seen by it."""
    N = check_int("staleness_from_events", "update_every", update_every, minimum=1)
    updates = sorted(end for kind, k, _, end in events if kind == "B" and (k + 1) % N == 0)
    start = {(kind, k): s for kind, k, s, _ in events}
    seen = lambda t: sum(1 for u in updates if u <= t)  # noqa: E731
    mbs = sorted(k for kind, k, _, _ in events if kind == "F")
    return [seen(start[("B", k)]) - seen(start[("F", k)]) for k in mbs]


def staleness(machine: str, num_stages: int, num_microbatches: int | None = None, update_every: int = 1,
              forward_time=1, backward_time=1) -> list:
    """Largest staleness on each stage over a run of ``num_microbatches`` (default 4p + 4N)."""
    p = check_int("staleness", "num_stages", num_stages, minimum=1)
    N = check_int("staleness", "update_every", update_every, minimum=1)
    m = num_microbatches if num_microbatches is not None else 4 * p + 4 * N
    ev = stage_events(machine, p, m, forward_time, backward_time)
    return [max(staleness_from_events(ev[s], N)) for s in range(p)]


def closed_form(machine: str, num_stages: int, stage: int, update_every: int = 1) -> int:
    """ceil(τ/N) with τ = p-1-s ("1f1b") or 2(p-s)-1 ("fully_pipelined"); s is 0-indexed."""
    p = check_int("closed_form", "num_stages", num_stages, minimum=1)
    s = check_int("closed_form", "stage", stage, minimum=0, maximum=p - 1)
    N = check_int("closed_form", "update_every", update_every, minimum=1)
    if machine not in MACHINES:
        raise ValueError(f"closed_form: unknown machine {machine!r}; expected one of {MACHINES}")
    tau = p - 1 - s if machine == "1f1b" else 2 * (p - s) - 1
    return -(-tau // N)


def staleness_table(num_stages: int = 4, update_every=(1, 2)) -> Table:
    """Per machine and N: simulated staleness per stage next to the closed form."""
    update_every = check_sequence("staleness_table", "update_every", update_every)
    rows = []
    for machine in MACHINES:
        for N in update_every:
            got = staleness(machine, num_stages, update_every=N)
            want = [closed_form(machine, num_stages, s, N) for s in range(num_stages)]
            rows.append((machine, N, got, want, got == want))
    return Table(["machine", "N", "simulated per stage", "closed form", "equal"], rows)


# --------------------------------------------------------------------------- a small training run

@dataclass
class TrainResult:
    """Loss of each micro-batch (before its update), the delays used, and whether it blew up."""

    losses: list
    delays: list
    diverged: bool

    def final(self, last: int = 20) -> float:
        """Mean loss of the last ``last`` micro-batches (inf if the run diverged)."""
        return math.inf if self.diverged else float(np.mean(self.losses[-last:]))


def _problem(p: int, width: int, rng):
    """A random teacher network and a random start for the student (same shapes)."""
    teacher = [rng.normal(0, 0.8 / math.sqrt(width), (width, width)) for _ in range(p)]
    student = [rng.normal(0, 0.8 / math.sqrt(width), (width, width)) for _ in range(p)]
    return teacher, student


def _forward(ws, x):
    acts = [x]                                       # acts[s]: input of stage s, (b, width)
    for s, w in enumerate(ws):
        z = acts[-1] @ w.T
        acts.append(np.tanh(z) if s < len(ws) - 1 else z)
    return acts


def train(delays, steps: int = 600, lr: float = 0.4, width: int = 8, batch: int = 16, seed: int = 0,
          stash: bool = False, reschedule: float = 0, correction: float | None = None) -> TrainResult:
    """Train a p-layer tanh network (p = len(delays), one layer per stage) to imitate a fixed
    random teacher, one SGD update per micro-batch, with stage s's forward ``delays[s]`` updates
    behind (0 everywhere: ordinary synchronous SGD on the same micro-batches).

    stash: the backward uses the forward's weights (PipeDream) instead of the current ones.
    reschedule: K > 0 turns on PipeMare-style learning-rate rescheduling: a stage with delay
      τ > 1 divides its step by τ^(1 - k/K) at micro-batch k < K (full step afterwards);
      ``math.inf`` divides by τ for the whole run.
    correction: γ in [0, 1) turns on discrepancy correction with that running-average decay.
    """
    fn = "train"
    if not isinstance(delays, (list, tuple)) or not delays:
        raise TypeError(f"{fn}: delays must be a non-empty list of ints (one per stage), got {delays!r}")
    taus = [check_int(fn, f"delays[{s}]", d, minimum=0) for s, d in enumerate(delays)]
    steps = check_int(fn, "steps", steps, minimum=1, maximum=1_000_000)
    lr = check_real(fn, "lr", lr, positive=True)
    width = check_int(fn, "width", width, minimum=1)
    batch = check_int(fn, "batch", batch, minimum=1)
    if reschedule != math.inf:
        reschedule = check_real(fn, "reschedule", reschedule)
        if reschedule < 0:
            raise ValueError(f"{fn}: reschedule must be >= 0 steps (0: off, math.inf: always), got {reschedule}")
    if correction is not None:
        correction = check_real(fn, "correction", correction)
        if not 0 <= correction < 1:
            raise ValueError(f"{fn}: correction (a decay) must be in [0, 1), got {correction}")
    p = len(taus)
    rng = np.random.default_rng(seed)
    teacher, ws = _problem(p, width, rng)
    history = [[w.copy()] for w in ws]               # history[s][v]: stage s after v updates
    drift = [np.zeros_like(w) for w in ws]           # running average of the per-update change
    losses = []
    for k in range(steps):
        x = rng.normal(0, 1, (batch, width))
        y = _forward(teacher, x)[-1]
        fwd = [history[s][max(0, k - taus[s])] for s in range(p)]
        acts = _forward(fwd, x)
        err = acts[-1] - y                           # (b, width)
        loss = 0.5 * float(np.mean(np.sum(err * err, axis=1)))
        if not math.isfinite(loss) or loss > 1e6:
            return TrainResult(losses, taus, True)
        losses.append(loss)
        g_out = err / batch
        grads = [None] * p
        for s in range(p - 1, -1, -1):
            grads[s] = g_out.T @ acts[s]             # (width, width)
            if s:
                w_b = fwd[s] if stash else history[s][-1]
                if correction is not None and not stash:
                    w_b = w_b - taus[s] * drift[s]
                g_out = (g_out @ w_b) * (1 - acts[s] ** 2)   # through stage s-1's tanh
        for s in range(p):
            step = lr
            if reschedule and taus[s] > 1:
                step = lr / taus[s] ** (1.0 if reschedule == math.inf else max(0.0, 1 - k / reschedule))
            new = history[s][-1] - step * grads[s]
            if correction is not None:
                drift[s] = correction * drift[s] + (1 - correction) * (new - history[s][-1])
            history[s].append(new)
            old = len(history[s]) - 2 - max(taus)    # no later forward reads this version
            if old >= 0:
                history[s][old] = None
    return TrainResult(losses, taus, False)


def training_table(num_stages: int = 4, lrs=(0.4, 1.2), steps: int = 600) -> Table:
    """Final loss (mean of the last 50 micro-batches; "diverged" if it blew up) of synchronous
    SGD and of asynchronous runs with the delays of both machines, with and without PipeMare-style
    remedies, for each step size."""
    p = check_int("training_table", "num_stages", num_stages, minimum=1, maximum=1024)
    lrs = check_sequence("training_table", "lrs", lrs)
    full = [closed_form("fully_pipelined", p, s) for s in range(p)]
    alt = [closed_form("1f1b", p, s) for s in range(p)]
    runs = [("synchronous (delays 0)", dict(delays=[0] * p)),
            (f"async 1F1B (delays {' '.join(map(str, alt))})", dict(delays=alt)),
            (f"async full (delays {' '.join(map(str, full))})", dict(delays=full)),
            ("  same, stashed weights", dict(delays=full, stash=True)),
            ("  same, discrepancy correction", dict(delays=full, correction=0.5)),
            ("  same, lr / tau annealed to lr", dict(delays=full, reschedule=steps)),
            ("  same, lr / tau throughout", dict(delays=full, reschedule=math.inf))]
    rows = [[name] + [_fmt(train(steps=steps, lr=lr, **kw).final(50)) for lr in lrs] for name, kw in runs]
    return Table(["run"] + [f"lr {lr}" for lr in lrs], rows)


def _fmt(x: float) -> str:
    return "diverged" if math.isinf(x) else f"{x:.4f}"
