"""A new replica starts at the lowest CPU priority and serves at the node's (issue 48).

During a rollout the new replicas' processes start beside those serving: each imports Ray
and Serve (some 2 CPU-seconds), unpacks its runtime_env and runs the component's ``init``.
On a node with few cores that took the CPU from the processes answering requests — the
replicas serving, the gateway, Ray's proxy (which Ray runs at ``nice`` 15) — and the rollout
p99 was 15–18× the steady one (``benchmarks/rollout.py``). So a replica's process starts
at ``nice`` ``START_NICE`` and, once its constructor has run (it is about to serve), goes
back to the priority it was started at, every thread of it.

Going back means raising a priority, which Linux allows only with ``CAP_SYS_NICE`` (root
outside a restricted container) or an ``RLIMIT_NICE`` that reaches it. Where that is not
allowed the process is not lowered at all: it starts and serves at the node's priority,
as before.

The lowering has to happen before the process imports Ray, before any of peach's code
runs: this file is shipped twice in peach's runtime package, as this module and as the
package's top-level ``sitecustomize``, which Python imports while it starts any process
whose ``PYTHONPATH`` holds the package (Ray puts ``py_modules`` there). It acts only when
the process's environment has ``START_ENV`` (the application's ``runtime_env`` sets it)
and takes it out, so processes the replica starts are not lowered. Standard library only.
"""

from __future__ import annotations

import os
import sys

START_ENV = "PEACH_START_NICE"
"""The ``nice`` a replica's process starts at (set in the application's ``runtime_env``)."""
SERVING_ENV = "PEACH_SERVING_NICE"
"""Set by ``start_low``: the ``nice`` the process was started at, to serve at."""
START_NICE = 19


def may_raise_from(nice: int) -> bool:
    """Whether this process, at ``nice``, may raise its priority (``CAP_SYS_NICE``, or an
    ``RLIMIT_NICE`` that allows it): tried, one step up and back down (always allowed)."""
    if nice <= -20:
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice - 1)
    except OSError:
        return False
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    return True


def start_low(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Lower this process to the ``nice`` in ``START_ENV`` (taking it out of the
    environment) when it may come back; record where in ``SERVING_ENV``. Whether it did."""
    value = environ.pop(START_ENV, None)
    if value is None or not hasattr(os, "setpriority"):
        return False
    try:
        low = int(value)
        current = os.getpriority(os.PRIO_PROCESS, 0)
        if low <= current or not may_raise_from(current):
            return False
        os.setpriority(os.PRIO_PROCESS, 0, low)
    except (ValueError, OSError):
        return False
    environ[SERVING_ENV] = str(current)
    return True


def serve_at_full_priority(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Set every thread of this process back to the ``nice`` ``start_low`` recorded (Linux
    keeps a priority per thread; each thread started since inherited the low one). Whether
    it did: False when the process was not lowered or is not allowed back."""
    value = environ.pop(SERVING_ENV, None)
    if value is None:
        return False
    try:
        nice = int(value)
    except ValueError:
        return False
    from peach_cli.runtime.linux import thread_ids

    done = False
    for tid in thread_ids():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            done = True
        except OSError:  # a thread that has ended; or not allowed after all
            continue
    return done


def _next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this one shadows (a distribution's, further on the path)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # shipped as the runtime package's sitecustomize
    start_low()
    try:
        _next_sitecustomize()
    except Exception:  # noqa: BLE001 - as Python treats a failing sitecustomize: go on
        pass
