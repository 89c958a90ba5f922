"""A process's tree, with the standard library only.

A worker makes itself the *child subreaper* of what its code starts
(``peach_cli.runtime.linux``): a process that loses its parent (a daemon made with
``setsid`` and a double fork) is adopted by the worker instead of init, so it stays in the
worker's tree, where ``kill_descendants`` finds it. Where there is no subreaper, only what
still descends from the worker is found (and its process group killed, best effort).

    kill_descendants()             # how many processes were killed
"""

from __future__ import annotations

import os
import signal

from peach_cli.runtime.linux import parents


def descendants(pid: int | None = None) -> list[int]:
    """The pids below ``pid`` (default: this process), parents before children (from
    ``/proc``, or ``ps``: ``peach_cli.runtime.linux.parents``)."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for child, parent in parents().items():
        children.setdefault(parent, []).append(child)
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


__all__ = ["descendants", "kill_descendants"]
