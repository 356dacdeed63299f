"""Coordinated versus independent checkpoints: recovery lines, orphan messages and the domino effect.

A few processes exchange messages; each also saves checkpoints. When one process fails it restarts
from its latest checkpoint, and the others may have to roll back too, because a restored state must
not remember something that, after the rollback, never happened.

**Cuts and orphans.** A *cut* gives each process the time from which it resumes (a checkpoint, the
start, or — for a process that need not roll back — its current state at the failure). A
checkpoint at time t holds the effect of every event before t. A message is an **orphan** for the
cut if its *receipt* is before the receiver's cut (the receiver remembers it) while its *send* is
after the sender's cut (the sender will resume from before sending it, and may never send it
again, or send something else). A cut without orphans is *consistent*: a **recovery line**.
Messages sent before the sender's cut and received after the receiver's are merely *in transit*:
the line is consistent, but they must be replayed from a log (Chandy and Lamport's snapshot
records them as the channels' state).

**Rollback propagation** (`recovery_line`). Start from the failed process's latest checkpoint and
everyone else's current state; while an orphan exists, roll its receiver back to its latest
checkpoint before the receipt. Consistent cuts are closed under taking the later of two cuts per
process, so this ends at the unique *latest* recovery line, and it is what the tests check by
trying every combination of checkpoints.

**The domino effect** (B. Randell, "System structure for software fault tolerance", IEEE
Transactions on Software Engineering, 1975). With *independent* checkpoints, each process saving
on its own schedule, each rollback can orphan a message that forces another: in a zig-zag of
messages between checkpoints the cascade runs back to the very start, however many checkpoints
were taken. *Coordinated* checkpoints — every process saves at the same logical time, after a
barrier or with the markers of Chandy and Lamport's snapshot algorithm (1985), so that no
message is sent after one process's checkpoint and received before another's — always form a
consistent line: nobody ever rolls back further than the last coordinated checkpoint. (Here a
message takes time, so checkpoints at the same real time are coordinated; without a global clock
that is what the barrier or the markers buy.)

`domino_experiment` measures both on random traces. With few messages, independent checkpoints
can even lose less (the failed process's own last checkpoint is on average half a period old,
and the others seldom need to follow it); as messages become frequent — a training job talks at
every step — the cascades grow until whole runs are lost, while the coordinated loss stays
bounded by one period per process.

Times are seconds of real time, all distinct from one another (a message's send or receipt never
coincides with a checkpoint of the same process).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit.checks import check_int, check_real, check_sequence
from labkit.table import Table

__all__ = ["Message", "Rollback", "RecoveryLine", "orphans", "in_transit", "is_consistent", "recovery_line",
           "coordinated_checkpoints", "independent_checkpoints", "random_messages", "DominoStats",
           "domino_experiment", "domino_table"]


@dataclass(frozen=True)
class Message:
    """``sender`` sends at ``send_s``; ``receiver`` receives at ``recv_s`` > ``send_s`` (seconds)."""

    sender: int
    send_s: float
    receiver: int
    recv_s: float


@dataclass(frozen=True)
class Rollback:
    """One step of the propagation: ``process`` moved from ``from_s`` to ``to_s`` because of
    ``message`` (None for the failed process's own restart)."""

    process: int
    from_s: float
    to_s: float
    message: Message | None


@dataclass(frozen=True)
class RecoveryLine:
    """The latest consistent cut after ``failed_process`` fails at ``failure_s`` (seconds).

    restored[p]   index of the checkpoint p resumes from (0 = the start, k = its k-th checkpoint),
                  or None if p keeps its current state
    cut_s[p]      the time p resumes from;  lost_s[p] = failure_s − cut_s[p]
    steps         the rollbacks, in the order they were forced
    in_transit    messages crossing the line forward (to be replayed from a log)"""

    failed_process: int
    failure_s: float
    restored: tuple
    cut_s: tuple
    lost_s: tuple
    steps: tuple
    in_transit: tuple

    @property
    def total_lost_s(self) -> float:
        return sum(self.lost_s)

    @property
    def domino(self) -> bool:
        """True if every process rolled back to the start."""
        return all(r == 0 for r in self.restored)


def orphans(messages, cut_s) -> list:
    """Messages received before the receiver's cut but sent after the sender's cut."""
    return [m for m in messages if m.recv_s < cut_s[m.receiver] and m.send_s > cut_s[m.sender]]


def in_transit(messages, cut_s) -> list:
    """Messages sent before the sender's cut and received after the receiver's (replayed on recovery)."""
    return [m for m in messages if m.send_s < cut_s[m.sender] and m.recv_s > cut_s[m.receiver]]


def is_consistent(messages, cut_s) -> bool:
    """A cut is a recovery line iff no message is an orphan."""
    return not orphans(messages, cut_s)


def _check(fn, messages, checkpoints, processes=None):
    checkpoints = [list(c) for c in checkpoints]
    p = len(checkpoints) if processes is None else processes
    if p < 1:
        raise ValueError(f"{fn}: checkpoints needs one (possibly empty) list of times per process, got none")
    for q, ts in enumerate(checkpoints):
        for t in ts:
            check_real(fn, f"checkpoints[{q}]", t, positive=True)
        if ts != sorted(ts) or len(set(ts)) != len(ts):
            raise ValueError(f"{fn}: checkpoints[{q}] must be strictly increasing times, got {ts}")
    msgs = []
    for m in messages:
        if not isinstance(m, Message):
            raise TypeError(f"{fn}: messages must be Message objects, got {type(m).__name__}")
        for who in (m.sender, m.receiver):
            check_int(fn, "message process", who, minimum=0, maximum=p - 1)
        if m.sender == m.receiver:
            raise ValueError(f"{fn}: a message needs two different processes, got {m}")
        send = check_real(fn, "send_s", m.send_s, positive=True)
        recv = check_real(fn, "recv_s", m.recv_s, positive=True)
        if recv <= send:
            raise ValueError(f"{fn}: a message is received after it is sent, got {m}")
        for who, t in ((m.sender, send), (m.receiver, recv)):
            if t in checkpoints[who]:
                raise ValueError(f"{fn}: process {who} has an event and a checkpoint both at {t} s; "
                                 f"times must be distinct")
        msgs.append(m)
    return msgs, checkpoints


def recovery_line(messages, checkpoints, failed_process: int, failure_s: float) -> RecoveryLine:
    """The latest recovery line after ``failed_process`` fails at ``failure_s`` (seconds).

    messages: Message objects; checkpoints[p]: p's checkpoint times (increasing; the start, time 0,
    is always a checkpoint). Messages sent at or after ``failure_s`` never happened and checkpoints
    at or after it were never taken; a message received after it is in flight."""
    fn = "recovery_line"
    msgs, ckpts = _check(fn, messages, checkpoints)
    n = len(ckpts)
    f = check_int(fn, "failed_process", failed_process, minimum=0, maximum=n - 1)
    fail = check_real(fn, "failure_s", failure_s, positive=True)
    msgs = [m for m in msgs if m.send_s < fail]
    times = [[0.0] + [t for t in ts if t < fail] for ts in ckpts]   # candidate restore points

    def latest_before(p: int, t: float) -> int:
        return max(k for k, c in enumerate(times[p]) if c < t)

    restored: list = [None] * n
    cut = [fail] * n
    restored[f] = latest_before(f, fail)
    cut[f] = times[f][restored[f]]
    steps = [Rollback(f, fail, cut[f], None)]
    while True:
        bad = orphans(msgs, cut)
        if not bad:
            break
        m = min(bad, key=lambda m: (-m.recv_s, m.receiver))          # the latest receipt first
        k = latest_before(m.receiver, m.recv_s)
        steps.append(Rollback(m.receiver, cut[m.receiver], times[m.receiver][k], m))
        restored[m.receiver], cut[m.receiver] = k, times[m.receiver][k]
    return RecoveryLine(f, fail, tuple(restored), tuple(cut), tuple(fail - c for c in cut), tuple(steps),
                        tuple(in_transit(msgs, cut)))


MAX_CHECKPOINTS = 1_000_000   # processes · end_s / period_s a checkpoint list may hold


def _checkpoint_count(fn: str, processes: int, period: float, end: float) -> None:
    if processes * (end / period) > MAX_CHECKPOINTS:
        raise ValueError(f"{fn}: processes · end_s / period_s = {processes * end / period:.3g} checkpoints, "
                         f"more than {MAX_CHECKPOINTS}; use a longer period_s")


def coordinated_checkpoints(processes: int, period_s: float, end_s: float) -> tuple:
    """Every process checkpoints at period, 2·period, … < end_s (seconds): one global line each time."""
    fn = "coordinated_checkpoints"
    p = check_int(fn, "processes", processes, minimum=1)
    period = check_real(fn, "period_s", period_s, positive=True)
    end = check_real(fn, "end_s", end_s, positive=True)
    _checkpoint_count(fn, p, period, end)
    times = tuple(k * period for k in range(1, math.ceil(end / period)) if k * period < end)
    return tuple(times for _ in range(p))


def independent_checkpoints(processes: int, period_s: float, end_s: float, seed: int = 0) -> tuple:
    """Each process checkpoints every ``period_s`` from its own random phase in (0, period) (seconds)."""
    fn = "independent_checkpoints"
    p = check_int(fn, "processes", processes, minimum=1)
    period = check_real(fn, "period_s", period_s, positive=True)
    end = check_real(fn, "end_s", end_s, positive=True)
    _checkpoint_count(fn, p, period, end)
    rng = np.random.default_rng(check_int(fn, "seed", seed, minimum=0))
    out = []
    for phase in rng.uniform(0.05, 0.95, p) * period:
        out.append(tuple(float(t) for t in np.arange(phase, end, period)))
    return tuple(out)


def random_messages(processes: int, count: int, end_s: float, max_latency_s: float, seed: int = 0) -> tuple:
    """``count`` messages between random distinct processes, sent uniformly in (0, end_s), each taking
    a uniform latency in (0, max_latency_s); sorted by send time."""
    fn = "random_messages"
    p = check_int(fn, "processes", processes, minimum=2)
    count = check_int(fn, "count", count, minimum=0, maximum=MAX_CHECKPOINTS)
    end = check_real(fn, "end_s", end_s, positive=True)
    lat = check_real(fn, "max_latency_s", max_latency_s, positive=True)
    rng = np.random.default_rng(check_int(fn, "seed", seed, minimum=0))
    send = np.sort(rng.uniform(0, end, count))
    sender = rng.integers(0, p, count)
    receiver = (sender + rng.integers(1, p, count)) % p                # any process but the sender
    recv = send + rng.uniform(0, lat, count)
    return tuple(Message(int(a), float(s), int(b), float(r)) for a, s, b, r in zip(sender, send, receiver, recv))


@dataclass(frozen=True)
class DominoStats:
    """Outcomes over ``trials`` random traces for one checkpointing style (seconds; shares in [0, 1])."""

    style: str
    trials: int
    to_start: float               # share of failures that rolled every process back to the start
    failed_to_start: float        # share where the failed process itself went back to the start
    mean_lost_s: float            # mean total work lost, summed over processes
    max_rollback_s: float         # the furthest any process rolled back, over all trials
    mean_rollbacks: float         # mean rollbacks forced on top of the failed process's own


def domino_experiment(trials: int = 200, processes: int = 3, messages: int = 30, period_s: float = 10.0,
                      end_s: float = 60.0, max_latency_s: float = 3.0, seed: int = 0) -> tuple:
    """The same random traces under independent and under coordinated checkpoints (same period);
    a random process fails at ``end_s``. Returns (independent, coordinated) DominoStats."""
    fn = "domino_experiment"
    trials = check_int(fn, "trials", trials, minimum=1, maximum=100_000)
    processes = check_int(fn, "processes", processes, minimum=2, maximum=64)
    messages = check_int(fn, "messages", messages, minimum=0, maximum=100_000)
    seed = check_int(fn, "seed", seed, minimum=0)
    _checkpoint_count(fn, processes, check_real(fn, "period_s", period_s, positive=True),
                      check_real(fn, "end_s", end_s, positive=True))
    results = {"independent": [], "coordinated": []}
    for t in range(trials):
        rng = np.random.default_rng([seed, t])
        msgs = random_messages(processes, messages, end_s, max_latency_s, seed=int(rng.integers(2**31)))
        failed = int(rng.integers(processes))
        styles = {"independent": independent_checkpoints(processes, period_s, end_s, int(rng.integers(2**31))),
                  "coordinated": coordinated_checkpoints(processes, period_s, end_s)}
        for style, ckpts in styles.items():
            results[style].append(recovery_line(msgs, ckpts, failed, end_s))
    out = []
    for style, lines in results.items():
        out.append(DominoStats(style, trials, float(np.mean([ln.domino for ln in lines])),
                               float(np.mean([ln.restored[ln.failed_process] == 0 for ln in lines])),
                               float(np.mean([ln.total_lost_s for ln in lines])),
                               float(max(max(ln.lost_s) for ln in lines)),
                               float(np.mean([len(ln.steps) - 1 for ln in lines]))))
    return tuple(out)


def domino_table(message_counts=(15, 60, 240), trials: int = 200, processes: int = 3, period_s: float = 10.0,
                 end_s: float = 60.0, seed: int = 0) -> Table:
    """`domino_experiment` for a few message rates, both styles, as a table for the notebook.
    "all to 0 %": runs where every process went back to the start; "failed to 0 %": where the
    failed process did; lost work is summed over the processes (seconds); "rollbacks": mean
    rollbacks forced on top of the failed process's own."""
    rows = []
    for count in check_sequence("domino_table", "message_counts", message_counts):
        for s in domino_experiment(trials, processes, count, period_s, end_s, seed=seed):
            rows.append([count, s.style, 100 * s.to_start, 100 * s.failed_to_start, s.mean_lost_s,
                         s.max_rollback_s, s.mean_rollbacks])
    one = ".1f"
    return Table(["messages", "checkpoints", "all to 0 %", "failed to 0 %", "mean lost s",
                  "max rollback s", "rollbacks"], rows,
                 formats={"all to 0 %": one, "failed to 0 %": one, "mean lost s": one,
                          "max rollback s": one, "rollbacks": ".2f"},
                 title=f"{trials} random runs each: {processes} processes for {end_s:g} s, a checkpoint every "
                       f"{period_s:g} s, one process fails at the end")
