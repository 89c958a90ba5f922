"""``trigger_task_with_event`` in code that peach runs: the call, and the module providing it.

The platform's library ``pipe_algorithms_lib.task_helpers`` lets an endpoint or a task start
a task with an event. Where that library is not installed, peach provides the module in
every replica and task it runs (``install_task_helpers``, called by the worker processes):
a finder placed after the normal ones, so an installed library always wins.

The call checks that the payload is JSON, hands the event to the scheduler of the
``peach dev`` or ``peach task run`` process that started this one — over the Unix socket
named by ``PEACH_TASKS_SOCKET`` — and returns the run id at once; the scheduler checks the
name (``ValueError`` listing the project's tasks) and queues the run::

    from pipe_algorithms_lib.task_helpers import trigger_task_with_event
    run_id = trigger_task_with_event("retrain", {"reason": "drift"})   # "retrain#4"

Standard library only: this runs inside every user environment.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import socket
import sys
import types
from typing import Any

SOCKET_ENV = "PEACH_TASKS_SOCKET"
"""The scheduler's Unix socket, set by peach in the processes it starts."""
REPLY_TIMEOUT_S = 10.0
MAX_REPLY_BYTES = 1 << 20
MODULES = ("pipe_algorithms_lib", "pipe_algorithms_lib.task_helpers")


class TriggerPayloadError(TypeError, ValueError):
    """The payload cannot be sent as JSON."""


def trigger_task_with_event(task_name: str, payload: Any = None) -> str:
    """Queue a run of the task ``task_name`` with ``payload`` (JSON); return its run id.

    Raises ``ValueError`` for a name that is not a task of the project (the message lists
    them) and ``TriggerPayloadError`` (a ``TypeError`` and a ``ValueError``) for a payload
    that is not JSON.
    """
    if not isinstance(task_name, str) or not task_name:
        raise ValueError(f"the task name must be a non-empty string, not {task_name!r}")
    try:
        message = json.dumps({"task": task_name, "payload": payload}, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise TriggerPayloadError(
            f"the payload for task {task_name!r} must be JSON (dicts, lists, strings, "
            f"numbers, booleans, None): {error}"
        ) from None
    address = os.environ.get(SOCKET_ENV)
    if not address:
        raise RuntimeError(
            "trigger_task_with_event: no task scheduler here; tasks can be triggered in code "
            "run by `peach dev`, `peach task run` or the platform"
        )
    reply = _ask(address, message.encode() + b"\n")
    if "error" in reply:
        raise ValueError(reply["error"])
    return str(reply["run_id"])


def _ask(address: str, request: bytes) -> dict[str, Any]:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(REPLY_TIMEOUT_S)
        try:
            connection.connect(address)
            connection.sendall(request)
            received = b""
            while not received.endswith(b"\n") and len(received) < MAX_REPLY_BYTES:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
        except OSError as error:
            raise RuntimeError(
                f"trigger_task_with_event: the task scheduler is not reachable ({error}); "
                "has peach stopped?"
            ) from None
    finally:
        connection.close()
    try:
        reply = json.loads(received)
    except ValueError:
        raise RuntimeError("trigger_task_with_event: the task scheduler sent no answer") from None
    return reply if isinstance(reply, dict) else {"error": str(reply)}


class _TaskHelpers(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Provides ``pipe_algorithms_lib.task_helpers`` when no installed package does."""

    def find_spec(
        self, fullname: str, path: Any = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_loader(
            fullname, self, is_package=fullname == "pipe_algorithms_lib"
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__doc__ = "Provided by peach (the platform's library is not installed here)."
        if module.__name__.endswith(".task_helpers"):
            module.trigger_task_with_event = trigger_task_with_event  # type: ignore[attr-defined]
            module.__all__ = ["trigger_task_with_event"]  # type: ignore[attr-defined]


def install_task_helpers() -> None:
    """Make ``pipe_algorithms_lib.task_helpers`` importable unless a real one is installed."""
    if not any(isinstance(finder, _TaskHelpers) for finder in sys.meta_path):
        sys.meta_path.append(_TaskHelpers())
