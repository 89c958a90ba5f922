"""Ending a worker's whole process tree: the worker, what its code started, their children.

A replica or a task worker is the subreaper of what its code starts (on Linux), so even a
daemon made with ``setsid`` and a double fork stays below it until it is killed here::

    killed = kill_tree(process.pid)     # descendants first, then the worker
    await process.wait()
    reap(killed - {process.pid})        # those peach adopted meanwhile
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any


def kill_tree(pid: int) -> set[int]:
    """Kill the process ``pid``, its process group and every descendant; the pids killed.

    The descendants go first, round after round until none is left: a worker is the
    subreaper of what its code starts (``peach_cli.runtime.tree``), so a process that forks
    meanwhile, or a daemon that left its parent, is still below it for the next round. Those
    that die as peach's own (adopted, peach being a subreaper too) are for ``reap`` once
    the worker is gone. A task worker leads a process group of its own: it is killed too."""
    import psutil

    killed: set[int] = set()
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        root = None
    if root is not None:
        _stop(root)
    for _ in range(20 if root is not None else 0):
        try:
            below = root.children(recursive=True)
        except psutil.NoSuchProcess:  # the worker itself is gone
            break
        except psutil.Error:  # /proc read while another process went: look again
            continue
        alive = [p for p in below if _alive(p)]
        if not alive:
            break
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
                killed.add(process.pid)
    grouped = _group(pid)  # what the group's kill takes is counted, found below it or not
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)  # a task worker leads its own group (task_worker)
    killed |= grouped
    if root is not None:
        with contextlib.suppress(psutil.Error):
            root.kill()
            killed.add(pid)
    return killed


def _stop(root: Any) -> None:
    """Stop the worker (and its group) before looking below it, so that it forks nothing
    between the look and the kill: a child started in that moment would die with the group
    uncounted. Waits a moment for the stop to take effect (it is sent, not awaited)."""
    import psutil

    with contextlib.suppress(OSError):
        os.killpg(root.pid, signal.SIGSTOP)
    with contextlib.suppress(psutil.Error):
        root.suspend()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            if root.status() in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE):
                return
        except psutil.Error:
            return
        time.sleep(0.001)


def _group(pgid: int) -> set[int]:
    """The running processes of process group ``pgid`` (none when ``pgid`` leads no group:
    a replica does not, and then no process table is read)."""
    import psutil

    try:
        if os.getpgid(pgid) != pgid:
            return set()
    except OSError:
        return set()
    members: set[int] = set()
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and _alive(psutil.Process(pid)):
                members.add(pid)
        except (OSError, psutil.Error):
            continue
    return members


def _alive(process: Any) -> bool:
    """Whether a ``psutil.Process`` still runs (a zombie or a gone one does not)."""
    import psutil

    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def reap(pids: set[int]) -> None:
    """Collect the killed descendants peach adopted (after their worker has exited; the
    worker's own pid is its waiter's to reap)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)


__all__ = ["kill_tree", "reap"]
