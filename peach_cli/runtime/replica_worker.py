"""One replica process: ``python -m peach_cli.runtime.replica_worker --fd N``.

The gateway starts one of these per replica, with the project root as the working
directory and one end of a Unix socketpair as file descriptor ``N``; they exchange the
messages of ``peach_cli.runtime.protocol``. The first, ``Start``, says which component to
host; the worker wraps ``peach_cli.runtime.contract.ComponentRunner`` (exec the notebook
code, run ``init`` once, bind, call, stream, drift re-init, hot patches) and adds only
transport: calls and streams multiplexed by request id, each in its own task (async
methods on this loop, sync ones in threads), ``Cancel`` closing a stream's generator so its
``finally`` runs, ``Ping`` answered (the gateway samples memory itself, with psutil), and a
``Patch`` prepared, then committed or dropped by ``CommitPatch``.

The process exits when the gateway says ``Stop`` or when its socket closes (the gateway
exited or died), and on Linux also when its parent dies, so no replica outlives ``peach dev``.
On Linux the replica is the subreaper of what the user's code starts: a daemon that leaves
its parent stays below the replica, and everything below it is killed when it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from peach_cli.runtime import debug, sampler
from peach_cli.runtime.aio import run
from peach_cli.runtime.contract import (
    CallResult,
    ComponentRunner,
    ContractError,
    InitError,
    LoadedCode,
    RequestParams,
    StreamCut,
    method_kind,
)
from peach_cli.runtime.linux import become_subreaper
from peach_cli.runtime.protocol import (
    CRASH_EXIT,
    STREAM_WINDOW_BYTES,
    STREAM_WINDOW_CHUNKS,
    THREADS_HELD_EXIT,
    Call,
    Cancel,
    Chunk,
    CommitPatch,
    Credit,
    InitFailed,
    Log,
    Message,
    MessageChannel,
    OpenStream,
    Patch,
    PatchFailed,
    PatchReady,
    Ping,
    Pong,
    ProfileData,
    ProfileStart,
    ProfileStop,
    Ready,
    ReinitState,
    Result,
    Start,
    Stop,
    StreamCutOff,
    StreamEnded,
    StreamRefused,
    StreamStarted,
    die_with_parent,
    encode,
)
from peach_cli.runtime.tree import kill_descendants

_EAGER = sys.version_info >= (3, 12)
"""Calls start as eager tasks (``asyncio.Task(eager_start=True)`` is new in 3.12)."""

THREADS = 64
"""Threads for sync methods: a few slow calls must not starve the replica."""
STOP_GRACE_S = 2.0
"""How long closing generators may take when the replica stops."""

MAX_RESULT_BYTES = 32 * 1024 * 1024
"""The largest result a replica sends back; a larger one is a method_error saying so."""


class _ForwardLogs(logging.Handler):
    """Sends the replica's log records (user tracebacks included) to the gateway."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(logging.INFO)
        self.worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad log call must not break the replica
            message = str(record.msg)
        self.worker.send_threadsafe(Log(record.levelname.lower(), message))


class StreamWindow:
    """How much of one stream is in flight to the gateway (see ``STREAM_WINDOW_*``)."""

    def __init__(self) -> None:
        self.chunks = 0
        self.nbytes = 0
        self._room = asyncio.Event()
        self._room.set()

    async def reserve(self) -> None:
        """Wait until the gateway has consumed enough; always yields to the loop once,
        so a generator that never awaits cannot starve the replica's other work."""
        await asyncio.sleep(0) if self._room.is_set() else await self._room.wait()

    def spend(self, nbytes: int) -> None:
        self.chunks += 1
        self.nbytes += nbytes
        if self.chunks >= STREAM_WINDOW_CHUNKS or self.nbytes >= STREAM_WINDOW_BYTES:
            self._room.clear()

    def refund(self, chunks: int, nbytes: int) -> None:
        self.chunks -= chunks
        self.nbytes -= nbytes
        if self.chunks < STREAM_WINDOW_CHUNKS and self.nbytes < STREAM_WINDOW_BYTES:
            self._room.set()


class Worker:
    """The replica's side of the socket: dispatches messages to a ``ComponentRunner``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.channel = MessageChannel(self.on_message, self.on_lost)
        self.runner: ComponentRunner | None = None
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.windows: dict[int, StreamWindow] = {}
        self.patches: dict[int, LoadedCode] = {}
        """New code executed by ``Patch`` messages, waiting for their ``CommitPatch``."""
        self.closed = asyncio.Event()
        self.exit_code = 0
        """What the process exits with once ``closed`` (``THREADS_HELD_EXIT``, or 0)."""
        ready = getattr(self.loop, "_ready", None)
        self._ready: collections.deque[asyncio.Handle] | None = (
            ready if not _EAGER and isinstance(ready, collections.deque) else None
        )
        """asyncio's queue of handles to run (3.11, not uvloop's loop): see ``_start_call``."""
        self._started = False
        self._patching: int | None = None
        """The latest ``Patch`` whose code runs (in a thread of its own) or has run."""

    async def run(self) -> int:
        """Serve until the gateway stops this replica or its socket closes; the exit code."""
        await self.loop.create_connection(lambda: self.channel, sock=self.sock)
        await self.closed.wait()
        await self.close_all()
        return self.exit_code

    def send_threadsafe(self, message: Message) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self.channel.send(message)
        else:
            self.loop.call_soon_threadsafe(self.channel.send, message)

    # -- messages ------------------------------------------------------------------------

    def on_message(self, message: Message) -> None:
        match message:
            case Call(request_id, query, body):
                self._start_call(
                    request_id, self.handle_call(request_id, RequestParams(query, body))
                )
            case OpenStream(request_id, query, body):
                params = RequestParams(query, body)
                self._spawn(request_id, self.handle_stream(request_id, params))
            case Credit(request_id, chunks, nbytes):
                window = self.windows.get(request_id)
                if window is not None:
                    window.refund(chunks, nbytes)
            case Cancel(request_id):
                task = self.tasks.get(request_id)
                if task is not None:
                    task.cancel()
                    task.add_done_callback(self._check_threads)
            case Ping(request_id):
                runner = self.runner
                reinitializing = bool(runner and self._started and runner.reinitializing)
                self.channel.send(Pong(request_id, reinitializing))
            case Start(spec, root, replica_id, variables):
                self.loop.create_task(self.start(spec, root, replica_id, variables))
            case Patch(request_id, spec):
                self.prepare_patch(request_id, spec)
            case CommitPatch(request_id, commit):
                if self._patching == request_id:
                    self._patching = None  # dropped before its code finished: never kept
                prepared = self.patches.pop(request_id, None)
                if prepared is not None and commit and self.runner is not None:
                    self.runner.commit_patch(prepared)
            case ProfileStart(interval_s, cpu):
                sampler.start(interval_s, cpu, self.loop)
            case ProfileStop(request_id):
                self.channel.send(ProfileData(request_id, sampler.stop()))
            case Stop():
                self.closed.set()
            case _:
                logging.getLogger("peach.worker").error(
                    "a replica does not take %s messages", type(message).__name__
                )

    def on_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def _spawn(self, request_id: int, coroutine: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coroutine)
        self.tasks[request_id] = task
        task.add_done_callback(lambda _: self.tasks.pop(request_id, None))

    def _start_call(self, request_id: int, coroutine: Coroutine[Any, Any, None]) -> None:
        """A call's task, which forgets itself when it ends (no done callback: one turn of
        the loop less per call). It starts at once (an eager task): a call that never waits
        is answered before this returns, without a turn of the loop. From Python 3.12 that
        is ``eager_start``; on 3.11, asyncio's loop, the task's first step (the handle
        ``create_task`` has just queued) is taken off the queue and run here, in the task
        and its context, as ``eager_start`` does."""
        if _EAGER:
            task = asyncio.Task(coroutine, loop=self.loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
            if task.done():
                return
        else:
            ready = self._ready
            queued = len(ready) if ready is not None else -1
            task = self.loop.create_task(coroutine)
            if ready is not None and len(ready) == queued + 1:
                ready.pop()._run()
                if task.done():
                    return
        self.tasks[request_id] = task

    # -- work ----------------------------------------------------------------------------

    async def start(
        self, spec: Any, root: str, replica_id: str, variables: dict[str, str] | None = None
    ) -> None:
        os.environ.update(variables or {})  # its env_vars and secrets (SPEC §10)
        self.runner = ComponentRunner(spec, Path(root), replica_id=replica_id)
        try:
            await self.runner.start()
        except InitError as error:
            self.channel.send(InitFailed(error.message, error.details))
            self.closed.set()
            return
        except Exception as error:  # noqa: BLE001 - report anything, never hang the gateway
            self.channel.send(InitFailed(f"{type(error).__name__}: {error}", ""))
            self.closed.set()
            return
        self._started = True
        self.channel.send(Ready(self.runner.method_kind, os.getpid()))

    def prepare_patch(self, request_id: int, spec: Any) -> None:
        """Execute a component's new code beside the one in use (``ComponentRunner``), in a
        thread of its own: the code's top level may be slow, and the old code serves every
        call meanwhile (the loop never waits for it)."""
        runner = self.runner
        if runner is None or not self._started:
            message = "the replica has not finished starting"
            self.channel.send(PatchFailed(request_id, message, ""))
            return
        self._patching = request_id

        def execute() -> None:
            outcome: LoadedCode | PatchFailed
            try:
                outcome = runner.prepare_patch(spec)
            except InitError as error:
                outcome = PatchFailed(request_id, error.message, error.details)
            except BaseException as error:  # noqa: BLE001 - report anything (SystemExit too)
                outcome = PatchFailed(request_id, f"{type(error).__name__}: {error}", "")
            with contextlib.suppress(RuntimeError):  # the loop closed: the replica stops
                self.loop.call_soon_threadsafe(self._prepared, request_id, outcome)

        threading.Thread(target=execute, name="peach-patch", daemon=True).start()

    def _prepared(self, request_id: int, outcome: LoadedCode | PatchFailed) -> None:
        if isinstance(outcome, PatchFailed):
            self.channel.send(outcome)
            return
        if request_id != self._patching:  # a newer patch, or dropped: the gateway moved on
            return
        self.patches = {request_id: outcome}  # only the latest patch may be committed
        self.channel.send(PatchReady(request_id, method_kind(outcome.method)))

    def _check_threads(self, _task: object) -> None:
        """Leave (so the gateway restarts this replica) once no thread is left for calls."""
        runner = self.runner
        if runner is None or not runner.threads_exhausted or self.closed.is_set():
            return
        logging.getLogger("peach.worker").error(
            "all %d threads of this replica are stuck in %s() calls that never returned; "
            "the replica restarts (on the platform it would stop answering)",
            runner.max_threads,
            runner.spec.method,
        )
        self.exit_code = THREADS_HELD_EXIT
        transport = self.channel.transport
        if transport is not None:
            transport.close()  # sends what is buffered (the log line) first

    async def handle_call(self, request_id: int, params: RequestParams) -> None:
        runner = self.runner
        assert runner is not None
        debug.REQUEST.set(request_id)  # a breakpoint's banner names the request
        try:
            try:
                result: CallResult = await runner.call(params)
            except Exception as error:  # noqa: BLE001 - the gateway must get an answer
                result = CallResult.failure(
                    "method_error", f"{type(error).__name__}: {error}", runner.replica_id
                )
            self._send_result(request_id, result, runner.spec.method)
            if result.drift and runner.reinitializing:
                self.channel.send(ReinitState(True, None))
                await runner.wait_reinit()
                self.channel.send(ReinitState(False, runner.last_reinit_error))
        finally:
            self.tasks.pop(request_id, None)  # instead of a done callback (see _start_call)

    def _send_result(self, request_id: int, result: CallResult, method: str) -> None:
        """Send a call's result, or a clear error when it is too large to relay."""
        try:
            frame = encode(Result.of(request_id, result))
            size = len(frame)
        except OverflowError:  # the frame's length prefix cannot say it (4 GiB and more)
            frame, size = b"", 1 << 32
        if size > MAX_RESULT_BYTES:
            too_large = CallResult.failure(
                "method_error",
                f"{method}() returned a result of {size / 2**20:.0f} MiB, over the limit of "
                f"{MAX_RESULT_BYTES // 2**20} MiB: return less (page it), or stream it",
                result.replica,
            )
            frame = encode(Result.of(request_id, too_large))
        self.channel.write(frame)

    async def handle_stream(self, request_id: int, params: RequestParams) -> None:
        runner = self.runner
        assert runner is not None
        debug.REQUEST.set(request_id)
        send = self.channel.send
        try:
            chunks = await runner.open_stream(params)
        except ContractError as error:
            send(StreamRefused(request_id, error.code, error.message))
            return
        except Exception as error:  # noqa: BLE001 - report it, never hang the gateway
            message = f"{type(error).__name__}: {error}"
            send(StreamRefused(request_id, "method_error", message))
            return
        send(StreamStarted(request_id))
        window = StreamWindow()
        self.windows[request_id] = window
        try:
            async for chunk in chunks:
                await window.reserve()
                window.spend(len(chunk))
                send(Chunk(request_id, chunk))
        except StreamCut as cut:  # the user's generator raised: the gateway cuts the response
            send(StreamCutOff(request_id, str(cut)))
            return
        except Exception as error:  # noqa: BLE001 - cut the stream, never hang the gateway
            logging.getLogger("peach.worker").error(
                "the stream failed: %s: %s", type(error).__name__, error
            )
            send(StreamCutOff(request_id, f"{type(error).__name__}: {error}"))
            return
        finally:
            self.windows.pop(request_id, None)
            await chunks.aclose()
        send(StreamEnded(request_id))

    async def close_all(self) -> None:
        """Cancel every call and stream, letting generators run their ``finally``."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_GRACE_S)


async def serve(fd: int) -> int:
    from peach_cli.runtime.triggers import install_task_helpers

    install_task_helpers()  # pipe_algorithms_lib.task_helpers, unless the real one is installed
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="peach"))
    sock = socket.socket(fileno=fd)
    worker = Worker(sock)
    logging.getLogger("peach").addHandler(_ForwardLogs(worker))
    logging.getLogger("peach").setLevel(logging.INFO)
    return await worker.run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m peach_cli.runtime.replica_worker")
    parser.add_argument("--fd", type=int, required=True, help="the socket to the gateway")
    options = parser.parse_args(argv)
    run_replica(options.fd)


def run_replica(fd: int) -> None:
    """Serve the gateway on socket ``fd`` until it stops this replica; never returns (a
    replica forked by ``peach_cli.runtime.template`` starts here, without parsing argv)."""
    # Ctrl-C in the terminal, a closed terminal (SIGHUP) and `kill -- -PGID` or `timeout`
    # (SIGTERM) reach the whole process group: the gateway decides when replicas stop (it
    # closes their streams first), so the replica shrugs them off — with a handler, not
    # SIG_IGN, which every program the user's code runs would inherit. It still exits when
    # the gateway says so, when its socket closes, or when the gateway dies.
    ignore_stop_signals()
    die_with_parent()
    # Nothing the user's code starts gets the socket to the gateway: it would keep the
    # connection open after this process died, so the gateway would not see it go.
    os.set_inheritable(fd, False)
    become_subreaper()  # what the user's code starts stays below this process, even a daemon
    code = CRASH_EXIT
    try:
        code = run(serve(fd))
    except SystemExit as leave:  # the user's code called sys.exit(): its code, as Python's
        code = leave.code if isinstance(leave.code, int) else 0 if leave.code is None else 1
    except BaseException:  # noqa: BLE001 - said on the way out: os._exit skips the default
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        kill_descendants()  # what the user's code started ends with the replica
        # Threads still running a slow sync call must not keep the process alive.
        os._exit(code)


def ignore_stop_signals() -> None:
    """Shrug off SIGINT, SIGTERM and SIGHUP with a handler that does nothing: a handled
    signal is back to its default in what this process execs, an ignored one would not be.
    Interrupted system calls resume."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _shrug)
        signal.siginterrupt(number, False)


def _shrug(*_: object) -> None:
    """The handler of ``ignore_stop_signals``."""


if __name__ == "__main__":
    main()
