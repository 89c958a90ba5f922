"""What ``peach task list`` and ``peach task run`` show, and the tasks table of ``peach dev``.

``peach task run`` streams the task's output to stdout as it is printed, each line
prefixed with the task's name (``retrain | epoch 1``), and its own messages — the env
being built, how the run ended, the user's traceback — to stderr, so that piping the
output keeps only what the task printed. Plain writes: no styling to compute per line, and
Rich is imported only by the tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from peach_cli.boundary import shown, shown_lines
from simulator.debug import DebugStarted
from simulator.events import EnvFailed, EnvProgress, ServerNote
from simulator.tasks.events import RunStatus, TaskChanged, TaskOutput, TaskRunEnded, TaskState

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

    from peach_cli.boundary import Output

_STATE_STYLE = {TaskState.IDLE: "dim", TaskState.QUEUED: "yellow", TaskState.RUNNING: "cyan"}


def prefixed(task: str, text: str) -> str:
    """Every line of ``text`` with the task's name in front: ``retrain | …``.

    >>> prefixed("retrain", "a\\nb")
    'retrain | a\\nretrain | b'
    """
    return "\n".join(f"{task} | {line}" for line in text.splitlines() or [""])


class TaskRunView:
    """Renders one ``peach task run``: the task's lines on stdout, the rest on stderr."""

    def __init__(self, output: Output) -> None:
        self.out = output.stream("stdout")
        self.err = output.stream("stderr")
        self.closed = False

    def _write(self, stream: Any, text: str) -> None:
        if self.closed:
            return
        try:  # control characters escaped: no escape sequence from a task reaches the terminal
            stream.write(shown_lines(text) + "\n")
            stream.flush()
        except (BrokenPipeError, ValueError, OSError):  # `peach task run x | head`
            self.closed = True

    def handle(self, event: object) -> None:
        if isinstance(event, TaskOutput):
            self._write(self.out, f"{event.task} | {event.line}")
        elif isinstance(event, TaskRunEnded):
            if event.traceback:
                self._write(self.err, prefixed(event.task, event.traceback))
            self._write(self.err, event.message)
        elif isinstance(event, EnvProgress):
            if event.phase != "done" or event.detail != "cached":
                self._write(self.err, event.message)
        elif isinstance(event, (EnvFailed, ServerNote)):
            self._write(self.err, event.message)
        elif isinstance(event, DebugStarted):  # pdb takes the terminal (simulator.debug)
            self._write(self.err, event.banner)

    def note(self, message: str) -> None:
        self._write(self.err, message)

    def handle_line(self, task: str, line: str) -> None:
        """A line the task printed (on Ray: a line of its job's log)."""
        self._write(self.out, f"{task} | {line}")


def print_task_list(output: Output, rows: list[dict[str, Any]]) -> None:
    """``peach task list``: a table on a terminal, one plain line per task otherwise."""
    from rich.table import Table
    from rich.text import Text

    out = output.stdout
    if not rows:
        out.print("no tasks (add them under tasks: in the conf)", highlight=False)
        return
    if not out.is_terminal:
        for row in rows:
            out.file.write(
                f"{row['name']}  {row['notebook']}:{row['method']}  py_env {row['py_env']}  "
                f"timeout {row['timeout_s']:g} s\n"
            )
        return
    table = Table(box=None, pad_edge=False, header_style="bold dim")
    for column in ("task", "notebook", "method", "py_env", "timeout"):
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(
            Text(row["name"], style="bold"),
            row["notebook"],
            row["method"],
            row["py_env"],
            f"{row['timeout_s']:g} s",
        )
    out.print(table)


class TasksTable:
    """The tasks table of the ``peach dev`` view: one row per task, updated by events."""

    def __init__(self) -> None:
        self.rows: dict[str, TaskChanged] = {}

    def update(self, event: TaskChanged) -> None:
        self.rows[event.task] = event

    def render(self) -> RenderableType | None:
        if not self.rows:
            return None
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False, header_style="bold dim", expand=False)
        for column in ("task", "state", "ok", "failed", "last run"):
            table.add_column(
                column, no_wrap=True, justify="right" if column in ("ok", "failed") else "left"
            )
        table.add_column("last error", overflow="ellipsis", no_wrap=True, max_width=60)
        for row in self.rows.values():
            state = row.state.value + (f" ({row.queued})" if row.queued > 1 else "")
            table.add_row(
                Text(row.task, style="bold"),
                Text(state, style=_STATE_STYLE.get(row.state, "")),
                str(row.runs_ok),
                Text(str(row.runs_failed), style="red" if row.runs_failed else ""),
                f"{row.last_seconds:.2f} s" if row.last_seconds is not None else "-",
                Text(shown(row.last_error or ""), style="red"),
            )
        return table


def run_line(event: TaskRunEnded) -> Text:
    """The one line ``peach dev`` logs when a run ends."""
    from rich.text import Text

    style = "green" if event.status is RunStatus.OK else "bold red"
    return Text(event.message, style=style)
