"""Sharded checkpoints of our FSDP with PyTorch's Distributed Checkpoint (DCP): save on N ranks,
load on M.

    save_sharded(folder, model, opt, extra={"step": 3})      # on every rank of N
    extra = load_sharded(folder, model, opt)                 # later, on every rank of M (any M)

**Each rank writes what it holds.** A full checkpoint gathers everything to one rank first: Ψ
elements through one process and one file. With ``torch.distributed.checkpoint`` every rank
writes its own shards to its own file, in parallel, and nothing travels between ranks but small
plans. A save runs in two phases: each rank makes a *local plan* (which tensors and pieces it
has); the coordinator (rank 0) gathers them, keeps each *replicated* item once (a tensor that is
the same on every rank: here rank 0 writes them, ``dedup_save_to_lowest_rank``), and sends the
final plans back; every rank writes its items into ``__<rank>_0.distcp``; the coordinator
gathers where each item landed (file, offset, length) and writes ``.metadata`` last — a
checkpoint without it is incomplete and is never read.

**Resharding is reading.** ``.metadata`` records each tensor's global shape and the chunks that
were saved (offsets and sizes in the global tensor). To load on M ranks, each rank says which
piece of each global tensor it wants — its DTensors' local pieces on an M-rank mesh — and the
load planner reads the byte ranges of the saved chunks that overlap them. No rank gathers the
whole tensor; the N → M reshuffle is done by the file system.

**Our FSDP's state as DTensors** (`labkit.zero.fsdp.FSDP.sharded_state_dict`). A sharded group
of Ψ_g elements is cut into N shards of ⌈Ψ_g/N⌉, padded with zeros at the end. Without its
padding, rank r's shard is torch.chunk's r-th piece of the (Ψ_g,) vector — shorter on the last
rank, empty on a rank past the end — which is what a DTensor with placement ``Shard(0)`` on a
1-D ``DeviceMesh`` of N ranks holds. So the checkpoint sees the *global* (Ψ_g,) vector and
never the padding; on M ranks the same vector is cut with M's padding. The optimizer's state is
laid out like its parameter (AdamW: ``exp_avg`` m and ``exp_avg_sq`` v of the shard's shape,
a scalar ``step``), so m and v become DTensors of the same layout; ``step`` is replicated.

**Keys: flat groups, not parameter names** (our decision). Keys name a unit's group —
``model.blocks.0/sharded/trainable`` — the same on any number of ranks, so our FSDP reshards N →
M with no communication at all: each rank's piece is a view of its shard. PyTorch's FSDP1 faced
the same choice for its flat parameters; its ``SHARDED_STATE_DICT`` writes per-parameter (FQN)
keys instead, which costs an all-gather of every unit at every save (a flat shard's edges do
not fall on a parameter's rows, so part of a parameter's Shard(0) chunk lives on other ranks).
Saves are frequent and conversions rare, so we keep flat keys and write the layout (names and
shapes of each group, ``layout``) into the checkpoint, which makes it self-describing:
`load_into_fsdp2` reads the whole groups, cuts them into named parameters and hands them to
PyTorch's FSDP2 through ``set_model_state_dict(..., full_state_dict=True)`` — Ψ elements on every
rank for a moment, the price of converting.

**Bytes written per rank** (float32): 4 bytes of parameter + 8 of Adam's m and v per element of
the rank's piece: 12·Σ_g |chunk_r(Ψ_g)| — Lab 10's stage-3 bytes (p + k)·Ψ'/N with no gradients
(g = 0: gradients are not state) less the rank's padding. Rank 0 adds the replicated items (the
whole 1-D groups with their m, v; 4-byte step counters; layout and hyper-parameters as pickled
bytes). Each tensor is framed as a small ``torch.save`` archive: ~1.5 KB per item, measured in
tests/test_checkpoint_distributed.py; `written_items` lists every item's bytes from ``.metadata``.

**Asynchronous saves** (`async_save_sharded`, ``dcp.async_save``): the call *stages* the state —
copies it into fresh CPU memory, so training may change the parameters at once — and returns a
Future; a background thread writes while the next steps run. The thread's collectives (plans,
metadata) go over a separate gloo group (`checkpoint_group`): a process group's collectives must
be issued in the same order on every rank, and training's own on the default group would
interleave with the thread's unpredictably. The loop is blocked only for the copy, T_block; the
hidden fraction of a blocking save's time T_s is 1 − T_block / T_s.

Units: bytes, seconds, bytes/s.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from labkit.checks import check_int

MODEL, OPTIM, LAYOUT, EXTRA = "model", "optim", "layout", "extra"
_HYPER = (bool, int, float, str, type(None))
_GROUPS: dict = {}   # id(default process group) -> the checkpoint's own gloo group


# ----------------------------------------------------------------------------- layout
def chunk_numel(numel: int, world: int, rank: int) -> int:
    """Elements of torch.chunk's ``rank``-th piece of a (numel,) vector cut for ``world`` ranks:
    ⌈numel/world⌉, fewer on the last rank, 0 past the end (what DCP stores for that rank)."""
    numel = check_int("chunk_numel", "numel", numel, minimum=0)
    world = check_int("chunk_numel", "world", world, minimum=1)
    rank = check_int("chunk_numel", "rank", rank, minimum=0, maximum=world - 1)
    size = -(-numel // world)
    return min(size, max(0, numel - rank * size))


def layout_of(model) -> dict:
    """{group key: [[parameter name, shape], ...]}: how each flat group is laid out (the same on
    any number of ranks)."""
    return {key: [[n, list(s)] for n, s in zip(g.names, g.layout.shapes)] for key, g in model.named_groups()}


def _check_model(fn: str, model) -> None:
    from labkit.zero.fsdp import FSDP

    if not isinstance(model, FSDP):
        raise TypeError(f"{fn}: model must be a labkit.zero.fsdp.FSDP, got {type(model).__name__}")


# ----------------------------------------------------------------------------- optimizer state
def optimizer_state_dict(model, optimizer) -> dict:
    """{"state": {group key: {name: DTensor or tensor}}, "param_groups": JSON} for ``optimizer``
    stepping ``model``'s masters: views (no copy) laid out like `FSDP.sharded_state_dict`; state
    tensors of a master's shape follow its group's layout, others (AdamW's ``step``) are
    replicated. Masters the optimizer has not stepped (frozen) have no entry."""
    _check_model("optimizer_state_dict", model)
    state = {}
    for key, g in model.named_groups():
        st = optimizer.state.get(g.master, {})
        tensors = {name: t for name, t in st.items() if isinstance(t, torch.Tensor)}
        if tensors:
            state[key] = {name: model.as_dtensor(g, t) if t.shape == g.master.shape else t.detach()
                          for name, t in tensors.items()}
    hyper = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in pg.items()
              if k != "params" and (isinstance(v, _HYPER) or isinstance(v, tuple))} for pg in optimizer.param_groups]
    return {"state": state, "param_groups": json.dumps(hyper)}


def _optimizer_destination(model, metadata) -> dict:
    """Empty state to load into, shaped after what the checkpoint holds (for a fresh optimizer)."""
    prefix = f"{OPTIM}.state."
    dest: dict = {}
    groups = dict(model.named_groups())
    for fqn, md in metadata.state_dict_metadata.items():
        if not fqn.startswith(prefix) or not isinstance(md, TensorStorageMetadata):
            continue
        key, _, name = fqn[len(prefix):].rpartition(".")
        if key not in groups:
            raise ValueError(f"load_sharded: the checkpoint has optimizer state for group {key!r}, "
                             "which this model does not have")
        g = groups[key]
        if tuple(md.size) == (g.layout.numel,):
            t = model.as_dtensor(g, torch.zeros_like(g.master, dtype=md.properties.dtype))
        else:
            t = torch.zeros(tuple(md.size), dtype=md.properties.dtype)
        dest.setdefault(key, {})[name] = t
    return {"state": dest, "param_groups": ""}


def load_optimizer_state_dict(model, optimizer, state_dict: dict) -> None:
    """Install loaded optimizer state (as `optimizer_state_dict` returns it) for ``model``'s
    masters: DTensor pieces go into shard-shaped tensors whose padding is zero."""
    _check_model("load_optimizer_state_dict", model)
    groups = dict(model.named_groups())
    for key, tensors in state_dict["state"].items():
        g = groups[key]
        st = {}
        for name, t in tensors.items():
            if hasattr(t, "to_local"):
                local = torch.zeros_like(g.master, dtype=t.dtype).detach()
                piece = t.to_local()
                local[:piece.numel()].copy_(piece)
                st[name] = local
            else:
                st[name] = t.detach().clone()
        optimizer.state[g.master] = st
    saved = json.loads(state_dict.get("param_groups") or "[]")
    if saved and len(saved) != len(optimizer.param_groups):
        raise ValueError(f"load_sharded: the checkpoint has {len(saved)} optimizer param groups, "
                         f"the optimizer {len(optimizer.param_groups)}")
    for pg, hyper in zip(optimizer.param_groups, saved):
        for k, v in hyper.items():
            pg[k] = tuple(v) if isinstance(pg.get(k), tuple) else v


# ----------------------------------------------------------------------------- save / load
def checkpoint_state(model, optimizer=None, extra: dict | None = None, fn: str = "checkpoint_state") -> dict:
    """What `save_sharded` hands to DCP: {"model": ..., "optim": ..., "layout": JSON, "extra": JSON}."""
    _check_model(fn, model)
    state = {MODEL: model.sharded_state_dict(), LAYOUT: json.dumps(layout_of(model)),
             EXTRA: json.dumps(extra or {})}
    if optimizer is not None:
        state[OPTIM] = optimizer_state_dict(model, optimizer)
    return state


def _writer(folder) -> dcp.FileSystemWriter:
    # one file per rank, fsync-ed; an older checkpoint in the folder is replaced
    return dcp.FileSystemWriter(os.fspath(folder), single_file_per_rank=True, sync_files=True, overwrite=True)


def _planner() -> DefaultSavePlanner:
    return DefaultSavePlanner(dedup_save_to_lowest_rank=True)   # replicated items: written by rank 0


def save_sharded(folder, model, optimizer=None, extra: dict | None = None) -> Path:
    """Save ``model`` (our FSDP), ``optimizer`` and ``extra`` (JSON-able: step, data position)
    with ``dcp.save``; call on every rank with the same ``folder``. Returns the folder. Use a new
    folder per checkpoint: rewritten in place, a save that dies half-way leaves the old
    ``.metadata`` pointing into new data files (PyTorch warns when it overwrites)."""
    folder = Path(folder)
    state = checkpoint_state(model, optimizer, extra, "save_sharded")
    dcp.save(state, storage_writer=_writer(folder), planner=_planner())
    return folder


def checkpoint_group():
    """A second gloo process group over all ranks for DCP's background collectives (made on the
    first call, which every rank must make)."""
    key = id(dist.distributed_c10d._get_default_group())
    if key not in _GROUPS:
        _GROUPS[key] = dist.new_group(backend="gloo")
    return _GROUPS[key]


def async_save_sharded(folder, model, optimizer=None, extra: dict | None = None, group=None):
    """Like `save_sharded`, but returns once the state is staged (copied); the writing goes on in a
    background thread on ``group`` (default: `checkpoint_group`). Returns a Future: call
    ``.result()`` before the next save, and before the process ends."""
    state = checkpoint_state(model, optimizer, extra, "async_save_sharded")
    return dcp.async_save(state, storage_writer=_writer(folder), planner=_planner(),
                          process_group=group or checkpoint_group())


def _metadata(fn: str, folder: Path):
    """The checkpoint's .metadata; one-line FileNotFoundError when there is none (a save that did
    not finish writes no .metadata: its data files are never read)."""
    if not (folder / ".metadata").is_file():
        raise FileNotFoundError(f"{fn}: no checkpoint in {folder} (no .metadata: missing or unfinished)")
    return dcp.FileSystemReader(os.fspath(folder)).read_metadata()


def _read_object(folder, key: str, metadata) -> str:
    """A pickled (non-tensor) entry of the checkpoint, e.g. its layout ("" if absent)."""
    if key not in metadata.state_dict_metadata:
        return ""
    box = {key: ""}
    dcp.load(box, storage_reader=dcp.FileSystemReader(os.fspath(folder)))
    return box[key]


def load_sharded(folder, model, optimizer=None) -> dict:
    """Load a `save_sharded` checkpoint into ``model`` (our FSDP on any number of ranks) and
    ``optimizer`` (whose state may be empty); returns the saved ``extra``. Call on every rank.
    ValueError (one line) if the checkpoint's layout is not this model's."""
    _check_model("load_sharded", model)
    folder = Path(folder)
    metadata = _metadata("load_sharded", folder)
    layout = json.loads(_read_object(folder, LAYOUT, metadata) or "{}")
    mine = layout_of(model)
    if layout != mine:
        bad = next((k for k in sorted(set(layout) | set(mine)) if layout.get(k) != mine.get(k)), "?")
        raise ValueError(f"load_sharded: {folder} holds another model: group {bad!r} differs")
    state = {MODEL: model.sharded_state_dict(), EXTRA: ""}
    if optimizer is not None:
        state[OPTIM] = _optimizer_destination(model, metadata)
        if f"{OPTIM}.param_groups" not in metadata.state_dict_metadata:
            del state[OPTIM]["param_groups"]
    dcp.load(state, storage_reader=dcp.FileSystemReader(os.fspath(folder)))
    model.load_sharded_state_dict(state[MODEL])
    if optimizer is not None:
        load_optimizer_state_dict(model, optimizer, state[OPTIM])
    return json.loads(state[EXTRA]) if state[EXTRA] else {}


# ----------------------------------------------------------------------------- into PyTorch's FSDP2
def load_into_fsdp2(folder, model: torch.nn.Module, optimizer=None) -> dict:
    """Load a `save_sharded` checkpoint (our flat groups, from any number of ranks) into a model
    sharded by PyTorch's FSDP2 (``fully_shard``) and its ``optimizer`` (torch.optim, one param
    group): every rank reads each whole (Ψ_g,) group, cuts it into named parameters with the
    checkpoint's layout, and hands them to ``set_model_state_dict`` / ``set_optimizer_state_dict``
    with ``full_state_dict=True``, which keep each rank's Shard(0) piece. Returns ``extra``."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                         set_optimizer_state_dict)

    folder = Path(folder)
    metadata = _metadata("load_into_fsdp2", folder)
    layout = json.loads(_read_object(folder, LAYOUT, metadata) or "{}")
    if not layout:
        raise ValueError(f"load_into_fsdp2: {folder} is not a save_sharded checkpoint (no layout)")
    full: dict = {MODEL: {}, EXTRA: ""}
    opt_prefix = f"{OPTIM}.state."
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, TensorStorageMetadata) and (fqn.startswith(MODEL + ".") or
                                                      (optimizer is not None and fqn.startswith(opt_prefix))):
            if fqn.startswith(MODEL + "."):
                full[MODEL][fqn[len(MODEL) + 1:]] = torch.empty(tuple(md.size), dtype=md.properties.dtype)
            else:
                key, _, name = fqn[len(opt_prefix):].rpartition(".")
                slot = full.setdefault(OPTIM, {"state": {}})["state"].setdefault(key, {})
                slot[name] = torch.empty(tuple(md.size), dtype=md.properties.dtype)
    if optimizer is not None and f"{OPTIM}.param_groups" in metadata.state_dict_metadata:
        full.setdefault(OPTIM, {"state": {}})["param_groups"] = ""
    dcp.load(full, storage_reader=dcp.FileSystemReader(os.fspath(folder)))

    def named(key: str, flat: torch.Tensor) -> dict:
        # the group's parameters, in order, are consecutive (no padding in a global vector)
        out, at = {}, 0
        for name, shape in layout[key]:
            n = int(torch.Size(shape).numel())
            out[name] = flat[at:at + n].view(shape)
            at += n
        return out

    params = {n: t for key, flat in full[MODEL].items() for n, t in named(key, flat).items()}
    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, params, options=options)
    if optimizer is not None:
        state: dict = {}
        for key, tensors in full.get(OPTIM, {}).get("state", {}).items():
            for name, t in tensors.items():
                if t.dim() == 1 and t.numel() == sum(int(torch.Size(s).numel()) for _, s in layout[key]):
                    for pname, piece in named(key, t).items():
                        state.setdefault(pname, {})[name] = piece.clone()
                else:                                          # replicated: AdamW's step
                    for pname, _ in layout[key]:
                        state.setdefault(pname, {})[name] = t.clone()
        hyper = json.loads(full.get(OPTIM, {}).get("param_groups") or "[{}]")[0]
        group = dict(optimizer.param_groups[0])
        group.update({k: tuple(v) if isinstance(group.get(k), tuple) else v for k, v in hyper.items()})
        group["params"] = [n for n, p in model.named_parameters() if p.requires_grad]
        set_optimizer_state_dict(model, optimizer, {"state": state, "param_groups": [group]}, options=options)
    return json.loads(full[EXTRA]) if full[EXTRA] else {}
