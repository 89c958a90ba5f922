"""The local gateway: one ASGI app that routes every endpoint's url to its replica pools.

The request path is kept short: look the url up in the routing table, read the body, let
``peach_cli.runtime.contract`` parse it (405/413/400), then either answer through
``contract.answer`` (timeout, fallback, envelope) or relay a stream chunk by chunk with the
component's media type, no buffering and no compression. A client that goes away closes
the user's generator in the replica. The routing table is replaced as a whole by a reload;
requests that began on the old table finish on it.

``GET /_peach/routes`` lists the endpoints (``peach ask`` uses it after a 404), with each
A/B test's split and requests per arm, ``GET /_peach/health`` the replicas and their
states, and ``POST /_peach/reinit/<endpoint>[/<component>]`` (loopback clients only)
re-runs ``init``. The arm of an A/B test is chosen by ``contract.choose_arm``, as on Ray.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route as StarletteRoute

from peach_cli import wording
from peach_cli.addresses import is_loopback
from peach_cli.runtime import contract
from peach_cli.runtime.contract import (
    STREAMING_KINDS,
    Answer,
    Attempt,
    CallResult,
    ContractError,
    RequestParams,
    StreamCut,
    dispatch,
    parse_query_string,
    read_body,
    stream_headers,
)
from peach_cli.runtime.plan import EndpointSpec, url_key
from simulator.events import Event, ReplicaState, RequestLogged
from simulator.pool import ReplicaPool, Unavailable
from simulator.replica import ReplicaGone, ReplicaStream
from simulator.routing import Route, RoutingTable

if TYPE_CHECKING:
    from simulator.changes import PlanChange

INTERNAL_PREFIX = "/_peach/"
_JSON = (b"content-type", b"application/json")


def _lookup(routes: dict[str, Route], path: str) -> Route | None:
    """The route for a request path (the table is keyed by ``url_key``)."""
    return routes.get(path) or routes.get(url_key(path))


def _component_headers(component: str | None, replica: str | None) -> list[tuple[bytes, bytes]]:
    headers = []
    if component:
        headers.append((contract.COMPONENT_HEADER.lower().encode(), component.encode()))
    if replica:
        headers.append((contract.REPLICA_HEADER.lower().encode(), replica.encode()))
    return headers


class Gateway:
    """The ASGI application behind ``peach dev``."""

    def __init__(
        self,
        table: RoutingTable,
        on_event: Callable[[Event], None] | None = None,
        *,
        max_body_bytes: int = contract.MAX_BODY_BYTES,
    ) -> None:
        self.table = table
        self.on_event = on_event
        self.max_body_bytes = max_body_bytes
        self.arm_requests: dict[str, dict[str, int]] = {}
        """Endpoint name → A/B arm → requests routed to it (kept across reloads)."""
        self.reinit: Callable[[Collection[str]], Awaitable[PlanChange]] | None = None
        """Re-runs ``init`` of components (``DevServer.reinit``), for ``/_peach/reinit``."""
        self._internal = Starlette(
            routes=[
                StarletteRoute("/_peach/routes", self._list_routes, methods=["GET"]),
                StarletteRoute("/_peach/health", self._health, methods=["GET"]),
                StarletteRoute("/_peach/reinit/{endpoint}", self._reinit, methods=["POST"]),
                StarletteRoute(
                    "/_peach/reinit/{endpoint}/{component}", self._reinit, methods=["POST"]
                ),
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
        route = _lookup(table.routes, path)
        if route is None:
            if path.startswith(INTERNAL_PREFIX):
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
        endpoint = route.endpoint
        try:
            body = await read_body(receive, scope.get("headers", ()), self.max_body_bytes)
        except ContractError as error:  # over the limit: refused before it is all in memory
            answer = contract.error_answer(error.code, error.message)
            await self._send_answer(send, answer, scope, endpoint, started)
            return
        if body is None:  # the client went away while sending
            return
        try:
            params, wants_stream = contract.parse_request(
                scope["method"],
                parse_query_string(scope["query_string"]),
                body,
                max_body_bytes=self.max_body_bytes,
            )
        except ContractError as error:
            answer = contract.error_answer(error.code, error.message)
            await self._send_answer(send, answer, scope, endpoint, started)
            return
        arm = contract.choose_arm(endpoint, params)
        if endpoint.ab is not None:
            counts = self.arm_requests.setdefault(endpoint.name, {})
            counts[arm] = counts.get(arm, 0) + 1
        primary = route.pools[arm]
        kind = primary.method_kind
        if kind is None:  # no replica has come up yet: wait for one (or its init error)
            try:
                await primary.acquire()
            except Unavailable as error:
                answer = contract.error_answer("unavailable", str(error), component=arm)
                await self._send_answer(send, answer, scope, endpoint, started, arm)
                return
            kind = primary.method_kind
        decision = dispatch(kind, wants_stream)
        if decision == "stream":
            await self._stream(route, primary, params, scope, receive, send, started, arm)
            return
        if decision == "stream_required":
            answer = await _stream_required(endpoint, primary, arm)
            await self._send_answer(send, answer, scope, endpoint, started, arm)
            return
        pools = route.pools

        async def call(component: str, attempt: Attempt) -> CallResult:
            return await pools[component].call(params, attempt)

        answer = await contract.answer(endpoint, call, table.timeout_s, arm)
        await self._send_answer(send, answer, scope, endpoint, started, arm)

    async def _send_answer(
        self,
        send: Any,
        answer: Answer,
        scope: dict[str, Any],
        endpoint: EndpointSpec | None,
        started: float,
        arm: str | None = None,
    ) -> None:
        payload = answer.body_bytes()
        headers = [_JSON, (b"content-length", str(len(payload)).encode())]
        headers += _component_headers(answer.component, answer.replica)
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
        if self.on_event is not None:
            error = None
            if answer.status >= 400:
                details = answer.body.get("error") or {}
                error = f"{details.get('code')}: {details.get('message')}"
            self.on_event(
                RequestLogged(
                    scope["method"],
                    scope["path"],
                    answer.status,
                    endpoint.name if endpoint else None,
                    answer.component,
                    answer.replica,
                    time.perf_counter() - started,
                    error=error,
                    arm=_logged_arm(endpoint, arm),
                )
            )

    async def _not_found(
        self, scope: dict[str, Any], receive: Any, send: Any, table: RoutingTable
    ) -> None:
        urls = (route.endpoint.url for route in table.routes.values())
        answer = contract.not_found_answer(scope["path"], urls)
        try:
            await read_body(receive, scope.get("headers", ()), self.max_body_bytes)
        except ContractError:
            pass  # not found either way
        await self._send_answer(send, answer, scope, None, time.perf_counter())

    # -- streams -------------------------------------------------------------------------

    async def _stream(
        self,
        route: Route,
        pool: ReplicaPool,
        params: RequestParams,
        scope: dict[str, Any],
        receive: Any,
        send: Any,
        started: float,
        component: str,
    ) -> None:
        endpoint = route.endpoint
        attempt = Attempt(component)
        opening = asyncio.ensure_future(pool.open_stream(params, attempt))
        disconnect = asyncio.ensure_future(_wait_disconnect(receive))
        await asyncio.wait((opening, disconnect), return_when=asyncio.FIRST_COMPLETED)
        if not opening.done():  # the client left before the stream started
            opening.cancel()
            await asyncio.gather(opening, return_exceptions=True)
            self._log_stream(scope, endpoint, component, None, started, 499, "client disconnected")
            return
        disconnect.cancel()
        try:
            chunks = opening.result()
        except Unavailable as error:
            answer = contract.error_answer("unavailable", str(error), component=component)
            await self._send_answer(send, answer, scope, endpoint, started, component)
            return
        except ContractError as error:  # the replica refused the call (a binding error)
            answer = contract.error_answer(
                error.code, error.message, component=component, replica=attempt.replica
            )
            await self._send_answer(send, answer, scope, endpoint, started, component)
            return
        except ReplicaGone as error:
            answer = contract.error_answer(
                "method_error", str(error), component=component, replica=attempt.replica
            )
            await self._send_answer(send, answer, scope, endpoint, started, component)
            return
        replica = chunks.replica.id
        outcome: dict[str, str | None] = {"error": None}
        headers = stream_headers(pool.spec.media_type, component, replica)
        response = StreamingResponse(_relay(chunks, outcome), headers=headers)
        try:
            await response(scope, receive, send)  # StreamCut: uvicorn closes the connection
        finally:
            await chunks.aclose()
            self._log_stream(scope, endpoint, component, replica, started, 200, outcome["error"])

    def _log_stream(
        self,
        scope: dict[str, Any],
        endpoint: EndpointSpec,
        component: str,
        replica: str | None,
        started: float,
        status: int,
        error: str | None,
    ) -> None:
        if self.on_event is not None:
            self.on_event(
                RequestLogged(
                    scope["method"],
                    scope["path"],
                    status,
                    endpoint.name,
                    component,
                    replica,
                    time.perf_counter() - started,
                    stream=True,
                    error=error,
                    arm=_logged_arm(endpoint, component),
                )
            )

    # -- internal routes -----------------------------------------------------------------

    async def _list_routes(self, request: Request) -> JSONResponse:
        table = self.table
        endpoints: list[dict[str, Any]] = []
        for route in sorted(table.routes.values(), key=lambda r: r.endpoint.url):
            kind = route.pools[route.endpoint.primary].method_kind
            endpoints.append(
                {
                    "name": route.endpoint.name,
                    "url": route.endpoint.url,
                    "components": list(route.endpoint.components),
                    "streams": None if kind is None else kind in STREAMING_KINDS,
                }
            )
            ab = contract.ab_route(route.endpoint, self.arm_requests.get(route.endpoint.name, {}))
            if ab is not None:
                endpoints[-1]["ab"] = ab
        return JSONResponse({"codops": table.codops, "endpoints": endpoints})

    async def _health(self, request: Request) -> JSONResponse:
        components = []
        ready = True
        healthy = True
        for pool in self.table.pools():
            replicas = []
            for replica in pool.replicas:
                if replica.state in (ReplicaState.STARTING, ReplicaState.RESTARTING):
                    ready = False
                if replica.state is not ReplicaState.HEALTHY:
                    healthy = False
                replicas.append(
                    {
                        "id": replica.id,
                        "state": replica.state.value,
                        "pid": replica.pid,
                        "outstanding": replica.outstanding,
                        "rss": replica.rss,
                        "error": replica.error,
                    }
                )
            components.append({"component": pool.key, "replicas": replicas})
        status = "ok" if healthy else ("starting" if not ready else "degraded")
        return JSONResponse(
            {
                "status": status,
                "ready": ready,
                "codops": self.table.codops,
                "components": components,
            }
        )

    async def _reinit(self, request: Request) -> JSONResponse:
        """Re-run ``init`` of an endpoint's components that have one, or of one component:
        new replicas, started while the old ones serve. Loopback clients only."""
        client = request.client.host if request.client else None
        if not is_loopback(client):
            return _internal_error(403, "forbidden", "/_peach/reinit is for loopback clients")
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


def _internal_error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(contract.error_envelope(code, message), status_code=status)


def _logged_arm(endpoint: EndpointSpec | None, arm: str | None) -> str | None:
    """The arm a request was routed to, for endpoints with an A/B test."""
    return arm if endpoint is not None and endpoint.ab is not None else None


async def _stream_required(endpoint: EndpointSpec, pool: ReplicaPool, arm: str) -> Answer:
    """``stream_required`` for a generator called without ``stream``, naming the replica
    that would have failed to return it (as on the platform); 503 when none can serve."""
    try:
        replica = await pool.acquire()
    except Unavailable as error:
        return contract.error_answer("unavailable", str(error), component=arm)
    answer = contract.stream_required_answer(endpoint, pool.method_kind or "async_generator", arm)
    answer.replica = replica.id
    return answer


async def _relay(chunks: ReplicaStream, outcome: dict[str, str | None]) -> AsyncIterator[bytes]:
    """The stream's chunks. A generator that raises, or a replica that dies, cuts the
    stream: ``StreamCut`` leaves the response without its terminating chunk (SPEC §2)."""
    count = 0
    try:
        async for chunk in chunks:
            count += 1
            yield chunk
    except (StreamCut, ReplicaGone) as error:
        outcome["error"] = f"stream cut after {wording.count(count, 'chunk')}: {error}"
        raise StreamCut(str(error)) from None


async def _wait_disconnect(receive: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
