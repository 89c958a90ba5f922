"""What the task scheduler reports: plain data for whoever renders it.

``simulator.tasks.scheduler`` never prints; it hands each of these to its ``on_event`` callback
(``peach dev`` and ``peach task run`` render them, tests collect them).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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
    """peach stopped it (Ctrl-C)."""


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
            return (
                f"task {self.task} {how} {self.run_id} timed out after {self.timeout_s:g} s "
                f"({self.timeout_from}): killed its process tree ({_processes(self.killed)})"
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
TASK_EVENTS = (TaskChanged, TaskOutput, TaskRunEnded)
