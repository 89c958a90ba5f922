"""One replica: a worker process hosting one component, seen from the gateway.

A ``Replica`` starts a worker (``simulator.spawn``: cwd = the project root), sends it the
component, and waits for ``init``: the replica becomes healthy, or unhealthy with the init
error. Calls and streams are multiplexed over the replica's socket by request id; the
replica counts what is outstanding (the pool's load-balancing signal). When the process
dies, every in-flight call fails at once with an error saying so, in-flight streams end,
and the replica restarts itself (with a growing pause if it keeps dying).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from peach_cli.procmem import Memory, process_memory
from peach_cli.runtime.contract import (
    CallResult,
    ContractError,
    Deadline,
    RequestParams,
    StreamCut,
)
from peach_cli.runtime.plan import ComponentSpec
from peach_cli.runtime.protocol import (
    STREAM_WINDOW_BYTES,
    STREAM_WINDOW_CHUNKS,
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
    ProtocolError,
    Ready,
    ReinitState,
    Result,
    Start,
    Stop,
    StreamCutOff,
    StreamEnded,
    StreamRefused,
    StreamStarted,
)
from simulator import debug, profiling
from simulator.environments import explain_init_error
from simulator.events import (
    Event,
    MemoryWarning,
    ReplicaChanged,
    ReplicaLog,
    ReplicaMemory,
    ReplicaState,
)
from simulator.spawn import Spawner, WorkerLaunch, WorkerProcess
from simulator.trees import kill_tree, reap

HEALTH_INTERVAL_S = 1.0
PSS_EVERY = 5
"""The RSS is sampled every ``HEALTH_INTERVAL_S``, the PSS (costlier: each second, for a
hundred replicas, it would cost the gateway about 7 % of a core) the first time and every 5th after."""
STOP_TIMEOUT_S = 3.0
RESTART_PAUSES_S = (0.0, 0.5, 1.0, 2.0, 5.0)
"""Pause before each successive restart of a replica that keeps dying soon after start."""
STABLE_AFTER_S = 10.0
"""A replica that ran this long resets its restart pause."""
INIT_STUCK_S = 10.0
"""An init (or code) still running after this long is reported (the replica keeps waiting
for it); a session's ``Knobs.init_stuck_s`` changes it (tests say it sooner)."""
OUTPUT_LINES_PER_S = 100
"""Lines of a replica's output shown per second; the others are counted, then summarised."""
OUTPUT_LINE_BYTES = 4096
"""Longer lines of a replica's output are cut (the size of the rest is shown)."""


def resident_memory(pid: int, *, pss: bool = True) -> Memory | None:
    """Process ``pid``'s RSS and PSS in bytes (psutil: Linux, macOS, Windows; PSS is the
    RSS where the system does not say; 0 with ``pss=False``); None when it is gone."""
    try:
        return process_memory(psutil.Process(pid), pss=pss)
    except psutil.Error:
        return None


class ReplicaGone(Exception):
    """The replica process died before a stream it was asked for started."""


StreamEvent = StreamStarted | Chunk | StreamEnded | StreamCutOff | StreamRefused | ReplicaGone
"""What arrives for one stream: its messages, or the replica's death."""


def _exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "closed its connection"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


class ReplicaStream:
    """The chunks of one stream from a replica (``StreamCut`` when the generator raises or
    the process dies); ``aclose()`` stops it in the replica."""

    def __init__(
        self,
        replica: Replica,
        channel: MessageChannel,
        request_id: int,
        queue: asyncio.Queue[StreamEvent],
    ) -> None:
        self.replica = replica
        self._channel = channel
        self._request_id = request_id
        self._queue = queue
        self._released = False
        self._consumed_chunks = 0
        self._consumed_bytes = 0

    def __aiter__(self) -> ReplicaStream:
        return self

    async def __anext__(self) -> bytes:
        if self._released:
            raise StopAsyncIteration
        try:
            event = await self._queue.get()
        except BaseException:  # cancelled: the caller went away
            self.release(finished=False)
            raise
        if isinstance(event, Chunk):  # the common case, before any match
            self._credit(len(event.data))
            return event.data
        self.release(finished=True)
        match event:
            case StreamEnded():
                raise StopAsyncIteration
            case StreamCutOff(message=message):
                raise StreamCut(message)
            case ReplicaGone():
                raise StreamCut(str(event))  # the process died: the stream is cut too
        raise StreamCut(f"the replica {self.replica.id} sent {type(event).__name__} mid-stream")

    def _credit(self, nbytes: int) -> None:
        """Tell the replica what was consumed, so it may send more (flow control)."""
        self._consumed_chunks += 1
        self._consumed_bytes += nbytes
        if (
            self._consumed_chunks >= STREAM_WINDOW_CHUNKS // 4
            or self._consumed_bytes >= STREAM_WINDOW_BYTES // 4
        ):
            credit = Credit(self._request_id, self._consumed_chunks, self._consumed_bytes)
            self._consumed_chunks = self._consumed_bytes = 0
            self._channel.send(credit)

    def release(self, *, finished: bool) -> None:
        """Forget the stream (telling the replica to close it unless it ended)."""
        if not self._released:
            self._released = True
            self.replica._stream_done(self._request_id, self._channel, finished)

    async def aclose(self) -> None:
        self.release(finished=False)


class Replica:
    """A replica process of one component, and the gateway's handle on it."""

    def __init__(
        self,
        spec: ComponentSpec,
        root: Path,
        replica_id: str,
        on_event: Callable[[Event], None],
        *,
        on_change: Callable[[], None] | None = None,
        launch: WorkerLaunch | None = None,
        spawner: Spawner | None = None,
        init_stuck_s: float = INIT_STUCK_S,
        debugger: debug.DebugRelay | None = None,
    ) -> None:
        self.spec = spec
        self.root = Path(root).resolve()
        self.launch = launch or WorkerLaunch(self.root)
        """How this replica's process is started (its interpreter, its environment)."""
        self.spawner = spawner or Spawner()
        """Starts the process (a spare when hot reload keeps one for ``launch``)."""
        self.variables: dict[str, str] = {}
        """Its component's env_vars and secrets: the worker sets them when it takes the
        component, so a spare never holds another component's secrets."""
        self.id = replica_id
        self.init_stuck_s = init_stuck_s
        """A start-up still running after this long is reported (it goes on waiting)."""
        self.debugger = debugger
        """The session's pdb relay: a breakpoint in a call suspends the call's deadline."""
        self.on_event = on_event
        self.on_change = on_change
        self.state = ReplicaState.STARTING
        self.state_since = time.monotonic()
        """When it entered ``state`` (a timeout while it starts says for how long)."""
        self.error: str | None = None
        self.pid: int | None = None
        self.rss = 0
        self.pss = 0
        """Its memory as last sampled: RSS (what the ``memory`` request is checked against:
        a replica of its own on the platform) and PSS (shared pages counted once)."""
        self.method_kind: str | None = None
        self.outstanding = 0
        self._process: WorkerProcess | None = None
        self._channel: MessageChannel | None = None
        self._answers: dict[int, Callable[[CallResult], None]] = {}
        """The calls in flight (``send_call``): where each one's ``CallResult`` goes."""
        self._streams: dict[int, asyncio.Queue[StreamEvent]] = {}
        self._pings: dict[int, asyncio.Future[Pong | None]] = {}
        self._patches: dict[int, asyncio.Future[PatchReady | PatchFailed]] = {}
        self._replies: dict[int, asyncio.Future[Message]] = {}
        """Requests sent with ``request`` (a profile), waiting for their reply."""
        self._prepared_kind: str | None = None
        self._next_id = 0
        self._started: asyncio.Future[None] | None = None
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ready_at = 0.0
        self._restarts = 0
        self._over_limit = False
        self._idle = asyncio.Event()
        self._idle.set()

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the process and wait until init succeeded, failed, or the process died."""
        self._stopping = False
        self._set_state(ReplicaState.STARTING)
        await self._spawn()

    async def _spawn(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            worker = await self.spawner.worker(self.launch)
        except OSError as error:
            self._set_state(ReplicaState.UNHEALTHY, error=f"could not start a replica: {error}")
            return
        process, parent_end = worker
        self._process = process
        self.pid = process.pid
        channel = MessageChannel(self._on_message, lambda exc: self._on_lost(process, exc))
        self._channel = channel
        await loop.create_connection(lambda: channel, sock=parent_end)
        self._started = loop.create_future()
        self._background(self._pump_output(process))
        for first in profiling.first_messages(self):  # `peach profile --init`
            channel.send(first)
        channel.send(Start(self.spec, str(self.root), self.id, self.variables))
        try:
            await asyncio.wait_for(asyncio.shield(self._started), self.init_stuck_s)
        except TimeoutError:
            if self.state is ReplicaState.STARTING and process is self._process:
                stuck = (
                    f"init has not returned after {self.init_stuck_s:g} s; still waiting for it"
                    if self.spec.init
                    else f"its code is still loading after {self.init_stuck_s:g} s (the cells that "
                    "define the method are still running); still waiting for it"
                )
                self._set_state(ReplicaState.STARTING, message=stuck)
                self.error = stuck
            await asyncio.shield(self._started)

    def fail(self, error: str) -> None:
        """Unhealthy without a process: what it would run in could not be prepared."""
        self._stopping = True
        self._set_state(ReplicaState.UNHEALTHY, error=error)

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop the process: its streams are closed first; killed if it does not exit."""
        self._stopping = True
        process = self._process
        if self._channel is not None:
            self._channel.send(Stop())
        if process is not None and process.returncode is None:
            try:
                await asyncio.wait_for(process.wait(), timeout_s)
            except TimeoutError:  # its loop is blocked: it and what its code started die
                killed = kill_tree(process.pid)
                await process.wait()
                reap(killed - {process.pid})
        self._fail_in_flight(f"the replica {self.id} was stopped")
        current = asyncio.current_task()
        pending = [task for task in self._tasks if task is not current]
        for task in pending:
            task.cancel()
        # awaited, so that none is left pending when the loop closes after the last stop
        await asyncio.gather(*pending, return_exceptions=True)
        if self.state is not ReplicaState.STOPPED:
            self._set_state(ReplicaState.STOPPED)

    def mark_draining(self) -> None:
        """Retired by a reload: finish what is in flight, take what began before."""
        if self.serving:
            self._set_state(ReplicaState.DRAINING)

    def kill_now(self) -> None:
        """Last resort at interpreter exit: SIGKILL it and its tree without waiting."""
        process = self._process
        if process is not None and process.returncode is None:
            kill_tree(process.pid)

    @property
    def serving(self) -> bool:
        return self.state in (ReplicaState.HEALTHY, ReplicaState.RELOADING)

    async def wait_idle(self) -> None:
        """Wait until no call or stream is in flight on this replica."""
        await self._idle.wait()

    # -- calls and streams ---------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _begin(self) -> None:
        self.outstanding += 1
        self._idle.clear()

    def _end(self) -> None:
        self.outstanding -= 1
        if self.outstanding == 0:
            self._idle.set()

    async def call(self, params: RequestParams, deadline: Deadline | None = None) -> CallResult:
        """One non-streaming call; cancelling it cancels the call in the replica. A
        breakpoint in it suspends ``deadline`` (its ``timeout_s``)."""
        future: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()

        def answered(result: CallResult) -> None:
            if not future.done():  # cancelled meanwhile (its Cancel is on its way)
                future.set_result(result)

        request_id = self.send_call(params, answered)
        if request_id is None:
            return CallResult.failure(
                "unavailable", f"the replica {self.id} is not running", self.id
            )
        relay = self.debugger
        if relay is not None:  # a breakpoint in this call suspends its timeout
            relay.register(self.id, request_id, deadline)
        try:
            return await future
        except asyncio.CancelledError:
            self.cancel_call(request_id)
            raise
        finally:
            if relay is not None:
                relay.unregister(self.id, request_id)

    def send_call(
        self, params: RequestParams, on_answer: Callable[[CallResult], None]
    ) -> int | None:
        """Send one non-streaming call whose ``CallResult`` goes to ``on_answer``, called
        once, from the loop, as soon as it arrives (or fails: the process died); its
        request id, or None when the process is not running. ``cancel_call`` takes it back.
        ``call`` awaits one; the gateway's fast lane answers from ``on_answer`` directly."""
        channel = self._channel
        request_id = self._new_id()
        if channel is None or not channel.send(Call(request_id, params.query, params.body)):
            return None
        self._answers[request_id] = on_answer
        self._begin()
        return request_id

    def cancel_call(self, request_id: int) -> None:
        """Forget a ``send_call`` call and cancel it in the process (its answer is dropped)."""
        if self._answers.pop(request_id, None) is not None:
            self._end()
            channel = self._channel
            if channel is not None:
                channel.send(Cancel(request_id))

    async def open_stream(self, params: RequestParams) -> ReplicaStream:
        """Start a stream; return its chunks once the replica has bound the call.

        Raises ``ContractError`` when the stream cannot start (a binding error) and
        ``ReplicaGone`` when the process dies first. Cancelling this call, or closing the
        returned stream, closes the user's generator in the replica.
        """
        channel = self._channel
        if channel is None:
            raise ReplicaGone(f"the replica {self.id} is not running")
        request_id = self._new_id()
        queue: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self._streams[request_id] = queue
        if self.debugger is not None:  # a breakpoint's banner names the request
            self.debugger.register(self.id, request_id, None)
        self._begin()
        stream = ReplicaStream(self, channel, request_id, queue)
        try:
            channel.send(OpenStream(request_id, params.query, params.body))
            event = await queue.get()
        except BaseException:
            stream.release(finished=False)
            raise
        match event:
            case StreamStarted():
                return stream
            case StreamRefused(code=code, message=message):
                stream.release(finished=True)
                raise ContractError(code, message)
            case ReplicaGone():
                stream.release(finished=True)
                raise event
        stream.release(finished=True)
        raise ReplicaGone(f"the replica {self.id} sent {type(event).__name__} before the stream")

    def _stream_done(self, request_id: int, channel: MessageChannel, finished: bool) -> None:
        self._streams.pop(request_id, None)
        if self.debugger is not None:
            self.debugger.unregister(self.id, request_id)
        if not finished:
            channel.send(Cancel(request_id))
        self._end()

    async def ping(self, timeout_s: float = 2.0) -> Pong | None:
        """The replica's answer, or None when it is gone or does not answer in time."""
        channel = self._channel
        if channel is None:
            return None
        request_id = self._new_id()
        future: asyncio.Future[Pong | None] = asyncio.get_running_loop().create_future()
        self._pings[request_id] = future
        try:
            if not channel.send(Ping(request_id)):
                return None
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return None
        finally:
            self._pings.pop(request_id, None)

    def notify(self, message: Message) -> bool:
        """Send ``message``, which has no reply; False when the process is gone."""
        channel = self._channel
        return channel is not None and bool(channel.send(message))

    async def request(self, make: Callable[[int], Message], timeout_s: float) -> Message | None:
        """Send ``make(request_id)`` and return the reply carrying that id (a ``ProfileData``);
        None when the process is gone or does not reply within ``timeout_s``."""
        channel = self._channel
        if channel is None:
            return None
        request_id = self._new_id()
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._replies[request_id] = future
        try:
            if not channel.send(make(request_id)):
                return None
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return None
        finally:
            self._replies.pop(request_id, None)

    # -- hot patches (simulator.hotpatch) -------------------------------------------------

    async def prepare_patch(self, spec: ComponentSpec, timeout_s: float) -> tuple[int, str | None]:
        """Have the process execute ``spec``'s code beside the code in use.

        Returns the patch's id and None when it is ready to commit, or an error saying why
        it is not (the code raised, the process is gone, it took over ``timeout_s``).
        """
        channel = self._channel
        request_id = self._new_id()
        if channel is None or not channel.send(Patch(request_id, spec)):
            return request_id, f"the replica {self.id} is not running"
        future: asyncio.Future[PatchReady | PatchFailed] = (
            asyncio.get_running_loop().create_future()
        )
        self._patches[request_id] = future
        try:
            answer = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return request_id, f"the new code did not finish running within {timeout_s:g} s"
        finally:
            self._patches.pop(request_id, None)
        match answer:
            case PatchReady(method_kind=kind):
                self._prepared_kind = kind
                return request_id, None
            case PatchFailed(message=message):
                # The traceback is not logged here: the restart that follows a failed patch
                # runs the same code and reports it, with the error, if it fails again.
                return request_id, message

    def commit_patch(self, request_id: int, spec: ComponentSpec, *, commit: bool) -> None:
        """Serve (``commit``) or drop the code prepared as ``request_id``. Calls sent after
        this run the new method: the process reads its messages in order."""
        channel = self._channel
        if channel is not None:
            channel.send(CommitPatch(request_id, commit))
        if commit:
            self.spec = spec  # a restart of this process runs the new code, init included
            self.method_kind = self._prepared_kind or self.method_kind

    # -- messages from the process -------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        match message:
            case Result(request_id=request_id):
                on_answer = self._answers.pop(request_id, None)
                if on_answer is not None:  # else: cancelled, or failed when the process died
                    self._end()
                    on_answer(message.call_result())
            case Chunk() | StreamEnded() | StreamCutOff() | StreamStarted() | StreamRefused():
                queue = self._streams.get(message.request_id)
                if queue is not None:
                    queue.put_nowait(message)
            case PatchReady() | PatchFailed():
                patch = self._patches.get(message.request_id)
                if patch is not None and not patch.done():
                    patch.set_result(message)
            case ProfileData(request_id=request_id):
                reply = self._replies.get(request_id)
                if reply is not None and not reply.done():
                    reply.set_result(message)
            case Pong(request_id=request_id):
                ping = self._pings.get(request_id)
                if ping is not None and not ping.done():
                    ping.set_result(message)
            case ReinitState(reinitializing=reinitializing, error=error):
                if self.state in (ReplicaState.DRAINING, ReplicaState.STOPPED):
                    return  # retired: it only finishes what it has, whatever its state
                if reinitializing:
                    self._set_state(
                        ReplicaState.RELOADING, message="drift detected: re-running init"
                    )
                else:
                    self._set_state(
                        ReplicaState.HEALTHY,
                        error=error,
                        message="re-init failed, kept the previous state"
                        if error
                        else "re-init done",
                    )
            case Log(level=level, message=text):
                self.on_event(ReplicaLog(self.spec.key, self.id, level, text))
            case Ready(method_kind=kind):
                self.method_kind = kind
                self._ready_at = time.monotonic()
                restarted = "restarted" if self._restarts else None
                self._set_state(ReplicaState.HEALTHY, message=restarted)
                self._background(self._monitor())
                self._settle()
            case InitFailed(message=text, details=details):
                if details:
                    self.on_event(ReplicaLog(self.spec.key, self.id, "error", details))
                error = explain_init_error(text, self.launch)
                self._set_state(ReplicaState.UNHEALTHY, error=error)
                self._settle()
            case _:
                self.on_event(
                    ReplicaLog(
                        self.spec.key,
                        self.id,
                        "error",
                        f"the replica sent a {type(message).__name__} message, which a "
                        "replica never sends; ignored",
                    )
                )

    def _settle(self) -> None:
        if self._started is not None and not self._started.done():
            self._started.set_result(None)

    def _on_lost(self, process: WorkerProcess, error: Exception | None) -> None:
        if process is not self._process:
            return
        if isinstance(error, ProtocolError):
            self.on_event(ReplicaLog(self.spec.key, self.id, "error", f"the replica sent {error}"))
        self._channel = None
        self._background(self._after_exit(process))

    async def _after_exit(self, process: WorkerProcess) -> None:
        try:
            returncode: int | None = await asyncio.wait_for(process.wait(), 2.0)
        except TimeoutError:  # its socket closed but it lives on: it and its tree die
            killed = kill_tree(process.pid)
            returncode = await process.wait()
            reap(killed - {process.pid})
        if self._stopping or self.state is ReplicaState.UNHEALTHY:
            self._settle()
            return
        how = _exit_description(returncode)
        if self.state is ReplicaState.DRAINING:  # retired by a reload: not restarted
            self._fail_in_flight(
                f"the replica {self.id} (pid {process.pid}) {how} while handling the request"
            )
            self._set_state(ReplicaState.STOPPED, error=f"the replica process {how}")
            self._settle()
            return
        self._fail_in_flight(
            f"the replica {self.id} (pid {process.pid}) {how} while handling the request; "
            "peach dev is restarting it"
        )
        if self.state is ReplicaState.STARTING and self._started and not self._started.done():
            error = f"the replica process {how} during init"
        else:
            error = f"the replica process {how}"
        self._set_state(ReplicaState.RESTARTING, error=error, message=f"{error}; restarting")
        self._settle()
        ran_for = time.monotonic() - self._ready_at if self._ready_at else 0.0
        if ran_for > STABLE_AFTER_S:
            self._restarts = 0
        pause = RESTART_PAUSES_S[min(self._restarts, len(RESTART_PAUSES_S) - 1)]
        self._restarts += 1
        if pause:
            await asyncio.sleep(pause)
        if not self._stopping:
            await self._spawn()

    def _fail_in_flight(self, message: str) -> None:
        answers, self._answers = self._answers, {}
        for on_answer in answers.values():
            self._end()
            on_answer(CallResult.failure("method_error", message, self.id))
        for queue in list(self._streams.values()):
            queue.put_nowait(ReplicaGone(message))
        for ping in list(self._pings.values()):
            if not ping.done():
                ping.set_result(None)
        for request_id, patch in list(self._patches.items()):
            if not patch.done():
                patch.set_result(PatchFailed(request_id, message, ""))

    # -- background work -----------------------------------------------------------------

    def _background(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _pump_output(self, process: WorkerProcess) -> None:
        """Forward what the replica prints (the user's prints, crashes) as log events.

        A replica printing without pause must not starve the gateway: long lines are cut
        and lines over ``OUTPUT_LINES_PER_S`` are counted and summarised, not shown.
        """
        stream = process.stdout
        if stream is None:
            return
        output = _OutputLimiter(
            lambda text: self.on_event(ReplicaLog(self.spec.key, self.id, "output", text))
        )
        while True:
            try:
                data = await asyncio.wait_for(stream.read(1 << 16), output.seconds_to_summary())
            except TimeoutError:
                output.summarise()
                continue
            if not data:
                output.close()
                return
            output.feed(data)

    async def _monitor(self) -> None:
        """Sample memory about once a second; warn once each time it crosses the limit."""
        process = self._process
        samples = 0
        while process is self._process and process is not None and process.returncode is None:
            info = await self.ping()
            pss = samples % PSS_EVERY == 0
            memory = resident_memory(process.pid, pss=pss) if info is not None else None
            if memory is not None:
                samples += 1
                self.rss, self.pss = memory.rss, memory.pss if pss else self.pss
                limit = self.spec.memory
                self.on_event(ReplicaMemory(self.spec.key, self.id, self.rss, limit, self.pss))
                over = limit is not None and self.rss > limit
                if over and not self._over_limit:
                    assert limit is not None
                    self.on_event(MemoryWarning(self.spec.key, self.id, self.rss, limit))
                self._over_limit = over
            await asyncio.sleep(HEALTH_INTERVAL_S)

    def _set_state(
        self, state: ReplicaState, *, error: str | None = None, message: str | None = None
    ) -> None:
        if state is not self.state:
            self.state_since = time.monotonic()
        self.state = state
        if error is not None or state in (ReplicaState.HEALTHY, ReplicaState.STARTING):
            self.error = error
        self.on_event(
            ReplicaChanged(
                self.spec.key, self.id, state, pid=self.pid, error=error, message=message
            )
        )
        if self.on_change is not None:
            self.on_change()


class _OutputLimiter:
    """Splits a replica's output into lines, cut at ``OUTPUT_LINE_BYTES`` and shown at
    most ``OUTPUT_LINES_PER_S`` a second; ``emit`` gets each shown line and the summaries."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.line = bytearray()
        self.cut = 0
        self.shown = 0
        self.hidden = 0
        self.window = time.monotonic()

    def feed(self, data: bytes) -> None:
        if time.monotonic() - self.window >= 1.0:
            self.summarise()
        pieces = data.split(b"\n")
        self._add(pieces[0])
        for piece in pieces[1:]:
            self._end_line()
            self._add(piece)

    def _add(self, piece: bytes) -> None:
        room = OUTPUT_LINE_BYTES - len(self.line)
        if room > 0:
            self.line += piece[:room]
        self.cut += max(0, len(piece) - max(room, 0))

    def _end_line(self) -> None:
        if self.shown < OUTPUT_LINES_PER_S:
            self.shown += 1
            text = self.line.decode("utf-8", "replace")
            if self.cut:
                text += f" … ({self.cut} more bytes not shown)"
            self.emit(text)
        else:
            self.hidden += 1
        self.line.clear()
        self.cut = 0

    def seconds_to_summary(self) -> float | None:
        """How long until hidden lines are due to be summarised (None: nothing hidden)."""
        if not self.hidden:
            return None
        return max(0.0, 1.0 - (time.monotonic() - self.window))

    def summarise(self) -> None:
        if self.hidden:
            self.emit(
                f"… {self.hidden} more lines of output not shown "
                f"(at most {OUTPUT_LINES_PER_S} lines a second are)"
            )
        self.hidden = 0
        self.shown = 0
        self.window = time.monotonic()

    def close(self) -> None:
        if self.line or self.cut:
            self._end_line()
        self.summarise()
