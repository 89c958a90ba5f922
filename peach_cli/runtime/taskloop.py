"""The Tasks Scheduler's decisions, written once for both hosts (SPEC §5).

Which run goes next, and what each task's row says: one queue of runs; runs triggered by
events go first, in the order they were triggered, one at a time; with ``loop=True`` every
task also runs once, one after another, then the loop pauses ``interval_s`` and starts again,
forever (triggered runs still go before the loop's next task, and run during the pause).
Each task has a row — idle, queued or running; runs ok and failed; the last run's seconds
and error; how many runs of it wait — that both hosts show.

A host moves the runs, nothing more (``TaskHost``): ``peach dev`` runs each in a process of
its own (``simulator.tasks.scheduler``), a deployed project as a Ray job
(``peach_cli.deploy.scheduler``)::

    loop = TaskLoop(["retrain", "report"], host, loop=True, interval_s=60)
    loop.trigger("retrain", '{"reason": "drift"}')        # "retrain#1", queued first
    await loop.run_forever()                              # cancel it to stop

Standard library only: the Ray side imports it from peach's runtime package.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from peach_cli.runtime.triggers import unknown_task_message

DEFAULT_INTERVAL_S = 60.0
GONE = "the task is no longer in the project"


class TaskState(StrEnum):
    IDLE = "idle"
    QUEUED = "queued"
    """A run of it is waiting (triggered, or next in the loop)."""
    RUNNING = "running"


class RunStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    """It raised (or its process died, or its env could not be built)."""
    TIMED_OUT = "timed out"
    STOPPED = "stopped"
    """peach stopped it (Ctrl-C, a delete)."""


@dataclass(frozen=True)
class TaskChanged:
    """A task's row: its state and its counts so far."""

    task: str
    state: TaskState
    runs_ok: int = 0
    runs_failed: int = 0
    queued: int = 0
    last_seconds: float | None = None
    last_error: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskChanged:
        """A row back from ``to_dict`` (what a deployed scheduler reports)."""
        seconds = data.get("last_seconds")
        return cls(
            str(data.get("task", "?")),
            TaskState(data.get("state", "idle")),
            int(data.get("runs_ok") or 0),
            int(data.get("runs_failed") or 0),
            int(data.get("queued") or 0),
            None if seconds is None else float(seconds),
            None if data.get("last_error") is None else str(data["last_error"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The row as ``peach status --format json`` shows it (the same on both hosts)."""
        return {
            "task": self.task,
            "state": self.state.value,
            "runs_ok": self.runs_ok,
            "runs_failed": self.runs_failed,
            "queued": self.queued,
            "last_seconds": self.last_seconds,
            "last_error": self.last_error,
        }


@dataclass(frozen=True)
class TaskOutput:
    """One line the task's process printed (stdout and stderr)."""

    task: str
    run_id: str
    line: str


@dataclass(frozen=True)
class TaskRunEnded:
    """One run is over: how, in how long, and what it returned or raised."""

    task: str
    run_id: str
    status: RunStatus
    seconds: float
    result: str | None = None
    """The return value as shown: its JSON (None when it returned None)."""
    error: str | None = None
    """``TypeName: text``, or what went wrong outside the task's code."""
    traceback: str | None = None
    """The user's traceback, with notebook cells and lines."""
    triggered: bool = False
    timeout_s: float | None = None
    timeout_from: str = "timeout_s"
    """Where the bound came from: the task's ``timeout_s``, or ``--timeout-s``."""
    killed: int = 0
    """Processes killed with the run (timed out or stopped)."""

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.OK

    @property
    def message(self) -> str:
        """The one log line of the run."""
        how = "triggered run" if self.triggered else "run"
        head = f"task {self.task} {how} {self.run_id} {self.status.value} in {self.seconds:.2f} s"
        if self.status is RunStatus.OK:
            return head + (f": returned {self.result}" if self.result is not None else "")
        if self.status is RunStatus.TIMED_OUT:
            killed = f" ({_processes(self.killed)})" if self.killed else ""
            return (
                f"task {self.task} {how} {self.run_id} timed out after {self.timeout_s:g} s "
                f"({self.timeout_from}): killed its process tree{killed}"
            )
        if self.status is RunStatus.STOPPED:
            return (
                f"task {self.task} {how} {self.run_id} stopped after {self.seconds:.2f} s: "
                "its process tree was killed"
            )
        return f"{head}: {self.error}"


def _processes(count: int) -> str:
    return f"{count} process{'' if count == 1 else 'es'}"


TaskEvent = TaskChanged | TaskOutput | TaskRunEnded


class UnknownTask(ValueError):
    """The name is not a task of the project; the message lists them."""


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
    """What the scheduler knows of one task (a row of the dev view and of `peach status`)."""

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


class TaskHost(Protocol):
    """What a host does for the loop: move runs, re-read the project, hear events."""

    async def refresh(self) -> None:
        """Re-read the project if it changed (then call ``TaskLoop.set_tasks``)."""

    async def execute(self, run: Run) -> TaskRunEnded:
        """Run ``run`` once, bounded by its task's timeout; cancelled: stop it, re-raise."""
        ...

    def emit(self, event: TaskEvent) -> None:
        """A row changed, a run printed a line, a run ended."""


class TaskLoop:
    """One queue of task runs for a project, fed by triggers and (optionally) the loop."""

    def __init__(
        self,
        tasks: Iterable[str],
        host: TaskHost,
        *,
        loop: bool = False,
        interval_s: float = DEFAULT_INTERVAL_S,
        ready: asyncio.Event | None = None,
    ) -> None:
        """``ready``: the loop's first round waits until it is set (default: at once)."""
        self.host = host
        self.tasks: list[str] = list(tasks)
        self.loop = loop
        self.interval_s = interval_s
        self.ready = ready
        self._queue: deque[Run] = deque()
        self._wake = asyncio.Event()
        self._resume = False
        """Set by ``set_loop``: the pause (or the wait without a loop) ends at once."""
        self._count = 0
        self.status: dict[str, TaskStatus] = {name: TaskStatus(name) for name in self.tasks}

    # -- the project -----------------------------------------------------------------------

    def set_tasks(self, names: Iterable[str]) -> None:
        """The project's tasks now (a re-read, a redeploy): new ones get a row; a removed
        one keeps its row, and its queued runs fail saying it is gone."""
        self.tasks = list(names)
        for name in self.tasks:
            if name not in self.status:
                self.status[name] = TaskStatus(name)
                self.host.emit(self.status[name].event())

    def set_loop(self, loop: bool, interval_s: float) -> None:
        """A new loop setting (a redeploy): a pause under way ends now, and with the loop
        on, the next round starts; a round under way runs to its end."""
        if (loop, interval_s) == (self.loop, self.interval_s):
            return
        self.loop, self.interval_s = loop, interval_s
        self._resume = True
        self._wake.set()

    def rows(self) -> list[TaskChanged]:
        """Every task's row, the project's tasks first in their order."""
        names = self.tasks + [name for name in self.status if name not in self.tasks]
        return [self.status[name].event() for name in names]

    # -- triggers --------------------------------------------------------------------------

    def trigger(self, task: str, payload: str | None = None, *, triggered: bool = True) -> str:
        """Queue a run of ``task`` (payload: JSON text); its run id. Raises ``UnknownTask``."""
        if task not in self.tasks:
            raise UnknownTask(unknown_task_message(task, self.tasks))
        self._count += 1
        run = Run(f"{task}#{self._count}", task, payload, triggered)
        self._queue.append(run)
        status = self._status(task)
        status.queued += 1
        if status.state is TaskState.IDLE:
            status.state = TaskState.QUEUED
        self.host.emit(status.event())
        self._wake.set()
        return run.run_id

    @property
    def queued(self) -> int:
        """Runs waiting in the queue (triggered ones, or those ``trigger`` added)."""
        return len(self._queue)

    # -- running ---------------------------------------------------------------------------

    async def run_until_idle(self) -> list[TaskRunEnded]:
        """Run what is queued, and what those runs trigger, until the queue is empty."""
        ended: list[TaskRunEnded] = []
        while self._queue:
            ended.append(await self._run(self._queue.popleft()))
        return ended

    async def run_forever(self) -> None:
        """Triggered runs as they come; with ``loop``, every task in turn, then the pause."""
        if self.ready is not None:
            await self._idle(until=self.ready)
        while True:
            self._resume = False  # this round (or wait) reads the setting as it is now
            if self.loop:
                await self.host.refresh()
                cycle = list(self.tasks)
                for name in cycle:
                    self._mark_queued(name)
                for name in cycle:
                    await self._drain_triggers()
                    if name in self.tasks:
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
            if (remaining is not None and remaining <= 0) or (until is None and self._resume):
                self._resume = False
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
            self.host.emit(status.event())

    def _status(self, name: str) -> TaskStatus:
        status = self.status.get(name)
        if status is None:
            status = self.status[name] = TaskStatus(name)
        return status

    async def _run(self, run: Run, *, from_loop: bool = False) -> TaskRunEnded:
        await self.host.refresh()
        status = self._status(run.task)
        if not from_loop:
            status.queued = max(0, status.queued - 1)
        status.state = TaskState.RUNNING
        self.host.emit(status.event())
        began = time.perf_counter()
        try:
            if run.task not in self.tasks:
                ended = TaskRunEnded(
                    run.task, run.run_id, RunStatus.FAILED, 0.0, error=GONE, triggered=run.triggered
                )
            else:
                ended = await self.host.execute(run)
        except asyncio.CancelledError:  # peach stops: the host killed the run's process tree
            stopped = TaskRunEnded(
                run.task,
                run.run_id,
                RunStatus.STOPPED,
                time.perf_counter() - began,
                triggered=run.triggered,
            )
            self.host.emit(stopped)
            status.state = TaskState.IDLE
            self.host.emit(status.event())
            raise
        if ended.ok:
            status.runs_ok += 1
        else:
            status.runs_failed += 1
            status.last_error = ended.error
        status.last_seconds = ended.seconds
        status.state = TaskState.QUEUED if status.queued else TaskState.IDLE
        self.host.emit(ended)
        self.host.emit(status.event())
        return ended
