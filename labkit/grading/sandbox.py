"""Start untrusted worker processes in a sandbox, watch them, and leave nothing behind.

With bubblewrap (``bwrap``, a system package) a worker sees:
- the whole filesystem read-only, a private empty ``/tmp`` (its only
  writable place), the submission's files read-only at ``/submission``, and
  the repository's ``solutions/`` replaced by an empty folder;
- its own network namespace holding only loopback (enough for gloo ranks);
- its own PID namespace: when the worker's sandbox is killed, the kernel
  kills every process inside it, detached or not;
- a new session (no controlling terminal) and death with the judge.

Without bubblewrap (``Sandbox.kind == "none"``) a worker runs in its own
process group; as root it is switched to user ``nobody`` first (so it cannot
write the checkout or the judge's files), and the judge becomes a child
subreaper so that double-forked children come back to it and are killed.
The grade report says which of the two ran.

Either way every worker has an address-space limit (``RLIMIT_AS``, CPU runs
only: CUDA reserves more address space than it uses), a resident-memory
limit over its whole process tree (checked by the judge while it waits), a
file-size limit, and no core dumps.
"""
from __future__ import annotations

import ctypes
import functools
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from labkit.env import REPO_ROOT
from labkit.proctree import children, descendants

MOUNT = "/tmp/submission"  # where the submission folder appears inside bubblewrap (read-only)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def bwrap_path() -> str | None:
    """The bubblewrap binary if it is installed and works here, else None (cached)."""
    global _BWRAP
    if _BWRAP is None:
        path = shutil.which("bwrap")
        ok = False
        if path:
            try:
                ok = subprocess.run([path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                                    capture_output=True, timeout=20).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
        _BWRAP = path if ok else ""
    return _BWRAP or None


_BWRAP: str | None = None


@dataclass
class Limits:
    """Per-worker limits. ``memory_bytes``: resident memory of the whole process tree."""

    memory_bytes: int = 4 << 30
    address_space_bytes: int = 16 << 30
    file_bytes: int = 256 << 20


@dataclass
class Sandbox:
    """How workers are confined: ``kind`` is "bubblewrap" or "none"."""

    kind: str
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def best(cls, limits: Limits | None = None, require: bool = False) -> "Sandbox":
        """bubblewrap when it works here, else none; ``LABKIT_SANDBOX=none`` forces none (to test that mode)."""
        kind = "bubblewrap" if bwrap_path() and os.environ.get("LABKIT_SANDBOX") != "none" else "none"
        if require and kind == "none":
            raise RuntimeError("grade: --require-sandbox was given but bubblewrap (bwrap) is not installed or "
                               "does not work here (apt-get install bubblewrap)")
        return cls(kind, limits or Limits())

    def describe(self) -> str:
        if self.kind == "bubblewrap":
            return ("bubblewrap: read-only filesystem, private /tmp, solutions/ hidden, loopback-only network, "
                    "own PID namespace")
        who = "user nobody" if self.runs_as_nobody() else "the grader's own user"
        return (f"NONE (bubblewrap not available): workers ran as {who} in their own process group; "
                "install bubblewrap for a read-only filesystem and a private network")

    def runs_as_nobody(self) -> bool:
        """Without bubblewrap, root hands workers to user nobody when nobody can reach Python and labkit."""
        return self.kind == "none" and os.geteuid() == 0 and _reachable_by_others(Path(sys.executable)) \
            and _reachable_by_others(REPO_ROOT / "labkit" / "__init__.py")

    # ------------------------------------------------------------ start
    def start(self, argv: list[str], submission_dir: Path, env: dict[str, str], pass_fds=()) -> subprocess.Popen:
        """Start ``argv`` (a Python command line) confined; its stdout/stderr go to one pipe."""
        uses_cuda = _cuda_present()
        if self.kind == "bubblewrap":
            argv = self._bwrap_argv(submission_dir, uses_cuda) + argv
            cwd = "/"
            drop = None
        else:
            cwd = env["HOME"]
            drop = _nobody() if self.runs_as_nobody() else None
            _become_subreaper()
        limits = self.limits

        def preexec():
            if not uses_cuda:
                resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes,) * 2)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes,) * 2)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            _pdeathsig()
            if drop is not None:
                uid, gid = drop
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)

        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, pass_fds=pass_fds, start_new_session=True, preexec_fn=preexec)

    def _bwrap_argv(self, submission_dir: Path, uses_cuda: bool) -> list[str]:
        argv = [bwrap_path(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                "--ro-bind", str(submission_dir), MOUNT]
        for path in _under_tmp(REPO_ROOT, Path(sys.prefix), Path(sys.base_prefix), worker_labkit_root()):
            argv += ["--ro-bind", str(path), str(path)]   # a checkout or venv in /tmp stays visible
        solutions = REPO_ROOT / "solutions"
        if solutions.is_dir():
            argv += ["--tmpfs", str(solutions)]
        if uses_cuda:
            for dev in sorted(Path("/dev").glob("nvidia*")):
                argv += ["--dev-bind", str(dev), str(dev)]
        return argv + ["--unshare-all", "--die-with-parent", "--new-session", "--chdir", "/tmp"]

    def submission_path(self, submission_dir: Path) -> str:
        """Where the worker finds the submission folder."""
        return MOUNT if self.kind == "bubblewrap" else str(submission_dir)

    def needs_world_readable(self) -> bool:
        """True when workers run as another user and must be able to read the snapshot."""
        return self.runs_as_nobody()


@functools.lru_cache(maxsize=1)
def worker_labkit_root() -> Path:
    """The folder holding the ``labkit`` a worker imports (``python -I`` ignores the working
    directory and PYTHONPATH, so it is the one installed in this interpreter, which may differ from
    the judge's own copy, as in a Gradescope autograder run from its unpacked source)."""
    out = subprocess.run([sys.executable, "-I", "-c",
                          "import importlib.util as u; print(u.find_spec('labkit').origin)"],
                         capture_output=True, text=True, timeout=60)
    origin = out.stdout.strip()
    return Path(origin).resolve().parents[1] if out.returncode == 0 and origin else REPO_ROOT


def _under_tmp(*paths: Path) -> list[Path]:
    """Those of ``paths`` (resolved, without repeats or nesting) inside /tmp, which the sandbox
    replaces by an empty tmpfs: they are bound back read-only."""
    inside = sorted({p.resolve() for p in paths if p.resolve().is_relative_to("/tmp")})
    return [p for p in inside if not any(p != q and p.is_relative_to(q) for q in inside)]


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than the owner can read ``path`` (and traverse every folder above it)."""
    path = path.resolve()
    try:
        if not path.stat().st_mode & 0o004:
            return False
        return all(p.stat().st_mode & 0o001 for p in path.parents)
    except OSError:
        return False


def _cuda_present() -> bool:
    return any(Path("/dev").glob("nvidia[0-9]*"))


def _nobody() -> tuple[int, int]:
    try:
        p = pwd.getpwnam("nobody")
        return p.pw_uid, p.pw_gid
    except KeyError:
        return 65534, 65534


def _libc():
    return ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None


def _pdeathsig() -> None:
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _become_subreaper() -> None:
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)


def kill_tree(proc: subprocess.Popen) -> None:
    """Kill a worker and everything it started; reap it. Safe to call twice."""
    for _ in range(3):
        pids = descendants(proc.pid) if proc.poll() is None else descendants(proc.pid) - {proc.pid}
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            continue
        if not (descendants(proc.pid) - {proc.pid}):
            break


def reap_orphans(protect: set[int]) -> None:
    """Kill and reap processes re-parented to us (we are a subreaper in the no-sandbox mode).

    Targets our children that run in a session other than ours and are not in
    ``protect`` (the pids of live workers): what a worker left behind.
    """
    me, mine = os.getpid(), os.getsid(0)
    killed = []
    for p, sid in children(me).items():
        if p not in protect and sid != mine:
            try:
                os.kill(p, signal.SIGKILL)
                killed.append(p)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + 2
    for p in killed:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(p, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.01)
