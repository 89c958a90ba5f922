"""What the simulator reports while it serves: plain data for whoever renders it.

The simulator never prints; ``DevServer`` hands each of these to the ``on_event`` callback
it was given (``peach dev`` renders them, tests collect them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.wording import count
from simulator.changes import Changes
from simulator.edits import REASONS

if TYPE_CHECKING:
    from peach_cli.project.diagnostics import Diagnostic
    from peach_cli.runtime.plan import ABSpec, ProjectPlan


class ReplicaState(StrEnum):
    STARTING = "starting"
    HEALTHY = "healthy"
    RELOADING = "reloading"
    """Re-running ``init`` after a drift signal."""
    UNHEALTHY = "unhealthy"
    """``init`` raised; the error says why."""
    RESTARTING = "restarting"
    """The process died and is being started again."""
    DRAINING = "draining"
    """Retired by a reload: finishing in-flight work."""
    STOPPED = "stopped"


@dataclass(frozen=True)
class ReplicaChanged:
    """A replica changed state (or reported an error without changing state)."""

    component: str
    """``endpoint/component``."""
    replica: str
    state: ReplicaState
    pid: int | None = None
    error: str | None = None
    message: str | None = None
    """What happened, in a sentence (``restarted after exit code 17``)."""


@dataclass(frozen=True)
class ReplicaLog:
    """A log record or a line of output from a replica process (tracebacks included)."""

    component: str
    replica: str
    level: str
    message: str


@dataclass(frozen=True)
class ReplicaMemory:
    """A replica's resident memory, sampled about once a second: its RSS and its PSS
    (shared pages counted once: what the view shows)."""

    component: str
    replica: str
    rss: int
    limit: int | None
    pss: int = 0


@dataclass(frozen=True)
class MemoryWarning:
    """A replica's resident memory went over the component's ``memory`` request."""

    component: str
    replica: str
    rss: int
    limit: int


@dataclass(slots=True)
class RequestLogged:
    """One request answered (or one stream ended). Made for every request, so not frozen
    (a frozen dataclass sets each field through ``object.__setattr__``: five times the
    cost); nothing changes one after it is sent."""

    method: str
    path: str
    status: int
    endpoint: str | None
    component: str | None
    replica: str | None
    latency_s: float
    stream: bool = False
    error: str | None = None
    """The error code and message of an error envelope."""
    arm: str | None = None
    """The A/B arm the request was routed to (endpoints with ``ab:`` only)."""
    tried: str | None = None
    """The primary's replica when the fallback answered: it served the request too."""
    covered: str | None = None
    """``code: message`` of the primary's error when the fallback answered in its place
    (``peach fuzz`` reports it: the answer alone does not show it)."""


@dataclass(frozen=True)
class Serving:
    """The server is bound and answers on ``url`` (its replicas may still be starting)."""

    url: str


@dataclass(frozen=True)
class ReplicasStarted:
    """Every replica the server started with is healthy, unhealthy or restarting, ``seconds``
    after the session began."""

    seconds: float


@dataclass(frozen=True)
class ServerNote:
    """Something about the server itself (started, stopping, a plan applied)."""

    message: str
    level: str = "info"


@dataclass(frozen=True)
class Reinitialized:
    """``init`` was re-run on demand (the dev view's key, ``POST /_peach/reinit/...``): the
    components got new replicas, or kept their old ones when the new ``init`` raised."""

    keys: tuple[str, ...]
    seconds: float
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        done = [k for k in self.keys if k not in self.failed]
        took = f"{self.seconds:.2f} s"
        parts = [f"re-ran init of {', '.join(done)} in {took}"] if done else []
        parts += [
            f"{key}: the new init failed: {error}; still serving with the previous state"
            for key, error in self.failed.items()
        ]
        return "; ".join(parts) or "no component to re-run init for"


@dataclass(frozen=True)
class EnvProgress:
    """A py_environment is being built (or found): one step, for the live view."""

    env: str
    phase: str
    """``waiting``, ``resolving``, ``downloading``, ``installing`` or ``done``."""
    elapsed_s: float
    detail: str = ""

    @property
    def message(self) -> str:
        detail = f": {self.detail}" if self.detail else ""
        return f"py_env {self.env} {self.phase}{detail} ({self.elapsed_s:.1f} s)"


@dataclass(frozen=True)
class EnvFailed:
    """A py_environment could not be built: its components are unhealthy with ``error``."""

    env: str
    error: str
    components: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return self.error


Event = (
    ReplicaChanged
    | ReplicaLog
    | ReplicaMemory
    | MemoryWarning
    | RequestLogged
    | Serving
    | ReplicasStarted
    | ServerNote
    | Reinitialized
    | EnvProgress
    | EnvFailed
)


# --- hot reload -----------------------------------------------------------------------------


def _files(files: Iterable[str]) -> str:
    names = sorted(files)
    if len(names) > 3:
        return f"{', '.join(names[:3])} and {len(names) - 3} more"
    return ", ".join(names) or "the project"


def describe_split(ab: ABSpec | None) -> str:
    """``main 80% / diverse 20% by user`` (``off``: no A/B test).

    >>> from peach_cli.runtime.plan import ABSpec
    >>> describe_split(ABSpec("user", (("main", 80), ("diverse", 20))))
    'main 80% / diverse 20% by user'
    """
    if ab is None:
        return "off"
    return " / ".join(f"{arm} {percent}%" for arm, percent in ab.split) + f" by {ab.by}"


def _seconds(value: float) -> str:
    return f"{value:.2f} s"


def _reason(reason: str) -> str:
    """One reason as the reload line says it: ``init changed``, ``helpers.py changed``."""
    if reason.startswith("patch failed"):
        return reason
    return REASONS.get(reason) or f"{reason} changed"


@dataclass(frozen=True)
class ReloadStarted:
    """A save was detected and the new plan is valid: these components get new replicas
    (``restarting``) or new code in their running replicas (``patching``)."""

    files: tuple[str, ...]
    restarting: tuple[str, ...]
    patching: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        parts = []
        if self.patching:
            parts.append(f"patching {', '.join(self.patching)}")
        if self.restarting or not parts:
            parts.append(f"reloading {', '.join(self.restarting) or 'routing only'}")
        return f"{_files(self.files)} changed: {'; '.join(parts)}"


@dataclass(frozen=True)
class Reloaded:
    """A reload is done: the new version serves."""

    files: tuple[str, ...]
    changes: Changes
    seconds: float
    """From detecting the save to the new version serving."""
    init_seconds: float
    """Spent starting the new replicas (process, code, ``init``) while the old ones served."""
    failed: dict[str, str] = field(default_factory=dict)
    """Components whose new replicas did not start (the previous version still serves)."""
    unstarted: tuple[str, ...] = ()
    """Components whose new replicas did not start, none serving (their error is shown)."""
    plan: ProjectPlan | None = field(default=None, compare=False, repr=False)
    """The plan now served."""

    @property
    def applied(self) -> bool:
        """Whether anything changed in what is served (not only refused restarts)."""
        changes = self.changes
        return bool(
            [k for k in changes.needs_new_replicas if k not in self.failed]
            or changes.patched
            or changes.stopped
            or changes.urls_changed
            or changes.timeout_changed
            or changes.splits_changed
        )

    @property
    def message(self) -> str:
        changes = self.changes
        restarted = [
            k for k in changes.restarted if k not in self.failed and k not in self.unstarted
        ]
        started = [k for k in changes.started if k not in self.failed and k not in self.unstarted]
        parts: list[str] = []
        if changes.patched:
            parts.append("patched " + ", ".join(self._patched(k) for k in changes.patched))
        if restarted:
            parts.append(
                "restarted "
                + ", ".join(
                    f"{k} ({'; '.join(_reason(r) for r in changes.reasons(k))})" for k in restarted
                )
            )
        if started:
            parts.append("started " + ", ".join(started))
        if self.unstarted:
            parts.append(", ".join(self.unstarted) + " did not start (unhealthy, see above)")
        if changes.stopped:
            parts.append("stopped " + ", ".join(changes.stopped))
        for name, old, new in changes.urls_changed:
            parts.append(f"{name} moved from {old} to {new}")
        if changes.timeout_changed:
            parts.append(f"timeout_s {changes.timeout_changed[1]:g}")
        for name in changes.splits_changed:
            endpoint = self.plan.endpoints.get(name) if self.plan is not None else None
            parts.append(f"{name} split {describe_split(endpoint.ab if endpoint else None)}")
        head = "; ".join(parts) if parts else "re-routed"
        text = f"{head} in {_seconds(self.seconds)}"
        if restarted or started:
            text += f" (init {_seconds(self.init_seconds)})"
        unchanged = len(changes.unchanged)
        if unchanged:
            text += f"; {count(unchanged, 'component')} unchanged"
        return text

    def _patched(self, key: str) -> str:
        reasons = [_reason(r) for r in self.changes.reasons(key)]
        specs = {c.key: c for c in self.plan.components()} if self.plan is not None else {}
        spec = specs.get(key)
        if spec is None or spec.init:
            reasons.append("init state kept")
        return f"{key} ({'; '.join(reasons)})"


@dataclass(frozen=True)
class ReloadSkipped:
    """A save changed nothing that is served (a comment in an unused cell, a new file)."""

    files: tuple[str, ...]
    recovered: bool = False
    """The previous save was rejected and this one is back to what is served."""
    tasks: tuple[str, ...] = ()
    """Tasks whose code or config the save changed: they take it from their next run."""

    @property
    def message(self) -> str:
        if self.tasks:
            names = ", ".join(self.tasks)
            which = "task" if len(self.tasks) == 1 else "tasks"
            return f"{_files(self.files)} changed: {which} {names} will use it from the next run"
        if self.recovered:
            return f"{_files(self.files)} changed: the project is valid again, nothing to reload"
        return f"{_files(self.files)} changed: nothing to reload"


@dataclass(frozen=True)
class ReloadRejected:
    """The saved project has errors: the last good version keeps serving."""

    files: tuple[str, ...]
    diagnostics: tuple[Diagnostic, ...]
    problem: str | None = None
    """What is wrong when it is not a diagnostic (the conf file is gone)."""

    @property
    def errors(self) -> int:
        return sum(d.severity == "error" for d in self.diagnostics)

    @property
    def message(self) -> str:
        what = self.problem or f"the project has {count(self.errors, 'error')}"
        return f"{_files(self.files)} changed, but {what}: still serving the previous version"


@dataclass(frozen=True)
class ReloadFailed:
    """A changed component's new replicas could not start (its ``init`` raised, its code
    failed to import): its previous version keeps serving."""

    key: str
    error: str

    @property
    def message(self) -> str:
        return (
            f"{self.key}: the new version failed to start: {self.error}. Still serving the "
            "previous version; on the platform this replica would stay unhealthy"
        )


@dataclass(frozen=True)
class ReloadSuperseded:
    """Files were saved again while a reload still started replicas (an ``init`` that
    takes long, or never returns): that reload is dropped and the newest save applied."""

    files: tuple[str, ...]

    @property
    def message(self) -> str:
        return "saved again while reloading: dropping that reload, applying the latest save"


@dataclass(frozen=True)
class Watching:
    """The watcher is live: saves from now on are reloaded."""

    root: Path
    notebooks: tuple[str, ...]

    @property
    def message(self) -> str:
        return (
            f"watching {self.root} for changes: the conf, {count(len(self.notebooks), 'notebook')} "
            "and .py files (--no-reload to turn off)"
        )


@dataclass(frozen=True)
class WatchStopped:
    """The watcher failed: the server keeps serving, without hot reload."""

    root: Path
    error: str

    @property
    def message(self) -> str:
        return (
            f"hot reload is off: cannot watch {self.root} ({self.error}); "
            "restart peach dev to pick up changes"
        )


ReloadEvent = (
    Watching
    | WatchStopped
    | ReloadStarted
    | Reloaded
    | ReloadSkipped
    | ReloadRejected
    | ReloadFailed
    | ReloadSuperseded
)
RELOAD_EVENTS = (
    Watching,
    WatchStopped,
    ReloadStarted,
    Reloaded,
    ReloadSkipped,
    ReloadRejected,
    ReloadFailed,
    ReloadSuperseded,
)
