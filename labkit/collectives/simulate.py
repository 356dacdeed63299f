"""A pure-Python simulator of labkit's collectives: the step-by-step trace.

``trace_collective(algorithm, world_size, n_elements, root=0) -> Trace``

A trace lists, per global round (`Step`), every transfer (who sends which
chunk to whom, element range, whether the receiver adds or stores it) and,
after the round, every rank's buffer as *symbolic contributions*: buffers[r][c]
is the frozenset of ranks whose original chunk c has been summed into rank r's
chunk c (an empty set = nothing valid there yet). `Trace.values(inputs)` turns
that into numbers. Within a round all transfers read the buffers as they were
before the round (everyone sends at once).

It never imports torch: it is derived independently of labkit's real
implementations, and tests replay it against real gloo runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labkit.collectives.chunking import chunk_bounds

ALGORITHMS = ("ring_all_reduce", "ring_reduce_scatter", "ring_all_gather", "tree_broadcast",
              "tree_reduce", "tree_all_reduce", "recursive_doubling_all_reduce")


@dataclass(frozen=True)
class Transfer:
    """src sends chunk ``chunk`` (elements start:stop) to dst; op "add" (dst sums it in) or "copy"."""

    src: int
    dst: int
    chunk: int
    start: int
    stop: int
    op: str

    @property
    def numel(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Step:
    """One global round: its phase name, transfers, and every rank's buffers after it."""

    index: int
    phase: str
    transfers: tuple
    buffers: tuple  # buffers[rank][chunk] -> frozenset of contributing ranks


@dataclass
class Trace:
    """What `trace_collective` returns. ``bounds``: chunk c is elements bounds[c]:bounds[c+1]."""

    algorithm: str
    world_size: int
    n_elements: int
    bounds: list
    initial: tuple
    steps: list = field(default_factory=list)

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def final(self) -> tuple:
        return self.steps[-1].buffers if self.steps else self.initial

    def buffers_at(self, i: int) -> tuple:
        """Buffers after i rounds (i = 0: initial)."""
        return self.initial if i == 0 else self.steps[i - 1].buffers

    def bytes_sent(self, rank: int, itemsize: int) -> int:
        return sum(t.numel for s in self.steps for t in s.transfers if t.src == rank) * itemsize

    def bytes_received(self, rank: int, itemsize: int) -> int:
        return sum(t.numel for s in self.steps for t in s.transfers if t.dst == rank) * itemsize

    def messages(self, rank: int) -> int:
        return sum(1 for s in self.steps for t in s.transfers if t.src == rank and t.numel > 0)

    def alpha_beta_time(self, alpha: float, beta: float, itemsize: int) -> float:
        """Σ over rounds of (α + β·largest message of the round in bytes): every rank sends at once,
        one message per link, so a round lasts as long as its biggest message."""
        return sum(alpha + beta * itemsize * max((t.numel for t in s.transfers), default=0)
                   for s in self.steps)

    def values(self, inputs, after: int | None = None) -> np.ndarray:
        """Numbers held after ``after`` rounds (default: the end), given ``inputs[rank]`` (shape (N, L)).

        Elements of a chunk with no contributions are NaN.
        """
        x = np.asarray(inputs, dtype=np.float64)
        if x.shape != (self.world_size, self.n_elements):
            raise ValueError(f"values: inputs must have shape {(self.world_size, self.n_elements)}, got {x.shape}")
        bufs = self.final if after is None else self.buffers_at(after)
        out = np.full_like(x, np.nan)
        for r in range(self.world_size):
            for c, contrib in enumerate(bufs[r]):
                a, b = self.bounds[c], self.bounds[c + 1]
                if contrib:
                    out[r, a:b] = x[sorted(contrib), a:b].sum(axis=0)
        return out


class _Builder:
    def __init__(self, trace: Trace):
        self.trace = trace
        self.bufs = [list(row) for row in trace.initial]

    def round(self, phase: str, moves):
        """moves: (src, dst, chunk, op). Reads pre-round buffers; checks no contribution is counted twice."""
        old = [list(row) for row in self.bufs]
        b = self.trace.bounds
        transfers = []
        for src, dst, c, op in moves:
            transfers.append(Transfer(src, dst, c, b[c], b[c + 1], op))
            if op == "add":
                if old[src][c] & self.bufs[dst][c]:
                    raise AssertionError(f"{self.trace.algorithm}: rank {dst} would count "
                                         f"{sorted(old[src][c] & self.bufs[dst][c])} twice in chunk {c}")
                self.bufs[dst][c] = self.bufs[dst][c] | old[src][c]
            else:
                self.bufs[dst][c] = old[src][c]
        self.trace.steps.append(Step(len(self.trace.steps), phase, tuple(transfers),
                                     tuple(tuple(row) for row in self.bufs)))


def trace_from_rounds(algorithm: str, world_size: int, n_elements: int, rounds, root: int = 0) -> Trace:
    """A `Trace` built from given rounds instead of from the algorithm's own schedule.

    rounds: [(phase, [(src, dst, chunk, op), ...]), ...] with op "add" or "copy" —
    e.g. the sends a learner's code really made, one round per `exchange` call.
    Buffers start as in ``trace_collective(algorithm, world_size, n_elements, root)``, so the
    result draws with the same pictures. ValueError (one line) for a move outside
    the ranks or chunks, or one that would sum a rank's contribution twice.
    """
    base = trace_collective(algorithm, world_size, n_elements, root)
    trace = Trace(algorithm, world_size, n_elements, base.bounds, base.initial)
    bld = _Builder(trace)
    n_chunks = len(base.bounds) - 1
    for phase, moves in rounds:
        moves = list(moves)
        for src, dst, c, op in moves:
            if not (0 <= src < world_size and 0 <= dst < world_size and 0 <= c < n_chunks) or op not in ("add", "copy"):
                raise ValueError(f"trace_from_rounds: bad move {(src, dst, c, op)} in round {len(trace.steps) + 1}")
        try:
            bld.round(phase, moves)
        except AssertionError as e:
            raise ValueError(f"round {len(trace.steps) + 1}: {e}") from None
    return trace


def _rounds(n: int) -> int:
    return (n - 1).bit_length()


def trace_collective(algorithm: str, world_size: int, n_elements: int, root: int = 0) -> Trace:
    """Step-by-step trace of ``algorithm`` on ``world_size`` ranks and an ``n_elements`` buffer.

    Ring algorithms cut the buffer into world_size chunks (`chunk_bounds`);
    tree and recursive-doubling algorithms move the whole buffer (one chunk).
    ``root`` is the src/dst of tree algorithms.
    """
    n = _check_args(algorithm, world_size, n_elements, root)
    ring = algorithm.startswith("ring")
    bounds = chunk_bounds(n_elements, n) if ring else [0, n_elements]
    n_chunks = len(bounds) - 1
    if algorithm == "ring_all_gather":
        initial = tuple(tuple(frozenset({r}) if c == r else frozenset() for c in range(n)) for r in range(n))
    else:
        initial = tuple(tuple(frozenset({r}) for _ in range(n_chunks)) for r in range(n))
    trace = Trace(algorithm, n, n_elements, bounds, initial)
    bld = _Builder(trace)
    for phase in _PHASES[algorithm]:
        phase(bld, n, root)
    return trace


def _check_args(algorithm: str, world_size, n_elements, root) -> int:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"trace_collective: unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"trace_collective: world_size must be an int >= 1, got {world_size!r}")
    if not isinstance(n_elements, int) or n_elements < 0:
        raise ValueError(f"trace_collective: n_elements must be an int >= 0, got {n_elements!r}")
    if not 0 <= root < world_size:
        raise ValueError(f"trace_collective: root must be in [0, {world_size}), got {root}")
    return world_size


# Each phase appends its rounds to the trace: (sender, receiver, chunk, "add" | "copy") per message.

def _ring_reduce_scatter(bld: "_Builder", n: int, root: int) -> None:
    for s in range(n - 1):
        bld.round("reduce-scatter", [(r, (r + 1) % n, (r - s - 1) % n, "add") for r in range(n)])


def _ring_all_gather(bld: "_Builder", n: int, root: int) -> None:
    for s in range(n - 1):
        bld.round("all-gather", [(r, (r + 1) % n, (r - s) % n, "copy") for r in range(n)])


def _tree_broadcast(bld: "_Builder", n: int, root: int) -> None:
    real = lambda v: (v + root) % n  # noqa: E731  (relative rank -> rank)
    for k in range(_rounds(n)):
        step = 1 << k
        bld.round("broadcast", [(real(v), real(v + step), 0, "copy") for v in range(step) if v + step < n])


def _tree_reduce(bld: "_Builder", n: int, root: int) -> None:
    real = lambda v: (v + root) % n  # noqa: E731  (relative rank -> rank)
    for k in reversed(range(_rounds(n))):
        step = 1 << k
        bld.round("reduce", [(real(v + step), real(v), 0, "add") for v in range(step) if v + step < n])


def _recursive_doubling(bld: "_Builder", n: int, root: int) -> None:
    """Fold the ranks above the largest power of two p into the first ones, exchange with the rank
    ``mask`` apart for mask = 1, 2, ..., p/2, unfold."""
    p = 1 << (n.bit_length() - 1)
    if n > p:
        bld.round("fold", [(r, r - p, 0, "add") for r in range(p, n)])
    mask = 1
    while mask < p:
        bld.round(f"exchange ^{mask}", [(r, r ^ mask, 0, "add") for r in range(p)])
        mask <<= 1
    if n > p:
        bld.round("unfold", [(r - p, r, 0, "copy") for r in range(p, n)])


_PHASES = {"ring_all_reduce": (_ring_reduce_scatter, _ring_all_gather),
           "ring_reduce_scatter": (_ring_reduce_scatter,), "ring_all_gather": (_ring_all_gather,),
           "tree_broadcast": (_tree_broadcast,), "tree_reduce": (_tree_reduce,),
           "tree_all_reduce": (_tree_reduce, _tree_broadcast),
           "recursive_doubling_all_reduce": (_recursive_doubling,)}
