"""The local gateway: one ASGI app that routes every endpoint's url to its replica pools.

A transport around ``contract.Flow`` (SPEC §2, written once for both hosts): it looks the
url up in the routing table, hands the request to the flow with the endpoint's pools as
its components (``_Pools``: a call, or a stream opened on the best replica), and sends the reply
back — an envelope, or a stream chunk by chunk with no buffering and no compression. A
client that goes away closes the user's generator in the replica. The routing table is
replaced as a whole by a reload; requests that began on the old table finish on it.

``GET /_peach/routes`` lists the endpoints (``peach ask`` uses it after a 404), with each
A/B test's split and requests per arm, ``GET /_peach/health`` the replicas, their states
and their component's ``memory`` and ``cpus`` (and the tasks' rows, when there are tasks), ``GET /_peach/metrics`` the Prometheus
figures (``simulator.metrics``), ``GET /_peach/openapi.json`` the OpenAPI document of what
the table serves (``peach_cli.openapi``), ``GET /_peach/docs`` the page to try the endpoints in
a browser (``simulator.docs_page``), and ``POST /_peach/reinit/<endpoint>[/<component>]``
(loopback clients with the session's token only) re-runs ``init``; ``/_peach/profile/…``
(the same)
samples replicas for `peach profile` (``simulator.profiling``). The arm of an A/B test is
chosen by ``contract.choose_arm``, as on Ray.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as StarletteRoute

from peach_cli.addresses import is_loopback
from peach_cli.boundary import Secrets
from peach_cli.devtoken import TOKEN_HEADER, DevToken
from peach_cli.internal import (
    HEALTH_PATH,
    INTERNAL_PREFIX,
    METRICS_PATH,
    OPENAPI_PATH,
    REINIT_PATH,
    ROUTES_PATH,
)
from peach_cli.runtime import contract
from peach_cli.runtime.contract import (
    STREAMING_KINDS,
    Attempt,
    CallResult,
    ClientGone,
    ContractError,
    Flow,
    HttpReply,
    HttpRequest,
    Opened,
    RequestParams,
    dispatch,
    read_body,
)
from peach_cli.runtime.contract.status import (
    component_health,
    health_body,
    replica_health,
    routes_body,
)
from peach_cli.runtime.plan import EndpointSpec, url_key
from simulator import debug
from simulator.docs_page import DocsPage
from simulator.events import Event, ReplicaState, RequestLogged
from simulator.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from simulator.metrics import DevMetrics, deployment_name
from simulator.pool import ReplicaPool, Unavailable
from simulator.profiling import InitProfiling, Profiler
from simulator.replica import ReplicaGone
from simulator.routing import Route, RoutingTable

if TYPE_CHECKING:
    from simulator.changes import PlanChange
    from simulator.record import RecordWriter


def lookup(routes: dict[str, Route], path: str) -> Route | None:
    """The route for a request path (the table is keyed by ``url_key``)."""
    return routes.get(path) or routes.get(url_key(path))


class DevGateway:
    """The ASGI application behind ``peach dev``."""

    def __init__(
        self,
        table: RoutingTable,
        on_event: Callable[[Event], None] | None = None,
        *,
        max_body_bytes: int = contract.MAX_BODY_BYTES,
        debugger: debug.DebugRelay | None = None,
        token: DevToken | None = None,
        task_rows: Callable[[], list[dict[str, Any]]] | None = None,
        init_profiling: InitProfiling | None = None,
        reinit: Callable[[Collection[str]], Awaitable[PlanChange]] | None = None,
        recorder: RecordWriter | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        self.table = table
        self.secrets = secrets if secrets is not None else Secrets()
        """The session's secrets: masked in the OpenAPI document it serves."""
        self.token = token or DevToken.new()
        """What state-changing ``/_peach/*`` actions need (``x-peach-token``, SPEC §6)."""
        self.task_rows = task_rows
        """The tasks' rows of the session's scheduler (``/_peach/health`` lists them, as a
        deployed gateway lists its scheduler's)."""
        self.debugger = debugger
        """The session's pdb relay: a breakpoint's banner names the request it serves."""
        self.on_event = on_event
        self.max_body_bytes = max_body_bytes
        self.flow = Flow(max_body_bytes=max_body_bytes)
        """SPEC §2 for every request to an endpoint; its A/B counts are kept across reloads."""
        self.metrics = DevMetrics(lambda: self.table.pools(), lambda: self.table.codops)
        """What ``GET /_peach/metrics`` shows (every answered request is counted)."""
        self.reinit = reinit
        """Re-runs ``init`` of components (``DevSession.reinit``), for ``/_peach/reinit``."""
        self.recorder = recorder
        """``peach dev --record``: every answered request, one JSON line each."""
        self.profiler = Profiler(self, init_profiling)
        """``/_peach/profile/…``: `peach profile` samples the replicas."""
        self._document: tuple[RoutingTable, bytes] | None = None
        """The OpenAPI document of a routing table (built on the first GET after a reload)."""
        self._internal = Starlette(
            routes=[
                StarletteRoute(ROUTES_PATH, self._list_routes, methods=["GET"]),
                StarletteRoute(HEALTH_PATH, self._health, methods=["GET"]),
                StarletteRoute(METRICS_PATH, self._metrics, methods=["GET"]),
                StarletteRoute(OPENAPI_PATH, self._openapi, methods=["GET"]),
                StarletteRoute(REINIT_PATH + "/{endpoint}", self._reinit, methods=["POST"]),
                StarletteRoute(
                    REINIT_PATH + "/{endpoint}/{component}", self._reinit, methods=["POST"]
                ),
                *self.profiler.routes(),
                *DocsPage().routes(),
            ]
        )

    # -- ASGI ----------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._internal(scope, receive, send)
            return
        path = scope["path"]
        table = self.table
        route = lookup(table.routes, path)
        if route is None:
            if path.startswith(INTERNAL_PREFIX + "/"):
                await self._internal(scope, receive, send)
                return
            await self._not_found(scope, receive, send, table)
            return
        route.enter()
        try:
            await self._serve(route, table, scope, receive, send)
        finally:
            route.leave()

    async def _serve(
        self, route: Route, table: RoutingTable, scope: dict[str, Any], receive: Any, send: Any
    ) -> None:
        started = time.perf_counter()
        line = self.request_line(scope["method"], scope["path"], scope["query_string"])
        recorder = self.recorder
        recording = recorder.begin(scope) if recorder is not None else None
        if recording is not None:
            receive = recording.receive(receive)
        request = HttpRequest(
            scope["method"], scope["query_string"], scope.get("headers", ()), receive
        )
        components = _Pools(route.pools, receive, line)
        reply = await self.flow.handle(route.endpoint, request, components, table.timeout_s)
        try:
            if recording is not None and reply.chunks is not None:
                reply.chunks = recording.wrap(reply.chunks)
            if reply.chunks is not None:
                try:
                    await _send_stream(send, receive, reply)  # StreamCut: uvicorn cuts it
                finally:
                    await reply.aclose()
            elif not reply.gone:
                await _send_reply(send, reply)
        finally:
            self.log(scope["method"], scope["path"], route.endpoint, reply, started)
            if recorder is not None and recording is not None and not reply.gone:
                recorder.finish(recording, scope, reply)

    def request_line(self, method: str, path: str, query: bytes) -> str | None:
        """How a breakpoint's banner names a request (``GET /greet?name=Ada``), handed to
        its replica with the call; None without a debugger relay (nothing names it)."""
        if self.debugger is None:
            return None
        return debug.request_line(method, path, query)

    def log(
        self,
        method: str,
        path: str,
        endpoint: EndpointSpec | None,
        reply: HttpReply,
        started: float,
    ) -> None:
        """Count an answered request (``/_peach/metrics``) and log it (the dev view)."""
        elapsed = time.perf_counter() - started
        self.metrics.observe(
            method,
            endpoint.url if endpoint else "",
            reply.status,
            elapsed,
            endpoint.name if endpoint else None,
            reply.component,
            reply.replica,
        )
        if self.on_event is not None:
            self.on_event(
                RequestLogged(
                    method,
                    path,
                    reply.status,
                    endpoint.name if endpoint else None,
                    reply.component,
                    reply.replica,
                    elapsed,
                    stream=reply.stream,
                    error=reply.error,
                    arm=reply.arm,
                    tried=reply.tried,
                    covered=reply.covered,
                )
            )

    def log_refused(self, method: str, path: str, reply: HttpReply, started: float) -> None:
        """Count a request the HTTP protocol refused before any route took it (a head or
        body that stopped arriving, a head over its limit: ``DevMetrics.refused``) and log
        it as any request is; ``method`` is ``""`` when its head never said it."""
        self.metrics.refused(method, reply.status)
        if self.on_event is not None:
            self.on_event(
                RequestLogged(
                    method or "-",
                    path or "-",
                    reply.status,
                    None,
                    None,
                    None,
                    time.perf_counter() - started,
                    error=reply.error,
                )
            )

    async def _not_found(
        self, scope: dict[str, Any], receive: Any, send: Any, table: RoutingTable
    ) -> None:
        started = time.perf_counter()
        urls = (route.endpoint.url for route in table.routes.values())
        reply = contract.answer_reply(contract.not_found_answer(scope["path"], urls))
        try:
            await read_body(receive, scope.get("headers", ()), self.max_body_bytes)
        except ContractError:
            pass  # not found either way
        await _send_reply(send, reply)
        self.log(scope["method"], scope["path"], None, reply, started)

    # -- internal routes -----------------------------------------------------------------

    async def _list_routes(self, request: Request) -> JSONResponse:
        table = self.table
        endpoints = []
        for route in table.routes.values():
            kind = route.pools[route.endpoint.primary].method_kind
            endpoints.append((route.endpoint, None if kind is None else kind in STREAMING_KINDS))
        return JSONResponse(routes_body(table.codops, endpoints, self.flow.arm_requests))

    async def _openapi(self, request: Request) -> Response:
        """The project's OpenAPI document (SPEC §11), read from the code the table serves:
        a reload that changes a signature shows in the next GET."""
        table = self.table
        if self._document is None or self._document[0] is not table:
            import json

            from peach_cli.boundary import shown_value
            from peach_cli.openapi import document_of

            endpoints = [route.endpoint for route in table.routes.values()]
            document = document_of(table.codops, endpoints)
            document = shown_value(self.secrets.mask_value(document))  # as `peach openapi`
            self._document = (table, json.dumps(document, ensure_ascii=False).encode())
        return Response(self._document[1], media_type="application/json")

    async def _metrics(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=METRICS_CONTENT_TYPE)

    async def _health(self, request: Request) -> JSONResponse:
        components = []
        starting = False
        healthy = True
        for pool in self.table.pools():
            replicas = []
            for replica in pool.replicas:
                if replica.state in (ReplicaState.STARTING, ReplicaState.RESTARTING):
                    starting = True
                if replica.state is not ReplicaState.HEALTHY:
                    healthy = False
                replicas.append(
                    replica_health(
                        replica.id,
                        replica.state.value,
                        replica.pid,
                        replica.error,
                        outstanding=replica.outstanding,
                        rss=replica.memory.rss,
                        pss=replica.memory.pss,
                    )
                )
            # the error none of its replicas got past: every one is unhealthy with it
            stuck = all(r.state is ReplicaState.UNHEALTHY for r in pool.replicas)
            error = next((r.error for r in pool.replicas if r.error), None) if stuck else None
            deployment = deployment_name(pool.spec.endpoint, pool.spec.name)
            components.append(component_health(pool.spec, deployment, replicas, error))
        body = health_body(
            self.table.codops, components, host="dev", starting=starting, healthy=healthy
        )
        tasks = self.task_rows() if self.task_rows is not None else []
        if tasks:
            body["tasks"] = tasks
        return JSONResponse(body)

    async def _reinit(self, request: Request) -> JSONResponse:
        """Re-run ``init`` of an endpoint's components that have one, or of one component:
        new replicas, started while the old ones serve. Loopback clients only."""
        refused = self.refuse_action(request, REINIT_PATH)
        if refused is not None:
            return refused
        name, component = request.path_params["endpoint"], request.path_params.get("component")
        routes = {route.endpoint.name: route for route in self.table.routes.values()}
        route = routes.get(name)
        if route is None:
            return _internal_error(404, "not_found", f"no endpoint named {name!r}")
        specs = route.endpoint.components
        if component is not None and component not in specs:
            return _internal_error(404, "not_found", f"{name} has no component {component!r}")
        chosen = [component] if component else [c for c, spec in specs.items() if spec.init]
        keys = [specs[c].key for c in chosen]
        if not any(specs[c].init for c in chosen):
            return _internal_error(400, "bad_request", f"{name}/{component or '*'} has no init")
        if self.reinit is None:
            return _internal_error(503, "unavailable", "this server cannot re-run init")
        began = time.perf_counter()
        change = await self.reinit(keys)
        if change.failed:
            message = "; ".join(f"{key}: {error}" for key, error in change.failed.items())
            return _internal_error(
                500, "init_error", f"{message} (the previous replicas keep serving)"
            )
        took = round(time.perf_counter() - began, 3)
        return JSONResponse({"status": "ok", "result": {"reinitialized": keys, "seconds": took}})

    def refuse_action(self, request: Request, what: str) -> JSONResponse | None:
        """The answer refusing a state-changing ``/_peach/*`` action (``what``), or None:
        it must come from a loopback peer and carry the session's token."""
        client = request.client.host if request.client else None
        if not is_loopback(client):
            return _internal_error(403, "forbidden", f"{what} is for loopback clients")
        if not self.token.accepts(request.headers.get(TOKEN_HEADER)):
            return _internal_error(
                403,
                "forbidden",
                f"{what} needs this server's session token in the {TOKEN_HEADER} header "
                "(peach's own tools read it from the user's runtime folder)",
            )
        return None


def _internal_error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(contract.error_envelope(code, message), status_code=status)


async def _send_reply(send: Any, reply: HttpReply) -> None:
    await send({"type": "http.response.start", "status": reply.status, "headers": reply.headers})
    await send({"type": "http.response.body", "body": reply.body})


class _Pools:
    """An endpoint's components under `peach dev`: their replica pools (``contract.Components``),
    for one request (``line``: how a breakpoint's banner names it)."""

    __slots__ = ("pools", "receive", "line")

    def __init__(self, pools: dict[str, ReplicaPool], receive: Any, line: str | None) -> None:
        self.pools = pools
        self.receive = receive
        self.line = line

    async def call(self, component: str, params: RequestParams, attempt: Attempt) -> CallResult:
        return await self.pools[component].call(params, attempt, self.line)

    async def open_stream(self, component: str, params: RequestParams, attempt: Attempt) -> Opened:
        pool = self.pools[component]
        try:
            if pool.method_kind is None:  # no replica has come up yet: wait for one
                await pool.acquire()
            if dispatch(pool.method_kind, True) != "stream":
                return Opened()  # the envelope answers: a plain call
            opening = asyncio.ensure_future(pool.open_stream(params, attempt, self.line))
            disconnect = asyncio.ensure_future(_wait_disconnect(self.receive))
            await asyncio.wait((opening, disconnect), return_when=asyncio.FIRST_COMPLETED)
            if not opening.done():  # the client left before the stream started
                opening.cancel()
                await asyncio.gather(opening, return_exceptions=True)
                raise ClientGone
            disconnect.cancel()
            return Opened(chunks=opening.result())  # a replica that dies cuts it: StreamCut
        except Unavailable as error:
            raise ContractError("unavailable", str(error)) from None
        except ReplicaGone as error:
            raise ContractError("method_error", str(error)) from None


async def _send_stream(send: Any, receive: Any, reply: HttpReply) -> None:
    """Send a streamed ``reply`` chunk by chunk; stop it as soon as the client hangs up.

    What Starlette's ``StreamingResponse`` does, with two asyncio tasks instead of an anyio
    task group: a task of anyio's group ended by a hang-up leaves a reference cycle behind
    (its ``CancelledError``, whose traceback holds the frame that holds it), which kept the
    cut stream and its whole connection in memory until a full garbage collection: over a
    day of dropped streams, steps in the gateway's memory. An error of the stream (``StreamCut``)
    is raised here, as it was from the response.
    """
    chunks = reply.chunks
    assert chunks is not None

    async def pump() -> None:
        await send(
            {"type": "http.response.start", "status": reply.status, "headers": reply.headers}
        )
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    streaming = asyncio.ensure_future(pump())
    hang_up = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        await asyncio.wait((streaming, hang_up), return_when=asyncio.FIRST_COMPLETED)
    finally:  # one of them is done (or this request is cancelled): the other ends too
        hang_up.cancel()
        if not streaming.done():
            streaming.cancel()
            await asyncio.wait((streaming,))
    if not streaming.cancelled():
        streaming.result()


async def _wait_disconnect(receive: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
