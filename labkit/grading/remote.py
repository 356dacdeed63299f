"""The judge's handle on a submission: a module-like proxy whose calls run in a sandboxed worker.

    sub = RemoteModule(pool, "lab03_matmul", "cache_tiled")
    C, traffic = sub.cache_tiled(A, B, 2, 4)        # runs in the worker, comes back as data
    out = sub.harness("lab05_collective", ...)       # a labkit harness run next to the submission

Every call has a deadline (what is left of the exercise's and the lab's time
budgets), the worker's process tree has a memory limit, what it prints is
kept only up to a cap, and a reply larger than `MAX_REPLY` is refused. When a
limit is hit the worker is killed (with everything it started) and the call
raises `WorkerFailure` with a one-line reason; the next call starts a fresh
worker. An exception raised by the submission comes back as the builtin
exception class it derives from (so ``pytest.raises(ValueError)`` works), with
the submission's file:line in the message.
"""
from __future__ import annotations

import builtins
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from labkit.grading import codec, static
from labkit.grading.sandbox import Sandbox, kill_tree, reap_orphans
from labkit.proctree import tree_rss

MAX_REPLY = 256 << 20        # bytes of one reply
TAG_ENV = "LABKIT_GRADING_TAG"   # labels this grading run's workers (their argv), e.g. for leftover checks
MAX_OUTPUT = 8 << 10         # characters of worker output kept (the tail) for messages
_POLL_S = 0.05


class WorkerFailure(Exception):
    """The submission's worker timed out, crashed, ran out of memory or broke the protocol."""


class SubmissionError(Exception):
    """The submission raised an exception that is not a builtin one (its name is in the message)."""


@dataclass
class Budget:
    """Seconds of worker time left: ``exercise`` per (module, exercise), ``lab`` per module."""

    exercise_s: float = 60.0
    lab_s: float = 240.0
    used: dict = field(default_factory=dict)

    def left(self, module: str, exercise: str) -> float:
        ex = self.exercise_s - self.used.get((module, exercise), 0.0)
        lab = self.lab_s - sum(v for (m, _), v in self.used.items() if m == module)
        return min(ex, lab)

    def spend(self, module: str, exercise: str, seconds: float) -> None:
        key = (module, exercise)
        self.used[key] = self.used.get(key, 0.0) + seconds


def other_exercises(module: str, exercise: str | None) -> dict | None:
    """What the worker grading ``exercise`` puts in place of the submission's other exercises of
    ``module``: {"source": the reference answers with ``exercise`` a stub, "names": the other
    exercises, "exercise": ``exercise``, whose learner's answer those references call}; None for a module without a manifest. So every graded test runs only the exercise
    it grades, and a stub or a mistake elsewhere in the file costs only its own points."""
    from labkit.grading import generate

    if exercise is None or module not in generate.LABS:
        return None
    names = [n for n in generate.stubs(module) if n != exercise]
    return ({"source": generate.render_except(module, exercise), "names": names, "exercise": exercise}
            if names else None)


class Worker:
    """One sandboxed process holding one submission module."""

    def __init__(self, sandbox: Sandbox, submission_dir: Path, module: str, references: tuple,
                 exercise: str | None = None):
        self.module = module
        self.output = ""
        self.home = Path(tempfile.mkdtemp(prefix="labkit-worker-"))
        if sandbox.needs_world_readable():
            os.chmod(self.home, 0o777)
        r, w = os.pipe()
        env = _worker_env(self.home if sandbox.kind == "none" else Path("/tmp"))
        argv = [sys.executable, "-I", "-B", "-m", "labkit.grading.worker", str(w)]
        if os.environ.get(TAG_ENV):      # a label on the command line, so whoever graded can find its workers
            argv.append(f"tag={os.environ[TAG_ENV]}")
        try:
            self.proc = sandbox.start(argv, submission_dir, env, pass_fds=(w,))
        finally:
            os.close(w)
        self.reply = r
        self.limits = sandbox.limits
        self.pending = [{"op": "load", "path": f"{sandbox.submission_path(submission_dir)}/{module}.py",
                         "name": module, "references": list(references),
                         "others": other_exercises(module, exercise)}]
        self.load_error = None

    def request(self, message: dict, timeout_s: float):
        """Send ``message``; return the decoded reply. WorkerFailure on any limit or crash."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        if self.load_error is None and self.pending:
            load, self.pending = self.pending[0], []
            result = self._roundtrip(load, deadline, timeout_s)
            if "raised" in result:
                self.load_error = result["raised"]
        if self.load_error is not None:
            raise _as_exception(self.load_error, f"importing {self.module}.py")
        return self._roundtrip(message, deadline, timeout_s)

    def _roundtrip(self, message: dict, deadline: float, timeout_s: float) -> dict:
        self._send(codec.dumps(message), deadline, timeout_s)
        reply = self._await_reply(deadline, timeout_s)
        try:
            value = codec.loads(reply)
        except codec.CodecError as e:
            self.close()
            raise WorkerFailure(f"the worker sent a malformed reply ({e})") from None
        if not isinstance(value, dict) or not ({"ok", "raised"} & set(value)):
            self.close()
            raise WorkerFailure("the worker sent a reply that is not a result")
        return value

    def _send(self, data: bytes, deadline: float, timeout_s: float) -> None:
        fd = self.proc.stdin.fileno()
        os.set_blocking(fd, False)
        view = memoryview(len(data).to_bytes(8, "little") + data)
        while view:
            if time.monotonic() >= deadline:
                self.close()
                raise WorkerFailure(f"timed out after {timeout_s:.0f} s (the worker stopped reading)")
            _, ready, _ = select.select([], [fd], [], _POLL_S)
            if ready:
                try:
                    view = view[os.write(fd, view[:1 << 16]):]
                except BlockingIOError:
                    continue
                except (BrokenPipeError, OSError):
                    self._died()

    def _await_reply(self, deadline: float, timeout_s: float) -> bytes:
        buf = b""
        need = None
        out = self.proc.stdout.fileno()
        while True:
            now = time.monotonic()
            if now >= deadline:
                self.close()
                raise WorkerFailure(f"timed out after {timeout_s:.0f} s (the call did not return; "
                                    f"the worker and everything it started were killed){self._tail()}")
            ready, _, _ = select.select([self.reply, out], [], [], min(_POLL_S * 4, deadline - now))
            if out in ready:
                chunk = os.read(out, 1 << 16)
                self.output = (self.output + chunk.decode(errors="replace"))[-MAX_OUTPUT:]
            if self.reply in ready:
                chunk = os.read(self.reply, 1 << 20)
                if not chunk:
                    self._died()
                buf += chunk
                if need is None and len(buf) >= 8:
                    need = int.from_bytes(buf[:8], "little")
                    if need > MAX_REPLY:
                        self.close()
                        raise WorkerFailure(f"the reply was {need} bytes, over the {MAX_REPLY >> 20} MiB limit")
                if need is not None and len(buf) >= 8 + need:
                    return buf[8:8 + need]
            if not ready:
                rss = tree_rss(self.proc.pid)
                if rss > self.limits.memory_bytes:
                    self.close()
                    raise WorkerFailure(f"used {rss >> 20} MiB of memory, over the "
                                        f"{self.limits.memory_bytes >> 20} MiB limit; it was killed")
                if self.proc.poll() is not None:
                    self._died()

    def _died(self):
        try:
            rest = os.read(self.proc.stdout.fileno(), 1 << 16)
            self.output = (self.output + rest.decode(errors="replace"))[-MAX_OUTPUT:]
        except OSError:
            pass
        code = self.proc.wait()
        self.close()
        how = f"signal {_signame(-code)}" if code < 0 else f"exit status {code}"
        raise WorkerFailure(f"the worker crashed ({how}){self._tail()}")

    def _tail(self) -> str:
        lines = [ln for ln in self.output.splitlines() if ln.strip()][-3:]
        return ("; it printed: " + " | ".join(ln[:200] for ln in lines)) if lines else ""

    def close(self) -> None:
        if self.proc is None:
            return
        kill_tree(self.proc)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.close(self.reply)
        except OSError:
            pass
        self.proc = None
        shutil.rmtree(self.home, ignore_errors=True)

    @property
    def alive(self) -> bool:
        return self.proc is not None


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


def _worker_env(home: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HOME=str(home), TMPDIR=str(home), TRITON_CACHE_DIR=str(home / "triton"), MPLBACKEND="Agg",
               PYTHONUNBUFFERED="1")
    return env


def _as_exception(raised: dict, context: str) -> Exception:
    name, message = str(raised.get("type", "?"))[:100], str(raised.get("message", ""))[:2000]
    where = str(raised.get("where", ""))[:200]
    text = f"{message} [{name} at {where}]" if where else f"{message} [{name}]"
    for base in raised.get("bases", ()):
        cls = getattr(builtins, str(base), None)
        if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, Warning):
            try:
                return cls(text)
            except Exception:  # noqa: BLE001 - an exception class with a strange constructor
                break
    return SubmissionError(f"{name} while {context}: {text}" if context else f"{name}: {text}")


class Pool:
    """The judge's workers: one per (module, exercise), all sharing one snapshot and budgets."""

    def __init__(self, submission_dir: Path, sandbox: Sandbox, budget: Budget):
        self.submission_dir = submission_dir
        self.sandbox = sandbox
        self.budget = budget
        self.workers: dict[tuple, Worker] = {}
        self.static: dict[str, dict] = {}

    def static_reasons(self, module: str, policy: static.Policy, exercises: set[str]) -> dict:
        if module not in self.static:
            path = self.submission_dir / f"{module}.py"
            source = path.read_text(errors="replace") if path.is_file() else None
            self.static[module] = ({static.ALL: f"the submission has no {module}.py"} if source is None
                                   else static.check(source, policy, exercises))
        return self.static[module]

    def worker(self, module: str, exercise: str, references: tuple) -> Worker:
        w = self.workers.get((module, exercise))
        if w is None or not w.alive:
            w = self.workers[(module, exercise)] = Worker(self.sandbox, self.submission_dir, module, references,
                                                          exercise)
        return w

    def release(self, module: str, exercise: str) -> None:
        w = self.workers.pop((module, exercise), None)
        if w is not None:
            w.close()
        self.reap()

    def reap(self) -> None:
        if self.sandbox.kind == "none":
            reap_orphans({w.proc.pid for w in self.workers.values() if w.alive})

    def close(self) -> None:
        for w in self.workers.values():
            w.close()
        self.workers.clear()
        self.reap()


class RemoteModule:
    """Attribute access gives a function that runs the submission's function of that name remotely."""

    def __init__(self, pool: Pool, module: str, exercise: str, references: tuple = ()):
        self._pool, self._module, self._exercise, self._refs = pool, module, exercise, references
        self.__name__ = module

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._run({"op": "call", "fn": name, "args": list(args), "kwargs": kwargs})

    def harness(self, name: str, *args, **kwargs):
        """Run ``labkit.grading.harness.<name>(module, *args, **kwargs)`` in the worker; return its data."""
        return self._run({"op": "harness", "fn": name, "args": list(args), "kwargs": kwargs})

    def _run(self, message: dict):
        budget = self._pool.budget
        left = budget.left(self._module, self._exercise)
        if left <= 0:
            raise WorkerFailure(f"the time budget for {self._exercise} ({budget.exercise_s:.0f} s per exercise, "
                                f"{budget.lab_s:.0f} s per lab) is used up")
        w = self._pool.worker(self._module, self._exercise, self._refs)
        start = time.monotonic()
        try:
            result = w.request(message, left)
        finally:
            budget.spend(self._module, self._exercise, time.monotonic() - start)
        if "raised" in result:
            raise _as_exception(result["raised"], "")
        return result["ok"]
