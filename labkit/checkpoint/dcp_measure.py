"""Measuring sharded checkpoints: the bytes DCP writes per rank, the disk's own bandwidth, save and
load bandwidth on real ranks, and how much of a save `async_save` hides.

    print(dcp_table(world=2))          # the notebook's one-liner
    measure_checkpoint(world=4)        # benchmarks/checkpoint.py

Bytes come from the checkpoint's ``.metadata`` (where each item landed: file, offset, length) and
the files themselves, to the byte; the disk baseline writes with ``os.write`` + ``fsync`` and
reads back after dropping the file from the page cache, in the same run. Units: bytes, seconds,
bytes/s. The save/load machinery itself is `labkit.checkpoint.distributed`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from labkit.checks import check_int
from labkit.checkpoint.distributed import (MODEL, OPTIM, _metadata, async_save_sharded, checkpoint_group, checkpoint_state, chunk_numel, load_sharded, save_sharded)
from labkit.dist import device

# ----------------------------------------------------------------------------- bytes on disk
@dataclass(frozen=True)
class WrittenItem:
    """One item of a DCP checkpoint, from its ``.metadata``: the data file it lies in, its key,
    where it starts (bytes), ``stored`` bytes in the file, and ``payload``: the tensor's own bytes
    (numel · element size; None for a pickled object). stored − payload is the framing."""

    file: str
    key: str
    offset: int
    stored: int
    payload: int | None


def written_items(folder) -> list[WrittenItem]:
    """Every item of the checkpoint in ``folder``, by file and offset."""
    metadata = _metadata("written_items", Path(folder))
    out = []
    for index, info in metadata.storage_data.items():
        md = metadata.state_dict_metadata[index.fqn]
        payload = None
        if isinstance(md, TensorStorageMetadata):
            chunk = next(c for c in md.chunks if index.offset is None or tuple(c.offsets) == tuple(index.offset))
            payload = int(torch.Size(chunk.sizes).numel()) * md.properties.dtype.itemsize
        out.append(WrittenItem(info.relative_path, index.fqn, info.offset, info.length, payload))
    return sorted(out, key=lambda w: (w.file, w.offset))


def file_bytes(folder) -> dict[str, int]:
    """{file name: bytes} of everything in ``folder`` (data files ``__<rank>_0.distcp`` and
    ``.metadata``)."""
    folder = Path(folder)
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}


def data_file(rank: int) -> str:
    """The name of the data file rank ``rank`` writes (one per rank: DCP's single_file_per_rank)."""
    return f"__{check_int('data_file', 'rank', rank, minimum=0)}_0.distcp"


def expected_payload_bytes(model, optimizer=None) -> int:
    """Tensor bytes this rank's data file should hold: its DTensor pieces of every group (and of
    the optimizer state shaped like them); rank 0 also the replicated tensors (whole groups, their
    state, step counters). Float32 AdamW: 12·Σ_g |chunk_r(Ψ_g)| (+ rank 0's share)."""
    state = checkpoint_state(model, optimizer)
    total = 0
    for part in (state[MODEL], *(state.get(OPTIM, {}).get("state", {}).values())):
        for t in part.values():
            if hasattr(t, "to_local"):
                total += t.to_local().numel() * t.element_size()
            elif model.rank == 0:
                total += t.numel() * t.element_size()
    return total


# ----------------------------------------------------------------------------- bandwidth
def _evict(paths) -> None:
    """Drop the files' pages from the page cache, so that the next read comes from the device."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_baseline(folder, nbytes: int, repeat: int = 3, block: int = 8 << 20) -> tuple[float, float]:
    """(write seconds, read seconds) of ``nbytes`` through one file in ``folder``, dd-style:
    ``os.write`` in ``block``-byte pieces then ``fsync``; evict it from the page cache, then
    ``os.read`` it back. Medians of ``repeat`` (labkit.bench.median_time); the file is removed."""
    from labkit.bench import median_time

    nbytes = check_int("disk_baseline", "nbytes", nbytes, minimum=1)
    repeat = check_int("disk_baseline", "repeat", repeat, minimum=1)
    block = check_int("disk_baseline", "block", block, minimum=1)
    path = os.path.join(os.fspath(folder), "disk-baseline.bin")
    data = memoryview(os.urandom(min(nbytes, block)))

    def write():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            left = nbytes
            while left:
                left -= os.write(fd, data[:min(left, len(data))])
            os.fsync(fd)
        finally:
            os.close(fd)

    def read():
        _evict([path])
        fd = os.open(path, os.O_RDONLY)
        try:
            while os.read(fd, block):
                pass
        finally:
            os.close(fd)

    try:
        return median_time(write, repeat=repeat, warmup=0), median_time(read, repeat=repeat, warmup=0)
    finally:
        if os.path.exists(path):
            os.unlink(path)

# ----------------------------------------------------------------------------- training on ranks
def full_state(model, optimizer) -> dict:
    """What a checkpoint of ``model`` (our FSDP) and ``optimizer`` holds, gathered whole on every
    rank and without padding, so that it compares across world sizes: {"params": {name: tensor},
    "optimizer": {group key: {state name: tensor}}} (a collective: call on every rank)."""
    from labkit.zero.comm import all_gather_flat

    opt = {}
    for key, g in model.named_groups():
        opt[key] = {name: (all_gather_flat(t.detach(), "gather")[:g.layout.numel].clone()
                           if g.sharded and t.shape == g.master.shape else t.detach().clone())
                    for name, t in optimizer.state.get(g.master, {}).items() if isinstance(t, torch.Tensor)}
    return {"params": model.gather_full_params(), "optimizer": opt}


def checkpoint_run(rank: int, world: int, cfg, steps: int, load_from=None, save_to=None,
                   global_batch: int = 12, dtype=torch.float64, lr: float = 1e-2, load_optimizer: bool = True,
                   gather: bool = False) -> dict:
    """A rank function for `labkit.dist.launch`: build our FSDP around ``GPT(cfg, seed=0)`` with
    AdamW (`labkit.zero.training.build`), load ``load_from`` if given (training goes on from the
    saved step), train ``steps`` steps on this rank's slice of ``batch(cfg, global_batch,
    seed=step)``, save to ``save_to`` if given. Returns {"params": full parameters at the end,
    "losses", "step": the last step}; with ``gather``, also `full_state` right after the load
    ("loaded") and right at the save ("saved")."""
    from labkit.model import batch
    from labkit.zero.training import build

    model, opt = build("fsdp", cfg, dtype, lr=lr)
    out, start = {}, 0
    if load_from is not None:
        start = load_sharded(load_from, model, opt if load_optimizer else None)["step"]
        if gather:
            out["loaded"] = full_state(model, opt)
    lo, hi = rank * global_batch // world, (rank + 1) * global_batch // world
    losses = []
    for step in range(start, start + steps):
        tokens, targets = (t.to(device()) for t in batch(cfg, global_batch, seed=step))
        opt.zero_grad()
        _, loss = model(tokens[lo:hi], targets[lo:hi])
        loss.backward()
        model.finish_gradient_synchronization()
        opt.step()
        losses.append(loss.item())
    if save_to is not None:
        save_sharded(save_to, model, opt, extra={"step": start + steps})
        if gather:
            out["saved"] = full_state(model, opt)
    return {**out, "params": model.gather_full_params(), "losses": losses, "step": start + steps}


def train_and_checkpoint(rank: int, world: int, cfg, steps: int, load_from=None, save_to=None,
                         global_batch: int = 12, dtype=torch.float64, lr: float = 1e-2, load_optimizer: bool = True):
    """`checkpoint_run` without the gathered states: (full parameters, losses, last step)."""
    run = checkpoint_run(rank, world, cfg, steps, load_from, save_to, global_batch, dtype, lr, load_optimizer)
    return run["params"], run["losses"], run["step"]


# ----------------------------------------------------------------------------- timing on ranks
def time_checkpoint(rank: int, world: int, cfg, folder, repeat: int = 3, steps_during: int = 2,
                    batch_per_rank: int = 2) -> dict:
    """A rank function: our FSDP (float32, AdamW, two steps so Adam's state exists), then
    medians over ``repeat`` of: a blocking `save_sharded` (T_s, barrier to barrier), a
    `load_sharded` with the files evicted from the page cache, a training step, and an
    `async_save_sharded` — the call (T_block), ``steps_during`` steps while it writes, then the
    wait for what is left. Also this rank's data-file bytes and their closed form."""
    import statistics

    from labkit.bench import median_time
    from labkit.model import batch
    from labkit.zero.formulas import model_state_bytes
    from labkit.zero.training import build

    model, opt = build("fsdp", cfg, torch.float32)
    tokens, targets = (t.to(device()) for t in batch(cfg, batch_per_rank, seed=rank))

    def step():
        opt.zero_grad()
        model(tokens, targets)[1].backward()
        model.finish_gradient_synchronization()
        opt.step()

    step(), step()
    saved = []                           # each save in a fresh folder, as a real run would do

    def fresh(kind: str) -> Path:
        saved.append(Path(folder) / f"{kind}-{len(saved)}")
        return saved[-1]

    def save():
        dist.barrier()
        save_sharded(fresh("sync"), model, opt, extra={"step": 2})
        dist.barrier()

    def load():
        dist.barrier()
        if rank == 0:
            _evict(p for p in sync.iterdir() if p.is_file())
        dist.barrier()
        load_sharded(sync, model, opt)
        dist.barrier()

    save_s = median_time(save, repeat=repeat, warmup=1)
    sync = saved[-1]
    load_s = median_time(load, repeat=repeat, warmup=1)
    step_s = median_time(lambda: (dist.barrier(), step()), repeat=repeat, warmup=0)
    checkpoint_group()
    async_save_sharded(fresh("async"), model, opt).result()            # warm-up: threads, plans
    blocks, during, waits = [], [], []
    for _ in range(repeat):
        futures = []
        dist.barrier()
        target = fresh("async")
        blocks.append(median_time(lambda: futures.append(async_save_sharded(target, model, opt)),
                                  repeat=1, warmup=0))
        during.append(median_time(step, repeat=steps_during, warmup=0))
        waits.append(median_time(lambda: futures[0].result(), repeat=1, warmup=0))
    sharded = [g for _, g in model.named_groups() if g.sharded]
    padding = sum(g.layout.shard_numel - chunk_numel(g.layout.numel, world, rank) for g in sharded)
    items = sum(1 for w in written_items(sync) if w.file == data_file(rank))
    return {"bytes": file_bytes(sync)[data_file(rank)], "metadata_bytes": file_bytes(sync)[".metadata"],
            "payload": expected_payload_bytes(model, opt), "items": items, "padding": padding,
            "formula": model_state_bytes(model.padded_numel, world, 3, param_bytes=4, grad_bytes=0,
                                         optimizer_bytes=8),
            "save_s": save_s, "load_s": load_s, "step_s": step_s, "block_s": statistics.median(blocks),
            "step_during_s": statistics.median(during), "wait_s": statistics.median(waits)}


@dataclass
class CheckpointTiming:
    """What `measure_checkpoint` saw: per rank (lists by rank) and for the whole save (seconds)."""

    world: int
    ranks: list                 # time_checkpoint's dict of each rank
    disk_write_s: float
    disk_read_s: float

    def _rank0(self, key: str) -> float:
        return self.ranks[0][key]

    @property
    def total_bytes(self) -> int:
        """Bytes of every data file together, plus .metadata."""
        return sum(r["bytes"] for r in self.ranks) + self._rank0("metadata_bytes")

    @property
    def hidden_fraction(self) -> float:
        """1 − T_block / T_s: the share of a blocking save's time that async_save takes off the loop."""
        return 1 - self._rank0("block_s") / self._rank0("save_s")

    def bandwidth(self) -> dict[str, float]:
        """bytes/s of DCP's save and load and of the disk baseline's write and read."""
        b = self.total_bytes
        return {"save": b / self._rank0("save_s"), "load": b / self._rank0("load_s"),
                "disk write": b / self.disk_write_s, "disk read": b / self.disk_read_s}

    def table(self):
        """Bandwidth next to the disk's, and the async save's blocked time (a `labkit.table.Table`)."""
        from labkit.table import Table

        bw, b = self.bandwidth(), self.total_bytes
        rows = [["disk: os.write + fsync", b, self.disk_write_s, bw["disk write"] / 1e6, 1.0],
                [f"DCP save, {self.world} ranks", b, self._rank0("save_s"), bw["save"] / 1e6,
                 bw["save"] / bw["disk write"]],
                ["disk: os.read, cache evicted", b, self.disk_read_s, bw["disk read"] / 1e6, 1.0],
                [f"DCP load, {self.world} ranks", b, self._rank0("load_s"), bw["load"] / 1e6,
                 bw["load"] / bw["disk read"]],
                ["async_save: loop blocked", b, self._rank0("block_s"), b / self._rank0("block_s") / 1e6,
                 b / self._rank0("block_s") / bw["disk write"]]]
        return Table(["what", "bytes", "seconds", "MB/s", "vs disk"], rows,
                     {"seconds": ".4f", "MB/s": ".0f", "vs disk": ".2f"},
                     title=f"hidden fraction of an async save: 1 - T_block/T_s = {self.hidden_fraction:.2f}")

    def bytes_table(self):
        """Per rank: data-file bytes next to Lab 10's stage-3 bytes 12·ΣΨ'/N (a Table)."""
        from labkit.table import Table

        rows = [[r, d["bytes"], d["payload"], int(d["formula"]), 12 * d["padding"], d["items"],
                 d["bytes"] - d["payload"]] for r, d in enumerate(self.ranks)]
        return Table(["rank", "file bytes", "tensor bytes", "12*sum(psi')/N", "padding B", "items",
                      "framing B"], rows)


def measure_checkpoint(world: int = 2, cfg=None, repeat: int = 3, steps_during: int = 2,
                       folder=None, timeout: float = 300.0) -> CheckpointTiming:
    """Run `time_checkpoint` on ``world`` ranks (gloo, or NCCL with a GPU each) and the disk baseline on the same file system
    (``folder``, default a temporary folder) with the checkpoint's bytes."""
    import shutil
    import tempfile

    from labkit.dist import launch
    from labkit.model import GPTConfig

    world = check_int("measure_checkpoint", "world", world, minimum=1)
    repeat = check_int("measure_checkpoint", "repeat", repeat, minimum=1)
    steps_during = check_int("measure_checkpoint", "steps_during", steps_during, minimum=1)
    cfg = cfg or GPTConfig(layers=2, hidden=128, heads=4, seq_len=32, vocab=512)
    tmp = tempfile.mkdtemp(prefix="labkit-dcp-", dir=folder)
    try:
        ranks = launch(time_checkpoint, world, cfg, tmp, repeat, steps_during, timeout=timeout)
        total = sum(r["bytes"] for r in ranks) + ranks[0]["metadata_bytes"]
        write_s, read_s = disk_baseline(tmp, total, repeat=repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return CheckpointTiming(world, ranks, write_s, read_s)


def dcp_table(world: int = 2, cfg=None, repeat: int = 3):
    """One line for a notebook: DCP's save/load bandwidth and async_save's blocked time next to the
    disk's, for a ~6 MB checkpoint on ``world`` ranks (a few seconds)."""
    return measure_checkpoint(world, cfg, repeat).table()


def reshard_table(saved_on: int = 3, load_on=(1, 2, 4), cfg=None, steps: int = 2, more: int = 2):
    """Train ``steps`` steps with our FSDP on ``saved_on`` ranks and save with DCP; load on each of
    ``load_on`` ranks, compare what was loaded with what was saved (`full_state`: parameters and
    Adam's m, v and step, bit for bit), and train ``more``; next to ``steps + more`` steps
    uninterrupted (float64). Returns a `labkit.table.Table`: the exact check, the largest
    parameter difference after training on, and the bytes each file holds."""
    import tempfile
    from functools import partial

    from labkit.checkpoint.state import equal_state
    from labkit.dist import launch
    from labkit.model import GPTConfig
    from labkit.table import Table

    cfg = cfg or GPTConfig(layers=2, hidden=12, heads=2, seq_len=6, vocab=29)
    gathered = partial(checkpoint_run, gather=True)
    whole = launch(checkpoint_run, saved_on, cfg, steps + more, quiet=True)[0]["params"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="labkit-dcp-") as folder:
        saved = launch(gathered, saved_on, cfg, steps, None, folder, quiet=True)[0]["saved"]
        sizes = file_bytes(folder)
        for m in load_on:
            runs = launch(gathered, m, cfg, more, folder, quiet=True)
            exact = all(equal_state(saved, r["loaded"]) for r in runs)
            params = runs[0]["params"]
            rows.append((saved_on, m, "yes" if exact else "NO",
                         max((params[k] - whole[k]).abs().max().item() for k in whole)))
    files = ", ".join(f"{name} {size} B" for name, size in sorted(sizes.items()))
    return Table(["saved on", "loaded on", "loaded = saved, bit for bit", f"max |param - uninterrupted|, +{more}"],
                 rows, formats={f"max |param - uninterrupted|, +{more}": ".1e"}, title=f"files: {files}")
