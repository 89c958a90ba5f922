"""Hot reload for ``peach dev``: what a save changed, and the loop that serves it.

The loop is uvicorn's reloader made finer-grained: wait for a save (``simulator.watch``),
rebuild the plan (``peach_cli.checks.build.build_plan``), then either keep serving the last good
version and report the diagnostics (the project has errors), or hand the new plan to
``DevServer.apply_plan``, which patches the components whose method alone changed (their
running replicas take the new code and keep their ``init`` state), starts new replicas for
the components whose code, config or imported project modules changed otherwise, and swaps
traffic once they are up.

What a save changed is worked out by ``simulator.changes`` (the pure part). The loop
reports through events (``simulator.events``: ``ReloadStarted``, ``Reloaded``,
``ReloadRejected``, ``ReloadFailed``, …), each with a one-line ``message``; it never prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from peach_cli.project.filenames import YAML_SUFFIXES
from simulator.changes import Snapshot, analyze_changes
from simulator.events import (
    Reloaded,
    ReloadEvent,
    ReloadFailed,
    ReloadRejected,
    ReloadSkipped,
    ReloadStarted,
    ReloadSuperseded,
    Watching,
    WatchStopped,
)
from simulator.watch import DEBOUNCE_MS, STEP_MS, ProjectFilter, awatch_project

if TYPE_CHECKING:
    from peach_cli.project.diagnostics import Diagnostic
    from peach_cli.runtime.plan import ProjectPlan
    from simulator.server import DevServer

logger = logging.getLogger("peach.reload")

MAX_SPARES = 2
ReloadMode = Literal["patch", "restart"]

# --- the loop -------------------------------------------------------------------------------


def _build(project: Path) -> tuple[ProjectPlan | None, list[Diagnostic], Snapshot | None]:
    """The project's plan, its diagnostics and its snapshot (the fingerprints read the
    notebooks' code and the imported modules): a reload's work, done off the serving loop."""
    from peach_cli.checks.build import build_plan

    plan, diagnostics = build_plan(project)
    return plan, diagnostics, None if plan is None else Snapshot.take(plan)


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
        [project.name] if single else [f for f in plan.watched_files if f.endswith(YAML_SUFFIXES)]
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
        mode: ReloadMode = "patch",
    ) -> None:
        r"""
        Args:
            server: the running server whose plan is reloaded.
            project: the project folder (or single conf file) as given to ``peach dev``.
            on_event: receives the reload events.
            step_ms, debounce_ms: the watcher's grouping of changes (``simulator.watch``).
            spares: replica processes kept started ahead of need (by ``server.spawner``);
                default: as many as the largest component has replicas, at most
                ``MAX_SPARES``, so restarting any one component skips Python's start-up.
            mode: ``patch`` (a component whose method alone changed keeps its replicas and
                their ``init`` state, taking the new code) or ``restart`` (always new
                replicas).
        """
        self.server = server
        self.project = Path(project)
        self.on_event = on_event
        self.filter = project_filter_for(self.project, server.plan)
        self.step_ms = step_ms
        self.debounce_ms = debounce_ms
        if spares is None:
            largest = max((c.replicas for c in server.plan.components()), default=1)
            spares = min(MAX_SPARES, max(1, largest))
        self.spares = spares
        self.mode = mode
        self.rejected = False
        """The last save was rejected (the served version is older than the files)."""

    @property
    def served(self) -> Snapshot:
        """What the server serves (``DevServer.served``): each save is compared with it."""
        return self.server.served

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
                        if prepare.done():  # a new env may be in use: keep spares for it
                            prepare = asyncio.ensure_future(self._keep_spares())
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
            if self.spares > 0:
                await self.server.spawner.release(self.filter.root)

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
            for launch in self.server.launches():  # one set per env in use
                await self.server.spawner.keep(launch, count=self.spares).fill()

    async def reload(self, files: Iterable[str]) -> ReloadEvent:
        """Rebuild the plan after ``files`` changed and serve it if it is valid."""
        from peach_cli.errors import PeachError
        from peach_cli.project.diagnostics import sort_key

        detected = time.perf_counter()
        changed = tuple(sorted(files))
        stamps = _stamps(self.filter.root, changed)
        event: ReloadEvent
        try:
            # In a thread, with the fingerprints: the serving loop never waits for them.
            plan, diagnostics, taken = await asyncio.to_thread(_build, self.project)
        except PeachError as error:  # no conf file any more (a rename in progress)
            plan, diagnostics, taken = None, [], None
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
        snapshot = taken or Snapshot.take(plan)
        changes = analyze_changes(self.served, snapshot, patch=self.mode == "patch")
        if changes.timeout_changed and self.server.timeout_override is not None:
            changes = replace(changes, timeout_changed=None)  # --timeout-s wins: nothing changes
        self.filter.use_plan(plan)
        if changes.empty:
            before = self.served.plan.tasks
            tasks = tuple(n for n, spec in plan.tasks.items() if before.get(n) != spec)
            self.server.adopt(snapshot)
            event = ReloadSkipped(changed, recovered, tasks)
            self.emit(event)
            return event
        self.emit(ReloadStarted(changed, tuple(changes.needs_new_replicas), tuple(changes.patched)))
        result = await self.server.apply_plan(snapshot, patch=changes.patched)
        changes = changes.with_restarts(result.patch_failed)
        failed = dict(result.failed)
        for key, message in failed.items():
            if key in self.served.fingerprints:  # the previous version still serves
                self.emit(ReloadFailed(key, message))
        event = Reloaded(
            changed,
            changes,
            seconds=time.perf_counter() - detected,
            init_seconds=result.seconds,
            failed={k: v for k, v in failed.items() if k in self.served.fingerprints},
            unstarted=tuple(result.unstarted),
            plan=plan,
        )
        if event.applied or not failed:  # a refused restart alone was reported above
            self.emit(event)
        return event
