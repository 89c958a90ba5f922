"""Hot reload for ``peach dev``: what a save changed, and the loop that serves it.

The loop is uvicorn's reloader made finer-grained: wait for a save (``simulator.watch``),
rebuild the plan (``peach_cli.validate.build_plan``), then either keep serving the last good
version and report the diagnostics (the project has errors), or hand the new plan to
``DevServer.apply_plan``, which starts new replicas only for the components whose code,
config or imported project modules changed and swaps traffic once they are up.

``analyze_changes`` is the pure part: two ``Snapshot``\\ s (a plan and the fingerprints of
its components, taken when it was applied) in, a ``Changes`` out — per component key
``started``, ``stopped``, ``restarted`` or ``unchanged``, with reasons, plus the endpoints
added, removed or moved to another url (a url change re-routes, it restarts nothing)::

    before = Snapshot.take(plan)
    ...  # the user saves
    changes = analyze_changes(before, Snapshot.take(new_plan))
    changes.restarted   # ['assistant/main']

The loop reports through events (``ReloadStarted``, ``Reloaded``, ``ReloadRejected``,
``ReloadFailed``), each with a one-line ``message``; it never prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from simulator.watch import DEBOUNCE_MS, STEP_MS, ProjectFilter, awatch_project
from simulator.workers import WorkerLaunch, keep_spares, release_spares

if TYPE_CHECKING:
    from peach_cli.diagnostics import Diagnostic
    from peach_cli.plan import ComponentSpec, ProjectPlan
    from simulator.server import DevServer

logger = logging.getLogger("peach.reload")

MAX_SPARES = 2

Action = Literal["started", "stopped", "restarted", "unchanged"]

_FIELD_REASONS = {
    "source": "code",
    "source_name": "cell positions",
    "line_map": "cell positions",
    "modules": "imports",
    "dependencies": "py_env",
}


# --- what changed ---------------------------------------------------------------------------


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return "<missing>"


@dataclass(frozen=True)
class Snapshot:
    """A plan as it was applied: each component's fingerprint and its modules' digests.

    Taken when the plan is built, because a fingerprint includes the current contents of the
    project modules a component imports: recomputing it later would see the new contents.
    """

    plan: ProjectPlan
    fingerprints: dict[str, str]
    modules: dict[str, str] = field(default_factory=dict)
    """Project module (relative path) -> digest of its contents."""

    @classmethod
    def take(cls, plan: ProjectPlan) -> Snapshot:
        components = plan.components()
        modules = {m for c in components for m in c.modules}
        return cls(
            plan,
            {c.key: c.fingerprint(plan.root) for c in components},
            {m: _digest(plan.root / m) for m in sorted(modules)},
        )

    def specs(self) -> dict[str, ComponentSpec]:
        return {c.key: c for c in self.plan.components()}

    def replace(self, key: str, other: Snapshot) -> Snapshot:
        """This snapshot with component ``key`` taken from ``other`` (or dropped if absent
        there): what is served after a restart of ``key`` was refused."""
        endpoints = dict(self.plan.endpoints)
        endpoint_name = key.split("/", 1)[0]
        endpoint = endpoints.get(endpoint_name)
        old_spec = other.specs().get(key)
        fingerprints = dict(self.fingerprints)
        if endpoint is not None:
            components = dict(endpoint.components)
            if old_spec is None:
                components.pop(key.split("/", 1)[1], None)
                fingerprints.pop(key, None)
            else:
                components[old_spec.name] = replace(old_spec, url=endpoint.url)
                fingerprints[key] = other.fingerprints[key]
            endpoints[endpoint_name] = replace(endpoint, components=components)
        modules = {**other.modules, **self.modules}
        return Snapshot(replace(self.plan, endpoints=endpoints), fingerprints, modules)


@dataclass(frozen=True)
class ComponentChange:
    """What a reload does to one component."""

    key: str
    """``endpoint/component``."""
    action: Action
    reasons: tuple[str, ...] = ()
    """Why it restarts: ``code``, ``init``, ``args``, ``replicas``, a module path, ..."""


@dataclass(frozen=True)
class Changes:
    """The difference between the served plan and a new one."""

    components: tuple[ComponentChange, ...] = ()
    endpoints_added: tuple[str, ...] = ()
    endpoints_removed: tuple[str, ...] = ()
    urls_changed: tuple[tuple[str, str, str], ...] = ()
    """(endpoint, old url, new url)."""
    timeout_changed: tuple[float, float] | None = None

    def keys(self, action: Action) -> list[str]:
        return [c.key for c in self.components if c.action == action]

    @property
    def started(self) -> list[str]:
        return self.keys("started")

    @property
    def stopped(self) -> list[str]:
        return self.keys("stopped")

    @property
    def restarted(self) -> list[str]:
        return self.keys("restarted")

    @property
    def unchanged(self) -> list[str]:
        return self.keys("unchanged")

    @property
    def needs_new_replicas(self) -> list[str]:
        """The keys whose replicas ``apply_plan`` starts: restarted and started ones."""
        return [c.key for c in self.components if c.action in ("started", "restarted")]

    @property
    def empty(self) -> bool:
        """Nothing to apply: every component unchanged and routing the same."""
        return not (
            self.needs_new_replicas
            or self.stopped
            or self.endpoints_added
            or self.endpoints_removed
            or self.urls_changed
            or self.timeout_changed
        )

    def reasons(self, key: str) -> tuple[str, ...]:
        for change in self.components:
            if change.key == key:
                return change.reasons
        return ()


def _reasons(
    old: ComponentSpec, new: ComponentSpec, snapshots: tuple[Snapshot, Snapshot]
) -> tuple[str, ...]:
    before, after = asdict(old), asdict(new)
    reasons: list[str] = []
    for name, value in after.items():
        if name == "url" or before.get(name) == value:
            continue
        reason = _FIELD_REASONS.get(name, name)
        if reason not in reasons:
            reasons.append(reason)
    old_modules, new_modules = snapshots[0].modules, snapshots[1].modules
    for module in new.modules:
        if module in old.modules and old_modules.get(module) != new_modules.get(module):
            reasons.append(module)
    return tuple(reasons) or ("config",)


def analyze_changes(old: Snapshot, new: Snapshot) -> Changes:
    """Compare the served snapshot with a new one, component by component.

    A component restarts when its fingerprint changed (its extracted code, its config, or
    the contents of a project module it imports); a url change only re-routes.
    """
    old_specs, new_specs = old.specs(), new.specs()
    components: list[ComponentChange] = []
    for key, spec in new_specs.items():
        previous = old_specs.get(key)
        if previous is None:
            components.append(ComponentChange(key, "started"))
        elif old.fingerprints.get(key) != new.fingerprints.get(key):
            components.append(
                ComponentChange(key, "restarted", _reasons(previous, spec, (old, new)))
            )
        else:
            components.append(ComponentChange(key, "unchanged"))
    components += [ComponentChange(key, "stopped") for key in old_specs if key not in new_specs]
    old_endpoints, new_endpoints = old.plan.endpoints, new.plan.endpoints
    urls = tuple(
        (name, old_endpoints[name].url, spec.url)
        for name, spec in new_endpoints.items()
        if name in old_endpoints and old_endpoints[name].url != spec.url
    )
    timeouts = (old.plan.timeout_s, new.plan.timeout_s)
    return Changes(
        components=tuple(components),
        endpoints_added=tuple(n for n in new_endpoints if n not in old_endpoints),
        endpoints_removed=tuple(n for n in old_endpoints if n not in new_endpoints),
        urls_changed=urls,
        timeout_changed=timeouts if timeouts[0] != timeouts[1] else None,
    )


# --- what the loop reports ------------------------------------------------------------------


def _files(files: Iterable[str]) -> str:
    names = sorted(files)
    if len(names) > 3:
        return f"{', '.join(names[:3])} and {len(names) - 3} more"
    return ", ".join(names) or "the project"


def _count(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _seconds(value: float) -> str:
    return f"{value:.2f} s"


@dataclass(frozen=True)
class ReloadStarted:
    """A save was detected and the new plan is valid: these components get new replicas."""

    files: tuple[str, ...]
    restarting: tuple[str, ...]

    @property
    def message(self) -> str:
        what = ", ".join(self.restarting) or "routing only"
        return f"{_files(self.files)} changed: reloading {what}"


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
    plan: ProjectPlan | None = field(default=None, compare=False, repr=False)
    """The plan now served."""

    @property
    def applied(self) -> bool:
        """Whether anything changed in what is served (not only refused restarts)."""
        changes = self.changes
        return bool(
            [k for k in changes.needs_new_replicas if k not in self.failed]
            or changes.stopped
            or changes.urls_changed
            or changes.timeout_changed
        )

    @property
    def message(self) -> str:
        changes = self.changes
        restarted = [k for k in changes.restarted if k not in self.failed]
        started = [k for k in changes.started if k not in self.failed]
        parts: list[str] = []
        if restarted:
            parts.append(
                "reloaded "
                + ", ".join(f"{k} ({', '.join(changes.reasons(k))} changed)" for k in restarted)
            )
        if started:
            parts.append("started " + ", ".join(started))
        if changes.stopped:
            parts.append("stopped " + ", ".join(changes.stopped))
        for name, old, new in changes.urls_changed:
            parts.append(f"{name} moved from {old} to {new}")
        if changes.timeout_changed:
            parts.append(f"timeout_s {changes.timeout_changed[1]:g}")
        head = "; ".join(parts) if parts else "re-routed"
        text = f"{head} in {_seconds(self.seconds)}"
        if restarted or started:
            text += f" (init {_seconds(self.init_seconds)})"
        unchanged = len(changes.unchanged)
        if unchanged:
            text += f"; {_count(unchanged, 'component')} unchanged"
        return text


@dataclass(frozen=True)
class ReloadSkipped:
    """A save changed nothing that is served (a comment in an unused cell, a new file)."""

    files: tuple[str, ...]
    recovered: bool = False
    """The previous save was rejected and this one is back to what is served."""

    @property
    def message(self) -> str:
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
        what = self.problem or f"the project has {_count(self.errors, 'error')}"
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
            f"watching {self.root} for changes: the conf, {_count(len(self.notebooks), 'notebook')} "
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


# --- the loop -------------------------------------------------------------------------------


def _stamps(root: Path, files: Iterable[str]) -> list[tuple[int, int] | None]:
    """Size and modification time of each file: whether it changed again meanwhile."""
    stamps: list[tuple[int, int] | None] = []
    for name in files:
        try:
            stat = (root / name).stat()
        except OSError:
            stamps.append(None)
        else:
            stamps.append((stat.st_size, stat.st_mtime_ns))
    return stamps


def project_filter_for(project: Path, plan: ProjectPlan) -> ProjectFilter:
    """The watch filter of a project folder (or single conf file) and its current plan."""
    project = Path(project)
    single = project.is_file()
    confs = (
        [project.name]
        if single
        else [f for f in plan.watched_files if f.endswith((".yaml", ".yml"))]
    )
    project_filter = ProjectFilter(plan.root, conf_files=confs, single_file=single)
    project_filter.use_plan(plan)
    return project_filter


class Reloader:
    """Watches a served project and reloads what each save changed.

    ``run`` is the loop; ``reload`` handles one batch of changed files (tests call it
    directly). Reloads never overlap: a save made while one still starts replicas
    supersedes it (its new replicas are stopped; an ``init`` that never returns cannot
    block the next save).
    """

    def __init__(
        self,
        server: DevServer,
        project: Path | str,
        *,
        on_event: Callable[[Any], None] | None = None,
        step_ms: int = STEP_MS,
        debounce_ms: int = DEBOUNCE_MS,
        spares: int | None = None,
    ) -> None:
        r"""
        Args:
            server: the running server whose plan is reloaded.
            project: the project folder (or single conf file) as given to ``peach dev``.
            on_event: receives the reload events.
            step_ms, debounce_ms: the watcher's grouping of changes (``simulator.watch``).
            spares: replica processes kept started ahead of need (``simulator.workers``);
                default: as many as the largest component has replicas, at most
                ``MAX_SPARES``, so restarting any one component skips Python's start-up.
        """
        self.server = server
        self.project = Path(project)
        self.on_event = on_event
        self.served = Snapshot.take(server.plan)
        self.filter = project_filter_for(self.project, server.plan)
        self.step_ms = step_ms
        self.debounce_ms = debounce_ms
        if spares is None:
            largest = max((c.replicas for c in server.plan.components()), default=1)
            spares = min(MAX_SPARES, max(1, largest))
        self.spares = spares
        self.rejected = False
        """The last save was rejected (the served version is older than the files)."""

    def emit(self, event: ReloadEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    async def run(self, stop_event: asyncio.Event | None = None) -> None:
        """Reload on every save until ``stop_event`` is set or the task is cancelled.

        Emits ``Watching`` once the watcher is live: a save made after it is seen.
        """
        changes = awatch_project(
            self.filter, stop_event=stop_event, step_ms=self.step_ms, debounce_ms=self.debounce_ms
        )
        batch: asyncio.Future[set[str]] = asyncio.ensure_future(anext(changes))
        prepare = asyncio.ensure_future(self._keep_spares())
        tasks: list[asyncio.Future[Any]] = []  # reloads, cancelled if the loop stops first
        try:
            await asyncio.sleep(0)  # the first step of `batch` has started the watcher
            self.emit(Watching(self.filter.root, tuple(sorted(self.filter.notebooks or ()))))
            while True:
                try:
                    files = await batch
                except StopAsyncIteration:
                    return
                except Exception as error:  # noqa: BLE001 - e.g. too many folders to watch
                    self.emit(WatchStopped(self.filter.root, f"{type(error).__name__}: {error}"))
                    return
                batch = asyncio.ensure_future(anext(changes))
                while True:  # a save during a reload supersedes it (an init may never end)
                    reloading = asyncio.ensure_future(self.reload(files))
                    tasks[:] = [reloading]
                    await asyncio.wait({reloading, batch}, return_when=asyncio.FIRST_COMPLETED)
                    if reloading.done() or not self._supersedable(batch):
                        await self._finish(reloading)
                        break
                    reloading.cancel()
                    await self._finish(reloading)
                    files = set(files) | batch.result()
                    self.emit(ReloadSuperseded(tuple(sorted(files))))
                    batch = asyncio.ensure_future(anext(changes))
        finally:
            pending: list[asyncio.Future[Any]] = [batch, prepare, *tasks]
            for task in pending:
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
            await changes.aclose()
            await release_spares(self.filter.root)

    @staticmethod
    def _supersedable(batch: asyncio.Future[set[str]]) -> bool:
        """A new batch of saves arrived (not the end of watching, nor a watcher error)."""
        return batch.done() and not batch.cancelled() and batch.exception() is None

    @staticmethod
    async def _finish(reloading: asyncio.Future[ReloadEvent]) -> None:
        try:
            await reloading
        except asyncio.CancelledError:
            if not reloading.cancelled():
                raise
        except Exception:  # a bug here must not stop the server: log it, keep watching
            logger.exception("reload failed")

    async def _keep_spares(self) -> None:
        """Once the first replicas are up, keep spare processes for the next reload."""
        if self.spares > 0:
            await self.server.wait_ready()
            await keep_spares(WorkerLaunch(self.filter.root), count=self.spares).fill()

    async def reload(self, files: Iterable[str]) -> ReloadEvent:
        """Rebuild the plan after ``files`` changed and serve it if it is valid."""
        from peach_cli.diagnostics import sort_key
        from peach_cli.errors import PeachError
        from peach_cli.validate import build_plan

        detected = time.perf_counter()
        changed = tuple(sorted(files))
        stamps = _stamps(self.filter.root, changed)
        event: ReloadEvent
        try:
            plan, diagnostics = await asyncio.to_thread(build_plan, self.project)
        except PeachError as error:  # no conf file any more (a rename in progress)
            plan, diagnostics = None, []
            problem: str | None = error.message
        else:
            problem = None
        if plan is None:
            self.filter.use_plan(None)  # a fix may name a notebook the last plan did not use
            self.rejected = True
            ordered = tuple(sorted(diagnostics, key=sort_key))
            event = ReloadRejected(changed, ordered, problem)
            if _stamps(self.filter.root, changed) == stamps:  # else: half a save, more to come
                self.emit(event)
            return event
        recovered, self.rejected = self.rejected, False
        snapshot = Snapshot.take(plan)
        changes = analyze_changes(self.served, snapshot)
        if changes.timeout_changed and self.server.timeout_override is not None:
            changes = replace(changes, timeout_changed=None)  # --timeout-s wins: nothing changes
        self.filter.use_plan(plan)
        if changes.empty:
            self.served = snapshot
            event = ReloadSkipped(changed, recovered)
            self.emit(event)
            return event
        self.emit(ReloadStarted(changed, tuple(changes.needs_new_replicas)))
        result = await self.server.apply_plan(plan)
        failed: dict[str, str] = dict(getattr(result, "failed", {}) or {})
        served = snapshot
        for key, message in failed.items():
            if key in self.served.fingerprints:  # the previous version still serves
                served = served.replace(key, self.served)
                self.emit(ReloadFailed(key, message))
        self.served = served
        event = Reloaded(
            changed,
            changes,
            seconds=time.perf_counter() - detected,
            init_seconds=float(getattr(result, "seconds", 0.0)),
            failed={k: v for k, v in failed.items() if k in self.served.fingerprints},
            plan=plan,
        )
        if event.applied or not failed:  # a refused restart alone was reported above
            self.emit(event)
        return event
