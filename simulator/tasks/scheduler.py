"""The local Tasks Scheduler: runs of a project's tasks, one at a time, in their envs.

Each run is a process of its own (``simulator.tasks.run``: a ``peach_cli.runtime.task_worker``
started by ``simulator.spawn``) in the task's py_env, with the project folder as working
directory; what it prints is reported line by line, and past its ``timeout_s`` its whole
process tree is killed. The scheduler keeps one queue: runs triggered by events
(``trigger_task_with_event`` in a replica or a task, over a Unix socket) go first, in order,
one at a time; with ``loop=True`` (``peach dev --tasks``) every task also runs once, one
after another, then the loop pauses ``interval_s`` and starts again, forever.

    trigger = TriggerSocket()
    environments = Environments(root, env=trigger.env)            # replicas can trigger
    scheduler = TaskScheduler(plan, environments, trigger=trigger, project=path, loop=True,
                              on_event=emit)
    await scheduler.start()
    scheduler.trigger("retrain", '{"reason": "drift"}')           # "retrain#1"
    await scheduler.stop()                                        # a running task is killed

Before each run the scheduler re-reads the project when one of its files changed, so an
edit to a task's notebook or conf applies from its next run (a broken save keeps the last
good version, and says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.errors import PeachError
from peach_cli.project.filenames import CONF_FOLDER
from peach_cli.runtime.jsonlimits import (
    PAYLOAD_LIMIT,
    PayloadError,
    check_depth,
    too_deep_message,
)
from peach_cli.runtime.plan import ProjectPlan, TaskSpec
from peach_cli.runtime.triggers import SOCKET_ENV, unknown_task_message
from peach_cli.wording import count
from simulator.environments import Environments, EnvUnavailable
from simulator.events import ServerNote
from simulator.spawn import Spawner, WorkerLaunch
from simulator.tasks.events import (
    RunStatus,
    TaskChanged,
    TaskEvent,
    TaskOutput,
    TaskRunEnded,
    TaskState,
)
from simulator.tasks.run import execute_task

if TYPE_CHECKING:
    from simulator.debug import DebugRelay

TASK_MODULE = "peach_cli.runtime.task_worker"
DEFAULT_INTERVAL_S = 60.0
MAX_REQUEST_BYTES = PAYLOAD_LIMIT + 64 * 1024  # the payload and the task's name

Emit = Callable[[TaskEvent | ServerNote], None]


class UnknownTask(ValueError):
    """The name is not a task of the project; the message lists them."""


class TriggerSocket:
    """Where the processes of one session reach its scheduler: a Unix socket in a folder
    of this user's only (0700), removed when the scheduler stops."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="peach-tasks-")
        self.path = os.path.join(self.folder, "trigger.sock")

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        """Environment variables for every process that may trigger a task."""
        return ((SOCKET_ENV, self.path),)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass(frozen=True)
class Run:
    """One queued run."""

    run_id: str
    task: str
    payload: str | None = None
    """The payload as JSON text (None: no payload, the function gets None)."""
    triggered: bool = False


@dataclass
class TaskStatus:
    """What the scheduler knows of one task (a row of the dev view)."""

    task: str
    state: TaskState = TaskState.IDLE
    runs_ok: int = 0
    runs_failed: int = 0
    queued: int = 0
    last_seconds: float | None = None
    last_error: str | None = None

    def event(self) -> TaskChanged:
        return TaskChanged(
            self.task,
            self.state,
            self.runs_ok,
            self.runs_failed,
            self.queued,
            self.last_seconds,
            self.last_error,
        )


# -- the scheduler -------------------------------------------------------------------------


async def _discard_rest(reader: asyncio.StreamReader) -> None:
    """Read and drop what a client still sends after a refused trigger (a lingering close,
    as HTTP servers do), so that it reads the answer instead of a broken pipe; bounded by
    ``LINGER_S`` and ``LINGER_BYTES``."""
    left = LINGER_BYTES
    with contextlib.suppress(TimeoutError, OSError):
        async with asyncio.timeout(LINGER_S):
            while left > 0 and (chunk := await reader.read(min(left, 1 << 16))):
                left -= len(chunk)


LINGER_S = 5.0
LINGER_BYTES = 64 * 1024 * 1024


class TaskScheduler:
    """One queue of task runs for a project, fed by triggers and (optionally) the loop."""

    def __init__(
        self,
        plan: ProjectPlan,
        environments: Environments | None = None,
        *,
        project: Path | str | None = None,
        loop: bool = False,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float | None = None,
        keep_warm: bool = True,
        held: bool = False,
        trigger: TriggerSocket | None = None,
        spawner: Spawner | None = None,
        on_event: Emit | None = None,
        debugger: DebugRelay | None = None,
    ) -> None:
        """``held``: the loop's first round waits until ``ready`` is set (``peach dev``
        sets it once the replicas are up). ``trigger``: the socket to listen on (default:
        a new one). ``spawner`` starts the task workers and keeps the warm ones. A run
        stopped at a breakpoint in ``debugger`` waits there."""
        self.plan = plan
        self.root = Path(plan.root).resolve()
        self.environments = environments
        self.project = Path(project) if project is not None else None
        self.loop = loop
        self.interval_s = interval_s
        self.timeout_override = timeout_s
        self.keep_warm = keep_warm
        self.on_event = on_event
        self.trigger_socket = trigger or TriggerSocket()
        self.spawner = spawner or Spawner()
        self.debugger = debugger
        self._queue: deque[Run] = deque()
        self._wake = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._runner: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        """Set when the loop may start its first round (``peach dev``: replicas are up)."""
        if not held:
            self.ready.set()
        self._warming: set[asyncio.Task[None]] = set()
        self._count = 0
        self._stamp = self._files_stamp(plan)
        self._warmed: set[WorkerLaunch] = set()
        self.status: dict[str, TaskStatus] = {name: TaskStatus(name) for name in plan.tasks}

    @property
    def socket_path(self) -> str:
        return self.trigger_socket.path

    @property
    def worker_env(self) -> tuple[tuple[str, str], ...]:
        """Environment variables for every process that may trigger a task."""
        return self.trigger_socket.env

    def emit(self, event: TaskEvent | ServerNote) -> None:
        if self.on_event is not None:
            self.on_event(event)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, *, run_loop: bool = True) -> None:
        """Listen for triggers and start running the queue (and the loop, if asked: its
        first round waits for ``ready``, which ``peach dev`` sets once replicas are up)."""
        self._server = await asyncio.start_unix_server(
            self._on_client, path=self.socket_path, limit=MAX_REQUEST_BYTES
        )
        for status in self.status.values():
            self.emit(status.event())
        if run_loop:
            self._runner = asyncio.get_running_loop().create_task(self._run_forever())

    async def stop(self) -> None:
        """Stop listening; a running task is killed with its process tree; spare task
        workers stop; an env build under way is stopped (uv killed), not waited for."""
        if self.environments is not None:
            self.environments.close()
        for warming in self._warming:
            warming.cancel()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(BaseException):
                await self._runner
            self._runner = None
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        self.trigger_socket.remove()
        for launch in self._warmed:  # only the task workers: replicas' spares are not ours
            await self.spawner.keep(launch).close()

    # -- triggers --------------------------------------------------------------------------

    def trigger(self, task: str, payload: str | None = None, *, triggered: bool = True) -> str:
        """Queue a run of ``task`` (payload: JSON text); its run id. Raises ``UnknownTask``."""
        if task not in self.plan.tasks:
            raise UnknownTask(unknown_task_message(task, list(self.plan.tasks)))
        self._count += 1
        run = Run(f"{task}#{self._count}", task, payload, triggered)
        self._queue.append(run)
        status = self._status(task)
        status.queued += 1
        if status.state is TaskState.IDLE:
            status.state = TaskState.QUEUED
        self.emit(status.event())
        self._wake.set()
        return run.run_id

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                line = await reader.readline()
            except (asyncio.LimitOverrunError, ValueError):  # no newline within the limit
                line = b""
                reply: dict[str, Any] = {"error": "the trigger is over the limit of 10 MiB"}
            else:
                reply = await self._answer(line)
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
            if not line:
                await _discard_rest(reader)  # the client may still be sending: let it finish
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _answer(self, line: bytes) -> dict[str, Any]:
        """The reply to one trigger request: its run id, or why it was refused."""
        what = "the trigger's payload"
        try:
            request = json.loads(line)
            if not isinstance(request, dict) or not isinstance(request.get("task"), str):
                return {"error": "not a trigger request"}
            check_depth(request.get("payload"), what)
            payload = json.dumps(request.get("payload"))
            await self._refresh()
            return {"run_id": self.trigger(request["task"], payload)}
        except UnknownTask as error:
            return {"error": str(error)}
        except RecursionError:
            return {"error": too_deep_message(what)}
        except PayloadError as error:
            return {"error": str(error)}
        except (ValueError, KeyError, TypeError):
            return {"error": "not a trigger request"}

    # -- running ---------------------------------------------------------------------------

    async def run_until_idle(self) -> list[TaskRunEnded]:
        """Run what is queued, and what those runs trigger, until the queue is empty."""
        ended: list[TaskRunEnded] = []
        while self._queue:
            ended.append(await self._run(self._queue.popleft()))
        return ended

    async def _run_forever(self) -> None:
        await self._idle(until=self.ready)
        while True:
            if self.loop:
                await self._refresh()
                cycle = list(self.plan.tasks)
                for name in cycle:
                    self._mark_queued(name)
                for name in cycle:
                    await self._drain_triggers()
                    if name in self.plan.tasks:
                        self._count += 1
                        await self._run(Run(f"{name}#{self._count}", name), from_loop=True)
                await self._idle(deadline=time.monotonic() + self.interval_s)
            else:
                await self._idle()

    async def _idle(
        self, *, deadline: float | None = None, until: asyncio.Event | None = None
    ) -> None:
        """Run triggered runs as they come until ``deadline`` passes or ``until`` is set
        (neither: forever)."""
        while True:
            await self._drain_triggers()
            if until is not None and until.is_set():
                return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            self._wake.clear()
            if self._queue:
                continue
            waiters = [asyncio.ensure_future(self._wake.wait())]
            if until is not None:
                waiters.append(asyncio.ensure_future(until.wait()))
            try:
                await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def _drain_triggers(self) -> None:
        while self._queue:
            await self._run(self._queue.popleft())

    def _mark_queued(self, name: str) -> None:
        status = self._status(name)
        if status.state is TaskState.IDLE:
            status.state = TaskState.QUEUED
            self.emit(status.event())

    def _status(self, name: str) -> TaskStatus:
        status = self.status.get(name)
        if status is None:
            status = self.status[name] = TaskStatus(name)
        return status

    async def _run(self, run: Run, *, from_loop: bool = False) -> TaskRunEnded:
        await self._refresh()
        status = self._status(run.task)
        if not from_loop:
            status.queued = max(0, status.queued - 1)
        spec = self.plan.tasks.get(run.task)
        status.state = TaskState.RUNNING
        self.emit(status.event())
        began = time.perf_counter()
        try:
            if spec is None:
                ended = TaskRunEnded(
                    run.task,
                    run.run_id,
                    RunStatus.FAILED,
                    0.0,
                    error="the task is no longer in the project",
                    triggered=run.triggered,
                )
            else:
                ended = await self._execute(spec, run)
        except asyncio.CancelledError:  # peach stops: execute_task killed the process tree
            stopped = TaskRunEnded(
                run.task,
                run.run_id,
                RunStatus.STOPPED,
                time.perf_counter() - began,
                triggered=run.triggered,
            )
            self.emit(stopped)
            status.state = TaskState.IDLE
            self.emit(status.event())
            raise
        if ended.ok:
            status.runs_ok += 1
        else:
            status.runs_failed += 1
            status.last_error = ended.error
        status.last_seconds = ended.seconds
        status.state = TaskState.QUEUED if status.queued else TaskState.IDLE
        self.emit(ended)
        self.emit(status.event())
        return ended

    async def _execute(self, spec: TaskSpec, run: Run) -> TaskRunEnded:
        from peach_cli.boundary import hide
        from peach_cli.project.secrets import DotenvError, MissingSecret, variables_of

        try:
            variables = variables_of(spec, self.root)
            hide(variables[name] for name in spec.secrets)  # printed as ***
        except (MissingSecret, DotenvError) as error:
            return TaskRunEnded(
                spec.name,
                run.run_id,
                RunStatus.FAILED,
                0.0,
                error=str(error),
                triggered=run.triggered,
            )
        try:
            launch = await self.launch_for(spec)
        except EnvUnavailable as error:
            return TaskRunEnded(
                spec.name,
                run.run_id,
                RunStatus.FAILED,
                0.0,
                error=str(error),
                triggered=run.triggered,
            )

        def output(line: str) -> None:
            self.emit(TaskOutput(spec.name, run.run_id, line))

        ended = await execute_task(
            spec,
            launch,
            run_id=run.run_id,
            payload=run.payload,
            timeout_s=self.timeout_override,
            triggered=run.triggered,
            on_output=output,
            spawner=self.spawner,
            variables=variables,
            debugger=self.debugger,
        )
        if self.keep_warm and launch not in self._warmed:
            self._warmed.add(launch)
            self._keep_task(self.spawner.keep(launch).fill())
        return ended

    def _keep_task(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._warming.add(task)
        task.add_done_callback(self._warming.discard)

    async def launch_for(self, spec: TaskSpec) -> WorkerLaunch:
        """How to start ``spec``'s process: its env's interpreter, the task worker module,
        and the variables that let it trigger tasks. Raises ``EnvUnavailable``."""
        if self.environments is None:
            base = WorkerLaunch(self.root)
        else:
            base = await self.environments.launch_for(spec)
        env = dict(base.env)
        env.update(self.worker_env)
        return dataclasses.replace(base, module=TASK_MODULE, env=tuple(sorted(env.items())))

    def warm_up(self) -> None:
        """Start a spare worker for every task's env (a trigger then starts at once)."""
        self._keep_task(self._warm_up())

    async def _warm_up(self) -> None:
        for spec in self.plan.tasks.values():
            try:
                launch = await self.launch_for(spec)
            except EnvUnavailable:
                continue
            if launch not in self._warmed:
                self._warmed.add(launch)
                await self.spawner.keep(launch).fill()

    # -- the project -----------------------------------------------------------------------

    def _files_stamp(self, plan: ProjectPlan) -> tuple[tuple[str, int, int], ...]:
        names = set(plan.watched_files)
        for spec in plan.tasks.values():
            names.update(spec.modules)
        conf_folder = self.root / CONF_FOLDER
        if conf_folder.is_dir():
            names.update(p.relative_to(self.root).as_posix() for p in conf_folder.iterdir())
        stamp = []
        for name in sorted(names):
            try:
                info = (self.root / name).stat()
                stamp.append((name, info.st_mtime_ns, info.st_size))
            except OSError:
                stamp.append((name, -1, -1))
        return tuple(stamp)

    async def _refresh(self) -> None:
        """Re-read the project when a file it was built from changed."""
        if self.project is None:
            return
        stamp = self._files_stamp(self.plan)
        if stamp == self._stamp:
            return
        from peach_cli.checks.build import build_plan

        self._stamp = stamp
        try:
            plan, diagnostics = await asyncio.to_thread(build_plan, self.project)
        except PeachError as error:  # mid-save (an editor renames over peach.yaml): not yet
            self._stamp = ()  # read it again next time
            self.emit(ServerNote(f"tasks: {error}: running the last good version", "warning"))
            return
        if plan is None:
            errors = sum(d.severity == "error" for d in diagnostics)
            self.emit(
                ServerNote(
                    f"tasks: the project has {count(errors, 'error')}: "
                    "running the last good version of the tasks",
                    "warning",
                )
            )
            return
        self.plan = plan
        self._stamp = self._files_stamp(plan)
        for name in plan.tasks:
            if name not in self.status:
                self.status[name] = TaskStatus(name)
                self.emit(self.status[name].event())


__all__ = [
    "DEFAULT_INTERVAL_S",
    "SOCKET_ENV",
    "TASK_MODULE",
    "Run",
    "TaskScheduler",
    "TaskStatus",
    "TriggerSocket",
    "UnknownTask",
]
