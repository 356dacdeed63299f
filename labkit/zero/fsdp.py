"""ZeRO stage 3 / FSDP: parameters, gradients and optimizer states all sharded over the ranks.

    model = FSDP(GPT(cfg))                       # inside a launched process group
    opt = torch.optim.AdamW(model.parameters())  # steps this rank's shards only
    _, loss = model(tokens_of_this_rank, targets_of_this_rank)
    loss.backward()
    model.finish_gradient_synchronization()      # wait for the reduce-scatters; grads = batch mean
    opt.step()

**Units.** The model is cut into units: each transformer block by default (every element of an
``nn.ModuleList``; ``units=`` names others), and the root, which owns every parameter not in a
unit — embeddings, the last LayerNorm, and any parameter two units share (the tied LM head).
Each unit's parameters become flat, padded groups (`labkit.zero.flat`); the parameters leave the
modules, and ``FSDP.parameters()`` are this rank's pieces — what the optimizer steps.

**Which parameters are sharded** is a policy: ``policy(name, param) -> bool``. By default
parameters of ≥ 2 dimensions (Linear and Embedding weights: nearly all the bytes) are sharded —
rank r keeps elements [r·Ψ'/N, (r+1)·Ψ'/N) of its unit's flat vector — and 1-D ones (biases,
LayerNorm scales) stay whole on every rank, their gradients all-reduced.

**One step of a unit** (the ZeRO-3 schedule):

1. just before the unit's forward, **all-gather** its full parameters (cast to ``compute_dtype``
   first when one is given: half the bytes on the wire for bf16), point the modules at views of
   them, run the forward, and **free** them right after;
2. autograd would keep the full weights alive until backward (a Linear saves its weight): a
   saved-tensor hook keeps a note instead, and the first backward op that needs them
   **all-gathers them again**; they are freed when the unit's backward is done;
3. the unit's gradient is **reduce-scattered** (in float32 when ``compute_dtype`` is 16-bit, so
   gradients and master weights stay float32), asynchronously while backward goes on;
   `finish_gradient_synchronization` waits, divides by N and leaves each shard's ``.grad``.

Per rank and step that is 2 all-gathers and 1 reduce-scatter of Ψ': 3(N−1)/N·Ψ elements — 1.5×
DDP's all-reduce. ZeRO-3 cuts memory, not communication. Memory per rank of the sharded states:
(p + g + k)·Ψ'/N, plus the whole-on-every-rank 1-D parameters and the one unit gathered at a time.

**Prefetch** (``prefetch=True``; FSDP's forward and backward prefetch, Zhao et al. 2023). Gathered
just before use, each all-gather stalls the compute that needs it. With prefetch the all-gather
of the *next* unit is posted (asynchronously) as soon as the current unit has its parameters:
in forward the next unit in the model's order (the root posts the first block's), in backward
the unit before it in the order forward ran (the root, whose LM head's backward comes first,
posts the last block's). The transfer then runs while the current unit computes, and the next
unit only waits for what is left of it. The price: two units are whole at once, so the peak
holds one unit more. ``gather_wait_s`` adds up the time this rank spent blocked on all-gathers
(the whole gather without prefetch, only the wait with it): the exposed part of ZeRO-3's traffic.
``gathered_peak_bytes`` is the most bytes of gathered parameter vectors alive at once (each
counted from its all-gather until its storage is freed, seen by a finalizer as MemoryTracker does).
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from labkit.checks import check_same_on_ranks, module_tensors
from labkit.zero.comm import (all_gather_flat, all_gather_flat_async, all_reduce_, broadcast_from_rank0_,
                              reduce_scatter_flat)
from labkit.zero.flat import FlatLayout
from labkit.zero.optimizer import _padded   # the answer to fsdp_linear pads dW as zero1_step does


def shard_if_matrix(name: str, param: torch.Tensor) -> bool:
    """The default policy: shard parameters of >= 2 dimensions, keep 1-D ones whole."""
    return param.dim() >= 2


@dataclass
class Group:
    """A unit's parameters of one kind (sharded or whole), as one flat master vector."""

    unit: str                        # the unit's name ("" for the root)
    names: list                      # the parameters' names in the original model
    places: list                     # per parameter: [(module, attribute), ...] (a tied weight has two)
    layout: FlatLayout
    master: nn.Parameter             # sharded: (Ψ'/N,) this rank's shard; whole: (Ψ',) everything
    sharded: bool
    full: torch.Tensor | None = None  # the gathered (Ψ',) vector while in use (sharded groups)
    pending: tuple | None = None      # (vector, work) of a prefetched all-gather not yet waited on


@dataclass
class Unit:
    """A wrapped module (``name`` "" is the root) and its parameter groups."""

    name: str
    module: nn.Module
    groups: list = field(default_factory=list)


class _GatherParams(torch.autograd.Function):
    """Forward: all-gather a shard into the full vector (or take the one a prefetch brought, left in
    ``group.full``). Backward: reduce-scatter its gradient (asynchronously; the owner collects it
    in finish_gradient_synchronization)."""

    @staticmethod
    def forward(ctx, shard, owner, group, compute_dtype):
        ctx.owner, ctx.group = owner, group
        if group.full is not None:
            return group.full
        return all_gather_flat(shard.detach().to(compute_dtype or shard.dtype), "forward")   # (Ψ',)

    @staticmethod
    def backward(ctx, grad_full):
        ctx.owner._reduce_scatter(ctx.group, grad_full)
        return None, None, None, None


# BEGIN SOLUTION (labkit's FSDP: it answers fsdp_linear)
class FSDP(nn.Module):
    """Fully sharded data parallelism (ZeRO-3); see the module docstring."""

    def __init__(self, module: nn.Module, compute_dtype: torch.dtype | None = None,
                 policy: Callable[[str, torch.Tensor], bool] = shard_if_matrix,
                 units: Callable[[str, nn.Module], bool] | None = None, prefetch: bool = False):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"FSDP: module must be a torch.nn.Module, got {type(module).__name__}")
        if compute_dtype not in (None, torch.float32, torch.float64, torch.bfloat16, torch.float16):
            raise TypeError(f"FSDP: compute_dtype must be None or a float dtype, got {compute_dtype!r}")
        if not callable(policy):
            raise TypeError(f"FSDP: policy must be callable as policy(name, param) -> bool, got {policy!r}")
        if not dist.is_initialized():
            raise RuntimeError("FSDP: no process group; run inside labkit.dist.launch (or torchrun)")
        if not isinstance(prefetch, bool):
            raise TypeError(f"FSDP: prefetch must be True or False, got {prefetch!r}")
        self.module, self.compute_dtype, self.prefetch = module, compute_dtype, prefetch
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        check_same_on_ranks("FSDP", "the module's parameters and buffers", module_tensors(module))
        broadcast_from_rank0_([*module.parameters(), *module.buffers()])
        self.units = self._build_units(module, policy, units or _in_module_list(module))
        self.flat_params = nn.ParameterList([g.master for u in self.units for g in u.groups])
        self._by_storage: dict[int, Group] = {}
        self._pending: list = []
        self.events: list[tuple[str, str, str]] = []   # (what, unit, phase); what: gather, prefetch, free,
                                                         # reduce_scatter
        self.gather_wait_s = 0.0                         # seconds blocked on all-gathers (module docstring)
        self.gathered_bytes = self.gathered_peak_bytes = 0   # gathered vectors alive now / at most
        self._forward_order: list[Unit] = []             # units in the order their forward ran
        for u in self.units[1:]:
            u.module.register_forward_pre_hook(lambda m, args, u=u: self._gather(u))
            u.module.register_forward_hook(lambda m, args, out, u=u: self._release(u))

    # ------------------------------------------------------------------ set-up
    def _build_units(self, module, policy, is_unit) -> list[Unit]:
        roots = {"": module, **{n: m for n, m in module.named_modules() if n and is_unit(n, m)}}
        owner_of_module = {}
        for path, m in module.named_modules():
            owner_of_module[id(m)] = max((r for r in roots if r == "" or path == r or path.startswith(r + ".")),
                                         key=len)
        places: dict[int, list] = {}
        names: dict[int, str] = {}
        params: dict[int, nn.Parameter] = {}
        for mpath, m in module.named_modules():
            for attr, p in list(m._parameters.items()):
                if p is None:
                    continue
                places.setdefault(id(p), []).append((m, attr, owner_of_module[id(m)]))
                names.setdefault(id(p), f"{mpath}.{attr}" if mpath else attr)
                params[id(p)] = p
        units = {r: Unit(r, m) for r, m in roots.items()}
        members: dict[tuple, list] = {}
        for key, where in places.items():
            owners = {o for _, _, o in where}
            unit = owners.pop() if len(owners) == 1 else ""      # shared by two units: the root owns it
            p = params[key]
            members.setdefault((unit, bool(policy(names[key], p)), p.requires_grad), []).append(key)
        for (unit, sharded, trainable), keys in sorted(members.items(), key=lambda kv: (kv[0][0], not kv[0][1],
                                                                                      not kv[0][2])):
            ps = [params[k] for k in keys]
            layout = FlatLayout.of(ps, self.world if sharded else 1)
            flat = layout.flatten([p.detach() for p in ps])
            lo, hi = layout.shard_range(self.rank) if sharded else (0, layout.padded)
            master = nn.Parameter(flat[lo:hi].clone(), requires_grad=trainable)
            units[unit].groups.append(Group(unit, [names[k] for k in keys], [[(m, a) for m, a, _ in places[k]] for k in keys],
                                            layout, master, sharded))
        for where in places.values():
            for m, attr, _ in where:
                m._parameters.pop(attr, None)
                setattr(m, attr, None)
        return [units[r] for r in roots if units[r].groups or r == ""]

    # ------------------------------------------------------------------ gather / release
    def _materialize(self, group: Group, phase: str) -> torch.Tensor:
        if group.sharded:
            t0 = time.perf_counter()
            gathered = None
            if group.pending is not None:                        # prefetched: wait for what is left
                gathered, work = group.pending
                group.pending = None
                if work is not None:
                    work.wait()
            else:
                self.events.append(("gather", group.unit, phase))
            if phase == "forward" and torch.is_grad_enabled() and group.master.requires_grad:
                group.full = gathered                            # _GatherParams takes it from there
                full = _GatherParams.apply(group.master, self, group, self.compute_dtype)
            elif gathered is not None:
                full = gathered
            else:
                with torch.no_grad():
                    full = all_gather_flat(group.master.to(self.compute_dtype or group.master.dtype), phase)
            self.gather_wait_s += time.perf_counter() - t0
            if gathered is None:
                self._count_gathered(full)
            group.full = full
            self._by_storage[full.untyped_storage().data_ptr()] = group
            return full
        return group.master if self.compute_dtype is None else group.master.to(self.compute_dtype)

    def _point(self, group: Group, full: torch.Tensor | None) -> None:
        views = group.layout.unflatten(full) if full is not None else [None] * len(group.places)
        for where, view in zip(group.places, views):
            for m, attr in where:
                setattr(m, attr, view)

    def _gather(self, unit: Unit) -> None:
        if unit is not self.units[0]:
            self._forward_order.append(unit)
        for g in unit.groups:
            self._point(g, self._materialize(g, "forward"))
        if self.prefetch:                                        # post the next unit's all-gather
            i = self.units.index(unit)
            if i + 1 < len(self.units):
                self._prefetch(self.units[i + 1], "forward")

    def _prefetch(self, unit: Unit, phase: str) -> None:
        """Post the all-gathers of ``unit``'s sharded groups that are neither whole nor on their way."""
        for g in unit.groups:
            if g.sharded and g.full is None and g.pending is None:
                self.events.append(("prefetch", g.unit, phase))           # an all-gather posted early
                with torch.no_grad():
                    shard = g.master.to(self.compute_dtype or g.master.dtype)
                    g.pending = all_gather_flat_async(shard, phase)          # (vector, work)
                self._count_gathered(g.pending[0])

    def _count_gathered(self, full: torch.Tensor) -> None:
        storage, nbytes = full.untyped_storage(), full.untyped_storage().nbytes()
        self.gathered_bytes += nbytes
        self.gathered_peak_bytes = max(self.gathered_peak_bytes, self.gathered_bytes)
        weakref.finalize(storage, self._uncount_gathered, nbytes)

    def _uncount_gathered(self, nbytes: int) -> None:
        self.gathered_bytes -= nbytes

    def _prefetch_before(self, group: Group) -> None:
        """Backward: ``group``'s unit is being re-gathered; post the unit that ran before it in forward
        (the root posts the last one)."""
        order = self._forward_order
        unit = next((u for u in self.units if u.name == group.unit), None)
        if unit is self.units[0]:
            before = order[-1] if order else None
        else:
            i = order.index(unit) if unit in order else 0
            before = order[i - 1] if i > 0 else None
        if before is not None:
            self._prefetch(before, "backward")

    def _release(self, unit: Unit) -> None:
        for g in unit.groups:
            self._point(g, None)
            self._drop(g, "forward")

    def _drop(self, group: Group, phase: str) -> None:
        if group.full is not None:
            self.events.append(("free", group.unit, phase))
            self._by_storage.pop(group.full.untyped_storage().data_ptr(), None)
            group.full = None

    # saved-tensor hooks: a saved view of a gathered vector becomes a note, unpacked by re-gathering
    def _pack(self, t: torch.Tensor):
        if t.numel() and t.untyped_storage().data_ptr() in self._by_storage:
            group = self._by_storage[t.untyped_storage().data_ptr()]
            return ("gathered", group, t.storage_offset(), t.shape, t.stride())
        return t

    def _unpack(self, saved):
        if isinstance(saved, tuple) and saved and saved[0] == "gathered":
            _, group, offset, shape, stride = saved
            if group.full is None:
                self._materialize(group, "backward")
                if self.prefetch:
                    self._prefetch_before(group)
            return group.full.as_strided(shape, stride, offset)
        return saved

    def forward(self, *args, **kwargs):
        root = self.units[0]
        self._forward_order = []
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            self._gather(root)
            try:
                return self.module(*args, **kwargs)
            finally:
                self._release(root)

    # ------------------------------------------------------------------ gradients
    def _reduce_scatter(self, group: Group, grad_full: torch.Tensor) -> None:
        """Called from backward once a sharded group's full gradient is complete."""
        self._drop(group, "backward")                            # the re-gathered weights are done with
        grad = grad_full.to(group.master.dtype)                  # reduce in the master's dtype (float32)
        shard, work = reduce_scatter_flat(grad, "backward", async_op=True)
        self.events.append(("reduce_scatter", group.unit, "backward"))
        self._pending.append((group, shard, work, grad))

    def finish_gradient_synchronization(self) -> None:
        """Wait for the reduce-scatters, all-reduce the whole (1-D) groups' gradients, divide by N:
        each master's ``.grad`` is then the batch-mean gradient of what this rank holds."""
        for group, shard, work, _grad in self._pending:
            if work is not None:
                work.wait()
            shard.div_(self.world)
            group.master.grad = shard if group.master.grad is None else group.master.grad.add_(shard)
        self._pending.clear()
        for u in self.units:
            for g in u.groups:
                if g.pending is not None:     # a prefetch nothing used (a unit whose backward needed no weights)
                    if g.pending[1] is not None:
                        g.pending[1].wait()
                    g.pending = None
                self._drop(g, "backward")     # frozen groups re-gathered in backward have no reduce-scatter
                if not g.sharded and g.master.grad is not None:
                    all_reduce_(g.master.grad, "backward")
                    g.master.grad.div_(self.world)

    @torch.no_grad()
    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """{name: full parameter} as in the original model's ``named_parameters()`` (master dtype)."""
        out = {}
        for u in self.units:
            for g in u.groups:
                full = all_gather_flat(g.master.detach(), "gather") if g.sharded else g.master.detach()
                out.update(zip(g.names, (v.clone() for v in g.layout.unflatten(full))))
        return out

    @property
    def padded_numel(self) -> int:
        """Σ Ψ'_g over the sharded groups: this rank holds padded_numel / N of those elements."""
        return sum(g.layout.padded for u in self.units for g in u.groups if g.sharded)

    # ------------------------------------------------------------------ sharded checkpoints (Lab 12)
    # A sharded group's flat (Ψ_g,) vector, cut into N shards of ⌈Ψ_g/N⌉ with the padding at the
    # end, is exactly a DTensor with placement Shard(0) on a 1-D mesh: without its padding, rank
    # r's shard is torch.chunk's r-th piece of the (Ψ_g,) vector (shorter, or empty, on the last
    # ranks). torch.distributed.checkpoint (DCP) saves such DTensors from N ranks and loads them
    # on M: see labkit.checkpoint.distributed.
    @staticmethod
    def group_key(group: Group) -> str:
        """The group's name in a checkpoint, the same on any number of ranks:
        "<unit or root>/<sharded|whole>/<trainable|frozen>"."""
        return "/".join((group.unit or "root", "sharded" if group.sharded else "whole",
                         "trainable" if group.master.requires_grad else "frozen"))

    def named_groups(self) -> list[tuple[str, Group]]:
        """[(group_key, group)] in the order the units hold them."""
        return [(self.group_key(g), g) for u in self.units for g in u.groups]

    def checkpoint_mesh(self):
        """The 1-D DeviceMesh of all N ranks (built on first use) that the DTensors live on."""
        mesh = getattr(self, "_checkpoint_mesh", None)
        if mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(self.flat_params[0].device.type, (self.world,))
            self._checkpoint_mesh = mesh
        return mesh

    def as_dtensor(self, group: Group, local: torch.Tensor) -> torch.Tensor:
        """A view (no copy) of a master-shaped tensor as checkpoint state. Sharded group: ``local``
        is this rank's (Ψ'_g/N,) shard; returned as a DTensor of global shape (Ψ_g,), placement
        Shard(0), whose local piece is the shard without its padding. Whole group: ``local``
        itself, a plain (Ψ_g,) tensor (the same on every rank)."""
        from torch.distributed.tensor import DTensor, Shard

        if local.shape != group.master.shape:
            raise ValueError(f"FSDP.as_dtensor: expected shape {tuple(group.master.shape)} for group "
                             f"{self.group_key(group)!r}, got {tuple(local.shape)}")
        local = local.detach()
        if not group.sharded:
            return local
        psi, s = group.layout.numel, group.layout.shard_numel
        keep = min(s, max(0, psi - self.rank * s))              # torch.chunk's r-th piece: elements
        return DTensor.from_local(local[:keep], self.checkpoint_mesh(), [Shard(0)], run_check=False,
                                  shape=(psi,), stride=(1,))

    def sharded_state_dict(self) -> dict[str, torch.Tensor]:
        """{group_key: DTensor (sharded groups) or tensor (whole groups)}: views of this rank's
        masters, ready for ``torch.distributed.checkpoint.save`` or ``load`` (which writes in place)."""
        return {key: self.as_dtensor(g, g.master) for key, g in self.named_groups()}

    @torch.no_grad()
    def load_sharded_state_dict(self, state_dict: dict) -> None:
        """Copy loaded pieces (as `sharded_state_dict` returns them) into this rank's masters; the
        padding is set to zero. Every group must be present, with its global shape."""
        for key, g in self.named_groups():
            if key not in state_dict:
                raise KeyError(f"FSDP.load_sharded_state_dict: no entry for group {key!r}")
            src = state_dict[key]
            src = src.to_local() if hasattr(src, "to_local") else src
            dst = self.as_dtensor(g, g.master)
            dst = dst.to_local() if hasattr(dst, "to_local") else dst
            if src.shape != dst.shape:
                raise ValueError(f"FSDP.load_sharded_state_dict: group {key!r} has local shape "
                                 f"{tuple(src.shape)}, this rank holds {tuple(dst.shape)}")
            dst.copy_(src)
            g.master.detach()[dst.numel():].zero_()
# END SOLUTION


def _in_module_list(model: nn.Module) -> Callable[[str, nn.Module], bool]:
    """The default units: every element of an nn.ModuleList (a transformer's blocks)."""
    lists = {name for name, m in model.named_modules() if isinstance(m, nn.ModuleList)}
    return lambda name, module: bool(name) and name.rpartition(".")[0] in lists


# BEGIN SOLUTION
def _gather_weight(shard, out_features, in_features):
    n = dist.get_world_size()
    full = torch.empty(n * shard.numel(), dtype=shard.dtype, device=shard.device)
    dist.all_gather_single(full, shard.detach().contiguous())
    return full[:out_features * in_features].view(out_features, in_features)


class _FSDPLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, shard, bias, out_features, in_features):
        w = _gather_weight(shard, out_features, in_features)           # (out, in), freed on return
        ctx.save_for_backward(x, shard)
        ctx.sizes = (out_features, in_features)
        return x @ w.t() + bias

    @staticmethod
    def backward(ctx, dy):
        x, shard = ctx.saved_tensors
        out_features, in_features = ctx.sizes
        w = _gather_weight(shard, out_features, in_features)           # gathered again
        n = dist.get_world_size()
        dw = _padded(dy.t() @ x, n * shard.numel())                     # (P',)
        dshard = torch.empty_like(shard)
        dist.reduce_scatter_single(dshard, dw)
        return dy @ w, dshard, dy.sum(0), None, None
# END SOLUTION


def fsdp_linear(x, weight_shard, bias, out_features, in_features):
    """y = x·Wᵀ + b, where W lives sharded: FSDP's gather → compute → free, in both passes.

    x: (B, in_features), this rank's input; weight_shard: (P'/N,) with requires_grad, this
    rank's shard of W (out_features, in_features) flattened row by row and padded with zeros to
    P' = ceil(out·in/N)·N elements; bias: (out_features,), the same on every rank.
    Return y: (B, out_features). Write a torch.autograd.Function:
    - forward: all-gather the full padded W, compute y, and keep for backward only x and what
      you were given — NOT the full W (it must be freed when forward returns);
    - backward: all-gather W again, compute dx = dy·W and dW = dyᵀ·x, flatten and pad dW, and
      reduce-scatter it (sum over ranks) into the gradient of weight_shard; the gradient of
      bias is dy summed over the batch (no communication).
    """
    # BEGIN SOLUTION
    # HINT: the full weight exists only while it is used: gathered for forward, freed, gathered
    # HINT: again for backward (a torch.autograd.Function that saves the shard, not the full
    # HINT: weight); the weight's gradient leaves backward already summed and cut to your shard
    # HINT: (dist.reduce_scatter_single).
    return _FSDPLinear.apply(x, weight_shard, bias, out_features, in_features)
    # END SOLUTION
