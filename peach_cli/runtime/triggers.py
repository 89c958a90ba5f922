"""``trigger_task_with_event`` in code that peach runs: the call, and the module providing it.

The platform's library ``pipe_algorithms_lib.task_helpers`` lets an endpoint or a task start
a task with an event. Where that library is not installed, peach provides the module in
every replica and task it runs (``install_task_helpers``, called by the worker processes):
a finder placed after the normal ones, so an installed library always wins.

The call checks that the payload is JSON, hands the event to the scheduler of the
``peach dev`` or ``peach task run`` process that started this one — over the Unix socket
named by ``PEACH_TASKS_SOCKET`` — and returns the run id at once; the scheduler checks the
name (``ValueError`` listing the project's tasks) and queues the run. In a replica or a
task deployed by ``peach deploy`` it queues the run with the application's scheduler (its
deployment ``tasks``, ``peach_cli.deploy.scheduler``) through a Serve handle, named by
``PEACH_TASKS_APP``; the run goes there as under ``peach dev``::

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

from peach_cli.runtime.jsonlimits import (
    PAYLOAD_LIMIT,
    nests_deeper,
    too_deep_message,
    too_large_message,
)

SOCKET_ENV = "PEACH_TASKS_SOCKET"
"""The scheduler's Unix socket, set by peach in the processes it starts."""
APP_ENV = "PEACH_TASKS_APP"
"""On Ray: the application whose scheduler queues the runs (set in its replicas and tasks)."""
SCHEDULER_DEPLOYMENT = "tasks"
"""The scheduler's deployment in a deployed project's application (SPEC §5)."""
PAYLOAD_ENV = "PEACH_TASK_PAYLOAD"
SECRETS_ENV = "PEACH_SECRETS"
"""The names of the secrets among a deployment's or a job's env_vars (SPEC §10)."""
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
    what = f"the payload for task {task_name!r}"
    try:
        message = json.dumps({"task": task_name, "payload": payload}, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        if isinstance(error, RecursionError) or nests_deeper(payload):
            raise TriggerPayloadError(too_deep_message(what)) from None
        raise TriggerPayloadError(
            f"{what} must be JSON (dicts, lists, strings, numbers, booleans, None): {error}"
        ) from None
    if nests_deeper(payload):
        raise TriggerPayloadError(too_deep_message(what))
    if len(message) > PAYLOAD_LIMIT:
        raise TriggerPayloadError(too_large_message(what))
    address = os.environ.get(SOCKET_ENV)
    if not address:
        app = os.environ.get(APP_ENV)
        if app:
            text = json.dumps(payload) if payload is not None else None
            reply = _ask_ray(app, task_name, text)
            if "error" in reply:
                raise ValueError(reply["error"])
            return str(reply["run_id"])
        raise RuntimeError(
            "trigger_task_with_event: no task scheduler here; tasks can be triggered in code "
            "run by `peach dev`, `peach task run` or `peach deploy`"
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


def unknown_task_message(name: str, tasks: list[str]) -> str:
    """``unknown task 'x': the project's tasks are a, b`` (or says there are none).

    >>> unknown_task_message("x", ["a", "b"])
    "unknown task 'x': the project's tasks are a, b"
    """
    if not tasks:
        return f"unknown task {name!r}: the project defines no task (add one under tasks:)"
    return f"unknown task {name!r}: the project's tasks are {', '.join(tasks)}"


def _ask_ray(app: str, task_name: str, payload: str | None) -> dict[str, Any]:
    """Queue the run with the scheduler of the application ``app`` on Ray (a Serve handle;
    a task's job connects its driver to the cluster first). Its reply: the run id or why not."""
    try:
        import ray
        from ray import serve
    except ImportError:
        raise RuntimeError("trigger_task_with_event: Ray is not installed here") from None

    def ask() -> Any:
        if not ray.is_initialized():  # a task's job: its driver joins the cluster
            ray.init(address="auto", log_to_driver=False, logging_level=40)  # ERROR
        handle = serve.get_deployment_handle(SCHEDULER_DEPLOYMENT, app_name=app)
        return handle.trigger.remote(task_name, payload).result(timeout_s=REPLY_TIMEOUT_S)

    import asyncio
    import threading

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no event loop in this thread: wait here
        reply = ask()
    else:  # an async method: a blocking wait is refused on the loop's thread
        box: list[Any] = []

        def wait() -> None:
            try:
                box.append(ask())
            except BaseException as error:  # noqa: BLE001 - re-raised below
                box.append(error)

        waiter = threading.Thread(target=wait, name="peach-trigger", daemon=True)
        waiter.start()
        waiter.join()
        if isinstance(box[0], BaseException):
            raise box[0]
        reply = box[0]
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
