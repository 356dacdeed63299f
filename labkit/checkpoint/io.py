"""Training checkpoints that survive a crash at any moment, and refuse to load when damaged.

    save(path, model=model, optimizer=opt, step=step, extra={"sampler": sampler.state_dict()})
    step, extra = load(path, model=model, optimizer=opt)

**Atomic writes.** A checkpoint is written to a temporary file in the same folder, flushed and
``fsync``-ed, then ``os.replace``-d onto its name (a rename is atomic on POSIX file systems), and
the folder is ``fsync``-ed so the rename itself is durable. A crash at any moment leaves either
the old file or the new one under that name — never half of one. Writing in place (open the final
name and write) is the classic mistake: a crash mid-write leaves a truncated file and no good
checkpoint at all.

**Checked reads.** The file is a short header — a magic line, then one JSON line with the
payload's length and SHA-256 — followed by the payload (``torch.save`` of a dict). ``load``
refuses a file whose length or checksum does not match, with one line saying which file and why
(`CheckpointError`). `CheckpointManager` keeps the last ``keep`` checkpoints of a run and, when
asked, falls back to the newest one that loads.

**What is saved** for an exact resume (`labkit.checkpoint.state`): the model's and optimizer's
state dicts (and a learning-rate scheduler's), the step, every random-number generator in use —
Python's, NumPy's, torch's CPU generator and every CUDA device's — and whatever ``extra`` holds
(the data order: a `ResumableSampler`'s epoch and position).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from pathlib import Path

import torch

from labkit.checkpoint.state import rng_state, set_rng_state

MAGIC = b"LABKIT-CHECKPOINT 1\n"
CRASH_ENV = "LABKIT_CHECKPOINT_CRASH"   # tests: "fraction" of the payload after which save() dies


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded: missing, truncated, corrupted, or not a checkpoint."""


def _payload(model, optimizer, step: int, extra, scheduler) -> bytes:
    state = {"step": int(step), "model": model.state_dict(), "rng": rng_state(), "extra": extra}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        state["scheduler"] = scheduler.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(path, *, model: torch.nn.Module, optimizer=None, step: int = 0, extra=None, scheduler=None) -> Path:
    """Write a checkpoint to ``path`` atomically (module docstring); returns the path. ``extra``:
    anything ``torch.save`` can store with ``weights_only`` loading (numbers, strings, lists,
    dicts, tensors) — e.g. a sampler's ``state_dict()``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"save: model must be a torch.nn.Module, got {type(model).__name__}")
    path = Path(path)
    if not path.parent.is_dir():
        raise CheckpointError(f"save: folder {path.parent} does not exist")
    payload = _payload(model, optimizer, step, extra, scheduler)
    header = MAGIC + json.dumps({"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}).encode() + b"\n"
    crash = os.environ.get(CRASH_ENV)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            if crash is not None:                       # a test's simulated power cut mid-write
                cut = int(len(payload) * float(crash))
                f.write(payload[:cut])
                f.flush()
                os._exit(9)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def read(path) -> dict:
    """The checkpoint's contents, after checking its header, length and SHA-256."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"load: cannot read {path} ({e.strerror or e})") from None
    if not data.startswith(MAGIC):
        raise CheckpointError(f"load: {path} is not a labkit checkpoint (no header)")
    head_end = data.find(b"\n", len(MAGIC))
    try:
        meta = json.loads(data[len(MAGIC):head_end])
    except ValueError:
        raise CheckpointError(f"load: {path} has a damaged header") from None
    payload = data[head_end + 1:]
    if len(payload) != meta["bytes"]:
        raise CheckpointError(f"load: {path} is truncated ({len(payload)} of {meta['bytes']} bytes)")
    if hashlib.sha256(payload).hexdigest() != meta["sha256"]:
        raise CheckpointError(f"load: {path} is corrupted (checksum mismatch)")
    return torch.load(io.BytesIO(payload), weights_only=True)


def load(path, *, model: torch.nn.Module, optimizer=None, scheduler=None, restore_rng: bool = True):
    """Restore ``model`` (and ``optimizer``, ``scheduler``) from ``path`` and, unless told not to,
    every random-number generator; returns (step, extra). `CheckpointError` if it is damaged."""
    state = read(path)
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    if restore_rng:
        set_rng_state(state["rng"])
    return state["step"], state["extra"]


class CheckpointManager:
    """Checkpoints ``step-<n>.ckpt`` in ``folder``: keeps the newest ``keep``, finds the newest good."""

    PATTERN = re.compile(r"step-(\d+)\.ckpt$")

    def __init__(self, folder, keep: int = 3):
        from labkit.checks import check_int

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.keep = check_int("CheckpointManager", "keep", keep, minimum=1)

    def paths(self) -> list[Path]:
        """Checkpoints on disk, newest first."""
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := self.PATTERN.search(p.name))]
        return [p for _, p in sorted(found, reverse=True)]

    def path(self, step: int) -> Path:
        return self.folder / f"step-{step:08d}.ckpt"

    def good_steps(self) -> list[int]:
        """Steps whose checkpoint reads back whole (header, length, checksum), newest first."""
        good = []
        for path in self.paths():
            try:
                read(path)
            except CheckpointError:
                continue
            good.append(int(self.PATTERN.search(path.name).group(1)))
        return good

    def save(self, step: int, **kwargs) -> Path:
        for stale in self.folder.glob(".step-*.tmp"):      # left by a writer that crashed mid-save
            stale.unlink(missing_ok=True)
        path = save(self.path(step), step=step, **kwargs)
        for old in self.paths()[self.keep:]:
            old.unlink(missing_ok=True)
        return path

    def load_latest(self, fallback: bool = True, **kwargs):
        """(step, extra, path) of the newest checkpoint that loads; with ``fallback``, damaged ones
        are skipped (and reported in ``skipped``). None if there is none."""
        self.skipped: list[str] = []
        for path in self.paths():
            try:
                step, extra = load(path, **kwargs)
                return step, extra, path
            except CheckpointError as e:
                if not fallback:
                    raise
                self.skipped.append(str(e))
        return None
