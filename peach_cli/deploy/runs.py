"""One run of a task as a Ray job, driven from the cluster: the request, its logs, its end.

A deployed project's scheduler (``peach_cli.deploy.scheduler``) runs each task as
``peach task run --address`` does: the job request ``peach deploy`` built for the task
(``jobs.job_template``: the project package, peach's runtime and the task's spec package,
its py_env's requirements, its env_vars), with the payload and the secrets' values added
(``run_request``), submitted to the dashboard's Jobs REST API; Ray runs the entrypoint in a
process group of its own and kills that group when the job is stopped.

``LogFollower`` turns repeated reads of a job's whole log into its new lines (``peach task
run --address`` uses it too); ``ended_with`` reads how the run went from the job's last lines.

Runs on the cluster: the standard library only (``urllib``), Ray imported nowhere.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from peach_cli.runtime.triggers import PAYLOAD_ENV, SECRETS_ENV

JOBS_PATH = "/api/jobs/"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
REQUEST_TIMEOUT_S = 10.0
TOKEN_ENV = "RAY_AUTH_TOKEN"


def run_request(
    template: dict[str, Any],
    submission_id: str,
    payload: str | None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The job request of one run: ``template`` (a task's, from ``tasks.json``) with its
    submission id, the payload (JSON text, or None) and the values of the secrets its
    ``PEACH_SECRETS`` names, read from this process's environment (they are never in the
    template: the scheduler's deployment holds them as a replica does)."""
    body: dict[str, Any] = json.loads(json.dumps(template))
    body["submission_id"] = submission_id
    env_vars = body.setdefault("runtime_env", {}).setdefault("env_vars", {})
    if payload is not None:
        env_vars[PAYLOAD_ENV] = payload
    for name in str(env_vars.get(SECRETS_ENV) or "").split(","):
        if name and name in os.environ:
            env_vars[name] = os.environ[name]
    env_vars.update(extra_env or {})
    return body


class LogFollower:
    """Turns repeated reads of a job's whole log into its new complete lines."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self.on_line = on_line
        self.seen = 0
        self.lines: list[str] = []
        """Every line so far."""

    def feed(self, logs: str, *, final: bool = False) -> None:
        fresh = logs[self.seen :]
        if not final:
            cut = fresh.rfind("\n")
            if cut < 0:
                return
            fresh = fresh[: cut + 1]
        self.seen += len(fresh)
        for line in fresh.splitlines():
            self.lines.append(line)
            self.on_line(line)


def ended_with(name: str, lines: list[str]) -> tuple[str | None, str | None, str | None]:
    """(result, error, traceback) from what a task's job printed: its entrypoint ends a
    run that returned with ``task NAME returned in S s: returned R`` and one that raised
    with the user's traceback (notebook cells and lines), whose last line is the error.

    >>> ended_with("t", ["hi", "task t returned in 0.01 s: returned 3"])
    ('3', None, None)
    >>> ended_with("t", ["Traceback (most recent call last):", "  File x", "ValueError: no"])
    (None, 'ValueError: no', 'Traceback (most recent call last):\\n  File x\\nValueError: no')
    """
    head = f"task {name} returned in "
    for line in reversed(lines):
        if line.startswith(head):
            _, found, result = line.partition(": returned ")
            return (result if found else None), None, None
    shown = [line for line in lines if line.strip()]
    if not shown:
        return None, None, None
    start = max(
        (i for i, line in enumerate(shown) if line.startswith("Traceback (most recent")),
        default=len(shown) - 1,
    )
    return None, shown[-1].strip(), "\n".join(shown[start:])


def dashboard_token() -> str | None:
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


class JobsREST:
    """The dashboard's Jobs endpoints over ``urllib`` (blocking: call it in a thread)."""

    def __init__(self, dashboard: str) -> None:
        self.base = (dashboard if "://" in dashboard else f"http://{dashboard}").rstrip("/")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Content-Type": "application/json"}
        token = dashboard_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return json.loads(response.read() or b"null")

    def submit(self, body: dict[str, Any]) -> str:
        return str(self._call("POST", JOBS_PATH, body)["submission_id"])

    def status(self, submission_id: str) -> dict[str, Any]:
        data = self._call("GET", f"{JOBS_PATH}{submission_id}")
        return data if isinstance(data, dict) else {}

    def logs(self, submission_id: str) -> str:
        data = self._call("GET", f"{JOBS_PATH}{submission_id}/logs")
        return str((data or {}).get("logs") or "")

    def stop(self, submission_id: str) -> None:
        try:
            self._call("POST", f"{JOBS_PATH}{submission_id}/stop")
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise
