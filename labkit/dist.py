"""The course's one launcher: run a function on N torch.distributed ranks.

    results = launch(fn, world_size, *args, backend="auto", timeout=60.0)

runs ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes, each
inside an initialised default process group, and returns the per-rank return
values (index = rank). gloo on CPU; NCCL when ``world_size`` <= number of GPUs
and ``fn`` lives in an importable .py module (a notebook cell's function runs
on gloo, with a one-line note saying why). Under NCCL the group is
``"cpu:gloo,cuda:nccl"``: CUDA tensors go through NCCL and CPU tensors (a step
counter, a timing) through gloo; rank r owns GPU r, and `device()` names it.
Rank code makes its tensors with ``device=labkit.dist.device()``; what a rank
returns comes back as CPU tensors.

Guarantees (each is tested in tests/test_dist.py):
- the ranks meet through a FileStore in a private temporary folder and gloo
  connects them over loopback on ports the OS picks, so two launches at the
  same time never collide and nothing listens beyond 127.0.0.1 (a TCP store
  would listen on every interface, and its client connect sometimes stalls
  for seconds);
- CPU ranks are forked (a notebook cell's function runs), except when the caller has
  already initialised CUDA: a forked child cannot use CUDA and inherits a driver state it
  must not touch, so importable functions are spawned then (others are forked and run on
  CPU, with a one-line note);
- a spawned rank gets ``cores // world_size`` torch threads (at least 1); a forked
  rank computes with one thread: GNU OpenMP (torch's CPU thread pool) hangs in a
  child forked from a process that has already used a thread team, which a
  notebook that ran any torch op has;
- a rank that raises ends the launch with `RankError` naming the rank and
  carrying its traceback; a rank that hangs ends it with `TimeoutError`
  naming the ranks that had not returned (and where they were) after
  ``timeout`` seconds; a rank that dies (signal, os._exit) is named too;
- every rank process, and anything a rank started, is gone when `launch`
  returns or raises (each rank leads its own process group); a caller
  stopped by SIGTERM cleans up too, and a caller killed outright leaves a
  temporary folder that the next launch removes;
- a rank that dies without a Python traceback (a signal, gloo's abort on
  mismatched sizes) is reported with the tail of what it wrote to stderr;
- launching from inside a rank is refused with a one-line error.

What a rank prints is captured and printed by the caller afterwards, prefixed
with ``[rank r]``, in rank order (so notebook output is deterministic).
"""
from __future__ import annotations

import contextlib
import datetime
import faulthandler
import io
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable

from labkit.proctree import kill_below

__all__ = ["launch", "RankError", "device", "backend", "default_backend", "auto_backend", "importable",
           "init_torchrun_group", "device_note"]

_RANK_ENV = "LABKIT_RANK"
_DIR_PREFIX = "labkit-launch-"
_STDERR_TAIL = 1500   # characters of a dead rank's stderr kept in its error
_JOIN_GRACE_S = 2.0   # how long finished ranks get to tear their group down before being killed
_ERROR_GRACE_S = 0.3  # after a first failure, how long to wait for earlier-timestamped ones


_YOUR_LINE = "your line: "


class RankError(RuntimeError):
    """A rank raised (or died). ``rank``, ``exc_type`` (a name) and ``remote_traceback`` say where;
    ``where`` is the failing line of the caller's own code ("file:line: source"), "" if none ran.
    The message names the rank and that line first, then the shortest useful traceback: the
    frames of the caller's own code and the frame that raised (`rank_traceback`)."""

    def __init__(self, rank: int, exc_type: str, message: str, remote_traceback: str):
        first, _, rest = remote_traceback.partition("\n")
        self.where = first[len(_YOUR_LINE):] if first.startswith(_YOUR_LINE) else ""
        tb = rest if self.where else remote_traceback
        self.rank, self.exc_type, self.remote_traceback = rank, exc_type, tb
        at = f" at {self.where}" if self.where else ""
        super().__init__(f"rank {rank} failed{at} with {exc_type}: {message}\n"
                         f"--- traceback from rank {rank} ---\n{tb.rstrip()}")


def _is_library(filename: str) -> bool:
    """Whether a frame's file belongs to labkit, an installed package or Python itself."""
    import sysconfig

    path = os.path.realpath(filename)
    roots = {os.path.dirname(os.path.realpath(__file__))}
    roots |= {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return filename.startswith("<frozen") or any(path.startswith(r + os.sep) for r in roots)


def rank_traceback(e: BaseException) -> str:
    """The shortest useful traceback of ``e``: the frames of the caller's own code (outside labkit,
    installed packages and the standard library), then the frame that raised, then the exception;
    the whole traceback when no frame is the caller's. When one is, the first line is
    "your line: file:line: source" for the innermost of them."""
    frames = traceback.extract_tb(e.__traceback__)
    own = [f for f in frames if not _is_library(f.filename)]
    if not own:
        return "".join(traceback.format_exception(type(e), e, e.__traceback__))
    keep = own + ([frames[-1]] if frames[-1] is not own[-1] else [])
    f = own[-1]
    head = f"{_YOUR_LINE}{os.path.basename(f.filename)}:{f.lineno}: {(f.line or '').strip()}\n"
    body = "".join(traceback.format_list(keep)) + "".join(traceback.format_exception_only(type(e), e))
    return head + body


def default_backend(world_size: int) -> str:
    """'nccl' when there are at least ``world_size`` GPUs and NCCL is built in, else 'gloo'."""
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def importable(fn) -> bool:
    """Whether spawned ranks can import ``fn``: a top-level function of a real .py module.

    Functions defined in a notebook cell (module ``__main__``), lambdas and nested
    functions cannot be found by a freshly spawned process.
    """
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    qualname = getattr(fn, "__qualname__", "")
    if module is None or fn.__module__ == "__main__" or not getattr(module, "__file__", None) or "<" in qualname:
        return False
    try:
        pickle.dumps(fn)
    except Exception:  # noqa: BLE001 - any pickling failure means "not importable"
        return False
    return True


def auto_backend(fn, world_size: int) -> tuple[str, str]:
    """The backend ``backend="auto"`` picks, and a one-line note when it passes over NCCL.

    NCCL when there is a GPU per rank *and* ``fn`` is importable (NCCL ranks are spawned,
    and a spawned rank must import fn); otherwise gloo on CPU tensors.
    """
    if default_backend(world_size) != "nccl":
        return "gloo", ""
    if not importable(fn):
        name = getattr(fn, "__name__", type(fn).__name__)
        return "gloo", f"launch: {name} runs on gloo (CPU); NCCL needs fn in a .py file, not a notebook cell"
    return "nccl", ""


def device():
    """The torch.device this rank computes on: its own GPU under NCCL, else the CPU.

    Rank r of a `launch` owns ``cuda:r``; under torchrun a rank owns ``cuda:$LOCAL_RANK``
    (its index on its own machine). Outside a process group: the CPU.
    """
    import torch
    import torch.distributed as dist

    if dist.is_initialized() and "nccl" in str(dist.get_backend()):
        local = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        return torch.device("cuda", local % torch.cuda.device_count())
    return torch.device("cpu")


def backend() -> str:
    """The default group's backend in one word: "nccl" (CUDA tensors; CPU ones go through gloo),
    "gloo", or "none" outside a process group. What notebooks print next to a run."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return "none"
    name = str(dist.get_backend())
    return next((b for b in ("nccl", "gloo") if b in name), name)


def group_options(backend: str, rank: int) -> tuple[str, dict]:
    """The backend string and keyword arguments `init_process_group` gets for ``backend`` on ``rank``.

    NCCL serves CUDA tensors only, so an NCCL launch asks for ``"cpu:gloo,cuda:nccl"`` (CPU tensors
    go through gloo) and binds rank r to GPU r (``device_id``: the communicator is made at once).
    """
    if backend != "nccl":
        return backend, {}
    import torch

    return "cpu:gloo,cuda:nccl", {"device_id": torch.device("cuda", rank)}


def init_torchrun_group(backend: str = "auto", **kwargs) -> str:
    """``init_process_group`` for a rank that torchrun started (on a Slurm cluster: one torchrun
    per node, started by srun), reading the rendezvous from the environment (RANK, WORLD_SIZE,
    MASTER_ADDR, LOCAL_RANK, ...).

    backend "auto": NCCL when this machine has a GPU for each of its LOCAL_WORLD_SIZE ranks, else
    gloo. Under NCCL the group is "cpu:gloo,cuda:nccl" and the rank owns cuda:$LOCAL_RANK.
    ``kwargs`` go to ``init_process_group`` (store=, rank=, world_size=, timeout=). Returns the
    backend chosen ("nccl" or "gloo"). Gloo picks its network interface from the host name; set
    GLOO_SOCKET_IFNAME (e.g. to the cluster's interface, or "lo" on one machine) to choose it.
    """
    import torch
    import torch.distributed as dist

    from labkit.compat import torch_fallbacks

    torch_fallbacks()
    if backend == "auto":
        backend = default_backend(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"init_torchrun_group: backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    name, options = group_options(backend, local)
    if backend == "nccl":
        torch.cuda.set_device(local)
    dist.init_process_group(name, **options, **kwargs)
    return backend


def _loopback_ifname() -> str:
    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in names if n.startswith("lo")), "lo")


def _die_with_parent() -> None:
    """On Linux, ask the kernel to kill this rank if the launching process dies."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


class _HostPickler(pickle.Pickler):
    """Pickles a GPU tensor as its CPU copy: the caller may have no CUDA (or must not start it)."""

    def reducer_override(self, obj):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor) and obj.device.type not in ("cpu", "meta"):
            return obj.detach().cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def _dumps(payload) -> bytes:
    buf = io.BytesIO()
    _HostPickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(payload)
    return buf.getvalue()


def _send(conn, payload: tuple) -> None:
    # Plain pickle (not multiprocessing's): tensors travel by value, not as
    # shared-memory handles that die with this process; GPU tensors as CPU copies.
    try:
        data = _dumps(payload)
    except Exception as e:  # an unpicklable return value
        message = f"the return value of fn could not be pickled ({type(e).__name__}: {e}); return plain data or tensors"
        data = pickle.dumps(("err", time.time(), "PicklingError", message, "", payload[-1]))
    conn.send_bytes(data)


def _rank_main(rank, world_size, backend, timeout, threads, workdir, fn, args, conn):
    _die_with_parent()
    os.setpgid(0, 0)  # a process group of our own: whatever this rank starts can be killed with it
    err = os.open(os.path.join(workdir, f"stderr{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(err, 2)   # C++ aborts (gloo) and warnings land here; relayed after a clean launch
    os.close(err)
    os.environ[_RANK_ENV] = str(rank)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback_ifname())
    os.environ["OMP_NUM_THREADS"] = str(threads)
    out = io.StringIO()
    with open(os.path.join(workdir, f"stack{rank}"), "w") as stack:
        faulthandler.register(signal.SIGUSR1, file=stack, all_threads=False)
        try:
            import torch
            import torch.distributed as dist

            from labkit.compat import torch_fallbacks

            torch_fallbacks()
            torch.set_num_threads(threads)
            td = datetime.timedelta(seconds=timeout)
            store = dist.FileStore(os.path.join(workdir, "store"), world_size)
            store.set_timeout(td)
            name, kw = group_options(backend, rank)
            if backend == "nccl":
                torch.cuda.set_device(rank)
            dist.init_process_group(name, store=store, rank=rank, world_size=world_size, timeout=td, **kw)
            with contextlib.redirect_stdout(out):
                result = fn(rank, world_size, *args)
        except BaseException as e:  # noqa: BLE001 - everything goes back to the caller
            _send(conn, ("err", time.time(), type(e).__name__, str(e), rank_traceback(e), out.getvalue()))
            conn.close()
            os._exit(1)
        _send(conn, ("ok", result, out.getvalue()))
        conn.close()
        try:
            dist.barrier()  # nobody tears down while a peer still reads from it
            dist.destroy_process_group()
        finally:
            os._exit(0)


def device_note(backend: str, world_size: int) -> str:
    """The line a launch prints on a machine with GPUs, saying where its ranks compute ("" on a
    machine without: there everything is gloo on the CPU, as the environment report says)."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus:
        return ""
    if backend == "nccl":
        return f"launch: {world_size} rank(s) on NCCL, rank r on cuda:r"
    why = f"{gpus} GPU(s) here, NCCL needs one per rank" if world_size > gpus else "asked for gloo"
    return f"launch: {world_size} rank(s) on gloo, CPU tensors ({why})"


def _check_args(fn, world_size, backend, timeout, quiet=False):
    if not callable(fn):
        raise TypeError(f"launch: fn must be callable as fn(rank, world_size, *args), got {type(fn).__name__}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"launch: world_size must be an integer >= 1, got {world_size!r}")
    if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"launch: timeout must be a finite positive number of seconds, got {timeout!r}")
    note = ""
    if backend == "auto":
        backend, note = auto_backend(fn, world_size)
        if note:
            print(note)
    if not note and not quiet:
        note = device_note(backend, world_size) if backend in ("gloo", "nccl") else ""
        if note:
            print(note)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"launch: backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl":
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if world_size > gpus:
            raise ValueError(f"launch: backend='nccl' needs one GPU per rank: world_size={world_size} but {gpus} GPU(s) found")
    return backend


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def _start_method(backend: str, fn=None) -> str:
    # CUDA cannot be used in a forked child, so NCCL spawns; on CPU, fork lets a
    # function defined in a notebook cell run, and starts ranks in milliseconds. Once
    # the caller has initialised CUDA, a forked child inherits a driver state it must
    # not touch: spawn whatever can be spawned.
    if backend == "nccl" or "fork" not in mp.get_all_start_methods():
        return "spawn"
    if _cuda_initialised() and fn is not None:
        if importable(fn):
            return "spawn"
        print(f"launch: {getattr(fn, '__name__', 'fn')} is forked after CUDA was initialised here; "
              "its ranks must stay on the CPU")
    return "fork"


def _preload_for_fork() -> None:
    """Import in the parent what every forked rank would otherwise import on its own: the first
    torch optimizer built in a process imports torch._dynamo (about 1.3 s of CPU), so each rank of
    each launch paid it again; imported once here, forked ranks share it."""
    import torch._dynamo  # noqa: F401


def _check_picklable(fn, args):
    try:
        pickle.dumps(fn)
    except Exception as e:
        raise TypeError(
            f"launch: {getattr(fn, '__qualname__', fn)!r} cannot be sent to spawned ranks ({type(e).__name__}); "
            "define it at the top level of a .py module (labkit, exercises, solutions or your own), not in a notebook cell"
        ) from None
    try:
        pickle.dumps(args)
    except Exception as e:
        raise TypeError(f"launch: the extra args cannot be pickled for spawned ranks: {e}") from None


def _where_stuck(stack_file: str) -> str:
    try:
        with open(stack_file) as f:
            frames = [ln.strip() for ln in f if ln.strip().startswith("File")]
    except OSError:
        return ""
    # faulthandler prints innermost first; report the innermost frame that is
    # neither torch's nor labkit's: the learner's own line.
    labkit_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep
    user = [fr for fr in frames if labkit_dir not in fr and f"{os.sep}torch{os.sep}" not in fr
            and f"{os.sep}multiprocessing{os.sep}" not in fr]
    # inside a torch.distributed call: waiting on a peer; anywhere else: still computing
    state = "" if not frames else " (waiting on a peer)" if any(
        f"{os.sep}torch{os.sep}distributed{os.sep}" in fr for fr in frames) else " (computing)"
    return (f" at {user[0]}" if user else "") + state


def _locate(stuck, procs, tmp) -> dict[int, str]:
    """Ask each stuck rank (SIGUSR1 -> faulthandler) where it is; return rank -> ' at File ...'."""
    for r in stuck:
        if procs[r].is_alive():
            os.kill(procs[r].pid, signal.SIGUSR1)
    if stuck:
        time.sleep(0.3)
    return {r: _where_stuck(os.path.join(tmp, f"stack{r}")) for r in stuck}


def _stop(procs, grace: float) -> None:
    """Give ranks ``grace`` seconds to exit by themselves, then kill what is left, and everything
    the ranks started (their process groups and, while a rank lives, its descendants), and reap all."""
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.pid is None:
            continue
        if p.is_alive():
            kill_below(p.pid)
            p.kill()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        if p.pid is not None:
            p.join(timeout=5)


def _sweep_stale_folders() -> None:
    """Remove launch folders left by callers that were killed outright (their pid is gone)."""
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        parts = name[len(_DIR_PREFIX):].split("-", 1)
        if not name.startswith(_DIR_PREFIX) or not parts[0].isdigit() or int(parts[0]) == os.getpid():
            continue
        try:
            os.kill(int(parts[0]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
        except PermissionError:
            pass


@contextlib.contextmanager
def _sigterm_cleans_up():
    """While launching, SIGTERM raises SystemExit so that ranks and the temp folder are cleaned up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check_not_nested() -> None:
    rank = os.environ.get(_RANK_ENV)
    if rank is not None or mp.current_process().daemon:
        where = f"rank {rank}" if rank is not None else "a daemonic process"
        raise RuntimeError(f"launch: nesting is not supported: launch was called from inside {where}; "
                           "launch once from the notebook or script and do the work inside fn")


def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "auto",
           timeout: float = 60.0, quiet: bool = False, may_die: tuple = ()) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` ranks; return results by rank.

    backend: "auto" (NCCL if there is a GPU per rank and fn is importable by spawned
        ranks, else gloo; see `auto_backend`), "gloo" or "nccl".
    timeout: seconds the whole launch may take, and the process group's own
        timeout for any one collective.
    quiet: if True, do not print what the ranks printed.
    may_die: ranks whose death (a signal, os._exit) is part of the demonstration — a replica
        killed to show that the others carry on: it does not end the launch, and its result is
        None. It must still die or return within ``timeout``; an exception it raises is an error.
    Raises RankError (a rank raised or died), TimeoutError (ranks still running
    after ``timeout``), ValueError/TypeError (bad arguments).
    """
    _check_not_nested()
    backend = _check_args(fn, world_size, backend, timeout, quiet)
    if not isinstance(may_die, (tuple, list, set, frozenset)) or not all(
            isinstance(r, int) and not isinstance(r, bool) and 0 <= r < world_size for r in may_die):
        raise ValueError(f"launch: may_die must list ranks in 0..{world_size - 1}, got {may_die!r}")
    method = _start_method(backend, fn)
    if method == "spawn":
        _check_picklable(fn, args)
    else:
        _preload_for_fork()
    ctx = mp.get_context(method)
    threads = max(1, (os.cpu_count() or 1) // world_size) if method == "spawn" else 1
    clean = died = False
    _sweep_stale_folders()
    with _sigterm_cleans_up(), tempfile.TemporaryDirectory(prefix=f"{_DIR_PREFIX}{os.getpid()}-") as tmp:
        procs, conns = [], []
        try:
            for r in range(world_size):
                ours, theirs = ctx.Pipe(duplex=False)
                p = ctx.Process(
                    target=_rank_main, daemon=True, name=f"labkit-rank-{r}",
                    args=(r, world_size, backend, timeout, threads, tmp, fn, args, theirs),
                )
                p.start()
                theirs.close()
                procs.append(p)
                conns.append(ours)
            results, outputs, errors, stuck = _collect(procs, conns, timeout, set(may_die))
            where = _locate(stuck, procs, tmp)
            clean = not errors and not stuck
            # with a rank dead on purpose the others' closing barrier cannot complete: no grace
            died = any(procs[r].exitcode not in (None, 0) for r in may_die)
        finally:
            _stop(procs, grace=_JOIN_GRACE_S if clean and not died else 0.0)
            for c in conns:
                c.close()
        stderr = {r: _read(os.path.join(tmp, f"stderr{r}")) for r in range(world_size)}
    errors = [(t, r, kind, msg + _tail(stderr[r]) if kind == "RankDied" else msg, tb)
              for t, r, kind, msg, tb in errors]
    if not quiet:
        for r in sorted(outputs):
            for line in outputs[r].splitlines():
                print(f"[rank {r}] {line}")
        if clean:  # after a failure the peers' stderr is connection noise; the error carries what matters
            for r in sorted(stderr):
                for line in stderr[r].splitlines():
                    print(f"[rank {r}] {line}", file=sys.stderr)
    if errors:
        # A peer's death or exception makes the others fail with network errors
        # moments later: report a root cause first, the earliest among equals.
        first = min(errors, key=lambda e: (_is_comm_failure(e[2], e[3]), e[0]))
        raise RankError(*first[1:])
    if stuck:
        detail = "; ".join(f"rank {r}{where[r]}" for r in stuck)
        hint = ("Look for a send without a matching recv, or a rank that skips a collective the others call."
                if not all(where[r].endswith("(computing)") for r in stuck) else
                "No rank was waiting on a peer: the work needs longer than the timeout (pass a larger "
                "timeout=), or loops forever.")
        raise TimeoutError(
            f"launch: rank(s) {', '.join(map(str, stuck))} of {world_size} had not returned after {timeout:g} s "
            f"({detail}); all ranks were stopped. {hint}"
        )
    return [results[r] for r in range(world_size)]


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _tail(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    return "; its stderr ended with: " + text[-_STDERR_TAIL:].replace("\n", " | ")


def _collect(procs, conns, timeout, may_die=frozenset()):
    """Wait for every rank's message. Returns results, outputs, errors, stuck ranks. A rank of
    ``may_die`` that dies gets the result None instead of an error."""
    results: dict[int, Any] = {}
    outputs: dict[int, str] = {}
    errors: list[tuple] = []  # (time, rank, exc_type, message, traceback)
    pending = set(range(len(procs)))
    deadline = time.monotonic() + timeout
    error_deadline = None
    while pending:
        now = time.monotonic()
        limit = deadline if error_deadline is None else min(deadline, error_deadline)
        if now >= limit:
            break
        waitables = [conns[r] for r in pending] + [procs[r].sentinel for r in pending]
        ready = multiprocessing.connection.wait(waitables, timeout=min(limit - now, 1.0))
        for r in sorted(pending):
            conn, proc = conns[r], procs[r]
            if conn in ready or (proc.sentinel in ready and conn.poll()):
                try:
                    msg = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    msg = None
                if msg is None:
                    proc.join(timeout=1)
                    if r in may_die:
                        results[r], outputs[r] = None, ""
                    else:
                        errors.append((time.time(), r, "RankDied", _death_message(proc), ""))
                elif msg[0] == "ok":
                    results[r], outputs[r] = msg[1], msg[2]
                else:
                    _, t, exc_type, message, tb, out = msg
                    outputs[r] = out
                    errors.append((t, r, exc_type, message, tb))
                pending.discard(r)
            elif proc.sentinel in ready:
                proc.join(timeout=1)
                if r in may_die:
                    results[r], outputs[r] = None, ""
                else:
                    errors.append((time.time(), r, "RankDied", _death_message(proc), ""))
                pending.discard(r)
        if errors and error_deadline is None:
            error_deadline = time.monotonic() + _ERROR_GRACE_S
    stuck = [] if errors else sorted(pending)
    return results, outputs, errors, stuck


def _is_comm_failure(exc_type: str, message: str) -> bool:
    text = message.lower()
    return exc_type.startswith("Dist") or any(
        k in text for k in ("gloo", "connection closed", "connection reset", "broken pipe", "socket"))


def _death_message(proc) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            how = f"signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"signal {-code}"
    else:
        how = f"exit code {code}"
    return f"the rank process ended ({how}) without returning a result"
