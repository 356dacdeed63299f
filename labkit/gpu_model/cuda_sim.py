"""A CUDA simulator that executes every thread of a launch, deterministically, on a CPU.

Kernels are written in numba's CUDA dialect (`numba.cuda`), so the same Python function is run
here, under numba's own simulator (``NUMBA_ENABLE_CUDASIM=1``) and compiled by ``numba.cuda.jit`` on
a GPU (`labkit.gpu_model.cuda_gpu`)::

    from labkit.gpu_model.cuda_sim import cuda, launch

    def vector_add(a, b, out, n):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < n:
            out[i] = a[i] + b[i]

    run = launch(vector_add, grid=4, block=32, args=(a, b, out, n))   # writes into out

What is supported: ``cuda.threadIdx``, ``cuda.blockIdx``, ``cuda.blockDim``, ``cuda.gridDim``
(``.x .y .z``), ``cuda.grid(ndim)``, ``cuda.gridsize(ndim)``, ``cuda.shared.array(shape, dtype)``,
``cuda.syncthreads()`` and ``cuda.atomic.add / max / min(array, index, value)``. Arrays passed as
arguments are numpy arrays (global memory, written in place); integers and floats are passed by
value. A kernel that says ``from numba import cuda`` runs here too: `launch` gives the kernel its
own ``cuda`` while it runs.

How it runs. Blocks run one after another in order of their linear id. Inside a block each thread
is a greenlet (a coroutine): thread 0 runs until it reaches ``cuda.syncthreads()`` or returns,
then thread 1, and so on, in order of the linear thread id x + y·Dx + z·Dx·Dy (warps are 32
consecutive ids). When every thread of the block waits at the barrier, all are released and the
next *phase* begins. The order is fixed, so a run is deterministic; and every access to global
and shared memory is checked, so a bug that a GPU would hide most of the time is an error here,
in one line, naming the threads:

- **RaceError**: two threads touch one element, at least one of them writing, with no barrier
  between them (same block and same phase, or different blocks, which never synchronise).
  Atomic updates of one element by many threads are not a race; mixing them with plain
  accesses is. This is what ``compute-sanitizer --tool racecheck`` reports on a GPU.
- **BarrierDivergence**: some threads of a block wait at a ``syncthreads()`` that others never
  reach (they returned, or wait at a different ``syncthreads()`` line). CUDA allows a barrier in
  conditional code only if the condition is the same for the whole block.
- **OutOfBounds**: an index outside an array's shape (negative ones included: CUDA has no
  wrap-around), i.e. an illegal address on a GPU.

`launch` returns a `LaunchRun`: loads and stores counted per memory space and per array,
atomics, barrier phases, and (``trace_block``) the order in which the threads of one block ran,
with a snapshot of its shared memory after every step, for the animation.
"""
from __future__ import annotations

import inspect
import linecache
import operator
import re
import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from labkit.checks import check_int

__all__ = ["cuda", "launch", "LaunchRun", "Dim3", "KernelError", "RaceError", "BarrierDivergence", "OutOfBounds",
           "TraceStep", "with_cuda", "MAX_THREADS_PER_BLOCK", "MAX_THREADS"]

MAX_THREADS_PER_BLOCK = 1024          # CUDA's limit on threads per block
MAX_THREADS = 1 << 20                 # simulated threads in one launch (a Python greenlet each)
WARP = 32


class Dim3(NamedTuple):
    """CUDA's dim3: ``.x``, ``.y``, ``.z``."""
    x: int
    y: int = 1
    z: int = 1


class KernelError(RuntimeError):
    """A simulated kernel did something a GPU would not allow (the message names where)."""


class RaceError(KernelError):
    """Two threads access one element without a barrier between them, at least one writing."""


class BarrierDivergence(KernelError):
    """Not every thread of a block reached the same ``syncthreads()``."""


class OutOfBounds(KernelError):
    """An index outside the array (an illegal address on a GPU)."""


@dataclass(frozen=True)
class TraceStep:
    """One step of a traced block: thread ``thread`` (linear id) ran until ``status``
    ("barrier" or "done") having reached phase ``phase``; ``shared`` maps each shared array's
    name to a copy of its contents after the step."""
    thread: int
    phase: int
    status: str
    shared: dict


@dataclass
class LaunchRun:
    """What one launch did. Counts are element accesses (not bytes), summed over all threads.

    global_loads / global_stores, shared_loads / shared_stores, atomics: totals;
    by_array: {(space, name): Counter(loads=, stores=, atomics=)};
    phases: barrier phases each block went through (1 + the number of syncthreads() it passed);
    shared_bytes: static shared memory per block (bytes); trace: `TraceStep`s of ``trace_block``.
    """
    grid: Dim3
    block: Dim3
    global_loads: int = 0
    global_stores: int = 0
    shared_loads: int = 0
    shared_stores: int = 0
    atomics: int = 0
    by_array: dict = field(default_factory=dict)
    phases: int = 0
    shared_bytes: int = 0
    trace: list = field(default_factory=list)

    @property
    def threads(self) -> int:
        return _volume(self.grid) * _volume(self.block)


def _volume(d: Dim3) -> int:
    return d.x * d.y * d.z


def _dim3(fn: str, name: str, value, minimum: int = 1) -> Dim3:
    if isinstance(value, Dim3):
        value = tuple(value)
    if not isinstance(value, tuple):
        value = (value,)
    if not 1 <= len(value) <= 3:
        raise ValueError(f"{fn}: {name} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    vals = [check_int(fn, f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(value)]
    return Dim3(*(vals + [minimum] * (3 - len(vals))))    # a block index pads with 0, a size with 1


# ---------------------------------------------------------------------------- the running thread
class _Thread:
    """One simulated thread: its coordinates and where it is."""
    __slots__ = ("tid", "linear", "block", "block_linear", "phase", "decls", "glet", "status", "site")

    def __init__(self, tid: Dim3, linear: int, block: Dim3, block_linear: int):
        self.tid, self.linear, self.block, self.block_linear = tid, linear, block, block_linear
        self.phase, self.decls, self.glet, self.status, self.site = 0, 0, None, "ready", None

    def where(self) -> str:
        return f"thread {tuple(self.tid)} of block {tuple(self.block)}"


class _State:
    """The launch being simulated (one at a time: launches do not nest)."""

    def __init__(self, grid: Dim3, block: Dim3, run: LaunchRun, kernel_code):
        self.grid, self.blockdim, self.run, self.code = grid, block, run, kernel_code
        self.thread: _Thread | None = None
        self.shared: list = []            # this block's shared arrays, in declaration order
        self.scheduler = None


_STATE: _State | None = None


def _current() -> _Thread:
    if _STATE is None or _STATE.thread is None:
        raise KernelError("cuda.threadIdx, syncthreads() and the rest exist only inside a kernel run by "
                          "labkit.gpu_model.cuda_sim.launch")
    return _STATE.thread


# ---------------------------------------------------------------------------- memory
class _Access:
    """Who touched one element last: per thread, its (block, phase) of the latest read; the
    latest write (thread key, block, phase, atomic?)."""
    __slots__ = ("write", "reads")

    def __init__(self):
        self.write = None
        self.reads = {}


def _ordered(block: int, phase: int, now_block: int, now_phase: int) -> bool:
    """An earlier access is ordered before now only inside one block, across a barrier."""
    return block == now_block and phase < now_phase


class TrackedArray:
    """A numpy array as a kernel sees it: every element access is counted and checked."""

    def __init__(self, data: np.ndarray, name: str, space: str):
        self.data, self.name, self.space = data, name, space
        self.shape, self.size, self.dtype, self.ndim = data.shape, data.size, data.dtype, data.ndim
        self._acc: dict[int, _Access] = {}
        self.counts = Counter(loads=0, stores=0, atomics=0)

    def __len__(self):
        return self.shape[0]

    def _flat(self, index) -> int:
        idx = index if isinstance(index, tuple) else (index,)
        t = _current()
        try:
            idx = tuple(operator.index(i) for i in idx)
        except TypeError:
            raise KernelError(f"{self.space} array {self.name} indexed with {index!r} by {t.where()}: "
                              f"index with integers, one per dimension (no slices)") from None
        if len(idx) != self.ndim:
            raise KernelError(f"{self.space} array {self.name} of shape {self.shape} indexed with {len(idx)} "
                              f"index(es) {idx} by {t.where()}")
        if any(not 0 <= i < n for i, n in zip(idx, self.shape)):
            raise OutOfBounds(f"out of bounds: {self.space} array {self.name}{list(idx)} (shape {self.shape}) "
                              f"by {t.where()}")
        flat = 0
        for i, n in zip(idx, self.shape):
            flat = flat * n + i
        return flat

    def _who(self, key) -> str:
        tid, block = key
        return f"thread {tid} of block {block}"

    def _check(self, flat: int, kind: str, atomic: bool = False) -> None:
        t = _current()
        key = (tuple(t.tid), tuple(t.block))
        acc = self._acc.get(flat)
        if acc is None:
            acc = self._acc[flat] = _Access()
        here = lambda: f"{self.space} array {self.name}{[int(i) for i in np.unravel_index(flat, self.shape)]}"  # noqa: E731
        w = acc.write
        if w is not None and w[0] != key and not _ordered(w[1], w[2], t.block_linear, t.phase) \
                and not (atomic and w[3]):
            raise RaceError(f"race on {here()}: {self._who(w[0])} wrote it and {self._who(key)} "
                            f"{'reads' if kind == 'load' else 'writes'} it with no syncthreads() between")
        if kind != "load":
            for other, (block, phase, was_atomic) in acc.reads.items():
                if other != key and not _ordered(block, phase, t.block_linear, t.phase) and not (atomic and was_atomic):
                    raise RaceError(f"race on {here()}: {self._who(other)} read it and {self._who(key)} "
                                    f"writes it with no syncthreads() between")
            acc.write = (key, t.block_linear, t.phase, atomic)
        if kind == "load" or atomic:
            acc.reads[key] = (t.block_linear, t.phase, atomic)

    def __getitem__(self, index):
        flat = self._flat(index)
        self._check(flat, "load")
        self.counts["loads"] += 1
        return self.data.flat[flat]

    def __setitem__(self, index, value):
        flat = self._flat(index)
        self._check(flat, "store")
        self.counts["stores"] += 1
        self.data.flat[flat] = value

    def _atomic(self, index, fn):
        flat = self._flat(index)
        self._check(flat, "atomic", atomic=True)
        self.counts["atomics"] += 1
        old = self.data.flat[flat]
        self.data.flat[flat] = fn(old)
        return old

    def __repr__(self):
        return f"<{self.space} array {self.name} {self.shape} {self.dtype}>"


_DECL = re.compile(r"(\w+)\s*=\s*\w+\.shared\.array")


class _Shared:
    @staticmethod
    def array(shape, dtype):
        """The block's shared array declared at this point of the kernel (the n-th declaration a
        thread makes is the block's n-th array; every thread gets the same one)."""
        t = _current()
        frame = inspect.currentframe().f_back
        n = t.decls
        t.decls += 1
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        shape = tuple(check_int("cuda.shared.array", "shape", s, minimum=1) for s in shape)
        dtype = np.dtype(dtype)
        shared = _STATE.shared
        if n < len(shared):
            arr = shared[n]
            if arr.shape != shape or arr.dtype != dtype:
                raise KernelError(f"{t.where()} declares shared array #{n} as {shape} {dtype}, other threads as "
                                  f"{arr.shape} {arr.dtype}")
            return arr
        m = _DECL.search(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
        name = m.group(1) if m else f"shared{n}"
        # uninitialised on a GPU: start from NaN (floats) so that reading before writing shows
        fill = np.nan if np.issubdtype(dtype, np.floating) else 0
        arr = TrackedArray(np.full(shape, fill, dtype), name, "shared")
        shared.append(arr)
        return arr


class _Atomic:
    @staticmethod
    def add(array, index, value):
        """``array[index] += value`` as one indivisible step; returns the old value."""
        return _as_tracked(array, "atomic.add")._atomic(index, lambda old: old + value)

    @staticmethod
    def max(array, index, value):
        return _as_tracked(array, "atomic.max")._atomic(index, lambda old: max(old, value))

    @staticmethod
    def min(array, index, value):
        return _as_tracked(array, "atomic.min")._atomic(index, lambda old: min(old, value))


def _as_tracked(array, fn: str) -> TrackedArray:
    if not isinstance(array, TrackedArray):
        raise KernelError(f"cuda.{fn}: the first argument must be a kernel argument array or a shared array, "
                          f"got {type(array).__name__}")
    return array


class _Cuda:
    """The ``cuda`` a kernel sees while `launch` runs it (the subset of numba.cuda listed above)."""
    shared = _Shared()
    atomic = _Atomic()

    @property
    def threadIdx(self) -> Dim3:   # noqa: N802 - CUDA's names
        return _current().tid

    @property
    def blockIdx(self) -> Dim3:    # noqa: N802
        return _current().block

    @property
    def blockDim(self) -> Dim3:    # noqa: N802
        _current()
        return _STATE.blockdim

    @property
    def gridDim(self) -> Dim3:     # noqa: N802
        _current()
        return _STATE.grid

    def grid(self, ndim: int):
        """The thread's absolute position: blockIdx·blockDim + threadIdx (an int for ndim = 1)."""
        t, b = _current(), _STATE.blockdim
        pos = tuple(t.block[k] * b[k] + t.tid[k] for k in range(ndim))
        return pos[0] if ndim == 1 else pos

    def gridsize(self, ndim: int):
        """Threads in the grid along each of the first ``ndim`` dimensions."""
        _current()
        g, b = _STATE.grid, _STATE.blockdim
        size = tuple(g[k] * b[k] for k in range(ndim))
        return size[0] if ndim == 1 else size

    def syncthreads(self) -> None:
        """Wait until every thread of the block has reached this barrier."""
        t = _current()
        frame = inspect.currentframe().f_back
        t.site = (frame.f_code.co_filename, frame.f_lineno)
        t.status = "barrier"
        _STATE.scheduler.switch()


cuda = _Cuda()


def with_cuda(kernel: Callable, module) -> Callable:
    """A copy of ``kernel`` whose global name ``cuda`` is ``module`` (this simulator's `cuda`, numba's
    simulator or numba.cuda itself): the same source, run by another implementation."""
    if not isinstance(kernel, types.FunctionType):
        raise TypeError(f"with_cuda: kernel must be a plain Python function, got {type(kernel).__name__}")
    g = dict(kernel.__globals__)
    g["cuda"] = module
    f = types.FunctionType(kernel.__code__, g, kernel.__name__, kernel.__defaults__, kernel.__closure__)
    f.__kwdefaults__, f.__doc__, f.__module__ = kernel.__kwdefaults__, kernel.__doc__, kernel.__module__
    return f


# ---------------------------------------------------------------------------- launching
def _coords(d: Dim3):
    for z in range(d.z):
        for y in range(d.y):
            for x in range(d.x):
                yield Dim3(x, y, z)


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0..2, 5' (linear thread ids)."""
    out, start = [], None
    for k, i in enumerate(ids):
        if start is None:
            start = i
        if k + 1 == len(ids) or ids[k + 1] != i + 1:
            out.append(f"{start}..{i}" if i > start else f"{i}")
            start = None
    return ", ".join(out)


def launch(kernel: Callable, grid, block, args: tuple = (), *, trace_block=None) -> LaunchRun:
    """Run ``kernel[grid, block](*args)`` thread by thread; numpy arrays in ``args`` are written in place.

    grid, block: an int or a tuple of up to 3 ints (CUDA's dim3; at most 1024 threads per block).
    trace_block: a block index (int or tuple) whose threads' order and shared memory are recorded
    in ``run.trace`` (`TraceStep` per step). Raises RaceError, BarrierDivergence, OutOfBounds or
    KernelError (one line) on a bug; an exception inside the kernel is re-raised with the thread named.
    """
    global _STATE
    from greenlet import greenlet

    fn = "launch"
    if not isinstance(kernel, types.FunctionType):
        raise TypeError(f"{fn}: kernel must be a Python function written with cuda.threadIdx etc., "
                        f"got {type(kernel).__name__}")
    grid, blockdim = _dim3(fn, "grid", grid), _dim3(fn, "block", block)
    if _volume(blockdim) > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"{fn}: a block has at most {MAX_THREADS_PER_BLOCK} threads, got {tuple(blockdim)} = "
                         f"{_volume(blockdim)}")
    if _volume(grid) * _volume(blockdim) > MAX_THREADS:
        raise ValueError(f"{fn}: {_volume(grid) * _volume(blockdim)} threads is more than the {MAX_THREADS} "
                         f"this simulator runs; use a smaller problem")
    if not isinstance(args, tuple):
        raise TypeError(f"{fn}: args must be a tuple, got {type(args).__name__}")
    if _STATE is not None:
        raise KernelError(f"{fn}: a kernel cannot launch another kernel here (no dynamic parallelism)")
    traced = None if trace_block is None else _dim3(fn, "trace_block", trace_block, minimum=0)
    if traced is not None and any(traced[k] >= grid[k] for k in range(3)):
        raise ValueError(f"{fn}: trace_block {tuple(traced)} is not a block of grid {tuple(grid)}")
    try:
        names = list(inspect.signature(kernel).parameters)
    except (TypeError, ValueError):
        names = []
    if len(names) != len(args):
        raise TypeError(f"{fn}: {kernel.__name__} takes {len(names)} arguments, {len(args)} were given")
    wrapped = []
    for name, a in zip(names, args):
        if isinstance(a, np.ndarray):
            wrapped.append(TrackedArray(a, name, "global"))
        elif isinstance(a, (bool, int, float, np.integer, np.floating)):
            wrapped.append(a)
        else:
            raise TypeError(f"{fn}: argument {name} must be a numpy array or a number, got {type(a).__name__}")
    run = LaunchRun(grid, blockdim)
    body = with_cuda(kernel, cuda)
    state = _State(grid, blockdim, run, kernel.__code__)
    _STATE = state
    try:
        for b_lin, bidx in enumerate(_coords(grid)):
            state.shared = []
            _run_block(state, body, wrapped, bidx, b_lin, greenlet, trace=bidx == traced)
            if b_lin == 0:
                run.shared_bytes = sum(a.data.nbytes for a in state.shared)
    finally:
        _STATE = None
    for a in wrapped:
        if isinstance(a, TrackedArray):
            run.by_array[("global", a.name)] = a.counts
            run.global_loads += a.counts["loads"]
            run.global_stores += a.counts["stores"]
            run.atomics += a.counts["atomics"]
    return run


def _run_block(state: _State, body, args, bidx: Dim3, b_lin: int, greenlet, trace: bool) -> None:
    run = state.run
    threads = [_Thread(tid, k, bidx, b_lin) for k, tid in enumerate(_coords(state.blockdim))]
    state.scheduler = greenlet.getcurrent()

    def start(t: _Thread):
        def go():
            try:
                body(*args)
            except (KernelError, NotImplementedError):
                raise
            except Exception as e:  # noqa: BLE001 - name the thread, keep the message to one line
                raise KernelError(f"{t.where()}: {type(e).__name__}: {e}") from e
            t.status = "done"
        return go

    for t in threads:
        t.glet = greenlet(start(t))
    phase = 0
    while True:
        for t in threads:
            if t.status == "done":
                continue
            t.status = "running"
            state.thread = t
            t.glet.switch()
            state.thread = None
            if trace:
                run.trace.append(TraceStep(t.linear, t.phase, t.status,
                                           {a.name: a.data.copy() for a in state.shared}))
        waiting = [t for t in threads if t.status == "barrier"]
        if not waiting:
            break
        done = [t for t in threads if t.status == "done"]
        sites = Counter(t.site for t in waiting)
        where = lambda site: f"{site[0].rsplit('/', 1)[-1]}:{site[1]}"  # noqa: E731
        if done:
            site = waiting[0].site
            raise BarrierDivergence(
                f"barrier divergence in block {tuple(bidx)}: threads {_ranges([t.linear for t in waiting])} wait at "
                f"syncthreads() ({where(site)}) that threads {_ranges([t.linear for t in done])} never reach "
                f"(they returned)")
        if len(sites) > 1:
            (s1, _), (s2, _) = sites.most_common(2)
            raise BarrierDivergence(
                f"barrier divergence in block {tuple(bidx)}: threads {_ranges([t.linear for t in waiting if t.site == s1])} "
                f"wait at syncthreads() ({where(s1)}), threads "
                f"{_ranges([t.linear for t in waiting if t.site == s2])} at another one ({where(s2)})")
        phase += 1
        for t in waiting:
            t.phase, t.status = phase, "ready"
    run.phases = max(run.phases, phase + 1)
    for a in state.shared:
        key = ("shared", a.name)
        c = run.by_array.setdefault(key, Counter(loads=0, stores=0, atomics=0))
        c.update(a.counts)
        run.shared_loads += a.counts["loads"]
        run.shared_stores += a.counts["stores"]
        run.atomics += a.counts["atomics"]
