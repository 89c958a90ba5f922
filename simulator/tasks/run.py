"""One task run: a worker process in the task's env, its output, its timeout, its tree.

``execute_task`` takes a worker of a ``WorkerLaunch`` (a warm spare, or a new one, from a
``simulator.spawn.Spawner``), sends it the task, reports each line it prints, and waits for its
answer; past the timeout, or when cancelled, the worker's whole process tree is killed (the
worker leads a process group of its own, ``peach_cli.runtime.task_worker``)::

    ended = await execute_task(spec, launch, run_id="retrain#1", payload='{"a": 1}',
                               on_output=print)       # TaskRunEnded: ok, failed, timed out
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from peach_cli.runtime.contract.deadline import Deadline, bounded
from peach_cli.runtime.plan import TaskSpec
from peach_cli.runtime.protocol import (
    Message,
    MessageChannel,
    ProtocolError,
    RunTask,
    TaskFailed,
    TaskReturned,
)
from simulator.spawn import Spawner, WorkerLaunch, WorkerProcess
from simulator.tasks.events import RunStatus, TaskRunEnded
from simulator.trees import kill_tree, reap

if TYPE_CHECKING:
    from simulator.debug import DebugRelay

MAX_LINE_BYTES = 4096
"""A line of a task's output is shown up to this many bytes (and how many more it had)."""
EXIT_GRACE_S = 5.0
"""How long a worker that answered may take to exit before it is killed."""
OUTPUT_GRACE_S = 2.0


async def _pump(stream: asyncio.StreamReader | None, on_line: Callable[[str], None]) -> None:
    """Report every line of ``stream``; a line longer than ``MAX_LINE_BYTES`` is cut there,
    reported when it ends with how many bytes were cut (the rest is never held whole)."""
    if stream is None:
        return
    head = bytearray()
    cut = 0

    def report() -> None:
        text = head.decode(errors="replace").rstrip("\r")
        if cut:
            text += f" … ({cut} more bytes of this line not shown)"
        on_line(text)

    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        *ended, rest = chunk.split(b"\n")
        for piece in ended:
            room = max(0, MAX_LINE_BYTES - len(head))
            head += piece[:room]
            cut += len(piece) - min(room, len(piece))
            report()
            head.clear()
            cut = 0
        room = max(0, MAX_LINE_BYTES - len(head))
        head += rest[:room]
        cut += len(rest) - min(room, len(rest))
    if head or cut:
        report()


async def execute_task(
    spec: TaskSpec,
    launch: WorkerLaunch,
    *,
    run_id: str,
    payload: str | None = None,
    timeout_s: float | None = None,
    triggered: bool = False,
    on_output: Callable[[str], None] | None = None,
    spawner: Spawner | None = None,
    variables: dict[str, str] | None = None,
    debugger: DebugRelay | None = None,
) -> TaskRunEnded:
    """Run ``spec`` once in a worker of ``launch``; never raises for the task's failures.

    Past ``timeout_s`` (default: the task's), or when cancelled, the worker's whole process
    tree is killed (a cancellation then propagates). ``spawner`` starts the worker (a warm
    spare when it keeps one for ``launch``); ``variables`` (its env_vars and secrets) are set
    by the worker before it runs the task. At a breakpoint in ``debugger``, the run's
    timeout waits.
    """
    limit = spec.timeout_s if timeout_s is None else timeout_s
    began = time.perf_counter()
    try:
        process, sock = await (spawner or Spawner()).worker(launch)
    except OSError as error:
        return TaskRunEnded(
            spec.name, run_id, RunStatus.FAILED, 0.0, error=f"cannot start: {error}"
        )
    run = RunTask(spec, str(launch.root), payload, run_id, dict(variables or {}))
    outcome, victims, answered = await _run(run, process, sock, limit, on_output, debugger)
    seconds = answered - began
    if outcome is TIMED_OUT:
        return TaskRunEnded(
            spec.name,
            run_id,
            RunStatus.TIMED_OUT,
            seconds,
            error=f"timed out after {limit:g} s",
            triggered=triggered,
            timeout_s=limit,
            timeout_from="timeout_s" if timeout_s is None else "--timeout-s",
            killed=len(victims),
        )
    return _ended(spec, run_id, outcome, process.returncode, seconds, triggered)


TIMED_OUT = object()
"""``_run``'s outcome when the run's deadline passed (its process tree then killed)."""


async def _run(
    run: RunTask,
    process: WorkerProcess,
    sock: socket.socket,
    limit: float,
    on_output: Callable[[str], None] | None,
    debugger: DebugRelay | None,
) -> tuple[object, set[int], float]:
    """Send ``run`` to the worker, report its output, and wait for its answer under the
    contract's ``Deadline`` (which the debugger relay suspends at a breakpoint, SPEC §7):
    the answer (``TIMED_OUT``; None when the worker was lost), the processes killed, and
    when (``time.perf_counter``) the run ended, before its worker was let exit."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Message | ProtocolError | None] = loop.create_future()

    def on_message(message: Message) -> None:
        if not answer.done():
            answer.set_result(message)

    def on_lost(error: Exception | None) -> None:
        if not answer.done():
            answer.set_result(error if isinstance(error, ProtocolError) else None)

    printed = on_output or (lambda _line: None)
    reading = loop.create_task(_pump(process.stdout, printed))
    transport, channel = await loop.create_connection(
        lambda: MessageChannel(on_message, on_lost), sock=sock
    )
    channel.send(run)
    relay, who = debugger, f"task {run.spec.name}"

    async def wait(deadline: Deadline) -> Message | ProtocolError | None:
        if relay is not None:  # stopped in the debugger, the run waits (SPEC §7)
            relay.register(who, None, deadline)
        return await asyncio.shield(answer)

    outcome: object
    victims: set[int] = set()
    try:
        outcome = await bounded(limit, wait)
    except TimeoutError:
        outcome, victims = TIMED_OUT, kill_tree(process.pid)
    except asyncio.CancelledError:
        await _finish(process, reading, kill_tree(process.pid))
        transport.close()
        raise
    finally:
        if relay is not None:
            relay.unregister(who, None)
    answered = time.perf_counter()
    await _finish(process, reading, victims)
    transport.close()
    return outcome, victims, answered


def _ended(
    spec: TaskSpec,
    run_id: str,
    outcome: object,
    returncode: int | None,
    seconds: float,
    triggered: bool,
) -> TaskRunEnded:
    """The run's end from the worker's answer (or its lack of one)."""
    match outcome:
        case TaskReturned(result=result):
            return TaskRunEnded(
                spec.name, run_id, RunStatus.OK, seconds, result=result, triggered=triggered
            )
        case TaskFailed(message=message, traceback=traceback):
            return TaskRunEnded(
                spec.name,
                run_id,
                RunStatus.FAILED,
                seconds,
                error=message,
                traceback=traceback,
                triggered=triggered,
            )
        case None:
            why = (
                f"the task's process exited with code {returncode} before {spec.method}() returned"
            )
        case ProtocolError():
            why = f"the task's process sent {outcome}"
        case _:
            why = f"the task's process sent a {type(outcome).__name__} message, not its outcome"
    return TaskRunEnded(
        spec.name, run_id, RunStatus.FAILED, seconds, error=why, triggered=triggered
    )


async def _finish(process: WorkerProcess, reading: asyncio.Task[None], victims: set[int]) -> None:
    """Let the worker exit, kill what it left running, and read the rest of its output."""
    try:
        await asyncio.wait_for(asyncio.shield(process.wait()), EXIT_GRACE_S)
    except TimeoutError:
        victims |= kill_tree(process.pid)
        await process.wait()
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)  # what it left in its group
    reap(victims - {process.pid})
    try:
        await asyncio.wait_for(asyncio.shield(reading), OUTPUT_GRACE_S)
    except TimeoutError:  # a grandchild outside the group still holds the pipe
        reading.cancel()
    with contextlib.suppress(BaseException):
        await reading
