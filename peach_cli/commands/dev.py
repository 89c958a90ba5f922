"""`peach dev`: build the plan, serve it with the local simulator, render what happens.

The command resolves everything once (plan, options), runs a ``simulator.session.DevSession``
built from them and renders its events with ``peach_cli.views.dev``. Ctrl-C
(or SIGTERM) stops it cleanly: in-flight streams are closed, every replica process is
stopped; a second Ctrl-C kills the replicas at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.boundary import Output, Secrets
    from peach_cli.commands.project_options import DevOptions
    from peach_cli.views.dev import DevView
    from peach_cli.views.keys import DevKeys
    from simulator.session import DevSession, SessionConfig

RELOAD_MODES = ("patch", "restart")


def run_dev(output: Output, options: DevOptions) -> int:
    """Serve the project at ``project`` until interrupted; return the exit code."""
    project, host, port, reload_mode = (
        options.project,
        options.host,
        options.port,
        options.reload_mode,
    )
    timeout_s, task_interval, record = options.timeout_s, options.task_interval, options.record
    reload, debug, post_mortem = not options.no_reload, not options.no_debug, options.post_mortem
    allow_hosts, allow_origins = (
        tuple(options.allow_hosts or ()),
        tuple(options.allow_origins or ()),
    )
    shared_env, inherit_env, offline, tasks = (
        options.shared_env, options.inherit_env, options.offline, options.tasks
    )  # fmt: skip
    if reload_mode not in RELOAD_MODES:
        raise UsageError(f"--reload must be patch or restart, not {reload_mode!r}")
    if timeout_s is not None and not timeout_s > 0:
        raise UsageError(f"--timeout-s must be a positive number of seconds, not {timeout_s:g}")
    if not task_interval >= 0:
        raise UsageError(f"--task-interval must be 0 or more seconds, not {task_interval:g}")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {port}")
    if record is not None and (record.is_dir() or not record.parent.is_dir()):
        raise UsageError(f"--record {record}: not a file in an existing folder")
    if port:
        check_port_free(host, port)
    from peach_cli.commands.loading import load_plan
    from peach_cli.runtime import aio
    from peach_cli.views.dev import DevView

    plan = load_plan(output, project, doing="serving", warnings="show")
    from peach_cli.runtime.linux import become_subreaper
    from simulator.debug import terminal_reason
    from simulator.session import SessionConfig

    become_subreaper()  # what a replica or task orphans is adopted here, not by init

    no_debug = "--no-debug" if not debug else terminal_reason()

    config = SessionConfig(
        plan,
        project=project,
        host=host,
        port=port,
        timeout_s=timeout_s,
        reload=reload,
        reload_mode="restart" if reload_mode == "restart" else "patch",
        shared_env=shared_env,
        inherit_env=inherit_env,
        offline=offline,
        task_loop=tasks,
        task_interval_s=task_interval,
        allow_hosts=allow_hosts,
        allow_origins=allow_origins,
        debug=no_debug is None,
        debug_skipped=no_debug or "",
        post_mortem=post_mortem,
        record=record,
    )
    out = output.stdout
    view = DevView(out, live=out.is_terminal)
    view.set_plan(plan)
    return aio.run(serve(config, view, output.secrets))


def check_port_free(host: str, port: int) -> None:
    """Raise ``PeachError`` (one line, and what to do) when ``host:port`` cannot be listened
    on: checked before anything starts, so nothing has to be stopped again."""
    from peach_cli.doctor.machine import check_port
    from peach_cli.errors import PeachError

    check = check_port(host, port)
    if check.status == "fail":
        raise PeachError(f"peach dev cannot start: {check.summary}", hint=check.advice)


async def serve(config: SessionConfig, view: DevView, secrets: Secrets) -> int:
    """Run a ``DevSession`` until SIGINT/SIGTERM/SIGHUP; always stop every replica.
    ``secrets``: the run's, where the session's secret values go."""
    from peach_cli.addresses import is_loopback
    from peach_cli.runtime.tree import kill_descendants
    from simulator.session import DevSession

    plan = config.plan
    session = DevSession(config, on_event=view.handle, secrets=secrets)
    stop = asyncio.Event()
    keys: DevKeys | None = None
    with _stop_on_signals(stop, session):
        try:
            await session.start()
            settle_heap()
            if config.task_loop and not plan.tasks:
                view.warn("--tasks: the project defines no task (add them under tasks:)")
            if config.shared_env:
                view.warn(
                    "--shared-env: every replica runs in peach's own Python; imports are not "
                    "checked against py_environments"
                )
            if config.inherit_env:
                view.warn(
                    "--inherit-env: replicas and tasks get peach's whole environment, not only "
                    "their env_vars and secrets; on the cluster they get only those"
                )
            if not is_loopback(config.host):
                view.warn(
                    f"bound to {config.host}: every endpoint is reachable from other machines, "
                    "with no authentication"
                )
            if config.record is not None:
                view.note(f"recording every answered request to {config.record}")
            view.start()
            keys = watch_keys(session, view)
            if keys is not None and session.debugger is not None:
                session.debugger.pause_hooks.append(keys.pause)
                session.debugger.resume_hooks.append(keys.resume)
            await stop.wait()
        finally:
            if keys is not None:
                keys.close()
            view.note("stopping: closing streams and replicas", "yellow")
            view.flush()
            try:
                await session.stop()
            finally:
                view.stop()
                kill_descendants()  # what was orphaned and adopted here (no keeper)
    return 0


def settle_heap() -> None:
    """Leave what start-up made (modules, classes, functions, the first version: about
    60,000 objects) out of the collector's full collections from now on: a busy ``peach dev``
    runs one every minute or two, and each went over all of them while every call in flight
    waited. The garbage of start-up is collected first; what is frozen is still freed when
    nothing refers to it (only a reference cycle among it would stay)."""
    import gc

    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event, session: DevSession) -> Iterator[None]:
    """SIGINT, SIGTERM, SIGHUP set ``stop``; a second Ctrl-C kills the replicas and exits."""
    loop = asyncio.get_running_loop()

    def on_signal(number: int) -> None:
        if not stop.is_set():
            stop.set()
        elif number == signal.SIGINT:  # a second Ctrl-C: do not wait for anything
            session.kill_now()
            os._exit(130)
        # A repeated SIGTERM/SIGHUP (`timeout` signals the process, then its group) is the
        # same request to stop: the clean stop already under way goes on.

    for number in SIGNALS:
        loop.add_signal_handler(number, on_signal, number)
    try:
        yield
    finally:
        for number in SIGNALS:
            loop.remove_signal_handler(number)


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def watch_keys(session: DevSession, view: DevView) -> DevKeys | None:
    """Keys typed in the terminal (``peach_cli.views.keys``): ``i`` re-runs every init."""
    from peach_cli.views.keys import DevKeys

    server = session.server
    assert server is not None
    if not any(c.init for c in server.plan.components()):
        return None

    def reinit() -> None:
        keys = [c.key for c in server.plan.components() if c.init]
        view.note(f"re-running init of {', '.join(keys)}", "yellow")
        session.start_reinit(keys)

    keys = DevKeys.open({"i": reinit})
    if keys is not None:
        view.note("press i to re-run every init (a patch keeps the state init returned)")
    return keys
