"""A process's tree, with the standard library only (Linux: ``prctl`` and ``/proc``).

A task worker makes itself the *child subreaper* of what its task starts: a process that
loses its parent (a daemon made with ``setsid`` and a double fork) is adopted by the
worker instead of init, so it stays in the worker's tree, where ``kill_descendants`` finds
it. ``peach`` makes itself one too (``become_subreaper``) for what it starts. Elsewhere
these are no-ops, and only the process group is left to kill (best effort).

    become_subreaper()             # True on Linux
    set_parent_death_signal(signal.SIGTERM)
    kill_descendants()             # how many processes were killed
"""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (Linux); whether it worked."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def set_parent_death_signal(signum: int) -> bool:
    """Get ``signum`` when the parent dies (Linux); whether it worked."""
    return _prctl(_PR_SET_PDEATHSIG, int(signum))


def children() -> set[int]:
    """This process's children, adopted ones included (Linux's
    ``/proc/self/task/*/children``; empty where there is none)."""
    found: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as listed:
                found.update(int(pid) for pid in listed.read().split())
        except OSError:
            continue
    return found


def descendants(pid: int | None = None) -> list[int]:
    """The pids below ``pid`` (default: this process), parents before children, from
    ``/proc`` (empty where there is none)."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields and fields[0] != b"Z":  # a zombie is dead already
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def kill_descendants(rounds: int = 20) -> int:
    """SIGKILL every process below this one until none is left (one that forks meanwhile
    is adopted by this process when it is a subreaper: the next round finds its child);
    reap those that were this process's children. How many were killed."""
    killed: set[int] = set()
    for _ in range(rounds):
        pids = descendants()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            killed.add(pid)
        _reap()
    _reap()
    return len(killed)


def _reap() -> None:
    """Collect the exit status of every child that has ended (adopted ones too)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except (ChildProcessError, OSError):
            return
        if pid == 0:
            return


__all__ = [
    "become_subreaper",
    "children",
    "descendants",
    "kill_descendants",
    "set_parent_death_signal",
]
