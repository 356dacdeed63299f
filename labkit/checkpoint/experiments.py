"""Experiments that put a save function or a resume-state function to the test, for the notebook's
pictures and for the grader (the same code for both).

``crash_test(save, cases)`` runs ``save(data, path)`` in a forked child that is killed at a chosen
moment — before its first byte, half way through the data, after the last byte, or just before
its rename — by replacing the file functions it can call (``open``, ``io.open``, ``os.open``,
``os.write``, ``os.replace``, ``os.rename``) with ones that count the bytes and die on cue. The
parent then reads what is at ``path``: the old contents, the new ones, nothing, or a torn mix.
It also notes whether the child ever opened ``path`` itself for writing (saving in place).

A kill is not a power loss: what a killed process wrote is in the kernel's page cache and reaches
the disk anyway, so a save with no ``fsync`` at all survives every kill above. What a power cut
would lose cannot be produced by killing a process; it is observed instead: the child's
``os.fsync``/``os.fdatasync`` are wrapped too, and the result says whether the file renamed onto
``path`` was fsync-ed whole before the rename (``fsync_file``) and the folder after it
(``fsync_dir``) — the two calls that make the new contents, and the rename itself, durable.

``resume_experiment(state_fn, ...)`` trains a small GPT whose every step draws on Python's,
NumPy's, torch's and a GPU's random generators and on a shuffled data order; it runs the whole
training once, and once as two fresh processes that hand over through a checkpoint: weights,
optimizer and ``state_fn(sampler)`` saved after ``stop`` steps, restored with
``state_fn(sampler, state)`` in a process whose generators were seeded differently. On a CPU the
GPU's generator is a stand-in (`fake_cuda`): ``torch.cuda.is_available()`` says True and
``torch.cuda.get_rng_state_all`` / ``set_rng_state_all`` read and set a CPU generator that the
step draws from, as dropout on a GPU would.
"""
from __future__ import annotations

import builtins
import contextlib
import io
import os
import random
import stat
import tempfile
from pathlib import Path

import numpy as np
import torch

from labkit.checkpoint.state import ResumableSampler
from labkit.dist import launch
from labkit.model import GPT, GPTConfig, batch

CRASH_POINTS = ("none", "start", "half", "end", "rename")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


# ---------------------------------------------------------------------- crash test
class _Crash:
    """The child's counting, dying file functions (installed by `_install`)."""

    def __init__(self, point: str, size: int, path: str, report: int):
        self.point, self.path, self.report = point, os.path.abspath(path), report
        st = os.stat(os.path.dirname(self.path))
        self.folder = (st.st_dev, st.st_ino)
        self.limit = {"start": 0, "half": size // 2, "end": size}.get(point)
        self.written = 0

    def note(self, what: str) -> None:
        os.write(self.report, (what + "\n").encode())

    def opened(self, target, writing: bool) -> None:
        if writing and isinstance(target, (str, bytes, os.PathLike)) and \
                os.path.abspath(os.fsdecode(target)) == self.path:
            self.note("opened-final")

    def wrote(self, n: int) -> int:
        """How many of the next ``n`` bytes may be written before dying (n: all of them)."""
        if self.limit is None or self.point == "end":
            return n
        return max(0, min(n, self.limit - self.written))

    def after_write(self, n: int) -> None:
        self.written += n
        if self.limit is not None and self.point != "end" and self.written >= self.limit:
            os._exit(9)

    def before_rename(self, src, dst) -> None:
        if self.point in ("end", "rename"):
            os._exit(9)
        if isinstance(dst, (str, bytes, os.PathLike)) and os.path.abspath(os.fsdecode(dst)) == self.path:
            with contextlib.suppress(OSError):
                st = os.stat(src)
                self.note(f"rename {st.st_dev}:{st.st_ino}")

    def synced(self, fd: int) -> None:
        """After a finished fsync of ``fd``: note a regular file (which, and how many bytes it
        held) or this folder."""
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == self.folder:
            self.note("fsync-dir")
        elif stat.S_ISREG(st.st_mode):
            self.note(f"fsync-file {st.st_dev}:{st.st_ino} {st.st_size}")


class _File:
    """A writable file whose writes `_Crash` counts."""

    def __init__(self, real, crash: _Crash):
        self._real, self._crash = real, crash

    def write(self, b):
        b = bytes(b) if not isinstance(b, (bytes, str)) else b
        allowed = self._crash.wrote(len(b))
        n = self._real.write(b[:allowed])
        if allowed < len(b):
            self._real.flush()
        self._crash.after_write(allowed)
        if allowed < len(b):
            os._exit(9)
        return n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._real.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _install(crash: _Crash) -> None:
    real_open, real_os_open, real_write = io.open, os.open, os.write
    real_replace, real_rename = os.replace, os.rename
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def open_(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        writing = any(c in mode for c in "wax+")
        crash.opened(file, writing)
        return _File(f, crash) if writing else f

    def os_open(path, flags, *args, **kwargs):
        crash.opened(path, bool(flags & _WRITE_FLAGS))
        return real_os_open(path, flags, *args, **kwargs)

    def os_write(fd, data):
        if fd == crash.report:
            return real_write(fd, data)
        allowed = crash.wrote(len(data))
        n = real_write(fd, bytes(data)[:allowed])
        crash.after_write(allowed)
        if allowed < len(data):
            os._exit(9)
        return n

    def replace(src, dst, *args, **kwargs):
        crash.before_rename(src, dst)
        return real_replace(src, dst, *args, **kwargs)

    def rename(src, dst, *args, **kwargs):
        crash.before_rename(src, dst)
        return real_rename(src, dst, *args, **kwargs)

    def syncing(real):
        def sync(fd):
            fd = fd if isinstance(fd, int) else fd.fileno()
            real(fd)
            crash.synced(fd)
        return sync

    builtins.open = io.open = open_
    os.open, os.write, os.replace, os.rename = os_open, os_write, replace, rename
    os.fsync, os.fdatasync = syncing(real_fsync), syncing(real_fdatasync)


def _durability(notes: list[str], size: int) -> tuple[bool, bool]:
    """(fsync_file, fsync_dir) from the child's notes, in order: the file last renamed onto the path
    was fsync-ed holding all ``size`` bytes before that rename; the folder was fsync-ed after it."""
    renamed = next((i for i in reversed(range(len(notes))) if notes[i].startswith("rename ")), None)
    if renamed is None:
        return False, False
    inode = notes[renamed].split()[1]
    whole = f"fsync-file {inode} {size}"
    return whole in notes[:renamed], "fsync-dir" in notes[renamed + 1:]


def crash_test(save, cases, timeout_s: float = 30.0) -> list[dict]:
    """For each (old bytes or None, new bytes, crash point) in ``cases``: ``save(new, path)`` in a
    killed-on-cue child; returns per case {"found": "old" | "new" | "missing" | "torn", "exit": the
    child's exit status (0 when it finished), "in_place": whether it opened ``path`` for writing,
    "fsync_file", "fsync_dir": whether the new file was fsync-ed whole before its rename onto
    ``path`` and the folder after it (module docstring), "files": the folder's file names
    afterwards}."""
    import signal
    import time

    out = []
    for old, new, point in cases:
        if point not in CRASH_POINTS:
            raise ValueError(f"crash_test: crash point must be one of {', '.join(CRASH_POINTS)}, got {point!r}")
        with tempfile.TemporaryDirectory(prefix="labkit-crash-") as folder:
            path = os.path.join(folder, "checkpoint.bin")
            if old is not None:
                with open(path, "wb") as f:
                    f.write(old)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:                                         # the child: save, and die on cue
                try:
                    os.close(r)
                    _install(_Crash(point, len(new), path, w))
                    save(new, path)
                    os._exit(0)
                except BaseException:                            # noqa: BLE001 - any error ends the child
                    os._exit(3)
            os.close(w)
            deadline = time.monotonic() + timeout_s
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    status = 9 << 8
                    break
                time.sleep(0.005)
            with os.fdopen(r, "rb") as f:
                notes = f.read().decode().splitlines()
            found = ("missing" if not os.path.exists(path) else "new" if Path(path).read_bytes() == new else
                     "old" if old is not None and Path(path).read_bytes() == old else "torn")
            fsync_file, fsync_dir = _durability(notes, len(new))
            out.append({"found": found, "exit": os.waitstatus_to_exitcode(status), "in_place": "opened-final" in notes,
                        "fsync_file": fsync_file, "fsync_dir": fsync_dir, "files": sorted(os.listdir(folder))})
    return out


# ---------------------------------------------------------------------- resume experiment
@contextlib.contextmanager
def fake_cuda(devices: int = 1, seed: int = 0, current: int = 0):
    """Within the block, torch reports ``devices`` initialised CUDA devices, ``current`` being this
    process's, whose random generators are CPU ``torch.Generator``s: get_rng_state(_all) /
    set_rng_state(_all) / manual_seed(_all) work on them ("cuda" alone: the current device).
    Yields the list of generators (what a step on a "GPU" draws from)."""
    gens = [torch.Generator().manual_seed(seed + d) for d in range(devices)]
    saved = {name: getattr(torch.cuda, name) for name in
             ("is_available", "is_initialized", "device_count", "current_device", "get_rng_state",
              "set_rng_state", "get_rng_state_all", "set_rng_state_all", "manual_seed", "manual_seed_all")}

    def _index(device) -> int:
        index = device if isinstance(device, int) else torch.device(device).index
        if index is None:
            return current
        if not 0 <= index < devices:
            raise RuntimeError(f"CUDA error: invalid device ordinal {index} ({devices} device(s))")
        return index

    torch.cuda.is_available = torch.cuda.is_initialized = lambda: True
    torch.cuda.device_count = lambda: devices
    torch.cuda.current_device = lambda: current
    torch.cuda.get_rng_state = lambda device="cuda": gens[_index(device)].get_state()
    torch.cuda.set_rng_state = lambda state, device="cuda": gens[_index(device)].set_state(state)
    torch.cuda.get_rng_state_all = lambda: [g.get_state() for g in gens]
    torch.cuda.set_rng_state_all = lambda states: [g.set_state(s) for g, s in zip(gens, states)]
    torch.cuda.manual_seed = lambda s: gens[current].manual_seed(s)
    torch.cuda.manual_seed_all = lambda s: [g.manual_seed(s) for g in gens]
    try:
        yield gens
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)


RESUME_CFG = GPTConfig(layers=1, hidden=16, heads=2, seq_len=8, vocab=32, dropout=0.2)


def _seed(seed: int, gens) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    for g in gens:
        g.manual_seed(seed + 7)


def _phase(rank, world, state_fn, phase: str, folder: str, steps: int, stop: int):
    """One process of the experiment: "whole" (all steps), "first" (stop steps, then checkpoint),
    or "rest" (restore in a differently seeded process, then the remaining steps)."""
    cfg = RESUME_CFG
    with fake_cuda() as gens:
        _seed(11 if phase != "rest" else 99, gens)
        model = GPT(cfg, seed=0)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        sampler = ResumableSampler(24, 4, seed=5)
        tokens_all, targets_all = batch(cfg, 24, seed=6)                    # (24, T) each
        start = 0
        if phase == "rest":
            saved = torch.load(os.path.join(folder, "ckpt.pt"), weights_only=False)
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["optimizer"])
            state_fn(sampler, saved["state"])
            start = stop
        last = stop if phase == "first" else steps
        for _ in range(start, last):
            idx = sampler.next_batch()                                       # the data order
            crop = random.randint(cfg.seq_len // 2, cfg.seq_len)             # Python's generator
            tokens, targets = tokens_all[idx, :crop].clone(), targets_all[idx, :crop]
            noisy = torch.from_numpy(np.random.random_sample(tuple(tokens.shape)) < 0.1)   # NumPy's
            tokens[noisy] = (tokens[noisy] + 1) % cfg.vocab
            gpu = 1 + 0.1 * torch.rand((), generator=gens[0])                 # the "GPU" generator
            opt.zero_grad()
            (model(tokens, targets)[1] * gpu).backward()                     # dropout: torch's generator
            opt.step()
        if phase == "first":
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "state": state_fn(sampler)},
                       os.path.join(folder, "ckpt.pt"))
        return {n: p.detach().clone() for n, p in model.named_parameters()}


def resume_experiment(state_fn, steps: int = 8, stop: int = 4, timeout: float = 60.0) -> dict:
    """{"whole": parameters after ``steps`` steps in one process, "resumed": after ``stop`` steps,
    a checkpoint with ``state_fn``'s state, and the rest in a fresh, differently seeded process}."""
    with tempfile.TemporaryDirectory(prefix="labkit-resume-") as folder:
        whole = launch(_phase, 1, state_fn, "whole", folder, steps, stop, backend="gloo", timeout=timeout,
                       quiet=True)[0]
        launch(_phase, 1, state_fn, "first", folder, steps, stop, backend="gloo", timeout=timeout, quiet=True)
        rest = launch(_phase, 1, state_fn, "rest", folder, steps, stop, backend="gloo", timeout=timeout,
                      quiet=True)[0]
    return {"whole": whole, "resumed": rest}
