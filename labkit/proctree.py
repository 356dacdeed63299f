"""Process trees (psutil): find every process below a pid, their memory, and kill them.

Used by the launcher (a rank's own children must not outlive a launch) and
by the grading sandbox (a submission's processes must not outlive grading).
psutil reads the process table on Linux and macOS alike; a process that is
gone, or that we may not inspect, is left out.
"""
from __future__ import annotations

import os
import signal

import psutil


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def children(pid: int) -> dict[int, int | None]:
    """``pid``'s direct children: child pid -> its session id (None if it could not be read)."""
    try:
        kids = psutil.Process(pid).children()
    except psutil.Error:
        return {}
    return {k.pid: _session(k.pid) for k in kids}


def descendants(pid: int) -> set[int]:
    """``pid`` and all processes below it, plus any in its session (a worker's session id is its pid:
    a process that left the tree by a double fork is still found)."""
    found = {pid}
    try:
        found |= {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        pass
    return found | {p for p in psutil.pids() if _session(p) == pid}


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid``'s whole process tree."""
    total = 0
    for p in descendants(pid):
        try:
            total += psutil.Process(p).memory_info().rss
        except psutil.Error:
            pass
    return total


def kill_below(pid: int, include_self: bool = False) -> None:
    """SIGKILL every process below ``pid`` (and ``pid`` itself if asked)."""
    for p in descendants(pid) - ({pid} if not include_self else set()):
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
