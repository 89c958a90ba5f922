"""The messages between peach and its worker processes, and the one framing they travel in.

A gateway talks to each replica process (``peach_cli.runtime.replica_worker``), and peach to
each task process (``peach_cli.runtime.task_worker``), over a private Unix socketpair. Every
message is one of the typed tuples below, each of one ``Kind``; receivers ``match`` on the
classes::

    Gateway → replica   Start  Call  OpenStream  Cancel  Credit  Ping  Patch  CommitPatch  Stop
                        ProfileStart  ProfileStop
    Replica → gateway   Ready  InitFailed  Result  StreamStarted  Chunk  StreamEnded
                        StreamCutOff  StreamRefused  Pong  ReinitState  Log  PatchReady
                        PatchFailed  ProfileData
    Peach → task        RunTask
    Task → peach        TaskReturned  TaskFailed

On the wire a message is a 4-byte big-endian length followed by the pickled plain tuple
``(kind, *fields)``, as ``multiprocessing.connection`` frames its ``send_bytes``: a plain
tuple pickles several times faster than a class instance, and a request crosses twice.
Both ends are this package, on one machine, over a socketpair nobody else can open, so
pickle is safe here and results and chunks are not re-encoded. Two ends of the framing:
``MessageChannel`` (an asyncio protocol: the gateway, the replica worker, peach's side of a
task) and ``send_message``/``receive_message`` on a blocking socket (the task worker).

Adding a message is a local change: a member of ``Kind``, a ``NamedTuple`` registered with
``@message(Kind.X)`` here, and a ``case`` where it is received.

Standard library only: this module runs in every replica and task process.
"""

from __future__ import annotations

import asyncio
import enum
import os
import pickle
import signal
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar

from peach_cli.runtime.contract.answers import CallResult

if TYPE_CHECKING:
    from peach_cli.runtime.plan import ComponentSpec, TaskSpec

HEADER_BYTES = 4
RECEIVE_BYTES = 64 * 1024
"""What one read of a channel's socket takes at most: each channel keeps this much for its
life (the gateway one per replica), so it stays small; a larger message takes more reads."""
STREAM_WINDOW_CHUNKS = 256
STREAM_WINDOW_BYTES = 1 << 20
"""Flow control: a replica sends at most this much of one stream before the gateway has
consumed it (one chunk always goes, however large). A client that stops reading thus
stops the generator at its next yield instead of filling the gateway's memory."""


class Kind(enum.IntEnum):
    """What a message is; its value is the message's tag on the wire."""

    START = 1
    CALL = 2
    OPEN_STREAM = 3
    CANCEL = 4
    CREDIT = 5
    PING = 6
    PATCH = 7
    COMMIT_PATCH = 8
    STOP = 9
    PROFILE_START = 10
    PROFILE_STOP = 11
    READY = 20
    INIT_FAILED = 21
    RESULT = 22
    STREAM_STARTED = 23
    CHUNK = 24
    STREAM_ENDED = 25
    STREAM_CUT_OFF = 26
    STREAM_REFUSED = 27
    PONG = 28
    REINIT_STATE = 29
    LOG = 30
    PATCH_READY = 31
    PATCH_FAILED = 32
    PROFILE_DATA = 33
    RUN_TASK = 40
    TASK_RETURNED = 41
    TASK_FAILED = 42


class ProtocolError(Exception):
    """Bytes on a worker's socket that are not a message (garbage, or a frame cut short)."""


_CLASSES: dict[int, tuple[type[tuple[Any, ...]], int]] = {}
"""Tag → (message class, number of fields)."""
_TAGS: dict[type, int] = {}
_M = TypeVar("_M", bound=type)


def message(kind: Kind) -> Callable[[_M], _M]:
    """Register a NamedTuple as the message of ``kind``."""

    def register(cls: _M) -> _M:
        if kind in _CLASSES:
            raise ValueError(f"{kind.name} is already {_CLASSES[kind][0].__name__}")
        _CLASSES[kind] = (cls, len(cls._fields))  # type: ignore[attr-defined]
        _TAGS[cls] = int(kind)  # an int: an IntEnum member would pickle by reference
        return cls

    return register


def kind_of(sent: Message) -> Kind:
    """The ``Kind`` of a message."""
    return Kind(_TAGS[type(sent)])


# -- gateway → replica -------------------------------------------------------------------


@message(Kind.START)
class Start(NamedTuple):
    """Load the component's code and run its ``init`` (the first message a replica gets)."""

    spec: ComponentSpec
    root: str
    replica_id: str
    variables: dict[str, str]
    """Its component's env_vars and secrets, set before its code loads (SPEC §10)."""


@message(Kind.CALL)
class Call(NamedTuple):
    """One non-streaming call: answered by a ``Result``."""

    request_id: int
    query: dict[str, Any]
    body: dict[str, Any]


@message(Kind.OPEN_STREAM)
class OpenStream(NamedTuple):
    """One stream: ``StreamStarted`` then ``Chunk``s and ``StreamEnded`` (or
    ``StreamCutOff``), or ``StreamRefused`` when it cannot start."""

    request_id: int
    query: dict[str, Any]
    body: dict[str, Any]


@message(Kind.CANCEL)
class Cancel(NamedTuple):
    """The caller went away or timed out: stop the call, close the stream's generator."""

    request_id: int


@message(Kind.CREDIT)
class Credit(NamedTuple):
    """The gateway consumed this much of a stream: the replica may send as much again."""

    request_id: int
    chunks: int
    nbytes: int


@message(Kind.PING)
class Ping(NamedTuple):
    """Are you alive? (the gateway reads the replica's memory itself)."""

    request_id: int


@message(Kind.PATCH)
class Patch(NamedTuple):
    """Execute the component's new code beside the old one, keeping the state."""

    request_id: int
    spec: ComponentSpec


@message(Kind.COMMIT_PATCH)
class CommitPatch(NamedTuple):
    """Serve the code the ``Patch`` of ``request_id`` prepared (``commit``), or drop it."""

    request_id: int
    commit: bool


@message(Kind.STOP)
class Stop(NamedTuple):
    """Close every stream and exit."""


@message(Kind.PROFILE_START)
class ProfileStart(NamedTuple):
    """Start sampling this process (``peach_cli.runtime.sampler``): every ``interval_s``,
    wall-clock time or (``cpu``) CPU time. Sent before ``Start`` to profile ``init``."""

    interval_s: float
    cpu: bool


@message(Kind.PROFILE_STOP)
class ProfileStop(NamedTuple):
    """Stop sampling and send the profile (``ProfileData``)."""

    request_id: int


# -- replica → gateway -------------------------------------------------------------------


@message(Kind.READY)
class Ready(NamedTuple):
    """``init`` is done: the replica serves."""

    method_kind: str
    pid: int


@message(Kind.INIT_FAILED)
class InitFailed(NamedTuple):
    """The code or ``init`` raised; the process exits."""

    message: str
    details: str


@message(Kind.RESULT)
class Result(NamedTuple):
    """A call's answer: the fields of its ``CallResult``."""

    request_id: int
    ok: bool
    result: Any
    empty: bool
    code: str | None
    message: str | None
    drift: bool
    replica: str | None

    @classmethod
    def of(cls, request_id: int, answer: CallResult) -> Result:
        return cls(
            request_id,
            answer.ok,
            answer.result,
            answer.empty,
            answer.code,
            answer.message,
            answer.drift,
            answer.replica,
        )

    def call_result(self) -> CallResult:
        # positional, in CallResult's field order (twice as fast as keywords, per call)
        return CallResult(
            self.ok, self.result, self.empty, self.code, self.message, self.drift, self.replica
        )


@message(Kind.STREAM_STARTED)
class StreamStarted(NamedTuple):
    """The stream is bound and its generator runs."""

    request_id: int


@message(Kind.CHUNK)
class Chunk(NamedTuple):
    """One chunk the generator yielded."""

    request_id: int
    data: bytes


@message(Kind.STREAM_ENDED)
class StreamEnded(NamedTuple):
    """The generator finished."""

    request_id: int


@message(Kind.STREAM_CUT_OFF)
class StreamCutOff(NamedTuple):
    """The generator raised after the stream began: the gateway cuts the response."""

    request_id: int
    message: str


@message(Kind.STREAM_REFUSED)
class StreamRefused(NamedTuple):
    """The stream could not start (a binding error): a contract error code and message."""

    request_id: int
    code: str
    message: str


@message(Kind.PONG)
class Pong(NamedTuple):
    """Alive; whether a drift re-init is running."""

    request_id: int
    reinitializing: bool


@message(Kind.REINIT_STATE)
class ReinitState(NamedTuple):
    """A drift re-init started (``reinitializing``) or finished (``error`` if it failed)."""

    reinitializing: bool
    error: str | None


@message(Kind.LOG)
class Log(NamedTuple):
    """A log record of the replica (user tracebacks included)."""

    level: str
    message: str


@message(Kind.PATCH_READY)
class PatchReady(NamedTuple):
    """The new code ran; it waits for its ``CommitPatch``."""

    request_id: int
    method_kind: str


@message(Kind.PATCH_FAILED)
class PatchFailed(NamedTuple):
    """The new code raised (or could not run): the old code keeps serving."""

    request_id: int
    message: str
    details: str


@message(Kind.PROFILE_DATA)
class ProfileData(NamedTuple):
    """The profile since ``ProfileStart`` (``Sampler.profile``; None: nothing sampled)."""

    request_id: int
    profile: dict[str, Any] | None


# -- peach ↔ task ------------------------------------------------------------------------


@message(Kind.RUN_TASK)
class RunTask(NamedTuple):
    """Run the task once (the only message a task process gets); ``payload`` is JSON text."""

    spec: TaskSpec
    root: str
    payload: str | None
    run_id: str
    env: dict[str, str]
    """The task's env_vars and secrets, set before it runs (SPEC §10)."""


@message(Kind.TASK_RETURNED)
class TaskReturned(NamedTuple):
    """The task's function returned: its value as shown (JSON; ``result_text``), None for None."""

    result: str | None
    seconds: float


@message(Kind.TASK_FAILED)
class TaskFailed(NamedTuple):
    """The task raised: ``TypeName: text`` and the traceback with notebook cells and lines."""

    message: str
    traceback: str


Message: TypeAlias = (
    Start
    | Call
    | OpenStream
    | Cancel
    | Credit
    | Ping
    | Patch
    | CommitPatch
    | Stop
    | ProfileStart
    | ProfileStop
    | Ready
    | InitFailed
    | Result
    | StreamStarted
    | Chunk
    | StreamEnded
    | StreamCutOff
    | StreamRefused
    | Pong
    | ReinitState
    | Log
    | PatchReady
    | PatchFailed
    | ProfileData
    | RunTask
    | TaskReturned
    | TaskFailed
)


# -- the framing -------------------------------------------------------------------------

_dumps = pickle.dumps
_loads = pickle.loads
_PICKLE = pickle.HIGHEST_PROTOCOL
_new = tuple.__new__


def encode(sent: Message) -> bytes:
    """A message ready to write: length prefix, then the pickled ``(kind, *fields)``.

    Raises ``OverflowError`` when it is 4 GiB or more (the prefix cannot say it).
    """
    body = _dumps((_TAGS[type(sent)], *sent), _PICKLE)
    return len(body).to_bytes(HEADER_BYTES, "big") + body


def decode(body: bytes | bytearray | memoryview) -> Message:
    """The message in one frame's body (after its length prefix); ``ProtocolError`` if none."""
    try:
        fields = _loads(body)
        cls, arity = _CLASSES[fields[0]]
    except Exception as error:  # noqa: BLE001 - whatever garbage raises, say it once
        raise ProtocolError(
            f"a {len(body)}-byte frame that is not a message ({type(error).__name__}: {error})"
        ) from None
    if len(fields) - 1 != arity:
        raise ProtocolError(f"a {cls.__name__} message with {len(fields) - 1} fields, not {arity}")
    return _new(cls, fields[1:])  # type: ignore[return-value]


THREADS_HELD_EXIT = 75  # sysexits EX_TEMPFAIL
"""The exit code of a replica that left because every thread is held by a call that never
returned (the gateway names the reason even when the log line that says it is lost)."""
CRASH_EXIT = 70  # sysexits EX_SOFTWARE
"""The exit code of a replica whose own loop failed (a defect of peach, never user code)."""


class MessageChannel(asyncio.BufferedProtocol):
    """An asyncio protocol that splits the byte stream into messages and hands each on.

    ``on_message`` is called for every message, in order; ``on_lost`` once when the
    connection closes (the other process exited or closed its end), with a
    ``ProtocolError`` when bytes arrived that are not a message (the channel closes then).

    The transport reads into one receive area kept for the channel's life (a buffered
    protocol): a message is decoded where it landed, and only the start of a message cut
    by the end of a read is copied aside until its rest comes. (A plain protocol gets a
    fresh bytes object per read, which for asyncio's 256 KiB reads is an mmap, a remap and
    an unmap per message.)
    """

    def __init__(
        self,
        on_message: Callable[[Message], None],
        on_lost: Callable[[Exception | None], None],
    ) -> None:
        self._on_message = on_message
        self._on_lost = on_lost
        self._area = memoryview(bytearray(RECEIVE_BYTES))
        self._buffer = bytearray()
        """The start of a message whose rest has not arrived yet."""
        self._error: ProtocolError | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._area

    def buffer_updated(self, nbytes: int) -> None:
        if self._buffer:  # the rest of a message that began in an earlier read
            self.data_received(self._area[:nbytes])
            return
        data = self._area[:nbytes]
        offset = self._split(data, nbytes)
        if offset < nbytes and self._error is None:
            self._buffer += data[offset:]

    def data_received(self, data: bytes | bytearray | memoryview) -> None:
        """Take bytes that follow the ones received so far (any split of the stream)."""
        buffer = self._buffer
        buffer += data
        offset = self._split(buffer, len(buffer))
        if offset:
            del buffer[:offset]

    def _split(self, data: bytes | bytearray | memoryview, size: int) -> int:
        """Hand on every whole message in ``data[:size]``; how many bytes they took."""
        offset = 0
        try:
            while size - offset >= HEADER_BYTES:
                end = (
                    offset
                    + HEADER_BYTES
                    + int.from_bytes(data[offset : offset + HEADER_BYTES], "big")
                )
                if end > size:
                    break
                received = decode(data[offset + HEADER_BYTES : end])
                offset = end
                self._on_message(received)
        except ProtocolError as error:
            self._error = error
            self._buffer.clear()
            if self.transport is not None:
                self.transport.abort()
            return size
        return offset

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._buffer and self._error is None:
            self._error = ProtocolError(
                f"the connection closed {len(self._buffer)} bytes into a message"
            )
        self._on_lost(self._error or exc)

    def send(self, sent: Message) -> bool:
        """Write one message; False when the connection is already gone."""
        return self.write(encode(sent))

    def write(self, frame: bytes) -> bool:
        """Write one message ``encode`` made; False when the connection is already gone."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        transport.write(frame)
        # a write that found the other end gone (the process died before its end of the
        # connection was seen to close) closes the transport at once: not delivered
        return not transport.is_closing()

    def unread(self) -> int:
        """Bytes the other end sent that this end has not read yet (0 when closed)."""
        import fcntl
        import termios

        transport = self.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None:
            return 0
        try:
            count = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return 0
        return int.from_bytes(count, sys.byteorder)

    def abort(self) -> None:
        """Close the connection now (``on_lost`` follows), dropping what is unsent."""
        if self.transport is not None:
            self.transport.abort()


def send_message(sock: socket.socket, sent: Message) -> None:
    """Write one message to a blocking socket."""
    sock.sendall(encode(sent))


def receive_message(sock: socket.socket) -> Message:
    """Read one message from a blocking socket.

    Raises ``EOFError`` when the other end closed before a message began, and
    ``ProtocolError`` when it closed in the middle of one or sent bytes that are not one.
    """
    header = _read_exactly(sock, HEADER_BYTES, started=False)
    length = int.from_bytes(header, "big")
    return decode(_read_exactly(sock, length, started=True))


def _read_exactly(sock: socket.socket, count: int, *, started: bool) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(min(count - len(data), 1 << 20))
        if not chunk:
            if not data and not started:
                raise EOFError("the other end closed the connection")
            where = "length" if not started else f"{count}-byte body"
            raise ProtocolError(f"the connection closed {len(data)} bytes into a message's {where}")
        data += chunk
    return bytes(data)


def die_with_parent() -> None:
    """Ask Linux to kill this worker when its parent dies (elsewhere the worker exits when
    its socket to peach closes: ``peach_cli.runtime.linux``); exit now when the parent is
    already gone."""
    from peach_cli.runtime.linux import set_parent_death_signal

    if set_parent_death_signal(signal.SIGKILL) and os.getppid() == 1:  # the parent is gone
        os._exit(0)
