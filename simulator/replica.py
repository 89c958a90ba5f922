"""One replica: a worker process hosting one component, seen from the gateway.

A ``Replica`` starts a worker (its ``ProcessSupervisor``, ``simulator.supervisor``: cwd =
the project root), sends it the component, and waits for ``init``: the replica becomes
healthy, or unhealthy with the init error. Calls, streams, pings and patches are multiplexed
over the replica's socket by request id, in one table of requests in flight, each settled
one way (``_settle``: what the process sent for it, or its death). The replica counts the
calls and streams outstanding (the pool's load-balancing signal). When the process dies,
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
from simulator.supervisor import (
    STOP_TIMEOUT_S,
    ProcessSupervisor,
    exit_description,
    resident_memory,
)

HEALTH_INTERVAL_S = 1.0
PSS_EVERY = 5
"""The RSS is sampled every ``HEALTH_INTERVAL_S``, the PSS (costlier: each second, for a
hundred replicas, it would cost the gateway about 7 % of a core) the first time and every 5th after."""
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

    def __init__(self, future: asyncio.Future[CallResult], replica: Replica) -> None:
        self.future = future
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
    """A request with one answer of kind ``expected`` (a ping, a patch), for ``future``;
    ``gone`` makes the answer of a process that died (or answered something else)."""

    __slots__ = ("future", "expected", "gone")

    def __init__(
        self,
        future: asyncio.Future[Any],
        expected: type | tuple[type, ...],
        gone: Callable[[str], object],
    ) -> None:
        self.future = future
        self.expected = expected
        self.gone = gone

    def deliver(self, outcome: Message | ReplicaGone) -> None:
        if self.future.done():
            return
        if isinstance(outcome, self.expected):
            self.future.set_result(outcome)
        else:
            reason = str(outcome) if isinstance(outcome, ReplicaGone) else type(outcome).__name__
            self.future.set_result(self.gone(reason))


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
        self._channel: MessageChannel | None = None
        self._in_flight: dict[int, InFlight] = {}
        """Every request in flight (calls, streams, pings, patches, profiles) by request id."""
        self._prepared_kind: str | None = None
        self._next_id = 0
        self._started: asyncio.Future[None] | None = None
        self._stopping = False
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
        for first in profiling.first_messages(self):  # `peach profile --init`
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
    def spawner(self) -> Spawner:
        """What starts its process (``supervisor.spawner``), shared by a server's replicas."""
        return self.supervisor.spawner

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

    def _track(self, request_id: int, entry: InFlight) -> None:
        self._in_flight[request_id] = entry
        if entry.counted:
            self.outstanding += 1
            self._idle.clear()

    def _forget(self, request_id: int) -> InFlight | None:
        """Take a request out of the table (its answer, if one comes, is dropped)."""
        entry = self._in_flight.pop(request_id, None)
        if entry is not None and entry.counted:
            self.outstanding -= 1
            if self.outstanding == 0:
                self._idle.set()
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

    async def call(self, params: RequestParams, deadline: Deadline | None = None) -> CallResult:
        """One non-streaming call; cancelling it cancels the call in the replica. A
        breakpoint in it suspends ``deadline`` (its ``timeout_s``)."""
        future: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()
        request_id = self.send_call(params, _AwaitedCall(future, self))
        if request_id is None:
            if not self._stopping and self.state in RESTARTED_WHEN_GONE:
                raise NotSent(self.id)
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

    def send_call(self, params: RequestParams, call: CallInFlight) -> int | None:
        """Send one non-streaming call (``call.replica`` is this one) whose ``CallResult``
        goes to ``call.answered``, once, from the loop, as soon as it arrives (or fails: the
        process died); its request id, or None when the process is not running.
        ``cancel_call`` takes it back. ``call`` awaits one; the gateway's fast lane is one."""
        channel = self._channel
        request_id = self._new_id()
        if channel is None or not channel.send(Call(request_id, params.query, params.body)):
            return None
        self._track(request_id, call)
        return request_id

    def cancel_call(self, request_id: int) -> None:
        """Forget a ``send_call`` call and cancel it in the process (its answer is dropped)."""
        if self._forget(request_id) is not None:
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
        entry = _StreamInFlight()
        self._track(request_id, entry)
        if self.debugger is not None:  # a breakpoint's banner names the request
            self.debugger.register(self.id, request_id, None)
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
        if self.debugger is not None:
            self.debugger.unregister(self.id, request_id)
        if not finished:
            channel.send(Cancel(request_id))

    async def ping(self, timeout_s: float = 2.0) -> Pong | None:
        """The replica's answer, or None when it is gone or does not answer in time."""
        reply = await self._ask(Ping, Pong, timeout_s)
        return reply if isinstance(reply, Pong) else None

    def notify(self, message: Message) -> bool:
        """Send ``message``, which has no reply; False when the process is gone."""
        channel = self._channel
        return channel is not None and bool(channel.send(message))

    async def request(self, make: Callable[[int], Message], timeout_s: float) -> Message | None:
        """Send ``make(request_id)`` and return the reply carrying that id (a ``ProfileData``);
        None when the process is gone or does not reply within ``timeout_s``."""
        return await self._ask(make, ProfileData, timeout_s)

    async def _ask(
        self, make: Callable[[int], Message], reply: type, timeout_s: float
    ) -> Message | None:
        """Send ``make(request_id)``; the ``reply`` message carrying that id, or None."""
        channel = self._channel
        if channel is None:
            return None
        request_id = self._new_id()
        future: asyncio.Future[Message | None] = asyncio.get_running_loop().create_future()
        self._track(request_id, _ReplyInFlight(future, reply, lambda _reason: None))
        try:
            if not channel.send(make(request_id)):
                return None
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return None
        finally:
            self._forget(request_id)

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

        def gone(reason: str) -> PatchFailed:
            return PatchFailed(request_id, reason, "")

        self._track(request_id, _ReplyInFlight(future, (PatchReady, PatchFailed), gone))
        try:
            answer = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return request_id, f"the new code did not finish running within {timeout_s:g} s"
        finally:
            self._forget(request_id)
        match answer:
            case PatchReady(method_kind=kind):
                self._prepared_kind = kind
                return request_id, None
            case PatchFailed(message=message):
                # The traceback is not logged here: the restart that follows a failed patch
                # runs the same code and reports it, with the error, if it fails again.
                return request_id, message
        return request_id, f"the replica {self.id} sent {type(answer).__name__} for a patch"

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
                self.supervisor.watch(self._monitor())
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
        await self.supervisor.pause_before_restart()
        if not self._stopping:
            await self._spawn()

    # -- watching ------------------------------------------------------------------------

    def _output(self, text: str) -> None:
        """A line the process printed (the user's prints, crashes): a log event."""
        self.on_event(ReplicaLog(self.spec.key, self.id, "output", text))

    async def _monitor(self) -> None:
        """Sample memory about once a second; warn once each time it crosses the limit."""
        process = self.supervisor.process
        samples = 0
        while (
            process is self.supervisor.process
            and process is not None
            and process.returncode is None
        ):
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
