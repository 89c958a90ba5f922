"""One replica: a worker process hosting one component, seen from the gateway.

A ``Replica`` starts a worker (its ``ProcessSupervisor``, ``simulator.supervisor``: cwd =
the project root), sends it the component, and waits for ``init``: the replica becomes
healthy, or unhealthy with the init error. Calls, streams and requests with one reply
(pings; a hot patch's, ``simulator.hotpatch``; a profile's) are multiplexed over the
replica's socket by request id, in one table of requests in flight, each settled one way
(``_settle``: what the process sent for it, or its death); a call or a stream is registered
with the debugger relay while it is in the table. The replica counts the calls and streams
outstanding (the pool's load-balancing signal); its supervisor samples its memory
(``MemoryWatch``). When the process dies,
every request in flight fails at once with an error saying so, streams end, and the
supervisor restarts the process (with a growing pause if it keeps dying).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

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
    Credit,
    InitFailed,
    Log,
    Message,
    MessageChannel,
    OpenStream,
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
from simulator import debug
from simulator.environments import explain_init_error
from simulator.events import Event, ReplicaChanged, ReplicaLog, ReplicaState
from simulator.spawn import Spawner, WorkerLaunch, WorkerProcess
from simulator.supervisor import STOP_TIMEOUT_S, MemoryWatch, ProcessSupervisor, exit_description

INIT_STUCK_S = 10.0
"""An init (or code) still running after this long is reported (the replica keeps waiting
for it); a session's ``Knobs.init_stuck_s`` changes it (tests say it sooner)."""


EXIT_DRAIN_TRIES = 100
"""How many times (10 ms apart) the messages a process sent before it exited are waited for
before its connection is closed, when its end of the socket outlives it."""


class ReplicaGone(Exception):
    """The replica process died before a stream it was asked for started."""


class NotSent(Exception):
    """A call that never reached the replica's process: it had died, and its end of the
    connection was not yet seen to close. Nothing of the call ran; the replica will be
    restarted, so the pool waits for one and sends the call again."""


RESTARTED_WHEN_GONE = (ReplicaState.HEALTHY, ReplicaState.RELOADING)
"""The serving states a replica is restarted from when its process dies."""


StreamEvent = Message | ReplicaGone
"""What arrives for one stream: its messages, or the replica's death."""


class InFlight:
    """A request in flight on a replica: where what arrives for it goes (``deliver``: a
    message the process sent for it, or ``ReplicaGone`` when the process died).

    A call and a stream count in the replica's ``outstanding`` (``counted``); a stream
    takes many messages and leaves the table when its reader releases it (``lasting``),
    every other request when its one answer is delivered."""

    __slots__ = ()
    counted: ClassVar[bool] = False
    lasting: ClassVar[bool] = False

    def deliver(self, outcome: Message | ReplicaGone) -> None:
        raise NotImplementedError


class CallInFlight(InFlight):
    """A non-streaming call: its ``CallResult`` goes to ``answered``, once (what the process
    sent, or a failure: it died, or sent something else), sent to ``replica``.
    ``Replica.call`` awaits one; the gateway's fast lane is one (``FastCall``)."""

    __slots__ = ()
    counted = True
    replica: Replica
    """The replica the call was sent to."""

    def sent(self, replica: Replica, request_id: int) -> None:
        """The call went to ``replica`` (which it is to keep as ``replica``) as
        ``request_id``."""
        raise NotImplementedError

    def answered(self, result: CallResult) -> None:
        raise NotImplementedError

    def deliver(self, outcome: Message | ReplicaGone) -> None:
        if type(outcome) is Result:
            self.answered(outcome.call_result())
            return
        message = (
            str(outcome)
            if isinstance(outcome, ReplicaGone)
            else f"the replica {self.replica.id} sent {type(outcome).__name__} for a call"
        )
        self.answered(CallResult.failure("method_error", message, self.replica.id))


class _AwaitedCall(CallInFlight):
    """``Replica.call``'s: its result goes to ``future`` (unless cancelled meanwhile: its
    ``Cancel`` is on its way)."""

    __slots__ = ("future", "replica")

    def __init__(self, future: asyncio.Future[CallResult]) -> None:
        self.future = future

    def sent(self, replica: Replica, request_id: int) -> None:
        self.replica = replica

    def answered(self, result: CallResult) -> None:
        if not self.future.done():
            self.future.set_result(result)


class _StreamInFlight(InFlight):
    """A stream: its messages queue for its ``ReplicaStream``."""

    __slots__ = ("queue",)
    counted = True
    lasting = True

    def __init__(self) -> None:
        self.queue: asyncio.Queue[StreamEvent] = asyncio.Queue()

    def deliver(self, outcome: Message | ReplicaGone) -> None:
        self.queue.put_nowait(outcome)


class _ReplyInFlight(InFlight):
    """A request with one answer of kind ``expected`` (a ping, a patch, a profile), for
    ``future``: ``ReplicaGone`` when the process died (or answered something else)."""

    __slots__ = ("future", "expected")

    def __init__(self, future: asyncio.Future[Any], expected: type | tuple[type, ...]) -> None:
        self.future = future
        self.expected = expected

    def deliver(self, outcome: Message | ReplicaGone) -> None:
        if self.future.done():
            return
        if isinstance(outcome, self.expected):
            self.future.set_result(outcome)
        else:
            reason = str(outcome) if isinstance(outcome, ReplicaGone) else type(outcome).__name__
            self.future.set_exception(ReplicaGone(reason))


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
        first_messages: Callable[[Replica], list[Message]] | None = None,
    ) -> None:
        self.spec = spec
        self.root = Path(root).resolve()
        self.launch = launch or WorkerLaunch(self.root)
        """How this replica's process is started (its interpreter, its environment)."""
        self.supervisor = ProcessSupervisor(spawner or Spawner(), self._output)
        """Starts, watches, restarts and kills the process."""
        self.variables: dict[str, str] = {}
        """Its component's env_vars and secrets: the worker sets them when it takes the
        component, so a spare never holds another component's secrets."""
        self.id = replica_id
        self.init_stuck_s = init_stuck_s
        """A start-up still running after this long is reported (it goes on waiting)."""
        self.debugger = debugger
        """The session's pdb relay: a breakpoint in a call suspends the call's deadline."""
        self.first_messages = first_messages
        """What its process gets before ``Start`` each time it starts (the server's
        ``simulator.profiling.InitProfiling``: `peach profile --init` samples from the
        first line)."""
        self.on_event = on_event
        self.on_change = on_change
        self.state = ReplicaState.STARTING
        self.state_since = time.monotonic()
        """When it entered ``state`` (a timeout while it starts says for how long)."""
        self.error: str | None = None
        self.pid: int | None = None
        self.memory = MemoryWatch(spec, replica_id, on_event)
        """Its process's memory, sampled while it runs (``rss``, ``pss``)."""
        self.method_kind: str | None = None
        self.outstanding = 0
        self._channel: MessageChannel | None = None
        self._in_flight: dict[int, InFlight] = {}
        """Every request in flight (calls, streams, pings, patches, profiles) by request id."""
        self._next_id = 0
        self._started: asyncio.Future[None] | None = None
        self._stopping = False
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
            process, parent_end = await self.supervisor.spawn(self.launch)
        except OSError as error:
            self._set_state(ReplicaState.UNHEALTHY, error=f"could not start a replica: {error}")
            return
        self.pid = process.pid
        channel = MessageChannel(self._on_message, lambda exc: self._on_lost(process, exc))
        self._channel = channel
        await loop.create_connection(lambda: channel, sock=parent_end)
        self.supervisor.watch(_close_at_exit(process, channel))
        self._started = loop.create_future()
        for first in self.first_messages(self) if self.first_messages else ():
            channel.send(first)
        channel.send(Start(self.spec, str(self.root), self.id, self.variables))
        try:
            await asyncio.wait_for(asyncio.shield(self._started), self.init_stuck_s)
        except TimeoutError:
            if self.state is ReplicaState.STARTING and process is self.supervisor.process:
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
        if self._channel is not None:
            self._channel.send(Stop())
        await self.supervisor.stop(timeout_s)
        self._fail_in_flight(f"the replica {self.id} was stopped")
        await self.supervisor.stop_watching()
        if self.state is not ReplicaState.STOPPED:
            self._set_state(ReplicaState.STOPPED)

    def mark_draining(self) -> None:
        """Retired by a reload: finish what is in flight, take what began before."""
        if self.serving:
            self._set_state(ReplicaState.DRAINING)

    def kill_now(self) -> None:
        """Last resort at interpreter exit: SIGKILL it and its tree without waiting."""
        self.supervisor.kill_now()

    @property
    def serving(self) -> bool:
        return self.state in (ReplicaState.HEALTHY, ReplicaState.RELOADING)

    async def wait_idle(self) -> None:
        """Wait until no call or stream is in flight on this replica."""
        await self._idle.wait()

    # -- requests in flight: one table, one way in (``_track``), one way out (``_settle``)

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _track(
        self,
        request_id: int,
        entry: InFlight,
        deadline: Deadline | None = None,
        line: str | None = None,
    ) -> None:
        """Put a request in the table. A call or a stream (``counted``) is registered with
        the debugger relay while it is in flight: a breakpoint in it suspends ``deadline``
        (its ``timeout_s``) and its banner names ``line``, the HTTP request it serves."""
        self._in_flight[request_id] = entry
        if entry.counted:
            self.outstanding += 1
            self._idle.clear()
            relay = self.debugger
            if relay is not None:
                relay.register(self.id, request_id, deadline, line)

    def _forget(self, request_id: int) -> InFlight | None:
        """Take a request out of the table (its answer, if one comes, is dropped)."""
        entry = self._in_flight.pop(request_id, None)
        if entry is not None and entry.counted:
            self.outstanding -= 1
            if self.outstanding == 0:
                self._idle.set()
            relay = self.debugger
            if relay is not None:
                relay.unregister(self.id, request_id)
        return entry

    def _settle(self, request_id: int, outcome: Message | ReplicaGone) -> None:
        """The one way a request in flight gets its outcome: what the process sent for it,
        or its death (``ReplicaGone``). A request with one answer leaves the table first; a
        stream stays until its reader releases it."""
        entry = self._in_flight.get(request_id)
        if entry is None:
            return  # cancelled or released meanwhile, or failed when the process died
        if not entry.lasting:
            self._forget(request_id)
        entry.deliver(outcome)

    def _fail_in_flight(self, message: str) -> None:
        gone = ReplicaGone(message)
        for request_id in list(self._in_flight):
            self._settle(request_id, gone)

    # -- calls and streams ---------------------------------------------------------------

    async def call(
        self, params: RequestParams, deadline: Deadline | None = None, line: str | None = None
    ) -> CallResult:
        """One non-streaming call, awaited; cancelling it cancels the call in the replica.
        ``deadline`` and ``line`` as for ``send_call``."""
        future: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()
        request_id = self.send_call(params, _AwaitedCall(future), deadline, line)
        if request_id is None:
            if not self._stopping and self.state in RESTARTED_WHEN_GONE:
                raise NotSent(self.id)
            return CallResult.failure(
                "unavailable", f"the replica {self.id} is not running", self.id
            )
        try:
            return await future
        except asyncio.CancelledError:
            self.cancel_call(request_id)
            raise

    def send_call(
        self,
        params: RequestParams,
        call: CallInFlight,
        deadline: Deadline | None = None,
        line: str | None = None,
    ) -> int | None:
        """Send one non-streaming call (``call.sent`` is told where it went) whose
        ``CallResult`` goes to ``call.answered``, once, from the loop, as soon as it arrives
        (or fails: the process died); its request id, or None when the process is not
        running. ``cancel_call`` takes it back. A breakpoint in it suspends ``deadline``
        (its ``timeout_s``), and its banner names ``line`` (``GET /greet?name=Ada``).
        ``call`` awaits one; the gateway's fast lane is one."""
        channel = self._channel
        request_id = self._new_id()
        if channel is None or not channel.send(Call(request_id, params.query, params.body)):
            return None
        call.sent(self, request_id)
        self._track(request_id, call, deadline, line)
        return request_id

    def cancel_call(self, request_id: int) -> None:
        """Forget a ``send_call`` call and cancel it in the process (its answer is dropped)."""
        if self._forget(request_id) is not None:
            channel = self._channel
            if channel is not None:
                channel.send(Cancel(request_id))

    async def open_stream(self, params: RequestParams, line: str | None = None) -> ReplicaStream:
        """Start a stream; return its chunks once the replica has bound the call (a
        breakpoint's banner names ``line``, the HTTP request).

        Raises ``ContractError`` when the stream cannot start (a binding error) and
        ``ReplicaGone`` when the process dies first. Cancelling this call, or closing the
        returned stream, closes the user's generator in the replica.
        """
        channel = self._channel
        if channel is None:
            raise ReplicaGone(f"the replica {self.id} is not running")
        request_id = self._new_id()
        entry = _StreamInFlight()
        self._track(request_id, entry, None, line)
        stream = ReplicaStream(self, channel, request_id, entry.queue)
        try:
            channel.send(OpenStream(request_id, params.query, params.body))
            event = await entry.queue.get()
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
        self._forget(request_id)
        if not finished:
            channel.send(Cancel(request_id))

    async def ping(self, timeout_s: float = 2.0) -> Pong | None:
        """The replica's answer, or None when it is gone or does not answer in time."""
        try:
            reply = await self.ask(Ping, Pong, timeout_s)
        except (ReplicaGone, TimeoutError):
            return None
        return reply if isinstance(reply, Pong) else None

    def notify(self, message: Message) -> bool:
        """Send ``message``, which has no reply; False when the process is gone."""
        channel = self._channel
        return channel is not None and bool(channel.send(message))

    async def request(self, make: Callable[[int], Message], timeout_s: float) -> Message | None:
        """Send ``make(request_id)`` and return the reply carrying that id (a ``ProfileData``);
        None when the process is gone or does not reply within ``timeout_s``."""
        try:
            return await self.ask(make, ProfileData, timeout_s)
        except (ReplicaGone, TimeoutError):
            return None

    async def ask(
        self,
        make: Callable[[int], Message],
        expected: type | tuple[type, ...],
        timeout_s: float,
    ) -> Message:
        """Send ``make(request_id)`` and return the reply of kind ``expected`` carrying that
        id: ``ReplicaGone`` when the process is not running, dies first or answers something
        else, ``TimeoutError`` when it does not within ``timeout_s``."""
        channel = self._channel
        if channel is None:
            raise ReplicaGone(f"the replica {self.id} is not running")
        request_id = self._new_id()
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._track(request_id, _ReplyInFlight(future, expected))
        try:
            if not channel.send(make(request_id)):
                raise ReplicaGone(f"the replica {self.id} is not running")
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._forget(request_id)

    def adopt(self, spec: ComponentSpec, method_kind: str | None) -> None:
        """Serve ``spec``'s code from now on (a hot patch committed it in the process): a
        restart of this process runs it, init included."""
        self.spec = self.memory.spec = spec
        self.method_kind = method_kind or self.method_kind

    # -- messages from the process -------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        match message:
            case (
                Result()
                | Chunk()
                | StreamEnded()
                | StreamCutOff()
                | StreamStarted()
                | StreamRefused()
                | Pong()
                | PatchReady()
                | PatchFailed()
                | ProfileData()
            ):
                self._settle(message.request_id, message)
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
                self.supervisor.ready()
                restarted = "restarted" if self.supervisor.restarted else None
                self._set_state(ReplicaState.HEALTHY, message=restarted)
                self.supervisor.watch(self.memory.watch(self.supervisor, self.ping))
                self._init_done()
            case InitFailed(message=text, details=details):
                if details:
                    self.on_event(ReplicaLog(self.spec.key, self.id, "error", details))
                error = explain_init_error(text, self.launch)
                self._set_state(ReplicaState.UNHEALTHY, error=error)
                self._init_done()
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

    def _init_done(self) -> None:
        """``start`` (or a restart) stops waiting: init ended, one way or another."""
        if self._started is not None and not self._started.done():
            self._started.set_result(None)

    def _on_lost(self, process: WorkerProcess, error: Exception | None) -> None:
        """The process's connection closed: it exited (or closed it, or sent garbage)."""
        if process is not self.supervisor.process:
            return
        if isinstance(error, ProtocolError):
            self.on_event(ReplicaLog(self.spec.key, self.id, "error", f"the replica sent {error}"))
        self._channel = None
        self.supervisor.watch(self._after_exit(process))

    async def _after_exit(self, process: WorkerProcess) -> None:
        returncode = await self.supervisor.wait_exit(process)
        if self._stopping or self.state is ReplicaState.UNHEALTHY:
            self._init_done()
            return
        how = exit_description(returncode)
        if self.state is ReplicaState.DRAINING:  # retired by a reload: not restarted
            self._fail_in_flight(
                f"the replica {self.id} (pid {process.pid}) {how} while handling the request"
            )
            self._set_state(ReplicaState.STOPPED, error=f"the replica process {how}")
            self._init_done()
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
        self._init_done()
        await self.supervisor.pause_before_restart(returncode)
        if not self._stopping:
            await self._spawn()

    # -- watching ------------------------------------------------------------------------

    def _output(self, text: str) -> None:
        """A line the process printed (the user's prints, crashes): a log event."""
        self.on_event(ReplicaLog(self.spec.key, self.id, "output", text))

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


async def _close_at_exit(process: WorkerProcess, channel: MessageChannel) -> None:
    """Close ``channel`` once ``process`` has exited. Its end of the socket closes with it,
    unless another process holds a copy (a process its code forked and left running): the
    exit alone then says it is gone, and what is in flight on it fails at once."""
    await process.wait()
    for _ in range(EXIT_DRAIN_TRIES):  # what it sent before it exited is read first
        if not channel.unread():
            break
        await asyncio.sleep(0.01)
    channel.abort()
