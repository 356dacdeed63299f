"""The Lab 05 notebook's one-liners: each runs real ranks (or the simulator) and returns a `Table`.

A notebook cell then reads as one call and its printed result, and the same
function is unit-tested (tests/test_collectives_lab.py) instead of living only
in a cell. Every rank function here is a top-level function of this module.

    primitives_vs_torch(n)              the seven pictures vs torch.distributed's own collectives
    ring_vs_trace(n, length)            a real ring all-reduce: sends and results vs the simulator
    ring_bytes_table(sizes, length)     bytes each rank sent vs 2S - c_r - c_(r+1), N = 2..6
    log_bytes_table(n, length)          tree / recursive doubling / ring bytes per rank vs formulas
    complete_chunk_owner(first, n)      which chunk each rank completes, for a reduce-scatter start
    rounds_table(ps)                    rounds and bytes of each all-reduce, Rabenseifner's included
    time_all_reduces(p, sizes)          timings: our three all-reduces and gloo's dist.all_reduce
    fit_table / times_table / ratio_table   the α–β model fitted once for all, or once per algorithm
    link_table(alpha)                   β in ps/B of real interconnects, and the crossover they give
    failure_table(n, dead, timeout)     one rank hangs or crashes between two all-reduces: who finishes
    builtin_times / gloo_vs_nccl        dist.all_reduce on gloo (CPU tensors) or NCCL (CUDA tensors)
    run_yours / picture                 a learner's function on real ranks, drawn like the lab
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from labkit.bench import now
from labkit.collectives import alpha_beta, formulas
from labkit.collectives.chunking import chunk_bounds
from labkit.collectives.p2p import recording
from labkit.collectives.primitives import PRIMITIVES, primitive_states
from labkit.collectives.recursive import recursive_doubling_all_reduce
from labkit.collectives.ring import ring_all_reduce
from labkit.collectives.simulate import trace_collective, trace_from_rounds
from labkit.collectives.timing import SIZES, TIMED, gloo_all_reduce, samples_of, time_all_reduces  # noqa: F401
from labkit.table import Table
from labkit.collectives.tree import tree_broadcast, tree_reduce

WIDTH = 100  # printed lines stay within this many characters


# --------------------------------------------------------------------------- section 1: primitives

def _value(rank: int, block: int, n: int) -> float:
    """Rank ``rank``'s block ``block`` carries 2^(rank*n + block): a sum decodes into its blocks."""
    return 2.0 ** (rank * n + block)


def primitives_on_ranks(rank, n):
    """Run torch.distributed's seven collectives on encoded one-element blocks; return what each left."""
    import warnings

    warnings.simplefilter("ignore", FutureWarning)  # torch may rename reduce_scatter_tensor; same meaning
    val = lambda b=0: torch.tensor([_value(rank, b, n)], dtype=torch.float64)  # noqa: E731
    zero = lambda: torch.zeros(1, dtype=torch.float64)  # noqa: E731
    out = {}
    t = val() if rank == 0 else zero()
    dist.broadcast(t, 0)
    out["broadcast"] = [t]
    t = zero()
    dist.scatter(t, [val(b) for b in range(n)] if rank == 0 else None, src=0)
    out["scatter"] = [t]
    lst = [zero() for _ in range(n)]
    dist.gather(val(), lst if rank == 0 else None, dst=0)
    out["gather"] = lst if rank == 0 else None
    t = val()
    dist.reduce(t, 0)
    out["reduce"] = [t] if rank == 0 else None
    lst = [zero() for _ in range(n)]
    dist.all_gather(lst, val())
    out["all_gather"] = lst
    t = zero()
    dist.reduce_scatter_tensor(t, torch.cat([val(b) for b in range(n)]))
    out["reduce_scatter"] = [t]
    t = val()
    dist.all_reduce(t)
    out["all_reduce"] = [t]
    return {k: None if v is None else [float(x) for x in v] for k, v in out.items()}


def primitives_vs_torch(n: int = 4) -> Table:
    """For each primitive: does its "after" picture equal what torch.distributed left on n gloo ranks?"""
    from labkit.dist import launch

    real = launch(primitives_on_ranks, n, backend="gloo")
    rows = []
    for name in PRIMITIVES:
        _, after = primitive_states(name, n)
        ok = all(real[r][name] is None and not any(after[r])
                 or real[r][name] == [sum(_value(q, b, n) for q, b in cell) for cell in after[r]]
                 for r in range(n))
        rows.append((name, ok))
    return Table(["primitive", "picture matches torch.distributed"], rows)


# --------------------------------------------------------------------------- section 2: the ring vs the trace

def ring_inputs(n: int, length: int) -> np.ndarray:
    """Small integers (exact in any summation order), shape (n, length)."""
    return np.arange(n * length, dtype=np.float64).reshape(n, length) % 7 - 3


def _ring_rank(rank, n, length):
    inputs = ring_inputs(n, length)
    x = torch.from_numpy(inputs[rank].copy())
    with recording() as events:
        ring_all_reduce(x)
    ref = torch.from_numpy(inputs[rank].copy())
    dist.all_reduce(ref)
    bounds = chunk_bounds(length, n)
    sends = [(e.step, e.peer, bounds.index((e.data_ptr - x.data_ptr()) // 8)) for e in events if e.op == "send"]
    return x.numpy(), bool(torch.equal(x, ref)), sends


def ring_vs_trace(n: int = 4, length: int = 10) -> tuple[Table, np.ndarray]:
    """labkit's ring all-reduce on n gloo ranks vs dist.all_reduce and vs the simulator's trace.

    Returns (a row per rank: equals dist.all_reduce, every send (step, peer, chunk) as traced,
    final buffer as traced; the summed buffer of rank 0).
    """
    from labkit.dist import launch

    trace = trace_collective("ring_all_reduce", n, length)
    want = trace.values(ring_inputs(n, length))
    rows = []
    real = launch(_ring_rank, n, length, backend="gloo")
    for r, (buf, same_as_torch, sends) in enumerate(real):
        traced = [(s.index, t.dst, t.chunk) for s in trace.steps for t in s.transfers if t.src == r]
        rows.append((r, same_as_torch, sends == traced, bool(np.array_equal(buf, want[r]))))
    return Table(["rank", "equals dist.all_reduce", "sends match trace", "buffer equals trace"], rows), real[0][0]


# --------------------------------------------------------------------------- section 3: bytes

def _ring_bytes_rank(rank, n, length):
    return ring_all_reduce(torch.ones(length)).bytes_sent


def ring_bytes_table(sizes=(2, 3, 4, 5, 6), length: int = 1001, itemsize: int = 4) -> Table:
    """Bytes each rank sent in a real float32 ring all-reduce of ``length`` elements, N in ``sizes``."""
    from labkit.dist import launch

    S = length * itemsize
    rows = []
    for n in sizes:
        sent = launch(_ring_bytes_rank, n, length, backend="gloo")
        f = [formulas.ring_all_reduce_bytes(r, n, length, itemsize)[0] for r in range(n)]
        rows.append((n, sent, sent == f, 2 * (n - 1) / n * S, sum(sent), sum(sent) == 2 * (n - 1) * S))
    return Table(["N", "bytes sent per rank", "= formula", "2(N-1)/N·S", "total", "= 2(N-1)·S"], rows,
                 formats={"2(N-1)/N·S": ".1f"})


LOG_ALGORITHMS = ("tree_broadcast", "tree_reduce", "recursive_doubling_all_reduce", "ring_all_reduce")


def _log_bytes_rank(rank, n, length):
    x = torch.ones(length)
    return (tree_broadcast(x.clone(), 0).bytes_sent, tree_reduce(x.clone(), 0).bytes_sent,
            recursive_doubling_all_reduce(x.clone()).bytes_sent, ring_all_reduce(x.clone()).bytes_sent)


def log_bytes_table(n: int = 6, length: int = 1001, itemsize: int = 4) -> Table:
    """Bytes sent per rank by the tree, recursive-doubling and ring algorithms on n real ranks."""
    from labkit.dist import launch

    real = launch(_log_bytes_rank, n, length, backend="gloo")
    rows = []
    for k, name in enumerate(LOG_ALGORITHMS):
        want = [formulas.BYTES[name](r, n, length, itemsize)[0] for r in range(n)]
        got = [row[k] for row in real]
        rows.append((name, got, got == want, sum(got)))
    return Table(["algorithm", "bytes sent per rank", "= formula", "total"], rows)


# --------------------------------------------------------------------------- section 4: where does chunk i end?

def complete_chunk_owner(first_offset: int, n: int = 4) -> dict[int, int]:
    """Which chunk each rank holds complete after a ring reduce-scatter whose rank i sends chunk
    (i - s - first_offset) % n at step s (first_offset 0: chunk i first; 1: chunk i-1 first)."""
    have = [[{r} for _ in range(n)] for r in range(n)]
    for s in range(n - 1):
        old = [[set(c) for c in row] for row in have]
        for r in range(n):
            c = (r - s - first_offset) % n
            have[(r + 1) % n][c] |= old[r][c]
    return {r: next(c for c in range(n) if len(have[r][c]) == n) for r in range(n)}


def rounds_table(ps=(2, 4, 8, 16, 64)) -> Table:
    """Per p: the ring's rounds counted on the simulator's trace, then each all-reduce's model cost
    as "rounds (× α), critical-path bytes per buffer byte (× β·S)" from `alpha_beta.coefficients`."""
    algs = ("ring_all_reduce", "recursive_doubling_all_reduce", "tree_all_reduce", "rabenseifner_all_reduce")
    short = {"ring_all_reduce": "ring", "recursive_doubling_all_reduce": "rec. doubling",
             "tree_all_reduce": "tree", "rabenseifner_all_reduce": "Rabenseifner"}
    rows = []
    for p in ps:
        cells = []
        for a in algs:
            r, b = alpha_beta.coefficients(a, p, 1.0)
            cells.append(f"{r}α + {b:.3g}·Sβ")
        rows.append(tuple([p, trace_collective("ring_all_reduce", p, p).n_steps] + cells))
    return Table(["p", "ring rounds traced"] + [short[a] for a in algs], rows)


# --------------------------------------------------------------------------- section 5: timing and the α–β fit

SHORT = {"ring_all_reduce": "ring", "recursive_doubling_all_reduce": "rec. doubling",
         "tree_all_reduce": "tree", "gloo_all_reduce": "gloo dist.all_reduce"}


def fit_table(measured: dict, p: int) -> tuple[Table, dict]:
    """α and β fitted once for all algorithms ("joint") and once per algorithm, with the smallest and
    largest measured/model ratio of each fit. Returns (table, {"joint" or algorithm: (α, β)})."""
    samples = samples_of(measured, p)
    fits = {"joint": alpha_beta.fit_alpha_beta(samples), **alpha_beta.fit_per_algorithm(samples)}
    rows = []
    for name, (a, b) in fits.items():
        own = [s for s in samples if name in ("joint", s[0])]
        ratios = [t / alpha_beta.predict_time(alg, q, n, a, b) for alg, q, n, t in own]
        rows.append((name, a * 1e6, b * 1e9, 1 / b / 1e9, min(ratios), max(ratios)))
    return Table(["fit", "α (us)", "β (ns/B)", "GB/s", "min meas/model", "max meas/model"], rows,
                 formats={"α (us)": ".1f", "β (ns/B)": ".3f", "GB/s": ".2f",
                          "min meas/model": ".2f", "max meas/model": ".2f"}), fits


def times_table(measured: dict, sizes=SIZES) -> Table:
    """Measured milliseconds per size (rows) and algorithm (columns)."""
    algs = [a for a in TIMED if (a, sizes[0]) in measured]
    cols = ["bytes"] + [f"{SHORT[a]} ms" for a in algs]
    rows = [tuple([n] + [measured[(a, n)] * 1e3 for a in algs]) for n in sizes]
    return Table(cols, rows, formats={c: ".3f" for c in cols[1:]})


def ratio_table(measured: dict, p: int, fits: dict, sizes=SIZES) -> Table:
    """measured / model per size and algorithm, with the joint fit and with the algorithm's own fit."""
    algs = [a for a in TIMED[:3] if (a, sizes[0]) in measured]
    cols = ["bytes"] + [f"{SHORT[a]} {which}" for a in algs for which in ("joint", "own")]
    rows = []
    for n in sizes:
        row = [n]
        for a in algs:
            t = measured[(a, n)]
            row += [t / alpha_beta.predict_time(a, p, n, *fits["joint"]),
                    t / alpha_beta.predict_time(a, p, n, *fits[a])]
        rows.append(tuple(row))
    return Table(cols, rows, formats={c: ".2f" for c in cols[1:]})


def median_ratio(measured: dict, p: int, fit: tuple[float, float], algorithm: str, sizes=SIZES) -> float:
    """Median over sizes of measured / model time of ``algorithm`` under ``fit`` = (α, β)."""
    return float(np.median([measured[(algorithm, n)] / alpha_beta.predict_time(algorithm, p, n, *fit)
                            for n in sizes]))


LINKS = (  # (name, GB/s per direction): vendors' figures, converted to one direction in GB (10^9 bytes)
    ("PCIe 4.0 x16", 32.0),
    ("HDR InfiniBand, 200 Gb/s", 25.0),
    ("NDR InfiniBand, 400 Gb/s", 50.0),
    ("NVLink 3 (A100), 600 GB/s both ways", 300.0),
    ("NVLink 4 (H100), 900 GB/s both ways", 450.0),
)


def link_table(alpha_s: float = 5e-6, p: int = 4, links=LINKS) -> Table:
    """β = 1 / bandwidth in picoseconds per byte for common links, and where recursive doubling
    and the ring cross on p ranks if α = ``alpha_s`` (8α/β for p = 4)."""
    rows = []
    for name, gbs in links:
        beta = 1 / (gbs * 1e9)
        x = alpha_beta.crossover_bytes("recursive_doubling_all_reduce", "ring_all_reduce", p, alpha_s, beta)
        rows.append((name, gbs, beta * 1e12, x / 1e6))
    return Table(["link", "GB/s one way", "β (ps/B)", f"crossover p={p} (MB)"], rows,
                 formats={"GB/s one way": ".0f", "β (ps/B)": ".1f", f"crossover p={p} (MB)": ".1f"})


# --------------------------------------------------------------------------- a rank that fails

FAILURES = ("hangs", "crashes")
ALL_REDUCES = {"ring": ring_all_reduce, "gloo": gloo_all_reduce}


def _note(path: str, line: str) -> None:
    """Append one line to the shared log (O_APPEND: whole lines, whichever rank writes)."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _failing_rank(rank, n, dead, failure, algorithm, log):
    """Two all-reduces of 4 KiB; between them rank ``dead`` hangs (stops answering, as a frozen or
    unreachable node does) or crashes (its process exits). Ranks log "done k" per all-reduce."""
    import os
    import time

    x = torch.ones(1024)
    for k in range(2):
        if k == 1 and rank == dead:
            _note(log, f"{rank} failed")
            if failure == "hangs":
                time.sleep(3600)          # stopped by launch at its timeout
            os._exit(1)
        ALL_REDUCES[algorithm](x)
        _note(log, f"{rank} done {k}")
    return float(x[0])


@dataclass(frozen=True)
class FailureRun:
    """One launch of `_failing_rank`: the ranks that finished all-reduce 0 and all-reduce 1, how the
    launch ended (the exception's name and first line) and its wall time in seconds."""

    failure: str
    algorithm: str
    done: tuple
    ended: str
    message: str
    seconds: float


def failure_run(failure: str, algorithm: str = "ring", n: int = 4, dead: int = 2,
                timeout: float = 3.0) -> FailureRun:
    """Launch `_failing_rank` on ``n`` gloo ranks with ``timeout`` seconds and read the log back."""
    import os
    import tempfile

    from labkit.dist import RankError, launch

    if failure not in FAILURES or algorithm not in ALL_REDUCES:
        raise ValueError(f"failure_run: failure in {FAILURES}, algorithm in {tuple(ALL_REDUCES)}; "
                         f"got {failure!r}, {algorithm!r}")
    with tempfile.TemporaryDirectory(prefix="labkit-failure-") as tmp:
        log = os.path.join(tmp, "log")
        t0 = now()
        try:
            launch(_failing_rank, n, dead, failure, algorithm, log, backend="gloo", timeout=timeout, quiet=True)
            ended, message = "returned", ""
        except (TimeoutError, RankError) as e:
            ended, message = type(e).__name__, str(e).splitlines()[0]
        seconds = now() - t0
        lines = open(log).read().split("\n") if os.path.exists(log) else []
    done = tuple(tuple(sorted(int(w[0]) for w in (ln.split() for ln in lines) if w[1:] == ["done", str(k)]))
                 for k in range(2))
    return FailureRun(failure, algorithm, done, ended, message, seconds)


def failure_table(n: int = 4, dead: int = 2, timeout: float = 3.0, runs=(("hangs", "ring"), ("hangs", "gloo"),
                                                                         ("crashes", "ring"))):
    """(Table, [FailureRun]): per (failure, all-reduce) the ranks that finished all-reduce 0 and 1,
    how the launch ended and when."""
    results = [failure_run(f, a, n, dead, timeout) for f, a in runs]
    rows = [(f"rank {dead} {r.failure}", r.algorithm, ",".join(map(str, r.done[0])) or "-",
             ",".join(map(str, r.done[1])) or "none", r.ended, r.seconds) for r in results]
    return Table(["between the all-reduces", "all-reduce", "1st done by", "2nd done by", "launch ended",
                  "after s"], rows, {"after s": ".1f"},
                 f"{n} gloo ranks, launch timeout {timeout:g} s"), results


# --------------------------------------------------------------------------- GPU: gloo next to NCCL

def builtin_on_ranks(rank, n, sizes, repeat):
    """Time dist.all_reduce (float32, sum) per size on this group's device: cuda:<rank> under NCCL,
    CPU under gloo. Minimum of ``repeat`` calls of the slowest rank, seconds."""
    from labkit.dist import device

    dev = device()
    out = {}
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, device=dev)
        dist.all_reduce(x)  # warm-up (NCCL builds its communicator here)
        best = math.inf
        for _ in range(repeat):
            dist.barrier()
            t0 = now()                                   # the course's clock: waits for queued GPU work
            dist.all_reduce(x)
            dt = torch.tensor([now() - t0], dtype=torch.float64, device=dev)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            best = min(best, float(dt))
        out[nbytes] = best
    return out


def builtin_times(n: int, sizes=(4 << 10, 1 << 20, 64 << 20), backend: str = "gloo", repeat: int = 10) -> dict:
    """{bytes: seconds} of torch's own all-reduce on n ranks over ``backend`` ("gloo": CPU tensors,
    "nccl": one CUDA tensor per GPU)."""
    from labkit.dist import launch

    return launch(builtin_on_ranks, n, tuple(sizes), repeat, backend=backend, timeout=300)[0]


def gloo_vs_nccl(n: int, sizes=(4 << 10, 1 << 20, 64 << 20), repeat: int = 10) -> Table:
    """dist.all_reduce on n ranks: gloo on CPU tensors next to NCCL on CUDA tensors (needs n GPUs).
    busbw = S/t · 2(n-1)/n, the nccl-tests definition (the bytes a ring moves per rank, per second)."""
    gloo = builtin_times(n, sizes, "gloo", repeat)
    nccl = builtin_times(n, sizes, "nccl", repeat)
    bus = lambda s, t: s / t * 2 * (n - 1) / n / 1e9  # noqa: E731
    rows = [(s, gloo[s] * 1e6, nccl[s] * 1e6, bus(s, gloo[s]), bus(s, nccl[s])) for s in sizes]
    return Table(["bytes", "gloo us", "NCCL us", "gloo busbw GB/s", "NCCL busbw GB/s"], rows,
                 formats={"gloo us": ".1f", "NCCL us": ".1f", "gloo busbw GB/s": ".2f", "NCCL busbw GB/s": ".1f"},
                 title=f"dist.all_reduce, float32, {n} ranks")


# --------------------------------------------------------------------------- your function, through the lab's pictures

# exercise -> (the simulator's algorithm, N, L, root) used for its picture
YOUR_SETUP = {
    "ring_reduce_scatter_chunks": ("ring_reduce_scatter", 4, 10, 0),
    "ring_all_gather_chunks": ("ring_all_gather", 4, 10, 0),
    "ring_all_reduce": ("ring_all_reduce", 4, 10, 0),
    "tree_broadcast": ("tree_broadcast", 6, 10, 2),
    "recursive_doubling_all_reduce": ("recursive_doubling_all_reduce", 6, 10, 0),
}


def _your_rank(rank, n, fn, exercise, length, root):
    """Rank r's buffer holds 2^r in every element (so any sum decodes into the ranks in it); run the
    learner's ``fn`` on it and return the buffer, the CommStats fields and the recorded sends."""
    algorithm = YOUR_SETUP[exercise][0]
    bounds = chunk_bounds(length, n) if algorithm.startswith("ring") else [0, length]
    x = torch.full((length,), 2.0 ** rank, dtype=torch.float64)
    if exercise == "ring_all_gather_chunks":   # only chunk r of rank r is meaningful before
        keep = x[bounds[rank]:bounds[rank + 1]].clone()
        x.zero_()
        x[bounds[rank]:bounds[rank + 1]] = keep
    base = x.data_ptr()
    with recording() as events:
        if exercise in ("ring_reduce_scatter_chunks", "ring_all_gather_chunks"):
            stats = fn(x, list(bounds))
        elif exercise == "tree_broadcast":
            stats = fn(x, root)
        else:
            stats = fn(x)
    fields = {k: getattr(stats, k, None) for k in ("bytes_sent", "bytes_received", "messages", "steps")}
    sends = []
    for e in events:
        if e.op == "send":
            off = (e.data_ptr - base) // 8
            sends.append((e.step, e.peer, bounds.index(off) if off in bounds[:-1] else None, e.numel))
    return x.numpy(), {k: v if isinstance(v, int) else None for k, v in fields.items()}, sends


def decode(buf: np.ndarray, bounds, n: int) -> list:
    """Per chunk: the frozenset of ranks whose 2^rank is summed in (every element must agree),
    or None when the chunk holds something no sum of distinct ranks gives."""
    out = []
    for a, b in zip(bounds, bounds[1:]):
        vals = set(buf[a:b].tolist())
        v = vals.pop() if len(vals) == 1 else None
        if v is None or not (0 <= v < 2 ** n) or v != int(v):
            out.append(None)
        else:
            out.append(frozenset(q for q in range(n) if int(v) >> q & 1))
    return out


@dataclass
class YourRun:
    """A learner's collective on real ranks, next to the simulator (see `run_yours`).

    buffers[r][c]: decoded contributions of rank r's chunk c (None: not a clean sum);
    expected[r][c]: the simulator's; matters[r][c]: whether that cell is specified (a
    reduce-scatter leaves partial sums in other chunks); stats[r]: the CommStats fields the
    function returned; want_bytes[r]: (sent, received) from the formulas; trace: the ring
    animation rebuilt from the sends recorded through ``exchange`` (None if not a ring or not
    recorded); trace_error: why there is no such animation, if there is none for a ring.
    """

    exercise: str
    algorithm: str
    world_size: int
    n_elements: int
    root: int
    bounds: list
    buffers: list
    expected: tuple
    matters: list
    stats: list
    want_bytes: list
    trace: object = None
    trace_error: str = ""

    @property
    def results_ok(self) -> bool:
        return all(self.buffers[r][c] == self.expected[r][c]
                   for r in range(self.world_size) for c in range(len(self.bounds) - 1) if self.matters[r][c])

    @property
    def bytes_ok(self) -> bool:
        return all(s.get("bytes_sent") == w[0] and s.get("bytes_received") == w[1]
                   for s, w in zip(self.stats, self.want_bytes))

    def bytes_table(self) -> Table:
        rows = [(r, s.get("bytes_sent"), w[0], s.get("bytes_received"), w[1], s.get("steps"))
                for r, (s, w) in enumerate(zip(self.stats, self.want_bytes))]
        return Table(["rank", "your bytes sent", "formula", "your bytes received", "formula", "your steps"], rows)


def run_yours(fn, exercise: str, timeout: float = 30.0) -> YourRun:
    """Run a learner's ``fn`` (one of exercises/lab05_collectives.py's functions) on real gloo ranks.

    Raises NotImplementedError while it is a stub (so `check_your_work` prints its friendly line).
    """
    from labkit.dist import RankError, launch

    algorithm, n, length, root = YOUR_SETUP[exercise]
    try:
        real = launch(_your_rank, n, fn, exercise, length, root, backend="gloo", timeout=timeout)
    except RankError as e:
        if e.exc_type == "NotImplementedError":
            raise NotImplementedError(exercise) from None
        raise
    expected = trace_collective(algorithm, n, length, root)
    bounds = expected.bounds
    matters = [[algorithm != "ring_reduce_scatter" or c == r for c in range(len(bounds) - 1)] for r in range(n)]
    item = 8
    want = [formulas.BYTES[algorithm](r, n, length, item, root) if algorithm == "tree_broadcast"
            else formulas.BYTES[algorithm](r, n, length, item) for r in range(n)]
    run = YourRun(exercise, algorithm, n, length, root, bounds, [decode(b, bounds, n) for b, _, _ in real],
                  expected.final, matters, [s for _, s, _ in real], want)
    if algorithm.startswith("ring") and not all(sends for _, _, sends in real):
        run.trace_error = "no sends recorded (only exchange is recorded), so no animation"
    elif algorithm.startswith("ring"):
        rounds = {}
        for r, (_, _, sends) in enumerate(real):
            for step, peer, chunk, _ in sends:
                rounds.setdefault(step, []).append((r, peer, chunk))
        phases = [s.phase for s in expected.steps]
        try:
            if any(c is None for moves in rounds.values() for _, _, c in moves):
                raise ValueError("a send was not a whole chunk of the buffer")
            steps = [rounds[k] for k in sorted(rounds)]
            if len(steps) != len(phases):
                raise ValueError(f"{len(steps)} rounds of sends, the ring takes {len(phases)}")
            run.trace = trace_from_rounds(algorithm, n, length, [
                (ph, [(s, d, c, "add" if ph == "reduce-scatter" else "copy") for s, d, c in moves])
                for ph, moves in zip(phases, steps)], root)
        except ValueError as e:
            run.trace_error = str(e)
    return run


def picture(exercise: str):
    """``picture(fn)`` for `check_your_work`: run the learner's ``fn`` on real ranks and show it the way
    the lab showed labkit's: the ring animation of its recorded sends (ring exercises), its final
    buffers next to the simulator's, and its bytes next to the formulas."""
    def draw(fn):
        from IPython.display import HTML, display

        from labkit.viz import collectives as V

        run = run_yours(fn, exercise)
        if run.trace is not None:
            from labkit.viz.player import player

            display(player(lambda i: V.ring_frame(run.trace, i), run.trace.n_steps + 1, interval_ms=900))
        elif run.trace_error:
            print(f"your sends, replayed as a ring: {run.trace_error}"[:WIDTH])
        display(HTML(V.result_frame(run)))
        print(f"{exercise}, N={run.world_size}, L={run.n_elements}: results as simulated {run.results_ok}, "
              f"bytes as formulas {run.bytes_ok}")
        print(run.bytes_table())
        return run
    return draw
