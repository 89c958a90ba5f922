"""uvicorn's httptools protocol with bounds on the size of a request's head and its time.

httptools buffers a header value in full before handing it over, and uvicorn sets no limit
on it (h11 has one, at some cost in speed), so a client could make the gateway hold
megabytes of header. This protocol counts the bytes received while a request's head is
being read and answers ``431 Request Header Fields Too Large`` (and closes) past
``MAX_HEAD_BYTES``. Its refusals (431 and the 408s below) are the contract's error answers
(``headers_too_large``, ``request_timeout``), counted in ``/_peach/metrics`` and logged as
any request is (``on_refusal``: ``DevGateway.log_refused``, a request line in the dev view).

uvicorn arms its keep-alive timeout only once a response is complete, and cancels it at the
first byte received, so a connection that sends half a head, or half a body, and then nothing
stays open for ever (SPEC §6: slow clients are cut). This protocol closes a connection whose
head is not complete ``HEAD_TIMEOUT_S`` after its first byte came (a client that sends a
byte now and then does not extend it), answering ``408 Request Timeout``, and one that sends
nothing at all that long after it opened. A body may take longer (an upload), but not pause:
a connection that received no byte of a body for ``HEAD_TIMEOUT_S`` while it was being read
is closed too, with a ``408`` when nothing was answered yet. While the server does not read
(the body waits for the application), the client is not the one pausing: that time does not
count.

An absolute-form request target (``GET http://host/path``, RFC 9112 §3.2.2) names the host
the request is for, and the server must use it instead of ``Host``: the protocol makes it
the request's ``Host`` header, so that the Host check (``LocalService``) judges it, on both
paths (the fast lane takes only targets that are a path).

A request a lane takes (``simulator.fastlane``) has no ASGI cycle: the lane gives the
protocol a ``LaneConnection`` of its own kind instead, which stands in for uvicorn's cycle
(what the protocol reads of one) and writes the lane's answer as uvicorn's cycle writes one. Everything of uvicorn's
internals this server relies on is in this module (``tests/test_uvicorn_shape.py`` checks
their shape against the installed uvicorn).

A response leaves in one send: uvicorn writes its head and its body separately, which wakes
the client twice (it reads the head, then waits for the body); each request's writes go
through ``HeadWithBody``, which holds the head until the body follows in the same turn of
the loop (or sends it alone at the end of that turn: a stream's first chunk may take longer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import unquote

import httptools
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from peach_cli.runtime.contract import HttpReply, answer_reply, error_answer

MAX_HEAD_BYTES = 64 * 1024
"""Request line plus headers; browsers and proxies stay well under 16 KiB."""
HEAD_TIMEOUT_S = 30.0
"""How long a request's head may take to arrive in full, and how long its body may pause
(SPEC §6)."""


class Lane(Protocol):
    """Takes requests whose answer needs no ASGI cycle (``simulator.fastlane``)."""

    def claim(
        self,
        method: bytes,
        http_version: str,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        client: str | None,
    ) -> LaneConnection | None:
        """The request whose head has just been read (``client``: its address), if the lane
        takes it: a ``LaneConnection`` of its own kind, which the protocol then opens."""
        ...


class _NoEvent:
    """What uvicorn sets on a cycle when its connection is lost: nothing waits on it here."""

    __slots__ = ()

    def set(self) -> None:
        pass


_NO_EVENT = _NoEvent()


class _DefaultHead:
    """uvicorn's default headers (``date``, ``server``) written out once each time uvicorn
    replaces them (once a second), not once a request."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[list[tuple[bytes, bytes]] | None, bytes] = (None, b"")
        """The list last written out (held: its id is not reused) and what it gave; one
        attribute, so that servers in other threads never see one without the other."""

    def of(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        last = self._last
        if last[0] is not headers:
            last = (headers, b"".join(name + b": " + value + b"\r\n" for name, value in headers))
            self._last = last
        return last[1]


_DEFAULT_HEAD = _DefaultHead()


class LaneConnection:
    """A request a lane took, as the connection sees it: the protocol's ``cycle`` while it
    is answered. It has what uvicorn reads of one (``response_complete``, ``disconnected``,
    ``keep_alive``, ``message_event``), ``reply`` writes the answer, and the lane's own
    subclass (``FastCall``) answers it in ``start``: one object a request."""

    __slots__ = (
        "body",
        "loop",
        "response_complete",
        "disconnected",
        "keep_alive",
        "message_event",
        "_protocol",
    )

    def open(self, protocol: BoundedHttpToolsProtocol, keep_alive: bool) -> None:
        """The protocol takes it as its cycle; the body is read next."""
        self.body = b""
        """The request's body, as it arrives."""
        self.loop = protocol.loop
        self.response_complete = False
        self.disconnected = False
        self.keep_alive = keep_alive
        """False after ``Connection: close`` (and when uvicorn shuts down meanwhile)."""
        self.message_event = _NO_EVENT
        self._protocol = protocol

    def start(self) -> bool:
        """The whole body is in (``body``): answer the request (``reply``); False when the
        general path must take it after all."""
        raise NotImplementedError

    def reply(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """Write the answer as uvicorn's cycle writes one (its status line, its default
        headers, ``connection: close`` when the connection ends), with the body in the same
        write, and let the connection go on to its next request."""
        protocol = self._protocol
        transport = protocol.transport
        self.response_complete = True
        if not transport.is_closing():
            content = [STATUS_LINE[status], _DEFAULT_HEAD.of(protocol.server_state.default_headers)]
            for name, value in headers:
                content += (name, b": ", value, b"\r\n")
            if not self.keep_alive:
                content.append(b"connection: close\r\n")
            content += (b"\r\n", body)
            transport.write(b"".join(content))
            if not self.keep_alive:
                transport.close()
        protocol.on_response_complete()

    def close_unanswered(self) -> bool:
        """Close the connection, as uvicorn does when an application raises; True when
        nothing had been answered yet."""
        unanswered = not self.response_complete
        self.response_complete = True
        self._protocol.transport.close()
        return unanswered


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that refuses a request head over ``MAX_HEAD_BYTES``.

    Two checks: while a head is still arriving, the bytes received so far (so a header that
    never ends is cut early); once it is complete, its exact size (url and headers).
    """

    fast_lane: Lane | None = None
    """Takes plain calls without an ASGI cycle (``simulator.fastlane``); set per server."""
    on_refusal: Callable[[str, str, HttpReply, float], None] | None = None
    """Logs and counts a request refused here: ``(method, path, reply, started)``, the
    method ``""`` and the path what arrived of it when the head was not all in
    (``DevGateway.log_refused``); set per server."""
    _method = b""
    """The method of the request being read, once its head is in."""
    _began = 0.0
    """``time.perf_counter()`` when the request being read began (its first byte)."""
    _fast: LaneConnection | None = None
    """The request whose body the fast lane is reading."""
    _reading_head = True
    _head_bytes = 0
    _refused = False
    _head_timer: asyncio.TimerHandle | None = None
    _in_head = False
    _body_timer: asyncio.TimerHandle | None = None
    _in_body = False
    _body_seen = 0.0
    """The loop's time when the body being read last received bytes."""
    head_timeout_s = HEAD_TIMEOUT_S

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.flow = ReadResumes(transport, self._reading_resumed)
        self._began = time.perf_counter()
        self._arm_head_timer()

    def _reading_resumed(self) -> None:
        """The server reads again: a body's pause counts from now (the wait was its own)."""
        if self._in_body:
            self._body_seen = self.loop.time()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._in_body = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().connection_lost(exc)
        # The connection refers to its flow control and its request cycle, which refer back
        # to it (the flow's ``resumed``, the cycle's ``flow``): left so, every connection a
        # client closed waited for a full garbage collection, and the gateway's memory grew
        # in steps by all that waited meanwhile. A cycle still answering keeps what it uses.
        if isinstance(self.flow, ReadResumes):
            self.flow.forget()
        self.cycle = None  # type: ignore[assignment]
        self.pipeline.clear()

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        idle = self.cycle is None or self.cycle.response_complete
        begun = self._in_head and idle  # part of a request came: say why it ends
        self._cut("Closed a connection whose request head did not arrive in time.", begun)

    def _cut(self, why: str, answer: bool) -> None:
        """Close the connection of a client too slow, with a ``408`` if ``answer`` (logged
        as its request); ``why`` is logged (at info) when nothing is answered."""
        self._refused = True
        if answer:
            wait = f"{self.head_timeout_s:g} s"
            self._refuse("request_timeout", f"the request did not arrive in {wait}")
        else:
            self.logger.info(why)
        self.transport.close()

    def _refuse(self, code: str, message: str) -> None:
        """Answer the contract's error ``code`` and close (the connection cannot go on),
        logged and counted as a refusal."""
        reply = answer_reply(error_answer(code, message))
        head = [STATUS_LINE[reply.status]]
        for name, value in reply.headers:
            head += (name, b": ", value, b"\r\n")
        head += (b"connection: close\r\n\r\n", reply.body)
        self.transport.write(b"".join(head))
        self.transport.close()
        if self.on_refusal is not None:
            url = getattr(self, "url", b"")  # (set as a request begins)
            path = unquote(url.partition(b"?")[0].decode("latin-1"), "latin-1")
            self.on_refusal(self._method.decode("ascii", "replace"), path, reply, self._began)

    def _body_paused(self) -> None:
        """The body timer: close the connection if the body received nothing for
        ``head_timeout_s`` (else look again when it would have)."""
        self._body_timer = None
        if not self._in_body or self.transport.is_closing():
            return
        now = self.loop.time()
        due = self._body_seen + self.head_timeout_s
        if self.flow.read_paused:  # the server is not reading: the client is not pausing
            due = now + self.head_timeout_s  # (and when it reads again, the pause restarts)
        if now < due:
            self._body_timer = self.loop.call_at(due, self._body_paused)
            return
        self._in_body = False
        cycle = self.cycle  # the general path's, or the fast lane's (which answers in one write)
        answered = cycle is not None and (
            cycle.response_complete or getattr(cycle, "response_started", False)
        )
        self._cut("Closed a connection whose request body stopped arriving.", not answered)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._method = b""
        self._began = time.perf_counter()
        self._in_head = True  # the first byte of a request line: its head's time starts
        self._cancel_head_timer()  # (armed at the end of this read if the head is not all in)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._reading_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._reading_head and self._head_bytes > MAX_HEAD_BYTES:
            self._refuse_head()
            return
        if self._refused:
            return
        if self._in_head and self._head_timer is None:
            # a head cut by the end of this read: its time runs from its first byte (a head
            # that came whole, the usual case, never needs the timer)
            self._arm_head_timer()
        if self._in_body:  # a body cut by the end of this read: its pause runs from now
            self._body_seen = self.loop.time()
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.head_timeout_s, self._body_paused)

    def on_headers_complete(self) -> None:
        self._method = self.parser.get_method()
        self._reading_head = False
        self._in_head = False
        self._cancel_head_timer()
        self._head_bytes = 0
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > MAX_HEAD_BYTES:
            self._refuse_head()
            return
        self._in_body = True  # until the message is complete (at once, without a body)
        if self.url[:1] != b"/":
            self._host_from_target()
        lane = self.fast_lane
        if lane is not None and not self.pipeline:
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                parser = self.parser
                client = self.client
                fast = lane.claim(
                    self._method,
                    parser.get_http_version(),
                    self.url,
                    self.headers,
                    client[0] if client else None,
                )
                if fast is not None:
                    fast.open(self, parser.should_keep_alive())
                    self._fast = fast
                    self.cycle = fast  # type: ignore[assignment]
                    return
        self._start_cycle()

    def _host_from_target(self) -> None:
        """An absolute-form target's authority replaces the ``Host`` header (RFC 9112
        §3.2.2). A target that is not a URL (``*``) is left to uvicorn."""
        try:
            target = httptools.parse_url(self.url)
        except httptools.HttpParserInvalidURLError:
            return
        host = target.host
        if host is None:
            return
        if b":" in host:  # an IPv6 address, which the URL had in brackets
            host = b"[" + host + b"]"
        if target.port is not None:
            host += b":%d" % target.port
        self.headers[:] = [(n, v) for n, v in self.headers if n != b"host"] + [(b"host", host)]

    def _start_cycle(self) -> None:
        """uvicorn's own: the request cycle and its ASGI task (the general path)."""
        previous = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle is not previous:  # its task has not run yet
            cycle.transport = HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]

    def on_body(self, body: bytes) -> None:
        fast = self._fast
        if fast is not None:
            fast.body += body
        elif not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        if self._refused:
            return
        fast = self._fast
        if fast is not None:
            self._fast = None
            self._reading_head = True
            if fast.start():
                return
            # the general path takes it, with the body already read
            self.cycle = None  # type: ignore[assignment]
            self._start_cycle()
            self.cycle.body += fast.body
        super().on_message_complete()
        self._reading_head = True  # the next request on this connection starts its head

    def _refuse_head(self) -> None:
        self._refused = True
        self._reading_head = False
        if self.transport.is_closing():
            return
        message = f"the request's headers are over {MAX_HEAD_BYTES // 1024} KiB"
        self._refuse("headers_too_large", message)


def _nothing() -> None:
    pass


class ReadResumes(FlowControl):
    """uvicorn's flow control, calling ``resumed`` when reading resumes after a pause."""

    def __init__(self, transport: asyncio.Transport, resumed: Callable[[], None]) -> None:
        super().__init__(transport)
        self._resumed = resumed

    def resume_reading(self) -> None:
        if self.read_paused:
            super().resume_reading()
            self._resumed()

    def forget(self) -> None:
        """The connection is gone: drop ``resumed`` (which holds it)."""
        self._resumed = _nothing


class HeadWithBody:
    """One response's view of the connection: its first write (the head) is held until the
    second (the body, or a stream's first chunk) and both go in one send; a head with
    nothing after it in the same turn of the loop goes alone at the end of that turn.
    Later writes go straight through. Everything else is the connection's own."""

    __slots__ = ("_transport", "_loop", "_held", "_flush_handle", "_writes")

    JOIN_BYTES = 64 * 1024
    """A body this large goes in its own send (joining it would copy it)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._flush_handle: asyncio.Handle | None = None
        self._writes = 0

    def write(self, data: bytes) -> None:
        self._writes += 1
        if self._writes == 1:
            self._held = bytes(data)
            self._flush_handle = self._loop.call_soon(self._flush)
            return
        held = self._held
        if held is None:
            self._transport.write(data)
            return
        self._cancel_flush()
        self._held = None
        if len(data) < self.JOIN_BYTES:
            self._transport.write(held + data)
        else:
            self._transport.write(held)
            self._transport.write(data)

    def _cancel_flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None

    def _flush(self) -> None:
        self._flush_handle = None
        held, self._held = self._held, None
        if held is not None:
            self._transport.write(held)

    def close(self) -> None:
        self._cancel_flush()
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._cancel_flush()
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def protocol_with(
    head_timeout_s: float | None,
    fast_lane: Lane | None = None,
    on_refusal: Callable[[str, str, HttpReply, float], None] | None = None,
) -> type[BoundedHttpToolsProtocol]:
    """The protocol class, with its head timeout changed when ``head_timeout_s`` is given
    (None: ``HEAD_TIMEOUT_S``), plain calls taken by ``fast_lane``, and its refusals (408,
    431) logged and counted by ``on_refusal``."""
    settings: dict[str, Any] = {"fast_lane": fast_lane}
    if on_refusal is not None:
        settings["on_refusal"] = staticmethod(on_refusal)
    if head_timeout_s is not None and head_timeout_s > 0:
        settings["head_timeout_s"] = float(head_timeout_s)
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), settings)
