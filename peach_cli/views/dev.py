"""What ``peach dev`` shows: a live table of endpoints → components → replicas, and log lines.

``DevView`` receives the simulator's events (``simulator.events``) and renders them with
Rich: one line per request (status, component, replica, latency), replica state changes,
user tracebacks and prints, memory warnings; on a terminal, a live table underneath with
each replica's state, request count, p50 latency, memory and last error, and for an
endpoint with an A/B test each arm's share and the requests routed to it. When stdout is
not a terminal there is no live table and every line is plain text, flushed at once, so
``peach dev serving on http://…`` can be parsed by scripts and tests.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.text import Text

from peach_cli.boundary import shown, shown_lines
from peach_cli.runtime.request_line import format_latency, request_line
from peach_cli.views.task import TasksTable, prefixed, run_line
from peach_cli.wording import human_size
from simulator.debug import DEBUG_EVENTS, DebugEnded, DebugQueued, DebugStarted
from simulator.events import (
    RELOAD_EVENTS,
    EnvFailed,
    EnvProgress,
    Event,
    MemoryWarning,
    Reinitialized,
    ReplicaChanged,
    ReplicaLog,
    ReplicaMemory,
    ReplicasStarted,
    ReplicaState,
    RequestLogged,
    ServerNote,
    Serving,
)
from simulator.tasks.events import TASK_EVENTS, TaskChanged, TaskEvent, TaskOutput

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

    from peach_cli.runtime.plan import ProjectPlan
    from simulator.events import ReloadEvent

REFRESH_S = 0.25
LOG_FLUSH_S = 0.05
REFRESH_COST_FACTOR = 5.0
"""The table waits at least this many times as long as its last redraw took."""
LATENCY_WINDOW = 200
MAX_LINES_PER_FLUSH = 25

_STATE_STYLE = {
    ReplicaState.STARTING: "yellow",
    ReplicaState.HEALTHY: "green",
    ReplicaState.RELOADING: "cyan",
    ReplicaState.UNHEALTHY: "bold red",
    ReplicaState.RESTARTING: "magenta",
    ReplicaState.DRAINING: "dim",
    ReplicaState.STOPPED: "dim",
}

_RETIRED_FROM = (ReplicaState.DRAINING, ReplicaState.UNHEALTHY, ReplicaState.RESTARTING)
"""States a replica leaves the table from when it stops (a reload retired or refused it)."""


@dataclass
class ReplicaRow:
    """What the view knows about one replica."""

    id: str
    component: str
    state: ReplicaState = ReplicaState.STARTING
    pid: int | None = None
    requests: int = 0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    memory: int | None = None
    """Its PSS (shared pages counted once; its RSS where the system has no PSS)."""
    limit: int | None = None
    over_limit: bool = False
    """Its RSS passed ``limit`` (what a replica of its own would hold on the platform)."""
    last_error: str | None = None

    @property
    def p50(self) -> float | None:
        return median(self.latencies) if self.latencies else None


class DevView:
    """Renders ``peach dev``'s events; ``live=True`` adds the live table (terminals only)."""

    def __init__(self, console: Console, *, live: bool) -> None:
        self.console = console
        self.live_enabled = live
        self.endpoints: list[tuple[str, str, list[str]]] = []
        """(endpoint name, url, component keys) in plan order."""
        self.replicas: dict[str, ReplicaRow] = {}
        self.limits: dict[str, int | None] = {}
        self.splits: dict[str, tuple[str, dict[str, int]]] = {}
        """Endpoint name → (by, arm → percent) for endpoints with an A/B test."""
        self.arm_requests: dict[str, dict[str, int]] = {}
        """Endpoint name → arm → requests routed to it."""
        self._live: Live | None = None
        self._pending: list[Text | str] = []
        self._closed_output = False
        self._dirty = True
        self._task: asyncio.Task[None] | None = None
        self.builds: dict[str, tuple[EnvProgress, float]] = {}
        """Envs being built: the last step and when (monotonic) it was reported."""
        self.tasks = TasksTable()
        self._paused = False
        """A pdb session holds the terminal: lines wait, the table is off."""
        self.env_errors: dict[str, str] = {}
        """A py_env build's error → the env: printed once, replicas then refer to it."""

    # -- plan and lifecycle --------------------------------------------------------------

    def set_plan(self, plan: ProjectPlan) -> None:
        """Show the endpoints and components of ``plan`` (again after a reload)."""
        self.endpoints = [
            (name, spec.url, [c.key for c in spec.components.values()])
            for name, spec in plan.endpoints.items()
        ]
        self.limits = {c.key: c.memory for c in plan.components()}
        self.splits = {
            name: (spec.ab.by, dict(spec.ab.split))
            for name, spec in plan.endpoints.items()
            if spec.ab is not None
        }
        keys = set(self.limits)
        for replica_id in [r for r, row in self.replicas.items() if row.component not in keys]:
            del self.replicas[replica_id]
        self._dirty = True

    def start(self) -> None:
        """Start the live table (if enabled) and the periodic flush of log lines."""
        if self.live_enabled:
            self._start_live()
        self._task = asyncio.get_running_loop().create_task(self._tick())

    def _start_live(self) -> None:
        """A new live table below the last line printed. (A stopped ``Live`` started again
        would first move up over as many lines as its last table had, and draw over them:
        a pdb session's transcript printed since.)"""
        from rich.live import Live

        self._live = Live(
            self.render(),
            console=self.console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.flush()
        if self._live is not None:
            self._live.stop()
            self._live = None

    async def _tick(self) -> None:
        since_refresh = 0.0
        pause = REFRESH_S
        while True:
            await asyncio.sleep(LOG_FLUSH_S)
            since_refresh += LOG_FLUSH_S
            self.flush()
            if self._paused:
                continue
            if self._live is not None and self._dirty and since_refresh >= pause:
                since_refresh = 0.0
                self._dirty = False
                began = time.perf_counter()
                self._live.update(self.render(self.console.height), refresh=True)
                # a slow terminal or a large table never takes more than a sixth of the loop
                pause = max(REFRESH_S, REFRESH_COST_FACTOR * (time.perf_counter() - began))

    # -- lines ---------------------------------------------------------------------------

    def line(self, text: Text | str, *, now: bool = False) -> None:
        """Queue a log line (printed within ``LOG_FLUSH_S``); ``now`` prints it at once.
        A secret's value in it is shown as ``***``."""
        plain = text if isinstance(text, str) else text.plain
        if shown_lines(plain) != plain:  # no secret, no escape sequence reaches the terminal
            text = shown_lines(plain)
        self._pending.append(text)
        if now or self._task is None:
            self.flush()

    def flush(self) -> None:
        if not self._pending or self._paused:
            return
        lines, self._pending = self._pending, []
        if self._closed_output:
            return
        try:
            self._write(lines)
        except (BrokenPipeError, ValueError, OSError):
            # stdout went away (`peach dev | head`): keep serving, stop writing.
            self._closed_output = True

    def _write(self, lines: list[Text | str]) -> None:
        if not self.live_enabled:
            # Plain output (a pipe, a file): no styling to render, one write per batch.
            text = "\n".join(line if isinstance(line, str) else line.plain for line in lines)
            self.console.file.write(text + "\n")
            self.console.file.flush()
            return
        if len(lines) > MAX_LINES_PER_FLUSH:  # faster than anyone reads: keep the latest
            skipped = len(lines) - MAX_LINES_PER_FLUSH
            lines = [Text(f"… {skipped} more lines", style="dim"), *lines[-MAX_LINES_PER_FLUSH:]]
        target = self._live.console if self._live is not None else self.console
        target.print(
            Text("\n").join(line if isinstance(line, Text) else Text(line) for line in lines),
            soft_wrap=True,
            highlight=False,
        )

    def serving(self, url: str) -> None:
        """The line scripts wait for: ``peach dev serving on http://host:port``."""
        self.line(Text.assemble(("peach dev serving on ", "bold green"), (url, "bold")), now=True)

    def note(self, message: str, style: str = "dim") -> None:
        self.line(Text(message, style=style))

    def warn(self, message: str) -> None:
        self.line(Text.assemble(("warning: ", "bold yellow"), message), now=True)

    # -- events --------------------------------------------------------------------------

    def handle(self, event: Event | TaskEvent) -> None:
        """The ``on_event`` callback given to the ``DevSession`` (``simulator.session``)."""
        if isinstance(event, RequestLogged):  # the most frequent, by far
            self._on_request(event)
        elif isinstance(event, TASK_EVENTS):
            self._on_task(event)
        elif isinstance(event, DEBUG_EVENTS):
            self._on_debug(event)
        elif isinstance(event, ReplicaMemory):
            row = self._row(event.replica, event.component)
            row.memory, row.limit = event.pss or event.rss, event.limit
            row.over_limit = event.limit is not None and event.rss > event.limit
            self._dirty = True
        elif isinstance(event, ReplicaChanged):
            self._on_replica(event)
        elif isinstance(event, ReplicaLog):
            self._on_log(event)
        elif isinstance(event, MemoryWarning):
            self.warn(
                f"{event.replica} uses {human_size(event.rss)}, over its memory request of "
                f"{human_size(event.limit)}: on the platform this replica would be killed"
            )
        elif isinstance(event, ServerNote):
            self.note(event.message, "yellow" if event.level == "warning" else "dim")
        elif isinstance(event, Serving):
            self.serving(event.url)
        elif isinstance(event, ReplicasStarted):
            self._on_started(event)
        elif isinstance(event, Reinitialized):
            self.line(Text(event.message, style="bold red" if event.failed else "bold cyan"))
        elif isinstance(event, EnvProgress):
            self._on_env(event)
        elif isinstance(event, EnvFailed):
            self.builds.pop(event.env, None)
            self.env_errors[event.error] = event.env
            self.line(Text(f"error: {event.message}", style="bold red"))
            self._dirty = True
        elif isinstance(event, RELOAD_EVENTS):
            self._on_reload(event)

    def _on_debug(self, event: DebugStarted | DebugEnded | DebugQueued) -> None:
        """A pdb session takes the terminal (the view pauses, the banner shows) and gives
        it back (the lines that waited, then the table)."""
        if isinstance(event, DebugStarted):
            self.flush()
            self._paused = True
            if self._live is not None:
                self._live.stop()  # transient: the table goes away
            self._write([Text(shown_lines(event.banner), style="bold magenta")])
        elif isinstance(event, DebugEnded):
            self._paused = False
            self._write([Text(f"debugger: {event.who} continues", style="dim")])
            if self._live is not None:
                self._start_live()
            self._dirty = True
            self.flush()

    def _on_started(self, event: ReplicasStarted) -> None:
        rows = list(self.replicas.values())
        healthy = sum(row.state is ReplicaState.HEALTHY for row in rows)
        message = f"{healthy}/{len(rows)} replicas healthy in {event.seconds:.2f} s"
        self.line(message if healthy == len(rows) else f"{message} (see errors above)", now=True)

    def _on_task(self, event: TaskEvent) -> None:
        """A task's row changed, it printed a line, or a run ended (one line per run)."""
        if isinstance(event, TaskChanged):
            self.tasks.update(event)
            self._dirty = True
        elif isinstance(event, TaskOutput):
            self.line(Text.assemble((f"{event.task} | ", "dim"), event.line))
        else:
            if event.traceback:
                self.line(Text(prefixed(event.task, event.traceback), style="red"))
            self.line(run_line(event))

    def _on_env(self, event: EnvProgress) -> None:
        """A py_environment build: a line per step (a cached env: none, so that the URL
        comes first); on a terminal the live view counts the seconds of the step under way."""
        import time

        if event.phase == "done":
            previous = self.builds.pop(event.env, None)
            if previous is not None or event.detail != "cached":
                self.note(event.message, "green")
        else:
            self.builds[event.env] = (event, time.monotonic())
            self.note(event.message)
        self._dirty = True

    def _on_reload(self, event: ReloadEvent) -> None:
        """Hot reload: replicas being replaced show as reloading; one line per reload."""
        from simulator.events import (
            ReloadFailed,
            ReloadRejected,
            ReloadSkipped,
            ReloadStarted,
            ReloadSuperseded,
            Watching,
            WatchStopped,
        )

        if isinstance(event, ReloadStarted):
            for row in self.replicas.values():
                if row.component in event.restarting and row.state is ReplicaState.HEALTHY:
                    row.state = ReplicaState.RELOADING
            self._dirty = True
        elif isinstance(event, ReloadRejected):
            from peach_cli.views.console import write_diagnostics

            self.flush()
            shown = [d for d in event.diagnostics if d.severity != "info"]
            write_diagnostics(self.console, shown, summary=event.message, ok=False)
        elif isinstance(event, ReloadFailed):
            self.line(Text(event.message, style="bold red"), now=True)
            for row in self.replicas.values():  # the previous replicas keep serving
                if row.component == event.key and row.state is ReplicaState.RELOADING:
                    row.state = ReplicaState.HEALTHY
            self._dirty = True
        elif isinstance(event, (ReloadSkipped, Watching, ReloadSuperseded)):
            self.note(event.message)
        elif isinstance(event, WatchStopped):
            self.warn(event.message)
        else:  # Reloaded
            if event.plan is not None:
                self.set_plan(event.plan)
            self.line(Text(event.message, style="bold cyan"), now=True)

    def _row(self, replica: str, component: str) -> ReplicaRow:
        row = self.replicas.get(replica)
        if row is None:
            row = self.replicas[replica] = ReplicaRow(replica, component)
        return row

    def _on_request(self, event: RequestLogged) -> None:
        if event.arm and event.endpoint:
            counts = self.arm_requests.setdefault(event.endpoint, {})
            counts[event.arm] = counts.get(event.arm, 0) + 1
            self._dirty = True
        rerouted = event.arm is not None and event.arm != event.component
        tried = self.replicas.get(event.tried) if event.tried else None
        if tried is not None:  # the primary failed it, the fallback answered: it counts
            tried.requests += 1
            self._dirty = True
        if event.replica:
            row = self._row(event.replica, f"{event.endpoint}/{event.component}")
            row.requests += 1
            row.latencies.append(event.latency_s)
            if event.error and event.status >= 500:
                row.last_error = event.error
            self._dirty = True
        method, path = shown(event.method), shown(event.path)  # the client's text
        error = shown(event.error) if event.error else None
        if not self.live_enabled:  # the line the deployed gateway logs too
            text = request_line(
                method,
                path,
                event.status,
                event.component,
                event.replica,
                event.latency_s,
                rerouted_to=event.arm if rerouted else None,
                stream=event.stream,
                error=error,
            )
            self.line(text)
            return
        status_style = (
            "green" if event.status < 400 else ("yellow" if event.status < 500 else "red")
        )
        parts: list[Any] = [
            (f"{method} ", "dim"),
            (path, "bold"),
            " ",
            (str(event.status), status_style),
        ]
        if event.component:
            parts += [" ", (event.component, "cyan")]
        if rerouted:
            parts += [" ", (f"(arm {event.arm})", "dim")]
        if event.replica:
            parts += [" ", (event.replica, "dim")]
        parts += [" ", format_latency(event.latency_s)]
        if event.stream:
            parts += [" ", ("stream", "magenta")]
        if error:
            parts += ["  ", (error, "red" if event.status >= 500 else "yellow")]
        self.line(Text.assemble(*parts))

    def _on_replica(self, event: ReplicaChanged) -> None:
        row = self._row(event.replica, event.component)
        previous = row.state
        row.state = event.state
        row.pid = event.pid or row.pid
        if event.error:
            row.last_error = event.error
        self._dirty = True
        style = _STATE_STYLE.get(event.state, "")
        text = Text.assemble((event.replica, "bold"), " ", (event.state.value, style))
        if event.pid and event.state is ReplicaState.HEALTHY:
            text.append(f" (pid {event.pid})", "dim")
        failed_env = self.env_errors.get(event.error or event.message or "")
        if failed_env is not None:  # the build's error is the line above: not said twice
            text.append(f": py_env '{failed_env}' could not be built (the error above)")
        elif event.message:
            text.append(f": {shown(event.message)}")
        if failed_env is None and event.error and event.error not in (event.message or ""):
            if event.state in (ReplicaState.UNHEALTHY, ReplicaState.RESTARTING):
                text.append(f": {shown(event.error)}", "red")
            else:
                text.append(f" ({shown(event.error)})", "yellow")
        if event.state is ReplicaState.STOPPED and previous in _RETIRED_FROM:
            self.replicas.pop(event.replica, None)  # retired or refused by a reload
        # "starting" is what the table shows; a line follows when the replica is up (or not).
        quiet = event.state is ReplicaState.STARTING and not event.message
        if event.state is ReplicaState.STOPPED and previous is not ReplicaState.DRAINING:
            quiet = self.live_enabled
        if not quiet:
            self.line(text)

    def _on_log(self, event: ReplicaLog) -> None:
        if event.level == "output":
            self.line(Text.assemble((f"{event.replica} | ", "dim"), event.message))
            return
        style = "red" if event.level in ("error", "critical") else "yellow"
        if event.level in ("error", "critical"):
            row = self.replicas.get(event.replica)
            if row is not None:
                row.last_error = event.message.splitlines()[0] if event.message else None
        self.line(Text(event.message, style=style))

    # -- the table -----------------------------------------------------------------------

    def render(self, height: int | None = None) -> Group:
        """The live table; with ``height``, only the endpoints that fit in it."""
        from peach_cli.views.dev_table import EndpointRows, render_endpoints

        by_component: dict[str, list[ReplicaRow]] = {}
        for row in self.replicas.values():
            by_component.setdefault(row.component, []).append(row)
        endpoints = []
        for name, url, components in self.endpoints:
            split = self.splits.get(name)
            shown = []
            for key in components:
                component = key.split("/", 1)[1]
                rows = by_component.get(key) or [ReplicaRow("-", key)]
                shown.append((component, self._component_label(name, component, split), rows))
            endpoints.append(EndpointRows(name, url, split[0] if split else None, shown))
        table = render_endpoints(
            endpoints,
            self.console.width,
            state_style=lambda row: _STATE_STYLE.get(row.state, ""),
            latency=format_latency,
            height=height,
        )
        tasks = self.tasks.render()
        tail = [table] if tasks is None else [table, Text(""), tasks]
        if not self.builds:
            return Group(Text(""), *tail)
        import time

        lines = [Text("")]
        for step, since in self.builds.values():
            seconds = step.elapsed_s + time.monotonic() - since
            detail = f": {step.detail}" if step.detail else ""
            lines.append(
                Text(f"building py_env {step.env}: {step.phase}{detail} ({seconds:.1f} s)", "cyan")
            )
        self._dirty = True  # the seconds keep counting
        return Group(*lines, *tail)

    def _component_label(
        self, endpoint: str, component: str, split: tuple[str, dict[str, int]] | None
    ) -> Text:
        """``main`` — or, in an A/B test, ``main 80% · 41 routed`` (the arm's share and the
        requests routed to it)."""
        if split is None or component not in split[1]:
            return Text(component)
        routed = self.arm_requests.get(endpoint, {}).get(component, 0)
        return Text.assemble(
            component, (f" {split[1][component]}%", "cyan"), (f" · {routed} routed", "dim")
        )
