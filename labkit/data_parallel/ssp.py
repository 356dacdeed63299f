"""The consistency models of a parameter server as a clock rule, simulated (pure Python).

Worker k's iteration c (0-based) takes ``durations[k][c]`` time units; talking to the server is
taken as instantaneous. A worker that has finished c iterations may start its next one when

- ASP (``staleness=None``): at once;
- SSP with bound s: every worker has finished at least c − s iterations (the slowest is at most
  s clocks behind); BSP is SSP with s = 0 — everybody waits for the slowest at every clock.

So start[k][c] = max(finish[k][c−1], max_j finish[j][c−s−1]) (terms with a negative index drop
out) and finish[k][c] = start[k][c] + durations[k][c]. This is the rule the real server of
`labkit.data_parallel.param_server` applies; the notebook checks the simulated time per run
against the measured one.

*Staleness* of a gradient (as the server counts it): the number of updates applied between the
moment its worker read the parameters (the start of the iteration) and the moment it is applied
(the finish). `ssp_staleness` counts it on the simulated timeline, one update per finished
iteration (ASP/SSP apply each gradient on arrival); simultaneous events are ordered by worker.
"""
from __future__ import annotations

from typing import Sequence

from labkit.checks import check_int, check_real


def check_durations(fn: str, durations) -> list[list[float]]:
    """``durations`` as a list of W >= 1 equal-length lists of times >= 0; one-line error otherwise."""
    if not isinstance(durations, Sequence) or not durations or isinstance(durations, (str, bytes)):
        raise ValueError(f"{fn}: durations must be a non-empty list with one list per worker")
    rows = [[check_real(fn, "duration", d) for d in row] for row in durations]
    if any(len(r) != len(rows[0]) for r in rows) or not rows[0]:
        raise ValueError(f"{fn}: every worker needs the same number (>= 1) of iteration durations")
    if any(d < 0 for r in rows for d in r):
        raise ValueError(f"{fn}: durations must be >= 0")
    return rows


def ssp_start_times(durations: Sequence[Sequence[float]], staleness: int | None) -> list[list[float]]:
    """start[k][c]: when worker k starts iteration c under SSP(``staleness``) (None = ASP)."""
    fn = "ssp_start_times"
    rows = check_durations(fn, durations)
    return _ssp_start_times(rows, None if staleness is None else check_int(fn, "staleness", staleness, minimum=0))


def _ssp_start_times(durations, staleness):
    """When each worker starts each iteration under a stale-synchronous parameter server.

    durations: list of W lists, each of the same length n: worker k's iteration c takes
    durations[k][c] time units (talking to the server takes no time). staleness: an int
    s >= 0, or None for fully asynchronous (ASP).
    A worker that has finished c iterations may start its next one at once under ASP;
    under SSP(s) only once every worker has finished at least c - s iterations (s = 0 is
    BSP: a barrier at every clock). Return start, a list of W lists of n numbers:
    start[k][c] = max(finish[k][c-1], max over j of finish[j][c-s-1]), dropping terms whose
    index is negative, where finish[k][c] = start[k][c] + durations[k][c].
    Example: durations [[1, 1, 1], [3, 3, 3]], s = 1 -> [[0, 1, 3], [0, 3, 6]].
    """
    # BEGIN SOLUTION
    # HINT: every start depends only on finishes of earlier clocks, so the table can be filled one clock
    # HINT: (column) at a time for all workers; the staleness bound is one gate shared by a whole clock.
    workers, steps = len(durations), len(durations[0])
    start = [[0.0] * steps for _ in range(workers)]
    finish = [[0.0] * steps for _ in range(workers)]
    for c in range(steps):
        gate = 0.0
        if staleness is not None and c - staleness - 1 >= 0:
            gate = max(finish[j][c - staleness - 1] for j in range(workers))
        for k in range(workers):
            start[k][c] = max(finish[k][c - 1] if c else 0.0, gate)
            finish[k][c] = start[k][c] + durations[k][c]
    return start
    # END SOLUTION


def ssp_staleness(durations: Sequence[Sequence[float]], staleness: int | None) -> list[int]:
    """Staleness of every applied gradient, in the order the server applies them (module doc)."""
    rows = check_durations("ssp_staleness", durations)
    if any(d <= 0 for r in rows for d in r):
        raise ValueError("ssp_staleness: durations must be > 0 (a read and its own update need an order)")
    start = ssp_start_times(rows, staleness)
    events = []                                 # (time, order, worker, iteration); order 1 = read
    for k, row in enumerate(rows):
        for c, d in enumerate(row):
            events.append((start[k][c] + d, 0, k, c))   # apply before a read at the same moment
            events.append((start[k][c], 1, k, c))
    version, read, out = 0, {}, []
    for _, kind, k, c in sorted(events):
        if kind == 1:
            read[(k, c)] = version
        else:
            out.append(version - read[(k, c)])
            version += 1
    return out


def ssp_makespan(durations: Sequence[Sequence[float]], staleness: int | None) -> float:
    """When the last worker finishes its last iteration."""
    rows = check_durations("ssp_makespan", durations)
    start = ssp_start_times(rows, staleness)
    return max(start[k][-1] + rows[k][-1] for k in range(len(rows)))
