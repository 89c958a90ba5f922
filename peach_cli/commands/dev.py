"""`peach dev`: build the plan, serve it with the local simulator, render what happens.

The command resolves everything once (plan, options), hands the plan to
``simulator.server.DevServer`` and renders its events with ``peach_cli.views.dev``. Ctrl-C
(or SIGTERM) stops it cleanly: in-flight streams are closed, every replica process is
stopped; a second Ctrl-C kills the replicas at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.errors import UsageError
from peach_cli.wording import count

if TYPE_CHECKING:
    from peach_cli.runtime.plan import ProjectPlan
    from peach_cli.views.dev import DevView
    from peach_cli.views.keys import DevKeys
    from simulator.reload import ReloadMode
    from simulator.server import DevServer

RELOAD_MODES = ("patch", "restart")


def run_dev(
    project: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    reload: bool = True,
    reload_mode: str = "patch",
    timeout_s: float | None = None,
    shared_env: bool = False,
    inherit_env: bool = False,
    offline: bool = False,
    tasks: bool = False,
    task_interval: float = 60.0,
) -> int:
    """Serve the project at ``project`` until interrupted; return the exit code."""
    if reload_mode not in RELOAD_MODES:
        raise UsageError(f"--reload must be patch or restart, not {reload_mode!r}")
    if timeout_s is not None and not timeout_s > 0:
        raise UsageError(f"--timeout-s must be a positive number of seconds, not {timeout_s:g}")
    if not task_interval >= 0:
        raise UsageError(f"--task-interval must be 0 or more seconds, not {task_interval:g}")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {port}")
    from peach_cli.checks.diagnostics import sort_key
    from peach_cli.checks.validate import build_plan
    from peach_cli.views import console

    plan, diagnostics = build_plan(project)
    diagnostics.sort(key=sort_key)
    if plan is None:
        errors = sum(d.severity == "error" for d in diagnostics)
        console.print_diagnostics(
            diagnostics,
            summary=f"{count(errors, 'error')} in {project}: not serving",
            ok=False,
        )
        return 1
    warnings = [d for d in diagnostics if d.severity == "warning"]
    if warnings:
        console.print_diagnostics(
            warnings, summary=f"{project}: {len(warnings)} warning(s), serving anyway", ok=True
        )
    from peach_cli.runtime import aio
    from peach_cli.views.dev import DevView

    out = console.stdout()
    view = DevView(out, live=out.is_terminal)
    view.set_plan(plan)
    return aio.run(
        serve(
            plan,
            view,
            host=host,
            port=port,
            reload=reload,
            timeout_s=timeout_s,
            project=project,
            reload_mode=reload_mode,
            shared_env=shared_env,
            inherit_env=inherit_env,
            offline=offline,
            tasks=tasks,
            task_interval=task_interval,
        )
    )


async def serve(
    plan: ProjectPlan,
    view: DevView,
    *,
    host: str,
    port: int,
    reload: bool,
    timeout_s: float | None,
    project: Path | None = None,
    reload_mode: str = "patch",
    shared_env: bool = False,
    inherit_env: bool = False,
    offline: bool = False,
    tasks: bool = False,
    task_interval: float = 60.0,
) -> int:
    """Run the dev server until SIGINT/SIGTERM/SIGHUP; always stop every replica."""
    from peach_cli.addresses import is_loopback
    from simulator.environments import Environments
    from simulator.server import DevServer
    from simulator.tasks.scheduler import TaskScheduler

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # Triggered runs are served with or without --tasks; --tasks adds the loop.
    scheduler = TaskScheduler(
        plan, project=project, loop=tasks, interval_s=task_interval, on_event=view.handle
    )
    environments = Environments(
        plan.root,
        isolated=not shared_env,
        offline=offline,
        on_event=view.handle,
        env=scheduler.worker_env,
        inherit_env=inherit_env,
    )
    scheduler.environments = environments
    server = DevServer(
        plan,
        host=host,
        port=port,
        timeout_s=timeout_s,
        on_event=view.handle,
        environments=environments,
    )

    def on_signal(number: int) -> None:
        if not stop.is_set():
            stop.set()
        elif number == signal.SIGINT:  # a second Ctrl-C: do not wait for anything
            server.kill_replicas()
            os._exit(130)
        # A repeated SIGTERM/SIGHUP (`timeout` signals the process, then its group) is the
        # same request to stop: the clean stop already under way goes on.

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(number, on_signal, number)
    began = time.perf_counter()
    reloading: asyncio.Task[None] | None = None
    keys: DevKeys | None = None
    try:
        await server.start()
        view.serving(server.url)
        scheduler.ready.clear()  # the loop's first round starts once the replicas are up
        await scheduler.start()
        if tasks and not plan.tasks:
            view.warn("--tasks: the project defines no task (add them under tasks:)")
        if plan.tasks:
            scheduler.warm_up()
        if shared_env:
            view.warn(
                "--shared-env: every replica runs in peach's own Python; imports are not "
                "checked against py_environments"
            )
        if inherit_env:
            view.warn(
                "--inherit-env: replicas and tasks get peach's whole environment, not only "
                "their env_vars and secrets; on the cluster they get only those"
            )
        if not is_loopback(host):
            view.warn(
                f"bound to {host}: every endpoint is reachable from other machines, "
                "with no authentication"
            )
        if reload and project is not None:
            from simulator.reload import Reloader

            mode: ReloadMode = "restart" if reload_mode == "restart" else "patch"
            reloader = Reloader(server, project, on_event=view.handle, mode=mode)
            reloading = loop.create_task(reloader.run(stop))
        view.start()
        keys = watch_keys(server, view)
        ready = loop.create_task(_report_ready(server, view, began, scheduler.ready))
        await stop.wait()
        ready.cancel()
    finally:
        if keys is not None:
            keys.close()
        view.note("stopping: closing streams and replicas", "yellow")
        view.flush()
        await scheduler.stop()  # a running task is killed with its process tree
        if reloading is not None:  # no reload may start replicas while they stop
            reloading.cancel()
            with contextlib.suppress(BaseException):
                await reloading
        try:
            await server.stop()
        finally:
            view.stop()
            for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(number)
    return 0


def watch_keys(server: DevServer, view: DevView) -> DevKeys | None:
    """Keys typed in the terminal (``peach_cli.views.keys``): ``i`` re-runs every init."""
    from peach_cli.views.keys import DevKeys

    components = [c.key for c in server.plan.components() if c.init]
    if not components:
        return None

    def reinit() -> None:
        keys = [c.key for c in server.plan.components() if c.init]
        view.note(f"re-running init of {', '.join(keys)}", "yellow")
        task = asyncio.get_running_loop().create_task(server.reinit(keys))
        _running.add(task)
        task.add_done_callback(_running.discard)

    keys = DevKeys.open({"i": reinit})
    if keys is not None:
        view.note("press i to re-run every init (a patch keeps the state init returned)")
    return keys


_running: set[asyncio.Task[object]] = set()


async def _report_ready(
    server: DevServer, view: DevView, began: float, tasks_ready: asyncio.Event
) -> None:
    from simulator.events import ReplicaState

    await server.wait_ready()
    tasks_ready.set()
    rows = list(view.replicas.values())
    healthy = sum(row.state is ReplicaState.HEALTHY for row in rows)
    message = f"{healthy}/{len(rows)} replicas healthy in {time.perf_counter() - began:.2f} s"
    view.line(message if healthy == len(rows) else f"{message} (see errors above)", now=True)
