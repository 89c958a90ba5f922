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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.boundary import Secrets
from peach_cli.errors import PeachError
from peach_cli.project.filenames import CONF_FOLDER
from peach_cli.runtime.jsonlimits import (
    PAYLOAD_LIMIT,
    PayloadError,
    check_depth,
    too_deep_message,
)
from peach_cli.runtime.plan import ProjectPlan, TaskSpec
from peach_cli.runtime.taskloop import (
    DEFAULT_INTERVAL_S,
    Run,
    TaskEvent,
    TaskLoop,
    TaskStatus,
    UnknownTask,
)
from peach_cli.runtime.triggers import SOCKET_ENV
from peach_cli.wording import count
from simulator.environments import Environments, EnvUnavailable
from simulator.events import ServerNote
from simulator.spawn import Spawner, WorkerLaunch
from simulator.tasks.events import RunStatus, TaskOutput, TaskRunEnded
from simulator.tasks.run import execute_task

if TYPE_CHECKING:
    from simulator.debug import DebugRelay

TASK_MODULE = "peach_cli.runtime.task_worker"
MAX_REQUEST_BYTES = PAYLOAD_LIMIT + 64 * 1024  # the payload and the task's name

Emit = Callable[[TaskEvent | ServerNote], None]


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
        secrets: Secrets | None = None,
    ) -> None:
        """``held``: the loop's first round waits until ``ready`` is set (``peach dev``
        sets it once the replicas are up). ``trigger``: the socket to listen on (default:
        a new one). ``spawner`` starts the task workers and keeps the warm ones. A run
        stopped at a breakpoint in ``debugger`` waits there. ``secrets``: the session's,
        where each task's values are masked."""
        self.plan = plan
        self.secrets = secrets if secrets is not None else Secrets()
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
        self._server: asyncio.AbstractServer | None = None
        self._runner: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        """Set when the loop may start its first round (``peach dev``: replicas are up)."""
        if not held:
            self.ready.set()
        self._warming: set[asyncio.Task[None]] = set()
        self._stamp = self._files_stamp(plan)
        self._warmed: set[WorkerLaunch] = set()
        self.tasks = TaskLoop(plan.tasks, self, loop=loop, interval_s=interval_s, ready=self.ready)
        """The queue and the loop's decisions (the shared ``TaskLoop``); this is its host."""

    @property
    def status(self) -> dict[str, TaskStatus]:
        return self.tasks.status

    def task_rows(self) -> list[dict[str, Any]]:
        """Every task's row as ``/_peach/health`` lists it (``TaskChanged.to_dict``)."""
        return [row.to_dict() for row in self.tasks.rows()]

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
            self._runner = asyncio.get_running_loop().create_task(self.tasks.run_forever())

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
        return self.tasks.trigger(task, payload, triggered=triggered)

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
        return await self.tasks.run_until_idle()

    async def refresh(self) -> None:
        """``TaskHost``: re-read the project when one of its files changed."""
        await self._refresh()

    async def execute(self, run: Run) -> TaskRunEnded:
        """``TaskHost``: one run in a process of its own, in its task's env."""
        return await self._execute(self.plan.tasks[run.task], run)

    async def _execute(self, spec: TaskSpec, run: Run) -> TaskRunEnded:
        from peach_cli.project.secrets import DotenvError, MissingSecret, variables_of

        try:
            variables = variables_of(spec, self.root)
            values = [variables[name] for name in spec.secrets]
            self.secrets.hide(values, source=f"task {spec.name}")  # printed as ***
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
        self.tasks.set_tasks(plan.tasks)


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
