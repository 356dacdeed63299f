"""A memory tracker that sees every tensor storage a training step allocates and frees (CPU, exact).

    tracker = MemoryTracker(model, optimizer)
    with tracker:
        tracker.mark("forward");  loss = model(x, y)[1]
        tracker.mark("backward"); loss.backward()
        tracker.mark("step");     optimizer.step()
    tracker.peak_bytes, tracker.peak_by_category, tracker.timeline

Every op runs through a ``TorchDispatchMode``; each storage an op returns is counted once (bytes
of the storage, so views cost nothing) and a ``weakref.finalize`` on the storage object takes it
off when the last tensor using it dies — PyTorch keeps one Python object per storage, so the
finalizer fires exactly at the free. Storages that exist before the block (the model's
parameters and buffers, the optimizer's states, gradients) are counted at the start.

Categories, decided when the peak is reached: a storage is **parameters** if a model parameter or
buffer uses it, **gradients** if a parameter's ``.grad`` does, **optimizer** if an optimizer state
does, and **activations** otherwise (what autograd keeps for backward, plus temporaries). A model
or optimizer that holds tensors elsewhere (ZeRO's master shards and gradient shards) lists them
in a ``memory_categories()`` method returning {category: [tensors]}.
"""
from __future__ import annotations

import gc
import time
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

CATEGORIES = ("parameters", "gradients", "optimizer", "activations")


@dataclass(frozen=True)
class Sample:
    """One point of the timeline: after op number ``op`` of phase ``phase``, ``total`` bytes live;
    ``by_category`` splits them (only when the tracker was made with ``by_category=True``)."""

    op: int
    phase: str
    total: int
    by_category: dict | None = None


def _storage(t: torch.Tensor):
    """The storage that holds ``t``'s bytes; for a DTensor (PyTorch's FSDP2, tensor parallel) the
    storage of this rank's local shard, since the DTensor itself is only a wrapper."""
    local = getattr(t, "_local_tensor", None)
    return (local if isinstance(local, torch.Tensor) else t).untyped_storage()


class MemoryTracker(TorchDispatchMode):
    """See the module docstring. ``model``/``optimizer`` name what the categories refer to."""

    def __init__(self, model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
                 by_category: bool = False):
        super().__init__()
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"MemoryTracker: model must be a torch.nn.Module or None, got {type(model).__name__}")
        if optimizer is not None and not isinstance(getattr(optimizer, "state", None), dict):
            raise TypeError(f"MemoryTracker: optimizer must be a torch.optim.Optimizer or None, "
                            f"got {type(optimizer).__name__}")
        if not isinstance(by_category, bool):
            raise TypeError(f"MemoryTracker: by_category must be True or False, got {by_category!r}")
        self.model, self.optimizer, self.by_category = model, optimizer, by_category
        self._live: dict[int, int] = {}          # id(storage object) -> bytes
        self._refs: dict[int, weakref.ref] = {}
        self.current = self.peak_bytes = 0
        self.peak_by_category: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.peak_phase = ""
        self.phase, self.ops = "start", 0
        self.timeline: list[Sample] = []

    # ------------------------------------------------------------------ counting
    def _add(self, t: torch.Tensor) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        st = _storage(t)
        key = id(st)
        if key in self._live:
            return
        self._live[key] = st.nbytes()
        self._refs[key] = weakref.ref(st)
        self.current += st.nbytes()
        weakref.finalize(st, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)
        self._refs.pop(key, None)

    def _existing(self):
        if self.model is not None:
            for t in [*self.model.parameters(), *self.model.buffers()]:
                yield t
                if isinstance(t, torch.nn.Parameter) and t.grad is not None:
                    yield t.grad
        if self.optimizer is not None:
            for state in self.optimizer.state.values():
                yield from (v for v in state.values() if isinstance(v, torch.Tensor))
        for tensors in self._declared().values():
            yield from tensors

    def _declared(self) -> dict[str, list]:
        """{category: tensors} that the model or optimizer declare (``memory_categories()``)."""
        out: dict[str, list] = {}
        for obj in (self.model, self.optimizer):
            declare = getattr(obj, "memory_categories", None)
            if callable(declare):
                for category, tensors in declare().items():
                    out.setdefault(category, []).extend(t for t in tensors if isinstance(t, torch.Tensor))
        return out

    def _classify(self) -> dict[str, int]:
        owners: dict[int, str] = {}
        if self.optimizer is not None:
            for state in self.optimizer.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor):
                        owners[id(_storage(v))] = "optimizer"
        for category, tensors in self._declared().items():
            for t in tensors:
                owners[id(_storage(t))] = category
        if self.model is not None:
            for p in self.model.parameters():
                if p.grad is not None:
                    owners[id(_storage(p.grad))] = "gradients"
            for t in [*self.model.parameters(), *self.model.buffers()]:
                owners[id(_storage(t))] = "parameters"
        out = dict.fromkeys(CATEGORIES, 0)
        # a copy: the loop's allocations can start a garbage collection whose finalizers call _free,
        # which would change _live mid-iteration (it did, once, in a 4-rank FSDP test); dict.copy()
        # runs no Python code and allocates nothing the collector tracks while it copies
        for key, nbytes in self._live.copy().items():
            out[owners.get(key, "activations")] += nbytes
        return out

    def _sample(self) -> None:
        split = self._classify() if self.by_category else None    # every live storage sorted: slower
        self.timeline.append(Sample(self.ops, self.phase, self.current, split))
        if self.current > self.peak_bytes:
            self.peak_bytes, self.peak_phase = self.current, self.phase
            self.peak_by_category = self._classify()

    # ------------------------------------------------------------------ the mode
    def __enter__(self):
        for t in self._existing():
            self._add(t)
        self._sample()
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self._add(t)
        self.ops += 1
        self._sample()
        return out

    def mark(self, phase: str) -> None:
        """Start a new phase (e.g. "forward", "backward", "step") for the timeline."""
        self.phase = phase

    def live_by_category(self) -> dict[str, int]:
        """Bytes live now, split into CATEGORIES."""
        return self._classify()

    def live_bytes_except(self, *tensors: torch.Tensor) -> int:
        """Bytes live now, leaving out the storages of ``tensors`` (e.g. a block's inputs, which the
        tracker counts once an op inside returns a view of them, and its outputs)."""
        skip = {id(_storage(t)) for t in tensors if isinstance(t, torch.Tensor)}
        return sum(nbytes for key, nbytes in self._live.items() if key not in skip)

    def settled_bytes_except(self, below: int, *tensors: torch.Tensor, wait_s: float = 0.3) -> int:
        """`live_bytes_except(*tensors)`, given up to ``wait_s`` seconds to drop under ``below`` bytes:
        gloo's worker thread can hold a finished collective's tensors for a moment after wait() returns."""
        deadline = time.monotonic() + wait_s
        kept = self.live_bytes_except(*tensors)
        while kept >= below and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.01)
            kept = self.live_bytes_except(*tensors)
        return kept


class ActivationPeakTracker(MemoryTracker):
    """A `MemoryTracker` that also records ``peak_activation_bytes``: the largest value of the
    "activations" category after any op (the parent's ``peak_by_category`` is the split at the
    moment of the *total* peak, which may come when the activations are already falling).

    After every op: activations = live bytes − the live bytes of parameters, buffers,
    parameters' ``.grad``, optimizer states and tensors the model declares (the same split as
    ``live_by_category``, which would be exact too but re-sorts every live storage per op)."""

    def __init__(self, model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None):
        super().__init__(model, optimizer)
        self.peak_activation_bytes = 0
        self._params: list = []
        self._fixed: set = set()

    def live_activation_bytes(self) -> int:
        """Bytes live now in the "activations" category (equal to ``live_by_category()``'s)."""
        owned = set(self._fixed)                       # storage ids of parameters and buffers
        owned.update(id(_storage(p.grad)) for p in self._params if p.grad is not None)
        if self.optimizer is not None:
            owned.update(id(_storage(v)) for state in self.optimizer.state.values()
                         for v in state.values() if isinstance(v, torch.Tensor))
        owned.update(id(_storage(t)) for tensors in self._declared().values() for t in tensors)
        return self.current - sum(self._live.get(key, 0) for key in owned)

    def __enter__(self):
        if self.model is not None:
            self._params = list(self.model.parameters())
            self._fixed = {id(_storage(t)) for t in [*self._params, *self.model.buffers()]}
        out = super().__enter__()
        self.peak_activation_bytes = max(self.peak_activation_bytes, self.live_activation_bytes())
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.peak_activation_bytes = max(self.peak_activation_bytes, self.live_activation_bytes())
        return out
