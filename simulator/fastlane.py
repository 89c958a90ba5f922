"""The gateway's fast lane: a call answered without an ASGI cycle.

Most requests to ``peach dev`` are calls: a GET or a small POST whose method does not
stream, with a replica ready. For those the general path (uvicorn's request cycle and task,
``LocalService``, ``DevGateway``, an awaited call, a future per call) costs the gateway more
than the call itself. The fast lane takes such a request from the HTTP protocol as its head
arrives (``BoundedHttpToolsProtocol``) and, once its body is in, drives the contract's flow
steps with the call answered through a callback instead of awaited — no task, no future,
one write:

    Flow.prepare → the contract's ``Attempt`` bound (its ``Deadline``), the call sent to
    a replica (``ReplicaPool.send``) → ``Attempt.ended`` on its result (or
    ``Attempt.timed_out``) → Flow.settle (or Flow.finish, in a task: the fallback, the
    error answers)

A request is one object, ``FastCall``: the protocol's cycle while it is answered and the
call in flight on its replica, whose result reaches it in one callback (``answered``). It
holds no reference cycle, so it is freed as soon as it is answered (the garbage
collector's passes would cost every request).

It decides nothing the flow decides (the parameters, the A/B arm and its count, stream or
call, the answers and every header are the flow's) and keeps no timer of its own; it logs
and counts the request as the gateway does (``DevGateway.log``). What it keeps is what is
HTTP's, judged at the head: a request goes to the general path when its method is not GET
or POST, it is not HTTP/1.1, its path has an escape, a byte outside ASCII or a fragment, no
endpoint serves it, its Host, Origin or Fetch Metadata is refused (``LocalService``,
whose reading of those headers it uses), its body is over
``FAST_BODY_BYTES`` or of unknown length, it has an ``Expect`` or ``Upgrade`` header (the
protocol also keeps a request pipelined behind another; under ``--record`` there is no
lane). Once the body is in, a request that streams or may (``Flow.prepare``'s
``calls_only``) goes to the general path too, counted there only. A call with no replica
ready is served by ``Flow.serve_call`` in a task (the pool waits for one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from peach_cli.runtime.contract import Attempt, CallResult, HttpReply, Prepared, RequestParams
from simulator.gateway import lookup
from simulator.http_protocol import LaneConnection
from simulator.local_service import request_sources
from simulator.replica import CallInFlight, Replica

if TYPE_CHECKING:
    from simulator.gateway import DevGateway
    from simulator.local_service import LocalService
    from simulator.routing import Route

logger = logging.getLogger("uvicorn.error")
FAST_BODY_BYTES = 64 * 1024
"""A larger body (or one of unknown length) takes the general path, which bounds it."""

_METHODS = (b"GET", b"POST")


class FastLane:
    """The fast lane of one gateway (``gateway``) behind its ``LocalService`` checks."""

    def __init__(self, gateway: DevGateway, service: LocalService) -> None:
        self.gateway = gateway
        self.flow = gateway.flow
        """The gateway's ``Flow``: the steps each request goes through."""
        self.service = service
        self.calls = 0
        """Requests the fast lane has sent on to a replica (the others took the general path)."""
        self.replies_pending: set[asyncio.Task[None]] = set()
        """Answers that went on to ``Flow.finish`` or wait for a replica, until sent."""

    def claim(
        self,
        method: bytes,
        http_version: str,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        client: str | None,
    ) -> FastCall | None:
        """The request whose head has just been read, if the fast lane takes it."""
        if method not in _METHODS or http_version != "1.1":
            return None
        if b"#" in url:  # uvicorn drops a fragment from the query: it takes those
            return None
        mark = url.find(b"?")
        raw_path, query = (url, b"") if mark < 0 else (url[:mark], url[mark + 1 :])
        if b"%" in raw_path or not raw_path.startswith(b"/") or not raw_path.isascii():
            return None
        path = raw_path.decode("ascii")
        table = self.gateway.table
        route = lookup(table.routes, path)
        if route is None:
            return None
        for name, value in headers:
            if name == b"content-length":
                if not value.isdigit() or int(value) > FAST_BODY_BYTES:
                    return None
            elif name in (b"transfer-encoding", b"expect", b"upgrade"):
                return None
        host, origin, site = request_sources(headers)  # as LocalService reads them
        if self.service.refusal_of(host, origin, path, client, site):
            return None
        return FastCall(self, route, method.decode("ascii"), path, query, table.timeout_s)


class FastCall(LaneConnection, CallInFlight):
    """One request in the fast lane, from its body to its answer: the connection's cycle
    while it is answered (``LaneConnection``) and, once sent, the call in flight on its
    replica (``CallInFlight``, whose result comes to ``answered``) — one object a request."""

    __slots__ = (
        "lane",
        "route",
        "method",
        "path",
        "query",
        "timeout_s",
        "started",
        "replica",
        "_prepared",
        "_request_id",
        "_attempt",
    )

    def __init__(
        self, lane: FastLane, route: Route, method: str, path: str, query: bytes, timeout_s: float
    ) -> None:
        self.lane = lane
        self.route = route
        self.method = method
        self.path = path
        self.query = query
        self.timeout_s = timeout_s
        self.started = time.perf_counter()
        self._prepared: Prepared | None = None
        self._request_id = 0
        self._attempt: Attempt | None = None

    def start(self) -> bool:
        """The whole body is in: serve the request; False when the general path must take
        it (it streams, or may)."""
        route = self.route
        prepared = self.lane.flow.prepare(
            route.endpoint, self.method, self.query, self.body, calls_only=route.method_kind
        )
        if prepared is None:
            return False
        route.enter()
        if isinstance(prepared, HttpReply):  # the contract refuses it
            self._reply(prepared)
            return True
        self._prepared = prepared
        self.lane.calls += 1
        attempt = self._attempt = Attempt(prepared.arm)
        deadline = attempt.bound(self.loop, self.timeout_s, self._timed_out)
        line = self.lane.gateway.request_line(self.method, self.path, self.query)
        if route.pools[prepared.arm].send(prepared.params, self, attempt, line) is None:
            deadline.cancel()  # no replica ready: the pool waits for one (the awaited
            self._reply_later(self._serve_waiting(prepared))  # attempt has its own deadline)
        return True

    def sent(self, replica: Replica, request_id: int) -> None:
        self.replica = replica
        self._request_id = request_id

    # -- the answer ------------------------------------------------------------------------

    def _timed_out(self) -> None:
        attempt, prepared = self._attempt, self._prepared
        assert attempt is not None and prepared is not None
        self.replica.cancel_call(self._request_id)
        self.answered(attempt.timed_out(prepared.endpoint, self.timeout_s))

    def answered(self, result: CallResult) -> None:
        """The arm's result: a success is written now, anything else goes on to
        ``Flow.finish``. Called from the replica's channel: whatever goes wrong here must
        not reach it (it would close the channel)."""
        try:
            attempt, prepared = self._attempt, self._prepared
            assert attempt is not None and prepared is not None
            attempt.ended(result)
            flow = self.lane.flow
            reply = flow.settle(prepared, result)
            if reply is not None:
                self._reply(reply)
                return
            self._reply_later(flow.finish(prepared, result, self, self.timeout_s))
        except Exception:  # noqa: BLE001 - as uvicorn does for an app that raises
            logger.exception("Exception in the fast lane")
            self._failed()

    async def _serve_waiting(self, prepared: Prepared) -> HttpReply:
        return await self.lane.flow.serve_call(prepared, self, self.timeout_s)

    async def call(self, component: str, params: RequestParams, attempt: Attempt) -> CallResult:
        """A call awaited (``contract.Caller``): the arm's when no replica was ready, the
        fallback's; a breakpoint's banner names this request too."""
        line = self.lane.gateway.request_line(self.method, self.path, self.query)
        return await self.route.pools[component].call(params, attempt, line)

    def _reply_later(self, replying: Coroutine[Any, Any, HttpReply]) -> None:
        task = asyncio.ensure_future(self._reply_awaited(replying))
        pending = self.lane.replies_pending
        pending.add(task)
        task.add_done_callback(pending.discard)

    async def _reply_awaited(self, replying: Coroutine[Any, Any, HttpReply]) -> None:
        try:
            self._reply(await replying)
        except Exception:  # noqa: BLE001 - as uvicorn does for an app that raises
            logger.exception("Exception in the fast lane")
            self._failed()

    def _failed(self) -> None:
        """The reply could not be made: close the connection, as uvicorn does when an
        application raises, and let the route drain."""
        if self.close_unanswered():
            self.route.leave()

    def _reply(self, reply: HttpReply) -> None:
        """Write the reply (as uvicorn's cycle writes one), then log and count it."""
        try:
            self.reply(reply.status, reply.headers, reply.body)
        finally:
            self.route.leave()
        self.lane.gateway.log(self.method, self.path, self.route.endpoint, reply, self.started)
