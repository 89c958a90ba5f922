"""A task on a Ray cluster: one Ray job, through the dashboard's Jobs REST API.

The job runs the same code ``peach deploy`` uploads for a component: the project package as
its ``working_dir`` (the one every component of the project shares), peach's runtime and the
task's own small spec package in ``py_modules``, the py_env's requirements (``base`` + its
own) installed by the cluster; its entrypoint is ``python -m _peach_spec`` (the spec
package's ``__main__``, which runs ``peach_cli.runtime.task`` on its ``task.json``), the
payload in ``PEACH_TASK_PAYLOAD``::

    POST /api/jobs/                      submit (a submission id of ours)
    GET  /api/jobs/<id>                  status: PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED
    GET  /api/jobs/<id>/logs             what it printed so far (polled, new lines shown)
    POST /api/jobs/<id>/stop             on Ctrl-C and past the task's timeout

``run_task_job`` reports through callbacks and raises ``DeployError``; nothing here prints
(``peach_cli.commands.task`` renders).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from peach_cli.deploy.dashboard import DashboardClient, resolve_address
from peach_cli.deploy.packaging import (
    TASK_ENTRYPOINT,
    TASK_FILE,
    Package,
    json_bytes,
    project_files,
    project_package,
    runtime_package,
    spec_package,
)
from peach_cli.deploy.runs import LogFollower
from peach_cli.deploy.variables import component_env_vars
from peach_cli.errors import DeployError
from peach_cli.runtime.plan import ProjectPlan, TaskSpec
from peach_cli.runtime.triggers import PAYLOAD_ENV
from peach_cli.wording import count

ENTRYPOINT = TASK_ENTRYPOINT
JOBS_PATH = "/api/jobs/"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
POLL_INTERVAL_S = 0.5
STOP_WAIT_S = 30.0


@dataclass(frozen=True)
class TaskJob:
    """What submitting one run of a task sends: the request body and the zips it names."""

    body: dict[str, Any]
    packages: tuple[Package, ...]


def job_template(plan: ProjectPlan, spec: TaskSpec, project: Package | None = None) -> TaskJob:
    """The job request for any run of ``spec``: no submission id, no payload yet.
    ``project``: the project package (default: built from the project's files)."""
    from peach_cli.deploy.requirements import requirements_runtime_env

    runtime = runtime_package()
    if project is None:
        project = project_package(project_files(plan.root, excluded=plan.watched_files))
    own = spec_package(
        "task", {TASK_FILE: json_bytes(dataclasses.asdict(spec))}, f"the spec of task {spec.name}"
    )
    runtime_env: dict[str, Any] = {
        "working_dir": project.uri,
        "py_modules": [runtime.uri, own.uri],
        **requirements_runtime_env(spec.dependencies),
    }
    env_vars = component_env_vars(spec, None)
    for name in spec.secrets:
        del env_vars[name]
    if env_vars:  # the secrets' names, never their values: they are not uploaded
        runtime_env["env_vars"] = env_vars
    body = {
        "entrypoint": ENTRYPOINT,
        "runtime_env": runtime_env,
        "metadata": {"peach_codops": plan.codops, "peach_task": spec.name},
    }
    return TaskJob(body, (project, runtime, own))


def task_job(
    plan: ProjectPlan,
    spec: TaskSpec,
    payload: str | None,
    secrets: Mapping[str, str] | None = None,
) -> TaskJob:
    """The job request for one run of ``spec`` (``payload``: JSON text or None); the same
    request ``trigger_task_with_event`` sends from a deployed replica. Its ``env_vars``
    hold the task's env_vars and its secrets' values (``secrets``, default: read from
    the environment or ``.env``; raises ``MissingSecret``)."""
    from peach_cli.project.secrets import secret_values

    template = job_template(plan, spec)
    body = json.loads(json.dumps(template.body))
    body["submission_id"] = f"peach-{plan.codops}-{spec.name}-{uuid.uuid4().hex[:10]}"
    values = secret_values(plan.root, spec.secrets) if secrets is None else secrets
    env_vars = component_env_vars(spec, values)
    if payload is not None:
        env_vars[PAYLOAD_ENV] = payload
    if env_vars:
        body["runtime_env"]["env_vars"] = env_vars
    return TaskJob(body, template.packages)


class JobsClient(DashboardClient):
    """The dashboard client, with the Jobs endpoints."""

    def __enter__(self) -> JobsClient:
        return self

    def submit_job(self, body: dict[str, Any]) -> str:
        response = self._request("POST", JOBS_PATH, json=body)
        try:
            return str(response.json()["submission_id"])
        except (ValueError, KeyError, TypeError):
            raise DeployError(f"POST {JOBS_PATH} did not answer a submission id") from None

    def job_status(self, submission_id: str) -> dict[str, Any]:
        response = self._request("GET", f"{JOBS_PATH}{submission_id}")
        try:
            data = response.json()
        except ValueError:
            raise DeployError(
                f"the job {submission_id}: the dashboard did not answer JSON"
            ) from None
        return data if isinstance(data, dict) else {}

    def job_logs(self, submission_id: str) -> str:
        response = self._request("GET", f"{JOBS_PATH}{submission_id}/logs")
        try:
            return str(response.json().get("logs") or "")
        except (ValueError, AttributeError):
            return ""

    def stop_job(self, submission_id: str) -> None:
        self._request("POST", f"{JOBS_PATH}{submission_id}/stop", allow=(404,))

    def upload_missing(self, packages: tuple[Package, ...]) -> list[str]:
        """Upload the zips the cluster lacks; their names."""
        uploaded = []
        for item in packages:
            if not self.package_exists(item.name):
                self.upload_package(item.name, item.data)
                uploaded.append(item.name)
        return uploaded


@dataclass
class JobOutcome:
    status: str
    """SUCCEEDED, FAILED, STOPPED, or TIMED_OUT (stopped by us past the timeout)."""
    submission_id: str
    seconds: float
    message: str = ""


def run_task_job(
    plan: ProjectPlan,
    name: str,
    payload: str | None,
    *,
    address: str | None,
    timeout_s: float | None = None,
    on_line: Callable[[str], None] = lambda line: None,
    on_note: Callable[[str], None] = lambda message: None,
    on_secrets: Callable[[Iterable[str]], None] = lambda values: None,
    poll_interval_s: float = POLL_INTERVAL_S,
) -> JobOutcome:
    """Run the task ``name`` once as a Ray job; follow its logs until it ends.

    Past ``timeout_s`` (default: the task's) the job is stopped. ``KeyboardInterrupt``
    stops the job, then propagates. ``on_secrets`` gets the task's secret values before anything
    is sent (the caller masks them in what it shows).
    """
    spec = plan.tasks[name]
    limit = spec.timeout_s if timeout_s is None else timeout_s
    url, warnings = resolve_address(address)
    for warning in warnings:
        on_note(f"warning: {warning}")
    from peach_cli.project.secrets import secret_values

    secrets = secret_values(plan.root, spec.secrets)  # MissingSecret: exit 1, nothing sent
    on_secrets(secrets.values())  # masked in its log lines and errors
    job = task_job(plan, spec, payload, secrets)
    with JobsClient(url) as dashboard:
        version = dashboard.version()
        uploaded = dashboard.upload_missing(job.packages)
        on_note(
            f"connected to Ray {version.get('ray_version', '?')} at {dashboard.shown}; "
            f"code: {count(len(uploaded), 'package')} uploaded, "
            f"{len(job.packages) - len(uploaded)} already on the cluster"
        )
        submission_id = dashboard.submit_job(job.body)
        on_note(f"task {name}: submitted as Ray job {submission_id}")
        follower = LogFollower(on_line)
        began = time.monotonic()
        running_since: float | None = None  # timeout_s counts from RUNNING, not the env setup
        try:
            while True:
                status = dashboard.job_status(submission_id)
                state = str(status.get("status", ""))
                follower.feed(dashboard.job_logs(submission_id), final=state in TERMINAL)
                if state in TERMINAL:
                    return JobOutcome(
                        state,
                        submission_id,
                        time.monotonic() - began,
                        str(status.get("message") or ""),
                    )
                if running_since is None and state == "RUNNING":
                    running_since = time.monotonic()
                if running_since is not None and time.monotonic() - running_since > limit:
                    _stop(dashboard, submission_id, follower)
                    return JobOutcome(
                        "TIMED_OUT",
                        submission_id,
                        time.monotonic() - began,
                        f"timed out after {limit:g} s",
                    )
                time.sleep(poll_interval_s)
        except KeyboardInterrupt:
            _stop(dashboard, submission_id, follower)
            raise


def _stop(dashboard: JobsClient, submission_id: str, follower: LogFollower) -> None:
    """Stop the job (Ray kills its process group) and wait until it says so."""
    dashboard.stop_job(submission_id)
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        state = str(dashboard.job_status(submission_id).get("status", ""))
        if state in TERMINAL:
            break
        time.sleep(0.2)
    follower.feed(dashboard.job_logs(submission_id), final=True)
