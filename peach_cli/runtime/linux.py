"""What only Linux offers, in one place, each with the fallback peach uses elsewhere (macOS).

=================  =============================================  ===============================
feature            on Linux                                       elsewhere: the fallback
=================  =============================================  ===============================
``subreaper``      ``prctl(PR_SET_CHILD_SUBREAPER)``: an orphan    orphans go to init; a worker's
                   of a worker's code stays in the worker's tree   process group is still killed;
                   (and in peach's), where it is found and         no keeper (peach starts its
                   killed; the keeper (``simulator.keeper``)      workers itself)
                   rests on it
``parent-death``   ``prctl(PR_SET_PDEATHSIG)``: a worker dies      a worker exits when its socket
                   with peach, even a killed peach                 to peach closes
``proc``           ``/proc``: a process's children and             ``ps -A -o pid=,ppid=,stat=``
                   descendants, read without a subprocess
``fork``           fork-based warm templates                       each replica is spawned
                   (``simulator.template``): ``os.fork`` after
                   the imports, ``socket.send_fds``
=================  =============================================  ===============================

Network namespaces are used by the tests alone (``tests/netns_support.py``), never by peach.

``PEACH_LINUX_WITHOUT`` names features to do without (``proc,fork``; ``all``): the fallbacks
then run on Linux too, which is how the tests run each of them. It is read at each call, so
a worker sees its own environment's. ``peach doctor`` names what this system lacks
(``missing``). Standard library only: the replica runtime imports it.

    become_subreaper()                 # True on Linux
    set_parent_death_signal(signal.SIGKILL)
    parents()                          # {pid: its parent's pid}, zombies left out
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

WITHOUT_ENV = "PEACH_LINUX_WITHOUT"

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Feature:
    name: str
    label: str
    """What it is, as ``peach doctor`` names it."""
    lost: str
    """What peach does without it."""


FEATURES = (
    Feature(
        "subreaper",
        "a subreaper (prctl)",
        "a process that a replica or task starts in a session of its own may outlive a "
        "killed peach (no keeper; each worker's process group is still killed)",
    ),
    Feature(
        "parent-death",
        "a parent-death signal (prctl)",
        "a worker learns that peach died when its socket to peach closes",
    ),
    Feature("proc", "/proc", "process trees are read with `ps`"),
    Feature(
        "fork",
        "fork-based warm templates",
        "each replica is started anew and imports its modules itself (a slower start)",
    ),
)
NAMES = tuple(feature.name for feature in FEATURES)


def offers(name: str) -> bool:
    """Whether this system offers feature ``name`` (one of ``NAMES``) and peach may use it."""
    assert name in NAMES, name
    if not sys.platform.startswith("linux"):
        return False
    without = {part.strip() for part in os.environ.get(WITHOUT_ENV, "").split(",")}
    if name in without or "all" in without:
        return False
    if name == "fork":
        import socket

        return hasattr(os, "fork") and hasattr(socket, "send_fds")
    if name == "proc":
        return os.path.isdir("/proc/self/task")
    return True


_FUTEX = {"x86_64": "202", "aarch64": "98"}.get(os.uname().machine)
"""The number of the ``futex`` system call, where a thread waits for a lock (the GIL)."""


def thread_state(native_id: int) -> str | None:
    """What thread ``native_id`` of this process does now, read from its system call in
    ``/proc`` (``peach profile --cpu``): ``"running"`` (on a CPU, or runnable, outside any
    system call), ``"lock"`` (waiting for a lock: the GIL, mostly) or ``"blocked"`` (in
    another system call: a sleep, I/O). None where that cannot be told (no ``/proc``, an
    unknown machine, a thread gone). Linux writes ``running\\n`` or the call's number and
    arguments. Its caller checks ``offers("proc")`` once, not at every sample.

    >>> import threading
    >>> thread_state(threading.get_native_id()) in ("blocked", None)  # in read(2), reading
    True
    """
    if _FUTEX is None:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/syscall", "rb") as call:
            head = call.read(32).split(maxsplit=1)
    except OSError:
        return None
    if not head:
        return None
    word = head[0].decode("ascii", "replace")
    if word == "running":
        return "running"
    return "lock" if word == _FUTEX else "blocked"


def missing() -> list[Feature]:
    """The features this system lacks (or does without), in ``FEATURES``' order."""
    return [feature for feature in FEATURES if not offers(feature.name)]


# -- prctl ----------------------------------------------------------------------------------


def _prctl(feature: str, option: int, value: int) -> bool:
    if not offers(feature):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (Linux); whether it worked."""
    return _prctl("subreaper", _PR_SET_CHILD_SUBREAPER, 1)


def set_parent_death_signal(signum: int) -> bool:
    """Get ``signum`` when the parent dies (Linux); whether it worked."""
    return _prctl("parent-death", _PR_SET_PDEATHSIG, int(signum))


# -- the process table ----------------------------------------------------------------------


def parents() -> dict[int, int]:
    """Every live process (zombies are dead already) and its parent: from ``/proc``, else
    from ``ps``; empty when neither answers."""
    return _parents_from_proc() if offers("proc") else _parents_from_ps()


def children() -> set[int]:
    """This process's children, adopted ones included (Linux's
    ``/proc/self/task/*/children``; elsewhere those in ``ps``'s table)."""
    if not offers("proc"):
        me = os.getpid()
        return {pid for pid, parent in _parents_from_ps().items() if parent == me}
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


def a_thread_runs(pid: int) -> bool:
    """Whether a thread of process ``pid`` is on a CPU or waiting for one (state ``R`` in
    ``/proc/PID/task/*/stat``): a call spinning on a core that a busy machine starves is
    runnable, an idle process's threads sleep (`peach fuzz`). False where there is no
    ``/proc`` (the caller then judges by CPU time alone).

    >>> a_thread_runs(os.getpid()) == offers("proc")  # this thread runs, reading it
    True
    """
    if not offers("proc"):
        return False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", "rb") as stat:
                state = stat.read().rpartition(b")")[2].split()[:1]
        except OSError:
            continue
        if state == [b"R"]:
            return True
    return False


def thread_ids() -> list[int]:
    """Every thread of this process by its kernel id, for what Linux keeps per thread (a
    scheduling priority): ``/proc/self/task``; elsewhere ``[0]``, the process itself (one
    priority for all its threads, as on macOS)."""
    if offers("proc"):
        try:
            return [int(task) for task in os.listdir("/proc/self/task")]
        except OSError:
            pass
    return [0]


def _parents_from_proc() -> dict[int, int]:
    found: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields and fields[0] != b"Z":
            found[int(entry)] = int(fields[1])
    return found


def _parents_from_ps() -> dict[int, int]:
    import subprocess

    try:
        with subprocess.Popen(
            ["ps", "-A", "-o", "pid=,ppid=,stat="],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as ps:
            listed, _ = ps.communicate(timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[int, int] = {}
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[0].isdigit() or not fields[1].isdigit():
            continue
        if not fields[2].startswith("Z"):
            found[int(fields[0])] = int(fields[1])
    found.pop(ps.pid, None)  # ps itself, gone by now
    return found


__all__ = [
    "FEATURES",
    "NAMES",
    "WITHOUT_ENV",
    "Feature",
    "become_subreaper",
    "children",
    "missing",
    "offers",
    "parents",
    "set_parent_death_signal",
    "thread_state",
]
