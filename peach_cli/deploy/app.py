"""The Ray Serve application of a peach project (runs on the cluster, imports Ray).

``build_application(args)`` is the application builder named by every peach config's
``import_path``. It binds:

* one ``ServeComponent`` deployment per component — a thin host around
  ``contract.ComponentRunner``: the notebook code and ``init`` run in the (async)
  constructor, so a failing ``init`` is a replica that fails to start, with the user's
  exception and traceback in its message; drift re-init happens inside the replica;
* one ``ServeGateway`` ingress deployment — the per-codops gateway: a transport around
  ``contract.Flow``, the SPEC §2 request flow `peach dev` runs too (body, parameters, A/B
  arm, ``timeout_s``, fallback, envelope, streams), over the component deployments as its
  components (``_Deployments``): one unary remote call, or one ``handle.options(stream=True)``
  call relayed chunk by chunk and cut if the generator fails. It reads
  Serve's status every second: a component none of whose replicas runs because they fail
  to start is answered with 503 and the user's init error, as under `peach dev` — and so
  is a call already waiting for a replica of it when that is found.

A component reads what it runs from its own spec package (``_peach_spec`` in its
``py_modules``; its working_dir, the cwd, is the project package every component shares);
the gateway reads its routes from the ``.peach/`` folder of its own working_dir.
The application may serve under a route prefix (Serve's ``root_path``): the gateway routes
the path below it. It also answers ``GET /_peach/routes`` and ``GET /_peach/health`` as
``peach dev`` does, the latter from what each replica reports (``reports``), and
``GET /_peach/openapi.json`` with the document the CLI built at deploy time (SPEC §11).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, cast

from ray import serve
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from peach_cli.deploy import INIT_FAILED_MARKER, reports
from peach_cli.deploy.config import component_from_json, endpoints_from_json
from peach_cli.deploy.packaging import (
    COMPONENT_FILE,
    GATEWAY_FILE,
    OPENAPI_FILE,
    spec_file,
)
from peach_cli.deploy.progress import still_failing_to_start
from peach_cli.internal import HEALTH_PATH, OPENAPI_PATH, ROUTES_PATH
from peach_cli.runtime import contract
from peach_cli.runtime.plan import EndpointSpec, url_key

logger = logging.getLogger("peach.deploy")

JSON_MEDIA_TYPE = "application/json"
TASKS_READ_S = 2.0
"""How long ``/_peach/health`` waits for the scheduler's rows."""
COMPONENT_CHECK_S = 1.0
"""How often the gateway reads which components have no replica because theirs fail to start."""


class PeachInitFailed(RuntimeError):
    """A component could not start: its message is what ``peach deploy`` shows the user."""


assert PeachInitFailed.__name__ == INIT_FAILED_MARKER


def _replica_suffix() -> str:
    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # outside a replica (tests of this module)
        return "local"


def _use_ray_tasks() -> None:
    """``trigger_task_with_event`` in this replica: runs queued with the application's
    scheduler (its deployment ``tasks``)."""
    import os

    from peach_cli.runtime.triggers import APP_ENV, install_task_helpers

    install_task_helpers()
    place = _replica_place()
    if place is not None:
        os.environ[APP_ENV] = place[0]


def _replica_place() -> tuple[str, str, str] | None:
    """(application, deployment, replica) of the running replica, or None outside one."""
    try:
        context = serve.get_replica_context()
        return context.app_name, context.deployment, context.replica_id.unique_id
    except Exception:
        return None


@serve.deployment
class ServeComponent:
    """One replica of one component: a ``ComponentRunner`` behind a handle."""

    async def __init__(self) -> None:  # type: ignore[misc]  # Serve awaits it
        found = spec_file(COMPONENT_FILE)
        if found is None:
            raise PeachInitFailed("this replica has no component spec (its py_modules lack it)")
        spec = component_from_json(json.loads(found.read_text()))
        _use_ray_tasks()
        self.runner = contract.ComponentRunner(
            spec, Path.cwd(), replica_id=f"{spec.key}#{_replica_suffix()}"
        )
        self._place = _replica_place()
        self._reports: set[asyncio.Task[None]] = set()
        self._reported = -1
        """``reinit_count`` when the last report was scheduled (one report per re-init)."""
        try:
            await self.runner.start()
        except contract.InitError as error:
            # in the replica's log too, where `peach logs` finds it
            logger.error("%s: %s\n%s", self.runner.replica_id, error.message, error.details)
            text = error.message
            if error.details:
                # Ray rewrites a "Traceback (most recent call last):" line inside an
                # exception's text into its own task header: name the user's frames otherwise
                details = error.details.replace(
                    "Traceback (most recent call last):", "In the notebook (most recent call last):"
                )
                text = f"{text}\n{details}"
            raise PeachInitFailed(text) from None

    async def call(self, params: dict[str, Any]) -> dict[str, Any]:
        """A non-streaming call: the ``CallResult`` as a dict, naming this replica (never
        raises for user errors). One unary remote call: the cheapest Serve has."""
        result = await self.runner.call(contract.RequestParams.from_dict(params))
        if result.drift:
            self._report_after_reinit()
        return result.to_dict()

    def _report_after_reinit(self) -> None:
        """Once the drift re-init ends, store its outcome for /_peach/health: once per
        re-init (one a drifting call started; concurrent drifts share it), and only when
        there is one (a component without ``init`` has nothing to re-run)."""
        runner = self.runner
        if not runner.reinitializing or self._reported == runner.reinit_count:
            return
        self._reported = runner.reinit_count  # the count this re-init ends at, minus one

        async def report() -> None:
            await self.runner.wait_reinit()
            error = self.runner.last_reinit_error
            if self._place is not None:
                await asyncio.to_thread(
                    reports.publish, *self._place, {"error": error, "at": time.time()}
                )

        task = asyncio.get_running_loop().create_task(report())
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def stream(self, params: dict[str, Any]) -> AsyncIterator[Any]:
        """A call that asked for a stream. The first item describes it: ``{"replica": id,
        "method_kind": kind}``, or ``{"replica": id, "code": …, "message": …}`` when the
        arguments cannot be bound. Then the chunks (bytes) of a generator method — or, for
        any other method, its ``CallResult`` as a dict: one remote call either way.
        """
        replica = self.runner.replica_id
        kind = self.runner.method_kind
        request = contract.RequestParams.from_dict(params)
        if contract.dispatch(kind, True) != "stream":
            yield {"replica": replica, "method_kind": kind}
            result = await self.runner.call(request)
            if result.drift:
                self._report_after_reinit()
            yield result.to_dict()
            return
        try:
            chunks = await self.runner.open_stream(request)
        except contract.ContractError as error:
            yield {"replica": replica, "code": error.code, "message": error.message}
            return
        try:
            yield {"replica": replica, "method_kind": kind}
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()

    def check_health(self) -> None:
        """Healthy once started (a drift re-init keeps it healthy), until every thread of
        the runner is held by a sync call nobody waits for: Serve then replaces it."""
        if self.runner.threads_exhausted:
            raise RuntimeError(
                f"{self.runner.replica_id}: every thread is held by calls past timeout_s"
            )

    def __del__(self) -> None:
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.close()
        place = getattr(self, "_place", None)
        if place is not None and runner is not None and runner.reinit_count:
            reports.remove(*place)


@serve.deployment
class ServeGateway:
    """The per-codops gateway: SPEC §2 on top of the component deployments."""

    async def __init__(  # type: ignore[misc]
        self, components: dict[str, DeploymentHandle], scheduler: DeploymentHandle | None = None
    ) -> None:
        data = json.loads(Path(GATEWAY_FILE).read_text())
        document = Path(OPENAPI_FILE)
        self.openapi = document.read_bytes() if document.is_file() else None
        """The project's OpenAPI document as the CLI built it at deploy time (SPEC §11)."""
        self.codops = str(data.get("codops", ""))
        self.timeout_s = float(data["timeout_s"])
        self.endpoints = endpoints_from_json(data)
        self._by_url = {url_key(e.url): e for e in self.endpoints.values()}
        self.deployments = {
            (name, component): info["deployment"]
            for name, item in data["endpoints"].items()
            for component, info in item["components"].items()
        }
        self.handles = components
        self.scheduler = scheduler
        """The project's task scheduler (``deploy.scheduler_app``), when it has tasks."""
        self.flow = contract.Flow()
        """SPEC §2 for every request to an endpoint; it counts the requests of each A/B arm."""
        self.unstartable: dict[str, str] = {}
        """Component deployment → the user's init error, while none of its replicas runs."""
        self.running: dict[str, int] = {}
        """Component deployment → its RUNNING replicas at the last read."""
        self._failing: dict[str, asyncio.Future[None]] = {}
        """Component deployment → set when it is found unstartable: what calls waiting for
        a replica of a deployment with none running wait on too."""
        self._checked_at = 0.0
        self._starting: dict[str, float] = {}
        """Deployment → when it was first seen with no replica running (still starting)."""
        self._reading: asyncio.Future[None] | None = None
        self._watcher = asyncio.get_running_loop().create_task(self._watch_components())
        self.release: dict[str, Any] | None = None
        """What runs, as the deploy recorded it (``deploy.release``)."""

    def reconfigure(self, config: dict[str, Any]) -> None:
        """The deploy's ``user_config``: the release record. A new one is applied in place
        (Serve reconfigures, it does not restart the gateway)."""
        self.release = config.get("release")

    async def _watch_components(self) -> None:
        """Keep ``unstartable`` current, so that a component whose replicas cannot start
        is answered at once with 503 and the user's error (as under `peach dev`) instead
        of the call waiting out ``timeout_s`` for a replica that never comes."""
        while True:
            await self._read_components()
            await asyncio.sleep(COMPONENT_CHECK_S)

    async def _read_components(self) -> None:
        """Read ``unstartable`` from Serve once; concurrent callers share one read."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read_status())
        await asyncio.shield(self._reading)

    async def _read_status(self) -> None:
        began = time.monotonic()
        try:
            app_name = serve.get_replica_context().app_name
            deployments = await asyncio.to_thread(_deployment_details, app_name)
            running: dict[str, int] = {}
            unstartable: dict[str, str] = {}
            for name, item in deployments.items():
                if name not in self.handles:
                    continue
                replicas = item.get("replicas") or ()
                count = running[name] = sum(1 for r in replicas if r.get("state") == "RUNNING")
                status = item.get("status", "")  # a DeploymentStatus (a str enum), or its value
                status, message = (
                    str(getattr(status, "value", status)),
                    str(item.get("message", "")),
                )
                error = still_failing_to_start(status, message, count, self.unstartable.get(name))
                if error:
                    unstartable[name] = error
            self.unstartable, self.running, self._checked_at = unstartable, running, began
            for name, count in running.items():
                if count:
                    self._starting.pop(name, None)
                else:
                    self._starting.setdefault(name, began)
            for name in unstartable:
                waiting = self._failing.pop(name, None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)
        except Exception as error:  # the controller is busy or restarting: keep the last
            logger.debug("cannot read the components' status: %s", error)

    async def _unavailable(self, endpoint: EndpointSpec, component: str) -> str | None:
        """Why ``component`` cannot answer (its replicas fail to start), or None."""
        deployment = self.deployments[(endpoint.name, component)]
        if deployment in self.unstartable and time.monotonic() - self._checked_at > 0.1:
            await self._read_components()  # a fixed version may have started since
        error = self.unstartable.get(deployment)
        if not error:
            return None
        return contract.unavailable_message(f"{endpoint.name}/{component}", error)

    def starting_since(self, endpoint: EndpointSpec, component: str) -> float | None:
        """When ``component`` was first seen with no replica running (None: some run, or
        Serve has not been read yet)."""
        return self._starting.get(self.deployments[(endpoint.name, component)])

    def _handle(self, endpoint: EndpointSpec, component: str) -> DeploymentHandle:
        return self.handles[self.deployments[(endpoint.name, component)]]

    async def _reply(self, endpoint: EndpointSpec, component: str, reply: Awaitable[Any]) -> Any:
        """``reply`` awaited — or ``Unstartable`` as soon as the component is found unable to
        start while the call waits for one of its replicas. (A component with replicas
        running is awaited directly: the common case costs nothing more.)"""
        deployment = self.deployments[(endpoint.name, component)]
        if self.running.get(deployment):
            return await reply
        failing = self._failing.get(deployment)
        if failing is None or failing.done():
            failing = self._failing[deployment] = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(reply)
        try:
            await asyncio.wait((waiting, failing), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            waiting.cancel()
            raise
        if waiting.done():
            return waiting.result()
        waiting.cancel()
        error = self.unstartable.get(deployment, "its replicas fail to start")
        raise Unstartable(contract.unavailable_message(f"{endpoint.name}/{component}", error))

    async def __call__(self, request: Request) -> Response:
        started = time.perf_counter()
        path = _route_path(request)
        endpoint = self._endpoint_for(path)
        if endpoint is None:
            if request.method == "GET" and path in (ROUTES_PATH, HEALTH_PATH):
                return await (self._routes() if path == ROUTES_PATH else self._health())
            if request.method == "GET" and path == OPENAPI_PATH and self.openapi is not None:
                return Response(self.openapi, media_type=JSON_MEDIA_TYPE)
            urls = (e.url for e in self.endpoints.values())
            reply = contract.answer_reply(contract.not_found_answer(path, urls))
        else:
            scope = request.scope
            incoming = contract.HttpRequest(
                request.method, scope["query_string"], scope.get("headers", ()), request.receive
            )
            components = _Deployments(self, endpoint)
            reply = await self.flow.handle(endpoint, incoming, components, self.timeout_s)
        shown_path = request.scope.get("path") or "/"  # as the client asked, prefix included
        if reply.chunks is None:
            _log_request(request.method, shown_path, reply, started)
        else:  # logged when the stream ends, as under `peach dev`
            reply.chunks = _logged_stream(reply.chunks, request.method, shown_path, reply, started)
        return _response(reply)

    def _endpoint_for(self, path: str) -> EndpointSpec | None:
        return self._by_url.get(url_key(path))

    # -- /_peach/routes and /_peach/health, as under `peach dev` -------------------------

    async def _routes(self) -> Response:
        endpoints = [(e, None) for e in self.endpoints.values()]  # streams: the replicas know
        body = contract.routes_body(self.codops, endpoints, self.flow.arm_requests)
        return Response(json.dumps(body), media_type=JSON_MEDIA_TYPE)

    async def _health(self) -> Response:
        """Every component's replicas, their states and last errors (a failed re-init)."""
        await self._read_components()
        app_name = serve.get_replica_context().app_name

        def read() -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
            return _deployment_details(app_name), reports.read(app_name)

        deployments, records = await asyncio.to_thread(read)
        components = {
            deployment: self.endpoints[name].components[component]
            for (name, component), deployment in self.deployments.items()
        }
        body = reports.health_body(self.codops, components, deployments, records, self.unstartable)
        if self.scheduler is not None:
            body["tasks"] = await _task_rows(self.scheduler)
        return Response(json.dumps(body), media_type=JSON_MEDIA_TYPE)


async def _task_rows(scheduler: DeploymentHandle) -> list[dict[str, Any]] | None:
    """Every task's row from the application's scheduler (None: it does not answer)."""
    try:
        handle = scheduler
        return cast(
            list[dict[str, Any]], await asyncio.wait_for(handle.status.remote(), TASKS_READ_S)
        )
    except Exception as error:  # starting, or replaced just now
        logger.debug("cannot read the tasks' status: %s", error)
        return None


def _log_request(method: str, path: str, reply: contract.HttpReply, started: float) -> None:
    """The request's line as `peach dev` prints it, on the gateway's stdout (what `peach
    logs` shows), through the output boundary: what the client sent is escaped."""
    from peach_cli.boundary import Output, shown
    from peach_cli.runtime.request_line import request_line

    line = request_line(
        shown(method),
        shown(path),
        reply.status,
        reply.component,
        reply.replica,
        time.perf_counter() - started,
        rerouted_to=reply.arm if reply.arm and reply.arm != reply.component else None,
        stream=reply.stream,
        error=shown(reply.error) if reply.error else None,
    )
    # the gateway is handed no secret value: `peach logs` masks the deployment's as it shows
    Output().write_report(line + "\n", channel="cluster-logs")


async def _logged_stream(
    chunks: AsyncIterator[bytes],
    method: str,
    path: str,
    reply: contract.HttpReply,
    started: float,
) -> AsyncGenerator[bytes, None]:
    """``reply``'s ``chunks``, its line logged once the stream ends (cut, or the client gone)."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:  # a cut is in ``reply.error`` (the flow records it)
        _log_request(method, path, reply, started)


def _deployment_details(app_name: str) -> dict[str, Any]:
    """The deployments of application ``app_name`` as the Serve controller details them
    (status, message, replicas and their states), read as plain data: ``serve.status()``
    would build its models from all of them, pickling each deployment's request router
    on the way, some 0.2 s of the gateway's CPU a read."""
    from ray.serve.context import _get_global_client

    client = _get_global_client()
    details = client.get_serve_details() if client is not None else {}
    app = (details.get("applications") or {}).get(app_name) or {}
    return cast(dict[str, Any], app.get("deployments") or {})


class Unstartable(Exception):
    """A call's component was found unable to start while the call waited for a replica."""


class _Deployments:
    """An endpoint's components on Ray, through their deployments' handles
    (``contract.Components``). A component whose replicas fail to start is ``unavailable``
    at once."""

    __slots__ = ("endpoint", "gateway")

    def __init__(self, gateway: ServeGateway, endpoint: EndpointSpec) -> None:
        self.gateway = gateway
        self.endpoint = endpoint

    async def call(
        self, component: str, params: contract.RequestParams, attempt: contract.Attempt
    ) -> contract.CallResult:
        gateway, endpoint = self.gateway, self.endpoint
        unavailable = await gateway._unavailable(endpoint, component)
        if unavailable:
            return contract.CallResult.failure("unavailable", unavailable)
        attempt.starting_since = gateway.starting_since(endpoint, component)
        # one unary remote call: the result names the replica that answered
        response = gateway._handle(endpoint, component).call.remote(params.to_dict())
        try:
            data = await gateway._reply(endpoint, component, response)
        except asyncio.CancelledError:  # timeout_s ran out: stop the call on the replica
            response.cancel()
            raise
        except Unstartable as error:
            response.cancel()
            return contract.CallResult.failure("unavailable", str(error))
        except Exception as error:  # the replica died or cannot be reached
            return _unreachable(endpoint, component, error, None)
        return _result(data, attempt)

    async def open_stream(
        self, component: str, params: contract.RequestParams, attempt: contract.Attempt
    ) -> contract.Opened:
        """One remote call (``ServeComponent.stream``): its first item says whether the method
        streams; if not, its next item is the result, which goes in the envelope."""
        gateway, endpoint = self.gateway, self.endpoint
        unavailable = await gateway._unavailable(endpoint, component)
        if unavailable:
            raise contract.ContractError("unavailable", unavailable)
        handle = gateway._handle(endpoint, component).options(stream=True)
        generator = cast(DeploymentResponseGenerator, handle.stream.remote(params.to_dict()))
        try:
            first = await gateway._reply(endpoint, component, generator.__anext__())
        except asyncio.CancelledError:
            generator.cancel()
            raise
        except Unstartable as error:
            generator.cancel()
            raise contract.ContractError("unavailable", str(error)) from None
        except Exception as error:
            generator.cancel()
            where = f"{endpoint.name}/{component}"
            message = contract.unavailable_message(where, _first_line(error))
            raise contract.ContractError("unavailable", message) from None
        attempt.replica = first.get("replica")
        if "code" in first:  # the arguments cannot be bound
            raise contract.ContractError(first["code"], first["message"])
        if contract.dispatch(first.get("method_kind"), True) == "stream":
            return contract.Opened(chunks=_relay(endpoint, generator))

        async def result(attempt: contract.Attempt) -> contract.CallResult:
            try:
                data = await generator.__anext__()
            except asyncio.CancelledError:  # timeout_s ran out: stop it on the replica
                generator.cancel()
                raise
            except Exception as error:  # the replica died or cannot be reached
                generator.cancel()
                return _unreachable(endpoint, component, error, attempt.replica)
            return _result(data, attempt)

        return contract.Opened(result=result)


def _result(data: dict[str, Any], attempt: contract.Attempt) -> contract.CallResult:
    result = contract.CallResult.from_dict(data)
    attempt.replica = result.replica or attempt.replica
    return result


async def _relay(
    endpoint: EndpointSpec, generator: DeploymentResponseGenerator
) -> AsyncGenerator[bytes, None]:
    """A stream's chunks; the generator raising, or its replica dying, is ``StreamCut``."""
    try:
        async for chunk in generator:
            yield chunk
    except asyncio.CancelledError:
        raise
    except Exception as error:  # the generator raised or the replica died: cut it
        cause = _stream_cut_cause(error)
        logger.error("the stream of %s was cut: %s", endpoint.url, cause)
        raise contract.StreamCut(cause) from None
    finally:
        generator.cancel()  # a client that went away closes the user's generator


def _unreachable(
    endpoint: EndpointSpec, component: str, error: BaseException, replica: str | None
) -> contract.CallResult:
    """The ``unavailable`` failure of a call whose replica died or cannot be reached."""
    message = contract.unavailable_message(f"{endpoint.name}/{component}", _first_line(error))
    return contract.CallResult.failure("unavailable", message, replica)


def _stream_cut_cause(error: BaseException) -> str:
    """What cut a stream: the user's exception (``StreamCut`` inside Ray's wrapper)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, contract.StreamCut):
        return str(cause)
    if isinstance(error, contract.StreamCut):
        return str(error)
    return _first_line(error)


def _route_path(request: Request) -> str:
    """The request's path below the application's route prefix (Serve's ``root_path``)."""
    path = request.scope.get("path") or "/"
    root = (request.scope.get("root_path") or "").rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root) :] or "/"
    return path


def _first_line(error: BaseException) -> str:
    text = contract.describe_exception(error)
    return text.splitlines()[0] if text else type(error).__name__


def _response(reply: contract.HttpReply) -> Response:
    """The flow's reply as Serve sends it (the headers exactly as the flow wrote them)."""
    if reply.gone:
        return Response(status_code=reply.status)
    response: Response
    if reply.chunks is not None:
        response = StreamingResponse(reply.chunks, status_code=reply.status)
    else:
        response = Response(reply.body, status_code=reply.status)
    response.raw_headers = reply.headers
    return response


def build_application(args: dict[str, Any]) -> serve.Application:
    """The application builder: ``args = {"gateway": name, "components": [names]}``, and
    ``"tasks": name`` when the project has tasks (its scheduler, ``deploy.scheduler_app``)."""
    component: Any = ServeComponent  # a serve.Deployment (the decorator hides it from mypy)
    components = {name: component.options(name=name).bind() for name in args.get("components", [])}
    scheduler = None
    if args.get("tasks"):
        from peach_cli.deploy.scheduler_app import ServeTaskScheduler

        deployment: Any = ServeTaskScheduler
        scheduler = deployment.options(name=args["tasks"]).bind()
    gateway = ServeGateway.options(name=args.get("gateway", "gateway"))  # type: ignore[attr-defined]
    return gateway.bind(components, scheduler)
