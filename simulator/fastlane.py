"""The gateway's fast lane: a plain call answered without an ASGI cycle.

Most requests to ``peach dev`` are the simplest kind: a GET or a small POST to an endpoint
without an A/B test whose method does not stream, with a replica ready. For those the
general path (uvicorn's request cycle and task, ``LocalService``, ``DevGateway``,
``contract.Flow``, an ``asyncio.timeout``, a future per call) costs the gateway more than
the call itself. The fast lane takes such a request from the HTTP protocol as its head
arrives (``BoundedHttpToolsProtocol``), sends the ``Call`` to the replica when its body is
complete, and writes the answer to the connection from the replica's message — no task,
no future, one write.

It is the same contract, not a second one: what it answers it builds with the contract's
own functions (``parse_request``, ``answer``, ``answer_reply``, ``timed_out``), it logs and
counts the request as the gateway does (``DevGateway.log``), and it gives a request back to
the general path whenever anything is not plain:

- before the head is taken: a method other than GET and POST, a path with an escape or a
  byte outside ASCII, a fragment, no such endpoint, an A/B test, a streaming method or one
  not known yet, a refused Host or Origin (``LocalService``), a body over
  ``FAST_BODY_BYTES`` or of unknown length, an ``Expect`` header, HTTP/1.0, a request
  pipelined behind another (under ``--record`` there is no fast lane);
- when the body is in: a request the contract refuses (its error answer is the general
  path's), ``stream`` asked for, no replica ready (the general path waits for one).

A result that is not a plain success (an error, an empty result, a timeout) goes on to
``contract.answer`` with that result as the primary's, so the fallback and every error
answer are the general path's. ``timeout_s`` is a loop timer, which the debugger relay
suspends while the call sits at a breakpoint, as it does the general path's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from peach_cli.runtime.contract import (
    STREAMING_KINDS,
    Attempt,
    CallResult,
    ContractError,
    RequestParams,
    parse_query_string,
    parse_request,
)
from peach_cli.runtime.contract.answers import answer, succeeded, timed_out
from peach_cli.runtime.contract.flow import HttpReply, answer_reply
from simulator import debug
from simulator.gateway import lookup

if TYPE_CHECKING:
    from simulator.gateway import DevGateway
    from simulator.http_protocol import BoundedHttpToolsProtocol
    from simulator.local_service import LocalService
    from simulator.replica import Replica
    from simulator.routing import Route

logger = logging.getLogger("uvicorn.error")
FAST_BODY_BYTES = 64 * 1024
"""A larger body (or one of unknown length) takes the general path, which bounds it."""

_METHODS = (b"GET", b"POST")


class _NoEvent:
    """What uvicorn sets on a cycle when its connection is lost: nothing waits on it here."""

    __slots__ = ()

    def set(self) -> None:
        pass


_NO_EVENT = _NoEvent()


class FastLane:
    """The fast lane of one gateway (``gateway``) behind its ``LocalService`` checks."""

    def __init__(self, gateway: DevGateway, service: LocalService) -> None:
        self.gateway = gateway
        self.service = service
        self.calls = 0
        """Requests the fast lane has sent on to a replica (the others took the general path)."""
        self.answering: set[asyncio.Task[None]] = set()
        """Answers that went on to ``contract.answer`` (a fallback, an error), until sent."""

    def claim(self, protocol: BoundedHttpToolsProtocol) -> FastCall | None:
        """The request whose head the protocol has just read, if the fast lane takes it."""
        gateway = self.gateway
        parser = protocol.parser
        method = parser.get_method()
        if method not in _METHODS or parser.get_http_version() != "1.1":
            return None
        url: bytes = protocol.url
        if b"#" in url:  # uvicorn drops a fragment from the query: it takes those
            return None
        mark = url.find(b"?")
        raw_path, query = (url, b"") if mark < 0 else (url[:mark], url[mark + 1 :])
        if b"%" in raw_path or not raw_path.startswith(b"/") or not raw_path.isascii():
            return None
        path = raw_path.decode("ascii")
        table = gateway.table
        route = lookup(table.routes, path)
        if route is None:
            return None
        endpoint = route.endpoint
        if endpoint.ab is not None:
            return None
        kind = route.pools[endpoint.primary].method_kind
        if kind is None or kind in STREAMING_KINDS:
            return None
        host = origin = None
        for name, value in protocol.headers:
            if name == b"host":
                if host is None:
                    host = value.decode("latin-1")
            elif name == b"content-length":
                if not value.isdigit() or int(value) > FAST_BODY_BYTES:
                    return None
            elif name == b"origin":
                if origin is None:
                    origin = value.decode("latin-1")
            elif name in (b"transfer-encoding", b"expect", b"upgrade"):
                return None
        client = protocol.client
        if self.service.refusal_of(host, origin, path, client[0] if client else None):
            return None
        return FastCall(
            self,
            protocol,
            route,
            method.decode("ascii"),
            path,
            query,
            table.timeout_s,
            keep_alive=parser.should_keep_alive(),
        )


class FastCall:
    """One request in the fast lane: the protocol's ``cycle`` while it is answered (it has
    the attributes uvicorn reads of one: ``response_complete``, ``disconnected``,
    ``keep_alive``, ``message_event``)."""

    __slots__ = (
        "lane",
        "protocol",
        "route",
        "method",
        "path",
        "query",
        "timeout_s",
        "body",
        "started",
        "response_complete",
        "disconnected",
        "keep_alive",
        "message_event",
        "_params",
        "_replica",
        "_request_id",
        "_timer",
        "_when",
    )

    def __init__(
        self,
        lane: FastLane,
        protocol: BoundedHttpToolsProtocol,
        route: Route,
        method: str,
        path: str,
        query: bytes,
        timeout_s: float,
        *,
        keep_alive: bool,
    ) -> None:
        self.lane = lane
        self.protocol = protocol
        self.route = route
        self.method = method
        self.path = path
        self.query = query
        self.timeout_s = timeout_s
        self.body = b""
        self.started = time.perf_counter()
        self.response_complete = False
        self.disconnected = False
        self.keep_alive = keep_alive
        """False after ``Connection: close`` (and when uvicorn shuts down meanwhile)."""
        self.message_event = _NO_EVENT
        self._params: RequestParams | None = None
        self._replica: Replica | None = None
        self._request_id = 0
        self._timer: asyncio.TimerHandle | None = None
        self._when: float | None = None

    def start(self) -> bool:
        """Send the call (the whole body is in); False when the general path must take the
        request instead (the contract refuses it, it asks for a stream, no replica is ready)."""
        try:
            params, wants_stream = parse_request(
                self.method,
                parse_query_string(self.query),
                self.body,
                max_body_bytes=self.lane.gateway.max_body_bytes,
            )
        except ContractError:
            return False
        if wants_stream:
            return False
        route = self.route
        replica = route.pools[route.endpoint.primary].pick()
        if replica is None:
            return False
        request_id = replica.send_call(params, self._answered)
        if request_id is None:
            return False
        route.enter()
        self.lane.calls += 1
        self._params = params
        self._replica = replica
        self._request_id = request_id
        loop = self.protocol.loop
        self._when = loop.time() + self.timeout_s
        self._timer = loop.call_at(self._when, self._timed_out)
        relay = debug.active
        if relay is not None:  # a breakpoint in this call suspends its timeout
            line = debug.request_line(self.method, self.path, self.query)
            relay.register(replica.id, request_id, self, line)
        return True

    # -- the deadline, as the debugger relay sees it (``debug.Deadline``) ------------------

    def when(self) -> float | None:
        return self._when

    def reschedule(self, when: float | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._when = when
        if when is not None and not self.response_complete:
            self._timer = self.protocol.loop.call_at(when, self._timed_out)

    # -- the answer ------------------------------------------------------------------------

    def _timed_out(self) -> None:
        self._timer = None
        replica = self._replica
        assert replica is not None
        replica.cancel_call(self._request_id)
        attempt = Attempt(self.route.endpoint.primary, replica.id)
        self._answered(timed_out(self.route.endpoint, attempt, self.timeout_s))

    def _answered(self, result: CallResult) -> None:
        """The primary's result: a plain success is written now, anything else goes on to
        ``contract.answer`` (the fallback, the error answers). Called from the replica's
        channel: whatever goes wrong here must not reach it (it would close the channel)."""
        try:
            self._answer_now(result)
        except Exception:  # noqa: BLE001 - as uvicorn does for an app that raises
            logger.exception("Exception in the fast lane")
            self._failed()

    def _failed(self) -> None:
        """The reply could not be made: close the connection, as uvicorn does when an
        application raises, and let the route drain."""
        if not self.response_complete:
            self.response_complete = True
            self.route.leave()
        self.protocol.transport.close()

    def _answer_now(self, result: CallResult) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        replica = self._replica
        assert replica is not None
        relay = debug.active
        if relay is not None:
            relay.unregister(replica.id, self._request_id)
        if result.replica is None:
            result.replica = replica.id
        answered = succeeded(result, self.route.endpoint.primary)
        if answered is not None:
            self._reply(answer_reply(answered))
            return
        task = asyncio.ensure_future(self._answer(result))
        answering = self.lane.answering
        answering.add(task)
        task.add_done_callback(answering.discard)

    async def _answer(self, primary: CallResult) -> None:
        route = self.route
        params = self._params
        assert params is not None

        async def call(component: str, attempt: Attempt) -> CallResult:
            return await route.pools[component].call(params, attempt)

        try:
            answered = await answer(route.endpoint, call, self.timeout_s, primary=primary)
            self._reply(answer_reply(answered))
        except Exception:  # noqa: BLE001 - as uvicorn does for an app that raises
            logger.exception("Exception in the fast lane")
            self._failed()

    def _reply(self, reply: HttpReply) -> None:
        """Write the reply, then log and count it. The head is written as uvicorn's cycle
        writes one (its status line, its default headers, ``connection: close`` when the
        connection ends), with the body in the same write: there is no cycle to send it."""
        protocol = self.protocol
        transport = protocol.transport
        self.response_complete = True
        try:
            if not transport.is_closing():
                content = [STATUS_LINE[reply.status]]
                for name, value in protocol.server_state.default_headers:
                    content += (name, b": ", value, b"\r\n")
                for name, value in reply.headers:
                    content += (name, b": ", value, b"\r\n")
                if not self.keep_alive:
                    content.append(b"connection: close\r\n")
                content += (b"\r\n", reply.body)
                transport.write(b"".join(content))
                if not self.keep_alive:
                    transport.close()
            protocol.on_response_complete()
        finally:
            self.route.leave()
        self.lane.gateway.log(self.method, self.path, self.route.endpoint, reply, self.started)
