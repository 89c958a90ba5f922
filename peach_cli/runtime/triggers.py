"""``trigger_task_with_event`` in code that peach runs: the call, and the module providing it.

The platform's library ``pipe_algorithms_lib.task_helpers`` lets an endpoint or a task start
a task with an event. Where that library is not installed, peach provides the module in
every replica and task it runs (``install_task_helpers``, called by the worker processes):
a finder placed after the normal ones, so an installed library always wins.

The call checks that the payload is JSON, hands the event to the scheduler of the
``peach dev`` or ``peach task run`` process that started this one — over the Unix socket
named by ``PEACH_TASKS_SOCKET`` — and returns the run id at once; the scheduler checks the
name (``ValueError`` listing the project's tasks) and queues the run. In a replica deployed
by ``peach deploy`` it submits the task as a Ray job to the cluster's dashboard instead
(``use_ray_jobs``; the run id is the job's submission id)::

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
import uuid
from typing import Any

from peach_cli.runtime.jsonlimits import (
    PAYLOAD_LIMIT,
    nests_deeper,
    too_deep_message,
    too_large_message,
)

SOCKET_ENV = "PEACH_TASKS_SOCKET"
"""The scheduler's Unix socket, set by peach in the processes it starts."""
JOBS_ENV = "PEACH_TASKS_JOBS"
"""On Ray: the file listing the project's tasks as Ray job requests (``use_ray_jobs``)."""
DASHBOARD_ENV = "PEACH_TASKS_DASHBOARD"
"""On Ray: the dashboard URL the jobs are submitted to."""
PAYLOAD_ENV = "PEACH_TASK_PAYLOAD"
SECRETS_ENV = "PEACH_SECRETS"
"""The names of the secrets among a deployment's or a job's env_vars (SPEC §10)."""
TOKEN_ENV = "RAY_AUTH_TOKEN"
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
        jobs = os.environ.get(JOBS_ENV)
        if jobs:
            return _submit_job(
                jobs, task_name, json.dumps(payload) if payload is not None else None
            )
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


def use_ray_jobs(tasks_file: str, dashboard: str) -> None:
    """In a Ray replica: trigger tasks as Ray jobs described by ``tasks_file``, submitted to
    the dashboard at ``dashboard`` (``http://host:port``)."""
    os.environ[JOBS_ENV] = os.path.abspath(tasks_file)
    os.environ[DASHBOARD_ENV] = dashboard if "://" in dashboard else f"http://{dashboard}"


def _submit_job(tasks_file: str, task_name: str, payload: str | None) -> str:
    """Submit one run of ``task_name`` as a Ray job (``POST /api/jobs/``); its submission id."""
    import urllib.error
    import urllib.request

    with open(tasks_file, encoding="utf-8") as handle:
        project = json.load(handle)
    tasks = project["tasks"]
    if task_name not in tasks:
        raise ValueError(unknown_task_message(task_name, project.get("names") or list(tasks)))
    body = json.loads(json.dumps(tasks[task_name]))
    body["submission_id"] = f"peach-{project['codops']}-{task_name}-{uuid.uuid4().hex[:10]}"
    env_vars = body["runtime_env"].setdefault("env_vars", {})
    if payload is not None:
        env_vars[PAYLOAD_ENV] = payload
    for name in str(env_vars.get(SECRETS_ENV) or "").split(","):
        if name and name in os.environ:  # a secret this replica has too (never uploaded)
            env_vars[name] = os.environ[name]
    headers = {"Content-Type": "application/json"}
    token = _token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    dashboard = os.environ.get(DASHBOARD_ENV, "http://127.0.0.1:8265").rstrip("/")
    request = urllib.request.Request(
        f"{dashboard}/api/jobs/", json.dumps(body).encode(), headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=REPLY_TIMEOUT_S) as response:
            reply = json.loads(response.read())
    except (OSError, ValueError) as error:  # urllib.error.URLError is an OSError
        raise RuntimeError(
            f"trigger_task_with_event: the Ray dashboard at {dashboard} did not take the job "
            f"({error})"
        ) from None
    return str(reply["submission_id"])


def _token() -> str | None:
    """The dashboard token as Ray's tools read it: ``RAY_AUTH_TOKEN``, else the file named
    by ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``."""
    value = (os.environ.get(TOKEN_ENV) or "").strip()
    if value:
        return value
    named = (os.environ.get(TOKEN_ENV + "_PATH") or "").strip()
    path = os.path.expanduser(named or os.path.join("~", ".ray", "auth_token"))
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


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
