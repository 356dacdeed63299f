"""Process trees from /proc (Linux): find every process below a pid, their memory, and kill them.

Used by the launcher (a rank's own children must not outlive a launch) and
by the grading sandbox (a submission's processes must not outlive grading).
Without /proc (macOS) the table is empty and callers fall back to process groups.
"""
from __future__ import annotations

import os
import signal


def proc_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, session id, resident bytes) for every process we can see (empty without /proc)."""
    if not os.path.isdir("/proc/self"):
        return {}
    page = os.sysconf("SC_PAGE_SIZE")
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        # fields[0] = state, [1] = ppid, [3] = session, [21] = rss (pages)
        table[int(name)] = (int(fields[1]), int(fields[3]), int(fields[21]) * page)
    return table


def descendants(pid: int, table=None) -> set[int]:
    """``pid`` and all processes below it, plus any in its session (a worker's session id is its pid)."""
    table = table if table is not None else proc_table()
    children: dict[int, list[int]] = {}
    for p, (pp, _, _) in table.items():
        children.setdefault(pp, []).append(p)
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in found:
            continue
        found.add(p)
        todo.extend(children.get(p, ()))
    found |= {p for p, (_, sid, _) in table.items() if sid == pid}
    return found & (set(table) | {pid})


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid``'s whole process tree."""
    table = proc_table()
    return sum(table[p][2] for p in descendants(pid, table) if p in table)


def kill_below(pid: int, include_self: bool = False) -> None:
    """SIGKILL every process below ``pid`` (and ``pid`` itself if asked)."""
    for p in descendants(pid) - ({pid} if not include_self else set()):
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
