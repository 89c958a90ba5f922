"""The long-running processes the tests start (`peach dev` above all) die with the pytest
process that started them, even when it is killed (SIGKILL, the OOM killer, a CI job's
hard timeout): nothing a test started is left serving behind it.

    subprocess.Popen(argv, ..., preexec_fn=dies_with_this_process())
    subprocess.Popen(argv, ..., preexec_fn=dies_with_this_process(then=_take_terminal))

The child asks Linux for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``); what it
started goes with it as peach arranges (`peach dev`'s keeper kills every process below it
when peach is gone). Linux sends that signal when the *thread* that started the child ends:
start such processes from the test's own thread (pytest runs tests, fixtures included, in
its main thread), never from a thread that ends before them. Elsewhere nothing is set.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1

if sys.platform.startswith("linux"):
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork
else:  # pragma: no cover - Linux runs the suite
    _prctl = None


def dies_with_this_process(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A ``preexec_fn``: the child is killed when this process dies; ``then`` runs after
    (another ``preexec_fn`` the child needs)."""
    parent = os.getpid()

    def preexec() -> None:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the line above
                os.kill(os.getpid(), signal.SIGKILL)
        if then is not None:
            then()

    return preexec
