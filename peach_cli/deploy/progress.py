"""Reading Serve's view of an application: deployments, replicas, and start failures.

Serve reports an init that raises as ``A replica failed to start …`` in the deployment's
message within seconds, and only much later as ``DEPLOY_FAILED``; ``startup_failure``
spots the first, and ``user_error`` cuts the user's exception and notebook traceback out
of Ray's message (ANSI colour codes stripped).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from peach_cli.deploy import INIT_FAILED_MARKER

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_RAY_TASK_HEADER = re.compile(r"^ray::\S+ \(pid=\d+")
_FAILED_TO_START = ("failed to start", "RuntimeEnvSetupError", "runtime_env setup failed")


def strip_ansi(text: str) -> str:
    r"""Remove terminal colour codes.

    >>> strip_ansi("\x1b[36mray::main\x1b[39m failed")
    'ray::main failed'
    """
    return _ANSI.sub("", text)


@dataclass(frozen=True)
class ServeReplica:
    replica_id: str
    state: str
    node_ip: str | None = None
    pid: int | None = None
    last_error: str | None = None
    """The replica's last error as its gateway reports it (a failed drift re-init)."""


@dataclass(frozen=True)
class DeploymentState:
    name: str
    status: str
    message: str
    target: int | None
    replicas: tuple[ServeReplica, ...] = ()
    code: str | None = None
    """The code the deployment is at (``code_of`` its ``runtime_env``), when reported."""

    @property
    def running(self) -> int:
        return sum(1 for r in self.replicas if r.state == "RUNNING")

    @property
    def starting(self) -> int:
        return sum(1 for r in self.replicas if r.state in ("STARTING", "PENDING_MIGRATION"))

    @property
    def ready(self) -> bool:
        target = self.target if self.target is not None else self.running
        return (
            self.status == "HEALTHY"
            and self.running >= target
            and all(r.state == "RUNNING" for r in self.replicas)
        )


@dataclass(frozen=True)
class ApplicationState:
    name: str
    status: str
    message: str
    route_prefix: str | None
    deployments: tuple[DeploymentState, ...] = field(default_factory=tuple)
    last_deployed_time_s: float | None = None
    tasks: tuple[dict[str, Any], ...] = ()
    """Its tasks' rows (``TaskChanged.to_dict``) as its scheduler reports them."""
    release: dict[str, Any] | None = None
    """What runs, as the deploy recorded it (``deploy.release``): ``version``, ``commit``,
    ``ref``, ``deployed_at``, ``deployed_by``, ``peach_version``; None when not recorded."""

    @property
    def ready(self) -> bool:
        return self.status == "RUNNING" and all(d.ready for d in self.deployments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "route_prefix": self.route_prefix,
            "release": self.release,
            "deployments": [
                {
                    "name": d.name,
                    "status": d.status,
                    "message": d.message,
                    "target_replicas": d.target,
                    "replicas": [
                        {
                            "replica_id": r.replica_id,
                            "state": r.state,
                            "pid": r.pid,
                            "node_ip": r.node_ip,
                            "last_error": r.last_error,
                        }
                        for r in d.replicas
                    ],
                }
                for d in self.deployments
            ],
            "tasks": [dict(row) for row in self.tasks],
        }


def read_application(name: str, app: dict[str, Any]) -> ApplicationState:
    """One application of ``GET /api/serve/applications/`` as an ``ApplicationState``."""
    targets = {}
    for deployment in (app.get("deployed_app_config") or {}).get("deployments") or []:
        if isinstance(deployment.get("num_replicas"), int):
            targets[deployment["name"]] = deployment["num_replicas"]
    deployments = []
    for deployment_name, deployment in sorted((app.get("deployments") or {}).items()):
        target = deployment.get("target_num_replicas")
        if not isinstance(target, int):
            target = targets.get(deployment_name)
        replicas = tuple(
            ServeReplica(
                replica_id=str(replica.get("replica_id", "?")),
                state=str(replica.get("state", "?")),
                node_ip=replica.get("node_ip"),
                pid=replica.get("pid"),
            )
            for replica in deployment.get("replicas") or []
        )
        options = (deployment.get("deployment_config") or {}).get("ray_actor_options") or {}
        code = code_of(options.get("runtime_env") or {})
        deployments.append(
            DeploymentState(
                name=deployment_name,
                status=str(deployment.get("status", "?")),
                message=strip_ansi(deployment.get("message") or ""),
                target=target,
                replicas=replicas,
                code=code or None,
            )
        )
    return ApplicationState(
        name=name,
        status=str(app.get("status", "?")),
        message=strip_ansi(app.get("message") or ""),
        route_prefix=app.get("route_prefix"),
        deployments=tuple(deployments),
        last_deployed_time_s=app.get("last_deployed_time_s"),
        release=release_record(app),
    )


RELEASE_KEY = "release"
"""The key of the release record in the gateway's ``user_config``."""
RELEASE_FIELDS = ("version", "commit", "ref", "deployed_at", "deployed_by", "peach_version")


def recorded_release(app: dict[str, Any]) -> dict[str, Any] | None:
    """The release record a peach deploy wrote in the gateway's ``user_config`` (see
    ``deploy.release``), as Serve reports the application; None when there is none."""
    for deployment in (app.get("deployed_app_config") or {}).get("deployments") or ():
        if isinstance(deployment, dict) and deployment.get("name") == "gateway":
            record = (deployment.get("user_config") or {}).get(RELEASE_KEY)
            return record if isinstance(record, dict) else None
    return None


def release_record(app: dict[str, Any]) -> dict[str, Any] | None:
    """``recorded_release``, the fields ``peach status`` shows only."""
    record = recorded_release(app)
    return None if record is None else {key: record.get(key) for key in RELEASE_FIELDS}


def with_replica_errors(app: ApplicationState, errors: dict[str, str]) -> ApplicationState:
    """``app`` with each replica's last error (replica id → error) filled in."""
    deployments = tuple(
        dataclasses.replace(
            d,
            replicas=tuple(
                dataclasses.replace(r, last_error=errors.get(r.replica_id)) for r in d.replicas
            ),
        )
        for d in app.deployments
    )
    return dataclasses.replace(app, deployments=deployments)


def with_tasks(app: ApplicationState, rows: list[dict[str, Any]] | None) -> ApplicationState:
    """``app`` with its tasks' rows (None: its scheduler did not answer, or it has none)."""
    return dataclasses.replace(app, tasks=tuple(rows)) if rows else app


def read_applications(details: dict[str, Any]) -> list[ApplicationState]:
    """Every application Serve reports, by name."""
    return [
        read_application(name, app)
        for name, app in sorted((details.get("applications") or {}).items())
    ]


@dataclass(frozen=True)
class StartupFailure:
    """A deployment whose replica could not start, and the error to show."""

    deployment: str
    error: str


def code_of(runtime_env: dict[str, Any]) -> str:
    """What identifies a deployment's code: its ``working_dir`` (the project package, the
    same for every component) and its ``py_modules`` (its own spec package among them).

    >>> code_of({"working_dir": "gcs://p.zip", "py_modules": ["gcs://r.zip", "gcs://s.zip"]})
    'gcs://p.zip gcs://r.zip gcs://s.zip'
    """
    parts = [runtime_env.get("working_dir"), *(runtime_env.get("py_modules") or ())]
    return " ".join(part for part in parts if isinstance(part, str))


def startup_failure(
    app: ApplicationState,
    code: dict[str, str] | None = None,
    replaced: dict[str, str] | None = None,
) -> StartupFailure | None:
    """The first deployment reporting a replica start failure (or the app failing).

    A redeploy must not stop at a failure of the version it replaces, which Serve keeps
    reporting for a moment: ``code`` maps deployment names to the code just
    deployed (a deployment still at other code is skipped), and ``replaced`` to the errors
    the old version failed with (``starting_errors`` before the deploy) — one of those
    counts only once Serve gives the new version up (``DEPLOY_FAILED``).
    """
    for deployment in app.deployments:
        wanted = (code or {}).get(deployment.name)
        if wanted and deployment.code and deployment.code != wanted:
            continue
        failed = deployment.status == "DEPLOY_FAILED"
        if is_start_failure(deployment.status, deployment.message):
            error = user_error(deployment.message)
            if not failed and (replaced or {}).get(deployment.name) == error:
                continue
            return StartupFailure(deployment.name, error)
    if app.status == "DEPLOY_FAILED":
        return StartupFailure("", user_error(app.message))
    return None


def is_start_failure(status: str, message: str) -> bool:
    """Whether a deployment's status and message say its replicas fail to start."""
    return status == "DEPLOY_FAILED" or any(marker in message for marker in _FAILED_TO_START)


_SLOW_START = re.compile(r"replicas (that )?have taken more than \S+ to (be scheduled|initialize)")


def still_failing_to_start(
    status: str, message: str, running: int, known: str | None
) -> str | None:
    """A deployment's start failure now (the user's error, first line), or None.

    ``known`` is the failure an earlier read found, if any. While Serve retries a replica
    that failed to start, it may replace the failure in the deployment's message with its
    slow-start warning ("… replicas that have taken more than 30s to be scheduled"): that
    keeps the known failure, since no replica has started since. A running replica, or any
    other message (a new deploy), clears it.

    >>> slow = "Deployment 'd' in application 'a' has 1 replicas that have taken more than 30s to initialize."
    >>> still_failing_to_start("UPDATING", slow, 0, "load_model() raised OSError")
    'load_model() raised OSError'
    >>> still_failing_to_start("UPDATING", slow, 1, "load_model() raised OSError") is None
    True
    >>> still_failing_to_start("UPDATING", slow, 0, None) is None
    True
    """
    if running:
        return None
    if is_start_failure(status, message):
        return (user_error(message).splitlines() or [status])[0]
    if known and _SLOW_START.search(message):
        return known
    return None


def starting_errors(app: ApplicationState) -> dict[str, str]:
    """Deployment → the start failure it reports now (the user's error), if any."""
    return {
        d.name: user_error(d.message)
        for d in app.deployments
        if is_start_failure(d.status, d.message)
    }


def user_error(message: str) -> str:
    """The part of Ray's failure message that is about the user's code.

    A component's init failure is raised as ``PeachInitFailed: <message + traceback>``:
    that text is returned. Anything else (a runtime_env that cannot be set up, a crash
    of Ray itself) is returned from its last ``Error:`` on, or whole.
    """
    text = strip_ansi(message)
    marker = f"{INIT_FAILED_MARKER}: "
    index = text.rfind(marker)
    if index >= 0:
        lines = text[index + len(marker) :].strip().splitlines()
        return "\n".join(line for line in lines if not _RAY_TASK_HEADER.match(line))
    index = text.rfind("Error:\n")
    if index >= 0:
        tail = text[index + len("Error:\n") :].strip()
        lines = tail.splitlines()
        # keep the exception line(s) at the end; a full Ray traceback is noise
        return "\n".join(lines[-12:]) if len(lines) > 12 else tail
    return text.strip()
