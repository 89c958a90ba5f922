"""What the task scheduler reports: plain data for whoever renders it.

``simulator.tasks.scheduler`` never prints; it hands each of these to its ``on_event`` callback
(``peach dev`` and ``peach task run`` render them, tests collect them). They are the shared
loop's (``peach_cli.runtime.taskloop``): a deployed project's scheduler reports the same.
"""

from __future__ import annotations

from peach_cli.runtime.taskloop import (
    RunStatus,
    TaskChanged,
    TaskEvent,
    TaskOutput,
    TaskRunEnded,
    TaskState,
)

TASK_EVENTS = (TaskChanged, TaskOutput, TaskRunEnded)

__all__ = [
    "TASK_EVENTS",
    "RunStatus",
    "TaskChanged",
    "TaskEvent",
    "TaskOutput",
    "TaskRunEnded",
    "TaskState",
]
