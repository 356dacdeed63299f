"""Record which elements each Triton program instance loads and stores (interpreter only).

Under ``TRITON_INTERPRET=1`` every ``tl.load``/``tl.store`` reaches the
interpreter's builder as a numpy array of raw addresses plus a boolean mask.
Inside ``with record() as rec:`` we wrap the builder's
``create_masked_load``/``create_masked_store`` and, for every call, map each
lane's address back to (kernel argument, element offset) using the
argument tensors' ``data_ptr`` ranges, tagged with the current program id.

Each lane is classified as
- *active*: mask true and inside the tensor: a real access (``offsets``);
- *masked*: mask false: no memory is touched (``masked_offsets``, which may
  well lie past the end: that is exactly what the mask is for);
- *out of bounds*: mask true but outside the tensor the pointer came from (``oob_offsets``,
  relative to the tensor the pointer was computed from). On a GPU that is a
  garbage read or a corrupting write; here the recorder drops those lanes
  (a load yields ``other``/0, a store is skipped) so the host stays intact,
  or raises at once when ``on_oob="raise"``.

Offsets are element offsets from the tensor's ``data_ptr`` (for a contiguous
tensor, the flat index). Only kernel launches made inside the block are seen.

On a GPU box (kernels compiled, no ``TRITON_INTERPRET``) ``record()`` still works:
inside the block every ``@triton.jit`` kernel runs through Triton's interpreter
instead of being compiled, and the wrappers expect CPU tensors, as on a CPU
machine. Keep such inputs small; outside the block the kernels compile as usual,
which is what timing cells need.

Attribution: pointer arguments are tagged when a launch starts, and the tag
is carried through the builder's ``create_*`` operations (splat, broadcast,
addptr, ...), so each load/store knows which argument its pointers came from;
every lane must stay inside that tensor (an overrun into a neighbouring
tensor's memory is out of bounds too). Untagged pointers (e.g. a ``tl.where``
between two arguments) fall back to the argument holding most active lanes.
Not recorded: block-pointer / tensor-descriptor loads and stores, and atomics
(no kernel in this lab uses them).

Triton versions: the interpreter's masked load/store signatures changed between releases (3.6
and 3.7 pass ``cache_modifier, eviction_policy``, 3.8 and later one ``cache_policy``); the hooks
bind the arguments by the installed interpreter's own signature, so 3.6 (a preinstalled GPU
stack), 3.7.1 (the pin) and 3.9 all record the same accesses.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
from typing import Iterator

import numpy as np
import triton.language as tl


@dataclasses.dataclass
class TensorInfo:
    """A tensor argument of one launch: ``name`` is the kernel parameter name."""
    name: str
    ptr: int            # data_ptr, bytes
    numel: int          # elements
    element_size: int   # bytes
    shape: tuple

    def contains(self, addr: np.ndarray) -> np.ndarray:
        return (addr >= self.ptr) & (addr < self.ptr + self.numel * self.element_size)


@dataclasses.dataclass
class Access:
    """One tl.load or tl.store executed by one program instance."""
    launch: int                 # index into AccessRecorder.launches
    pid: tuple                  # (x, y, z) program id
    kind: str                   # "load" or "store"
    tensor: str                 # kernel parameter name the pointer belongs to ("?" if none)
    offsets: np.ndarray         # element offsets of active, in-bounds lanes (flat, int64)
    masked_offsets: np.ndarray  # element offsets of lanes the mask switched off
    oob_offsets: np.ndarray     # element offsets of active lanes outside the tensor
    lanes: int                  # lanes in the block (mask size)


@dataclasses.dataclass
class Launch:
    kernel: str
    grid: tuple
    tensors: dict               # name -> TensorInfo


class OutOfBoundsError(IndexError):
    pass


class AccessRecorder:
    """Holds what ``record()`` saw: ``launches`` and ``accesses`` (see :class:`Access`)."""

    def __init__(self, on_oob: str = "record"):
        if on_oob not in ("record", "raise"):
            raise ValueError(f"record: on_oob must be 'record' or 'raise', got {on_oob!r}")
        self.on_oob = on_oob
        self.launches: list[Launch] = []
        self.accesses: list[Access] = []

    # ---- queries -------------------------------------------------------
    def select(self, kind: str | None = None, tensor: str | None = None, pid: tuple | int | None = None,
               launch: int | None = None) -> list[Access]:
        """Accesses matching every filter given; ``pid`` may be an int (axis 0 only)."""
        if isinstance(pid, int):
            pid = (pid, 0, 0)
        elif pid is not None:
            pid = tuple(pid) + (0,) * (3 - len(pid))
        return [a for a in self.accesses
                if (kind is None or a.kind == kind) and (tensor is None or a.tensor == tensor)
                and (pid is None or a.pid == pid) and (launch is None or a.launch == launch)]

    def elements(self, kind: str | None = None, tensor: str | None = None, pid=None, launch=None) -> np.ndarray:
        """Sorted unique element offsets actively accessed under the filters."""
        parts = [a.offsets for a in self.select(kind, tensor, pid, launch)]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def counts(self, tensor: str, kind: str | None = None, launch: int | None = None) -> np.ndarray:
        """How many times each element of ``tensor`` was accessed (length = its numel)."""
        info = self._info(tensor, launch)
        out = np.zeros(info.numel, dtype=np.int64)
        for a in self.select(kind, tensor, None, launch):
            np.add.at(out, a.offsets, 1)
        return out

    def owner(self, tensor: str, kind: str = "store", launch: int | None = None) -> np.ndarray:
        """For each element of ``tensor``: linear program id that last accessed it (-1: none).

        Linear id = x + gx * (y + gy * z) for launch grid (gx, gy, gz).
        """
        info = self._info(tensor, launch)
        out = np.full(info.numel, -1, dtype=np.int64)
        for a in self.select(kind, tensor, None, launch):
            gx, gy, _ = self.launches[a.launch].grid
            out[a.offsets] = a.pid[0] + gx * (a.pid[1] + gy * a.pid[2])
        return out

    @property
    def out_of_bounds(self) -> list[Access]:
        """Accesses with at least one active lane outside its tensor."""
        return [a for a in self.accesses if a.oob_offsets.size]

    def n_masked(self, kind: str | None = None, tensor: str | None = None) -> int:
        """Total masked-off lanes."""
        return int(sum(a.masked_offsets.size for a in self.select(kind, tensor)))

    def summary(self) -> str:
        """A few lines: launches, and per (launch, tensor, kind) active/masked/out-of-bounds lanes."""
        lines = []
        for i, ln in enumerate(self.launches):
            lines.append(f"launch {i}: {ln.kernel} grid={ln.grid}")
            for name in ln.tensors:
                for kind in ("load", "store"):
                    acc = self.select(kind, name, launch=i)
                    if acc:
                        act = sum(a.offsets.size for a in acc)
                        msk = sum(a.masked_offsets.size for a in acc)
                        oob = sum(a.oob_offsets.size for a in acc)
                        lines.append(f"  {kind:5s} {name:8s}: {len(acc)} calls, {act} active lanes, "
                                     f"{msk} masked, {oob} out of bounds")
        return "\n".join(lines)

    def _info(self, tensor: str, launch: int | None) -> TensorInfo:
        launches = self.launches if launch is None else [self.launches[launch]]
        for ln in reversed(launches):
            if tensor in ln.tensors:
                return ln.tensors[tensor]
        raise KeyError(f"no kernel argument named {tensor!r} was recorded")

    # ---- hooks ---------------------------------------------------------
    def _classify(self, kind: str, ptrs: np.ndarray, mask: np.ndarray, pid: tuple,
                  base: str | None = None) -> np.ndarray:
        """Record one call; return the mask with out-of-bounds lanes switched off.

        ``base``: the kernel argument the pointers were computed from, when known.
        """
        launch = len(self.launches) - 1
        tensors = list(self.launches[launch].tensors.values()) if launch >= 0 else []
        addr = np.asarray(ptrs, dtype=np.uint64).astype(np.int64).ravel()
        m = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(ptrs)).ravel()
        # The pointer's tensor: its known base argument; else the one holding most
        # *active* lanes; with none active, most lanes; else the nearest below.
        best, best_hits = None, 0
        if base is not None and launch >= 0 and base in self.launches[launch].tensors:
            best = self.launches[launch].tensors[base]
        for lanes in ((addr[m], addr) if best is None else ()):
            for t in tensors:
                hits = int(t.contains(lanes).sum())
                if hits > best_hits:
                    best, best_hits = t, hits
            if best is not None:
                break
        if best is None and tensors:
            below = [t for t in tensors if t.ptr <= addr.min()]
            best = max(below, key=lambda t: t.ptr) if below else tensors[0]
        if best is None:
            name, off, inside = "?", addr, np.zeros_like(m)
        else:  # lanes must stay inside *this* tensor: running into a neighbour is out of bounds too
            name = best.name
            off = (addr - best.ptr) // best.element_size
            inside = best.contains(addr)
        active = m & inside
        oob = m & ~inside
        self.accesses.append(Access(launch, pid, kind, name, off[active], off[~m], off[oob], int(m.size)))
        if oob.any() and self.on_oob == "raise":
            raise OutOfBoundsError(f"program {pid} would {kind} {name} at element offset(s) "
                                   f"{off[oob][:5].tolist()} outside the tensor")
        return active.reshape(np.shape(ptrs))


_ACTIVE: list[AccessRecorder] = []


@contextlib.contextmanager
def record(on_oob: str = "record") -> Iterator[AccessRecorder]:
    """Context manager: record every interpreted kernel launch inside it.

    ``on_oob="record"`` keeps going and drops out-of-bounds lanes (so learners'
    buggy kernels cannot corrupt memory); ``"raise"`` stops at the first one.
    Where kernels are compiled (a GPU box) they are interpreted inside the block,
    on CPU tensors (see the module docstring).
    """
    from labkit.kernels.checks import interpreting

    if _ACTIVE:
        raise RuntimeError("record(): already recording; nested recorders are not supported")
    with (contextlib.nullcontext() if interpreting() else _interpreted_kernels()):
        with _recording(on_oob) as rec:
            yield rec


@contextlib.contextmanager
def _interpreted_kernels() -> Iterator[None]:
    """Run every compiled ``@triton.jit`` function through Triton's interpreter inside the block.

    Launches (``kernel[grid](...)``) and calls of jit helpers from inside a kernel both go to an
    ``InterpretedFunction`` of the same Python function; ``TRITON_INTERPRET=1`` is set meanwhile
    so that the wrappers' device checks expect CPU tensors.
    """
    from triton.runtime import interpreter as I
    from triton.runtime.jit import JITFunction

    twins: dict[int, object] = {}

    def twin(jf):
        if id(jf) not in twins:
            twins[id(jf)] = I.InterpretedFunction(jf.fn)
        return twins[id(jf)]

    orig_run, orig_call = JITFunction.run, JITFunction.__call__
    old_env = os.environ.get("TRITON_INTERPRET")
    JITFunction.run = lambda self, *args, grid, warmup, **kw: twin(self).run(*args, grid=grid, warmup=warmup, **kw)
    JITFunction.__call__ = lambda self, *args, **kw: twin(self)(*args, **kw)
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        JITFunction.run, JITFunction.__call__ = orig_run, orig_call
        if old_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old_env


@contextlib.contextmanager
def _recording(on_oob: str) -> Iterator[AccessRecorder]:
    from triton.runtime import interpreter as I

    rec = AccessRecorder(on_oob)
    originals = _install_hooks(I, rec)
    _ACTIVE.append(rec)
    try:
        yield rec
    finally:
        _remove_hooks(I, originals)
        _ACTIVE.pop()


_TAG = "labkit_base"   # attribute of a pointer handle: the name of the kernel argument it points into


def _install_hooks(I, rec: AccessRecorder) -> dict:
    """Patch Triton's interpreter so every launch and masked load/store is reported to ``rec``;
    returns what `_remove_hooks` needs to undo it."""
    builder = I.interpreter_builder
    originals = {"init": I.GridExecutor._init_args_hst, "cvt": I._implicit_cvt}
    arg_names: dict[int, str] = {}   # id(host tensor) -> kernel parameter name, for the current launch
    I.GridExecutor._init_args_hst = _launch_hook(rec, originals["init"], arg_names)
    I._implicit_cvt = _tagging_cvt(originals["cvt"], arg_names)
    patched = _builder_patches(I, rec)
    for attr, fn in patched.items():
        setattr(builder, attr, fn)
    originals["patched"] = list(patched)
    return originals


def _remove_hooks(I, originals: dict) -> None:
    I.GridExecutor._init_args_hst = originals["init"]
    I._implicit_cvt = originals["cvt"]
    for attr in originals["patched"]:
        I.interpreter_builder.__dict__.pop(attr, None)


def _launch_hook(rec: AccessRecorder, orig_init, arg_names: dict[int, str]):
    """GridExecutor._init_args_hst that also starts a `Launch` with the kernel's tensor arguments."""
    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = orig_init(self, args_dev, kwargs)
        call = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
        tensors = {}
        arg_names.clear()
        for name, v in call.items():
            if hasattr(v, "data_ptr") and hasattr(v, "element_size"):
                tensors[name] = TensorInfo(name, int(v.data_ptr()), int(v.numel()), int(v.element_size()),
                                           tuple(v.shape))
                arg_names[id(v)] = name
        rec.launches.append(Launch(self.fn.__name__, (), tensors))
        return args_hst, kwargs_hst
    return init_args_hst


def _tagging_cvt(orig_cvt, arg_names: dict[int, str]):
    """_implicit_cvt that tags a tensor argument's pointer handle with the argument's name."""
    def implicit_cvt(arg):
        out = orig_cvt(arg)
        name = arg_names.get(id(arg))
        if name is not None and hasattr(out, "handle"):
            out.handle.attr[_TAG] = name
        return out
    return implicit_cvt


def _builder_patches(I, rec: AccessRecorder) -> dict:
    """The interpreter builder's methods to replace: set_grid_dim records the grid; masked loads and
    stores report each access (and, out of bounds, may mask it); every other create_* op passes a
    pointer's tag on to the pointer it computes."""
    builder = I.interpreter_builder
    orig_grid = builder.set_grid_dim

    def set_grid_dim(nx, ny, nz):
        if rec.launches:
            rec.launches[-1].grid = (nx, ny, nz)
        return orig_grid(nx, ny, nz)

    def propagate(method):
        def wrapped(*args, **kwargs):
            out = method(*args, **kwargs)
            if isinstance(out, I.TensorHandle) and isinstance(out.dtype, tl.pointer_type):
                tags = {a.attr[_TAG] for a in (*args, *kwargs.values())
                        if isinstance(a, I.TensorHandle) and _TAG in a.attr}
                if len(tags) == 1:
                    out.attr[_TAG] = tags.pop()
            return out
        return wrapped

    # Triton's interpreter changed these signatures between releases (3.6/3.7: cache_modifier,
    # eviction_policy; 3.8+: one cache_policy), so bind whatever is passed against the installed
    # builder's own signature and change only the mask.
    def masked(kind):
        sig = inspect.signature(getattr(I.InterpreterBuilder, f"create_masked_{kind}"))

        def call(*args, **kwargs):
            bound = sig.bind(builder, *args, **kwargs)
            ptrs, mask = bound.arguments["ptrs"], bound.arguments["mask"]
            keep = rec._classify(kind, ptrs.data, mask.data, tuple(builder.grid_idx), ptrs.attr.get(_TAG))
            bound.arguments["mask"] = I.TensorHandle(keep, mask.dtype)
            return getattr(I.InterpreterBuilder, f"create_masked_{kind}")(*bound.args, **bound.kwargs)
        return call

    patched = {"set_grid_dim": set_grid_dim, "create_masked_load": masked("load"),
               "create_masked_store": masked("store")}
    for attr in dir(I.InterpreterBuilder):
        if attr.startswith("create_") and attr not in patched and attr not in ("create_load", "create_store"):
            patched[attr] = propagate(getattr(builder, attr))
    return patched
