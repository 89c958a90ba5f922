"""The load generator behind `peach bench`: HTTP/1.1 keep-alive connections on asyncio.

Each request is written as pre-encoded bytes and its answer read by httptools (the parser
uvicorn uses), so the generator costs a few tens of microseconds a request and is not what
a benchmark measures. Two loops (SPEC §9):

- **open** (``rate``): request *i* is due at ``start + i / rate`` whatever the server does;
  its latency runs from that scheduled start, so a stall shows in the latencies of every
  request that should have been sent meanwhile (no coordinated omission, as wrk2 and vegeta
  measure). A request finds an idle connection or opens one.
- **closed** (``concurrency``): that many connections, each sending its next request as
  soon as the last one is answered.

Timers run on a ``select``-based event loop in the open loop: epoll rounds its timeout up to
the next millisecond, which would add up to 1 ms of the generator's own to every latency.

Every answer goes to a ``Tally`` (``peach_cli.bench.summary``); requests that started
during the warm-up are sent but not recorded.
"""

from __future__ import annotations

import asyncio
import json
import math
import selectors
import signal
import ssl
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import httptools

if TYPE_CHECKING:
    from peach_cli.bench.summary import Tally
    from peach_cli.client.items import AskRequest

USER_AGENT = "peach-bench"
_COMPONENT = b"x-peach-component"
_REPLICA = b"x-peach-replica"
_CONTENT_LENGTH = b"content-length"
_MAX_ERROR_BODY = 64 * 1024  # enough of an error answer to read its envelope's code
_SWEEP_S = 0.1
_EARLY_S = 0.0002
_BATCH = 256
"""Requests an open loop launches before it yields to the event loop."""
QUEUED_S = 1.0
"""An open loop holds at most this long of its schedule in requests not sent yet."""
MAX_QUEUED = 10_000
"""... and never more than this many, whatever the rate."""
SELECT_FDS = 900
"""Connections an open loop opens at most: ``select`` takes descriptors below 1024."""
"""The open loop wakes this long before a request is due and waits the rest actively."""


@dataclass(frozen=True)
class Shot:
    """One request, encoded once: the bytes on the wire and where they go."""

    raw: bytes
    stream: bool


@dataclass(frozen=True)
class Address:
    host: str
    port: int
    tls: bool

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"


def address_of(url: str) -> Address:
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    return Address(parts.hostname or "127.0.0.1", parts.port or (443 if tls else 80), tls)


def encode(request: AskRequest) -> Shot:
    """The bytes of ``request`` (one of `peach ask`'s) as an HTTP/1.1 keep-alive request."""
    parts = urlsplit(request.url)
    target = parts.path or "/"
    query = "&".join(q for q in (parts.query, urlencode(list(request.params))) if q)
    if query:
        target += "?" + query
    host = parts.netloc.rsplit("@", 1)[-1]
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {host}", "Accept: */*"]
    names = {name.lower() for name, _ in request.headers}
    if "user-agent" not in names:
        lines.append(f"User-Agent: {USER_AGENT}")
    lines += [f"{name}: {value}" for name, value in request.headers if name.lower() != "host"]
    body = b""
    if request.body is not None:
        body = json.dumps(request.body, separators=(",", ":"), ensure_ascii=False).encode()
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    return Shot(head + body, request.stream)


class _Exchange:
    """One request in flight on a connection, and what its answer said so far."""

    __slots__ = (
        "body",
        "chunks",
        "component",
        "content_length",
        "first_chunk",
        "last",
        "previous",
        "recorded",
        "replica",
        "scheduled",
        "shot",
        "status",
        "waiter",
    )

    def __init__(
        self, shot: Shot, scheduled: float, recorded: bool, waiter: asyncio.Future[bool]
    ) -> None:
        self.shot = shot
        self.scheduled = scheduled
        self.recorded = recorded
        self.waiter = waiter
        self.status = 0
        self.component: str | None = None
        self.replica: str | None = None
        self.content_length = False
        self.body: list[bytes] | None = None
        self.chunks = 0
        self.first_chunk = 0.0
        self.previous = 0.0
        self.last = scheduled


class _Connection(asyncio.Protocol):
    """A keep-alive connection carrying one exchange at a time."""

    def __init__(self, tally: Tally, clock: Callable[[], float]) -> None:
        self.tally = tally
        self.clock = clock
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.parser: Any = None
        self.open = False
        self.reusable = False

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.open = True

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        exchange.last = self.clock()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail("the server upgraded the connection")
        except httptools.HttpParserError as error:
            self._fail(f"invalid HTTP answer ({error})")

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        if self.exchange is not None:
            if self.exchange.status and self.exchange.chunks:
                self._finish(cut=True)
            else:
                self._fail("the connection closed before the answer")

    # -- httptools callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        exchange = self.exchange
        assert exchange is not None
        name = name.lower()
        if name == _COMPONENT:
            exchange.component = value.decode("latin-1")
        elif name == _REPLICA:
            exchange.replica = value.decode("latin-1")
        elif name == _CONTENT_LENGTH:
            exchange.content_length = True

    def on_headers_complete(self) -> None:
        exchange = self.exchange
        assert exchange is not None
        exchange.status = self.parser.get_status_code()
        if exchange.status >= 400 or not exchange.shot.stream:
            exchange.body = [] if exchange.status != 200 else None

    def on_body(self, body: bytes) -> None:
        exchange = self.exchange
        assert exchange is not None
        if exchange.body is not None:
            if sum(map(len, exchange.body)) < _MAX_ERROR_BODY:
                exchange.body.append(body)
            return
        if exchange.shot.stream and exchange.status == 200:
            now = exchange.last
            if exchange.chunks == 0:
                exchange.first_chunk = now
                self.tally.first_chunk(now - exchange.scheduled, exchange.recorded)
            else:
                self.tally.gap(now - exchange.previous, exchange.recorded)
            exchange.previous = now
            exchange.chunks += 1

    def on_message_complete(self) -> None:
        self.reusable = bool(self.parser.should_keep_alive())
        self._finish(cut=False)

    # -- exchanges ------------------------------------------------------------------------

    def send(self, shot: Shot, scheduled: float, recorded: bool) -> asyncio.Future[bool]:
        """Write ``shot``; the future says whether the connection can carry another."""
        assert self.transport is not None and self.exchange is None
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.exchange = _Exchange(shot, scheduled, recorded, waiter)
        self.parser = httptools.HttpResponseParser(self)
        self.reusable = False
        self.transport.write(shot.raw)
        return waiter

    def _finish(self, *, cut: bool) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        self.exchange = None
        now = self.clock()
        error_code = None
        if exchange.body:
            error_code = _error_code(b"".join(exchange.body))
        streamed = exchange.shot.stream and exchange.status == 200 and not exchange.content_length
        self.tally.record_answer(
            now - exchange.scheduled,
            exchange.status,
            exchange.component,
            exchange.replica,
            error_code,
            exchange.recorded,
            chunks=exchange.chunks if streamed else None,
            stream_s=(now - exchange.first_chunk) if streamed and exchange.chunks else 0.0,
            cut=cut,
        )
        keep = self.reusable and not cut and self.open
        if not keep:
            self.close()
        if not exchange.waiter.done():
            exchange.waiter.set_result(keep)

    def _fail(self, reason: str) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        self.exchange = None
        self.tally.record_failure(reason, exchange.recorded)
        self.close()
        if not exchange.waiter.done():
            exchange.waiter.set_result(False)

    def expire(self, now: float, timeout_s: float) -> None:
        """Give up on an exchange that has had no data for ``timeout_s``."""
        if self.exchange is not None and now - self.exchange.last > timeout_s:
            self._fail(f"no answer in {timeout_s:g} s")

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()


def _error_code(body: bytes) -> str | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("error"), dict):
        code = value["error"].get("code")
        return code if isinstance(code, str) else None
    return None


@dataclass
class LoadPlan:
    """What to send and for how long (``rate`` set: the open loop, else the closed loop)."""

    shots: Sequence[Shot]
    """Sent in turn, over and over."""
    address: Address
    rate: float | None = None
    concurrency: int = 8
    duration_s: float | None = 10.0
    requests: int | None = None
    """Stop after this many requests (counted after the warm-up)."""
    warmup_s: float = 0.0
    timeout_s: float = 60.0
    max_connections: int = 1000
    """The open loop never holds more connections than this; a request that finds none
    free waits for one (and its wait counts in its latency)."""


class LoadGenerator:
    """Runs one ``LoadPlan`` against its address, reporting to a ``Tally``."""

    def __init__(self, plan: LoadPlan, tally: Tally) -> None:
        self.plan = plan
        self.tally = tally
        self.stopping = asyncio.Event()
        self._connections: set[_Connection] = set()
        self._idle: list[_Connection] = []
        self._in_flight: set[asyncio.Future[Any]] = set()
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if plan.address.tls else None
        )
        self._clock = time.monotonic
        self.started = 0.0
        """When the measured part began (after the warm-up)."""
        self.ended = 0.0
        self._sent = 0
        self._connecting = 0
        self._max_connections = (
            plan.max_connections if plan.rate is None else min(plan.max_connections, SELECT_FDS)
        )
        """An open loop runs on ``select`` (``run_load``): its sockets stay under FD_SETSIZE."""
        self._queued = 0
        self._free_waiters: deque[asyncio.Future[None]] = deque()
        """Requests waiting for a connection to come free, in order."""
        self._room: asyncio.Future[None] | None = None
        """The open loop waiting for a queued request to go out."""
        """Requests launched that wait for a connection (or are being sent on a new one)."""

    def stop(self) -> None:
        """Stop sending (Ctrl-C): what is in flight still finishes, briefly; what waits
        for a connection is not sent."""
        self.stopping.set()
        while self._free_waiters:
            waiter = self._free_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def run(self) -> None:
        plan = self.plan
        loop = asyncio.get_running_loop()
        sweeper = loop.create_task(self._sweep())
        began = self._clock()
        self.started = began + plan.warmup_s
        self.tally.begin(self.started)
        try:
            if plan.rate is not None:
                await self._open_loop(plan.rate)
            else:
                await self._closed_loop(plan.concurrency)
            self.tally.sending_ended = self._clock()
            await self._drain(plan.timeout_s if not self.stopping.is_set() else 1.0)
        finally:
            self.ended = self._clock()
            self.tally.end(self.ended)
            sweeper.cancel()
            for connection in list(self._connections):
                connection.close()
            left = [future for future in self._in_flight if not future.done()]
            for future in left:  # still waiting for a connection: not sent, not measured
                future.cancel()
            await asyncio.gather(*left, return_exceptions=True)

    # -- the two loops --------------------------------------------------------------------

    def _measuring(self, scheduled: float) -> bool:
        return scheduled >= self.started

    def _done(self, due: float) -> bool:
        plan = self.plan
        if self.stopping.is_set():
            return True
        if plan.requests is not None and self.tally.sent >= plan.requests:
            return True
        return plan.duration_s is not None and due >= self.started + plan.duration_s

    async def _open_loop(self, rate: float) -> None:
        interval = 1.0 / rate
        shots = self.plan.shots
        # What is due but not sent yet (no connection free) is held in memory: at most one
        # second of the schedule (and ``MAX_QUEUED``). Past it the loop waits for room —
        # the requests go out late, their latency still counted from their scheduled
        # start — and yields to the event loop between batches, so Ctrl-C always stops it.
        room = max(1, min(math.ceil(rate * QUEUED_S), MAX_QUEUED))
        first = self._clock()
        index = 0
        while True:
            due = first + index * interval
            if self._done(due) or self._past_duration():
                return
            delay = due - self._clock()
            if delay > _EARLY_S:
                # Short sleeps keep Ctrl-C prompt at low rates; waking a little early and
                # spinning the rest puts the request on its time, not on the timer's.
                await asyncio.sleep(min(delay - _EARLY_S, 0.1))
                continue
            while self._clock() < due:
                pass
            # Everything due by now goes out at once (a late wake-up never drops a request),
            # in batches, as long as there is room.
            now = self._clock()
            launched = 0
            while due <= now and not self._done(due) and launched < _BATCH:
                if self._queued >= room:
                    await self._wait_for_room()
                    break
                self._launch(shots[index % len(shots)], due)
                index += 1
                launched += 1
                due = first + index * interval
            await asyncio.sleep(0)

    def _past_duration(self) -> bool:
        """Whether the run's duration is over by the clock (an open loop that cannot keep
        up ends on time, with what it could send)."""
        plan = self.plan
        return plan.duration_s is not None and self._clock() >= self.started + plan.duration_s

    async def _wait_for_room(self) -> None:
        """Until a queued request goes out or ends (or a short while: Ctrl-C, the end)."""
        self._room = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._room], timeout=_SWEEP_S)
        self._room = None

    def _dequeued(self) -> None:
        self._queued -= 1
        if self._room is not None and not self._room.done():
            self._room.set_result(None)

    def _wake_one(self) -> None:
        """A connection came free (or a slot for one): the first request waiting takes it."""
        while self._free_waiters:
            waiter = self._free_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _launch(self, shot: Shot, scheduled: float) -> None:
        recorded = self._measuring(scheduled)
        if recorded:
            self.tally.note_sent(scheduled)
        while self._idle:
            connection = self._idle.pop()
            if connection.open and connection.exchange is None:
                self._track(connection.send(shot, scheduled, recorded), connection)
                return
        self._queued += 1
        future = asyncio.ensure_future(self._connect_and_send(shot, scheduled, recorded))
        self._in_flight.add(future)
        future.add_done_callback(self._in_flight.discard)

    def _track(self, waiter: asyncio.Future[bool], connection: _Connection) -> None:
        self._in_flight.add(waiter)

        def done(future: asyncio.Future[bool]) -> None:
            self._in_flight.discard(future)
            if future.result() and connection.open:
                self._idle.append(connection)
            else:
                self._connections.discard(connection)
            self._wake_one()

        waiter.add_done_callback(done)

    async def _connect_and_send(self, shot: Shot, scheduled: float, recorded: bool) -> None:
        queued = True  # until it is sent (``_queued`` counts it)
        try:
            connection = await self._connection_for(recorded)
            if connection is None:
                return
            queued = False
            self._dequeued()
            keep = await connection.send(shot, scheduled, recorded)
        finally:
            if queued:
                self._dequeued()
        if keep and connection.open:
            self._idle.append(connection)
        else:
            self._connections.discard(connection)
        self._wake_one()

    async def _connection_for(self, recorded: bool) -> _Connection | None:
        """A free connection, or a new one (None: it could not be made)."""
        connection: _Connection | None = None
        # At the connection limit, wait for one to come free (the wait is in the latency).
        while len(self._connections) + self._connecting >= self._max_connections and not connection:
            if self.stopping.is_set():
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._free_waiters.append(waiter)  # woken in turn, one per connection freed
            await waiter
            while self._idle and connection is None:
                candidate = self._idle.pop()
                if candidate.open and candidate.exchange is None:
                    connection = candidate
        if connection is None:
            connection = await self._connect(recorded)
        return connection

    async def _connect(self, recorded: bool) -> _Connection | None:
        address = self.plan.address
        loop = asyncio.get_running_loop()
        self._connecting += 1
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(self.tally, self._clock),
                    address.host,
                    address.port,
                    ssl=self._ssl,
                    server_hostname=address.host if self._ssl else None,
                ),
                timeout=min(self.plan.timeout_s, 10.0),
            )
        except (OSError, TimeoutError, ssl.SSLError) as error:
            self.tally.record_failure(_connect_reason(error, address), recorded)
            return None
        finally:
            self._connecting -= 1
            self._wake_one()
        self._connections.add(protocol)
        return protocol

    async def _closed_loop(self, concurrency: int) -> None:
        workers = [asyncio.ensure_future(self._worker(n)) for n in range(concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()

    async def _worker(self, number: int) -> None:
        shots = self.plan.shots
        index = number
        connection: _Connection | None = None
        while True:
            scheduled = self._clock()
            if self._done(scheduled):
                return
            shot = shots[index % len(shots)]
            index += self.plan.concurrency
            recorded = self._measuring(scheduled)
            if recorded:
                self.tally.note_sent(scheduled)
            if connection is None or not connection.open:
                connection = await self._connect(recorded)
                if connection is None:
                    await asyncio.sleep(0.01)  # refused: do not spin
                    continue
            waiter = connection.send(shot, scheduled, recorded)
            self._in_flight.add(waiter)
            try:
                keep = await waiter
            finally:
                self._in_flight.discard(waiter)
            if not keep:
                self._connections.discard(connection)
                connection = None

    async def _drain(self, timeout_s: float) -> None:
        """Wait for what is in flight (each request is bounded by the sweeper's timeout)."""
        deadline = self._clock() + timeout_s + _SWEEP_S * 2
        while self._in_flight and self._clock() < deadline:
            await asyncio.wait(list(self._in_flight), timeout=max(0.0, deadline - self._clock()))
        for connection in list(self._connections):
            if connection.exchange is not None:
                connection.expire(float("inf"), 0.0)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            now = self._clock()
            for connection in list(self._connections):
                connection.expire(now, self.plan.timeout_s)


def _connect_reason(error: BaseException, address: Address) -> str:
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused by {address.host}:{address.port}"
    if isinstance(error, TimeoutError):
        return f"no connection to {address.host}:{address.port} in time"
    if isinstance(error, ssl.SSLError):
        return f"TLS failed ({error.reason or error})"
    reason = getattr(error, "strerror", None) or error
    return f"cannot connect to {address.host}:{address.port} ({reason})"


def run_load(plan: LoadPlan, tally: Tally, *, on_tick: Callable[[], None] | None = None) -> bool:
    """Run ``plan`` to its end on a fresh event loop; True when Ctrl-C stopped it early.

    Ctrl-C stops sending, lets what is in flight finish for up to a second, and returns what
    was measured; a second Ctrl-C interrupts at once (KeyboardInterrupt).
    """
    selector = selectors.SelectSelector() if plan.rate is not None else None
    loop = asyncio.SelectorEventLoop(selector) if selector else asyncio.new_event_loop()
    generator = LoadGenerator(plan, tally)
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        if interrupted:
            raise KeyboardInterrupt
        interrupted = True
        generator.stop()

    async def main() -> None:
        ticker = None
        if on_tick is not None:
            ticker = asyncio.ensure_future(_tick(on_tick))
        try:
            await generator.run()
        finally:
            if ticker is not None:
                ticker.cancel()

    handled = signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None)
    try:
        if handled:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        loop.run_until_complete(main())
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
        loop.close()
    return interrupted


async def _tick(callback: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(0.5)
        callback()


__all__ = ["Address", "LoadGenerator", "LoadPlan", "Shot", "address_of", "encode", "run_load"]
