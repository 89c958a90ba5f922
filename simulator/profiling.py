"""`peach profile`'s actions on `peach dev` (SPEC §12): sampling every replica of an endpoint.

Three ``/_peach/`` actions, for loopback clients with the session's token only (like
``/_peach/reinit``; ``DevGateway.refuse_action``)::

    POST /_peach/profile/start  {"url": "/hot", "interval_s": 0.01, "cpu": false}
         → {"status": "ok", "result": {"session": "…", "replicas": ["hot/main#1", …]}}
    POST /_peach/profile/stop   {"session": "…"}
         → {"status": "ok", "result": {"profiles": [{"replica": …, "component": …, <profile>}]}}
    POST /_peach/profile/init   {"url": "/hot", "interval_s": 0.01, "cpu": false}
         → the same as stop: the endpoint's components that have an ``init`` get new
           replicas (as ``/_peach/reinit`` does), sampled from before their code loads
           until ``init`` returned.

``--init`` needs the replicas that start while ``init`` is re-run to sample from their first
line: the server makes one ``InitProfiling`` and hands it to the gateway's ``Profiler`` (which
opens a watch on it) and to every replica it starts (``Replica(first_messages=...)``, which
asks it what to send before ``Start``).

The sampling itself runs inside each replica (``peach_cli.runtime.sampler``), switched on
and off by the ``ProfileStart`` and ``ProfileStop`` messages; a profile is plain data that
``peach_cli.profile`` turns into tables, a flame graph or a speedscope file.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route as StarletteRoute

from peach_cli.internal import PROFILE_PATH
from peach_cli.printable import without_surrogates
from peach_cli.runtime import contract
from peach_cli.runtime.jsonlimits import MAX_DEPTH, nests_deeper
from peach_cli.runtime.plan import ComponentSpec, url_key
from peach_cli.runtime.protocol import Message, ProfileData, ProfileStart, ProfileStop

if TYPE_CHECKING:
    from simulator.changes import PlanChange
    from simulator.routing import Route, RoutingTable


class Sampled(Protocol):
    """A replica as profiling sees it (``simulator.replica.Replica`` is one)."""

    @property
    def id(self) -> str: ...
    @property
    def spec(self) -> ComponentSpec: ...
    @property
    def pid(self) -> int | None: ...
    def notify(self, message: Message) -> bool: ...
    async def request(self, make: Callable[[int], Message], timeout_s: float) -> Message | None: ...


class Gateway(Protocol):
    """What the profile actions use of the gateway (``simulator.gateway.DevGateway``)."""

    @property
    def table(self) -> RoutingTable: ...
    @property
    def reinit(self) -> Callable[[Collection[str]], Awaitable[PlanChange]] | None: ...
    def refuse_action(self, request: Request, what: str) -> JSONResponse | None: ...


COLLECT_TIMEOUT_S = 10.0
"""How long a replica may take to send its profile."""
MAX_SESSIONS = 16
"""Sessions kept at most; the oldest is stopped (its samples dropped) to make room."""
GRACE_S = 10.0
"""A session asked for ``duration_s`` ends by itself this long after it (its client is
gone: a killed `peach profile` leaves no replica sampling)."""
MAX_SESSION_S = 600.0
"""... and a session ends by itself after this long, whatever it asked for."""
_MAX_BODY = 64 * 1024


@dataclass
class _InitWatch:
    """Replicas of ``keys`` spawned while ``init`` is profiled: each starts sampling first."""

    keys: frozenset[str]
    start: ProfileStart
    replicas: list[Sampled] = field(default_factory=list)


class InitProfiling:
    """The ``init`` being profiled on one server (``peach profile --init``), if any: what a
    replica it starts gets before ``Start``. One per server, handed to its replicas and to
    its gateway's ``Profiler``."""

    def __init__(self) -> None:
        self._watch: _InitWatch | None = None

    def first_messages(self, replica: Sampled) -> list[Message]:
        """``ProfileStart`` for a replica of a component whose ``init`` is profiled (the
        replica is collected when the watch ends); nothing otherwise."""
        watch = self._watch
        if watch is None or replica.spec.key not in watch.keys:
            return []
        watch.replicas.append(replica)
        return [watch.start]

    @property
    def busy(self) -> bool:
        return self._watch is not None

    @contextmanager
    def watching(self, keys: Collection[str], start: ProfileStart) -> Iterator[_InitWatch]:
        """Replicas of ``keys`` started inside the block sample with ``start``'s settings."""
        watch = self._watch = _InitWatch(frozenset(keys), start)
        try:
            yield watch
        finally:
            self._watch = None


@dataclass
class _Session:
    replicas: list[Sampled]
    began: float = field(default_factory=time.monotonic)
    expiry: asyncio.TimerHandle | None = None
    """Ends the session by itself (``Profiler.expire``), if nobody stops it first."""


class Profiler:
    """The profile actions of one gateway (``DevGateway``), and their sessions."""

    def __init__(self, gateway: Gateway, init: InitProfiling | None = None) -> None:
        self.gateway = gateway
        self.init = init
        """Where ``--init`` watches for the replicas it restarts (None: this gateway's
        server cannot restart replicas)."""
        self.sessions: dict[str, _Session] = {}
        self._expiring: set[asyncio.Task[Any]] = set()

    def routes(self) -> list[StarletteRoute]:
        return [
            StarletteRoute(PROFILE_PATH + "/start", self._start, methods=["POST"]),
            StarletteRoute(PROFILE_PATH + "/stop", self._stop, methods=["POST"]),
            StarletteRoute(PROFILE_PATH + "/init", self._init, methods=["POST"]),
        ]

    # -- actions -------------------------------------------------------------------------

    async def _start(self, request: Request) -> JSONResponse:
        read = await self._read_action(request)
        if isinstance(read, JSONResponse):
            return read
        route, settings, asked = read
        asked_duration = _duration(asked)
        if asked_duration is None:
            return _error(400, "bad_request", "duration_s must be a number of seconds, more than 0")
        replicas: list[Sampled] = [
            replica
            for pool in route.pools.values()
            for replica in pool.replicas
            if replica.pid is not None and replica.notify(settings)
        ]
        if not replicas:
            return _error(503, "unavailable", f"no replica of {route.endpoint.url} is running")
        while len(self.sessions) >= MAX_SESSIONS:
            oldest = next(iter(self.sessions))
            await _collect(self.sessions.pop(oldest).replicas)
        session = secrets.token_hex(8)
        self.sessions[session] = _Session(replicas)
        limit = min(asked_duration + GRACE_S, MAX_SESSION_S)
        self.sessions[session].expiry = asyncio.get_running_loop().call_later(
            limit, self.expire, session
        )
        return _ok({"session": session, "replicas": [replica.id for replica in replicas]})

    async def _stop(self, request: Request) -> JSONResponse:
        asked = await _read(request, self.gateway)
        if isinstance(asked, JSONResponse):
            return asked
        session = self.sessions.pop(str(asked.get("session")), None)
        if session is None:
            return _error(404, "not_found", "no such profile session (stopped already?)")
        if session.expiry is not None:
            session.expiry.cancel()
        return _ok({"profiles": await _collect(session.replicas)})

    def expire(self, session: str) -> None:
        """End ``session`` by itself: its replicas stop sampling, its samples are dropped."""
        ended = self.sessions.pop(session, None)
        if ended is not None:
            task = asyncio.ensure_future(_collect(ended.replicas))
            self._expiring.add(task)
            task.add_done_callback(self._expiring.discard)

    async def _init(self, request: Request) -> JSONResponse:
        read = await self._read_action(request)
        if isinstance(read, JSONResponse):
            return read
        route, settings, _ = read
        specs = route.endpoint.components
        keys = [spec.key for spec in specs.values() if spec.init]
        if not keys:
            return _error(400, "bad_request", f"{route.endpoint.url} has no component with init")
        reinit, init = self.gateway.reinit, self.init
        if reinit is None or init is None:
            return _error(503, "unavailable", "this server cannot restart replicas")
        if init.busy:
            return _error(409, "busy", "an init is already being profiled on this server")
        with init.watching(keys, settings) as watch:
            change = await reinit(keys)
        profiles = await _collect(watch.replicas)
        if change.failed:
            message = "; ".join(f"{key}: {error}" for key, error in change.failed.items())
            return _error(500, "init_error", f"{message} (the previous replicas keep serving)")
        return _ok({"profiles": profiles, "components": keys})

    async def _read_action(
        self, request: Request
    ) -> tuple[Route, ProfileStart, dict[str, Any]] | JSONResponse:
        """The endpoint and the sampler's settings a start or init action asks for, or the
        answer refusing it."""
        asked = await _read(request, self.gateway)
        if isinstance(asked, JSONResponse):
            return asked
        route = self._route(asked)
        if isinstance(route, JSONResponse):
            return route
        settings = _settings(asked)
        if isinstance(settings, JSONResponse):
            return settings
        return route, settings, asked

    def _route(self, asked: dict[str, Any]) -> Route | JSONResponse:
        url = asked.get("url")
        if not isinstance(url, str) or not url.startswith("/"):
            return _error(400, "bad_request", 'give the endpoint as {"url": "/path"}')
        routes = self.gateway.table.routes
        route = routes.get(url) or routes.get(url_key(url))
        if route is None:
            return _error(404, "not_found", f"no endpoint at {url}")
        return route


async def _read(request: Request, gateway: Gateway) -> dict[str, Any] | JSONResponse:
    refused = gateway.refuse_action(request, PROFILE_PATH)
    if refused is not None:
        return refused
    body = await request.body()
    if len(body) > _MAX_BODY:
        return _error(413, "payload_too_large", "a profile action takes a small JSON object")
    import json

    try:
        asked = json.loads(body or b"{}")
    except (ValueError, RecursionError):
        asked = None
    if not isinstance(asked, dict) or nests_deeper(asked, MAX_DEPTH):
        return _error(400, "bad_request", "the body must be a JSON object (a small one)")
    return asked


def _settings(asked: dict[str, Any]) -> ProfileStart | JSONResponse:
    interval = asked.get("interval_s", 0.01)
    if not isinstance(interval, (int, float)) or not 0.001 <= interval <= 1.0:
        return _error(400, "bad_request", "interval_s must be between 0.001 and 1 second")
    return ProfileStart(float(interval), bool(asked.get("cpu", False)))


def _duration(asked: dict[str, Any]) -> float | None:
    """The session's ``duration_s`` (default: the longest, ``MAX_SESSION_S``), or None
    when it is no positive number."""
    duration = asked.get("duration_s", MAX_SESSION_S)
    if isinstance(duration, bool) or not isinstance(duration, int | float):
        return None
    if not (math.isfinite(duration) and duration > 0):
        return None
    return float(duration)


async def _collect(replicas: list[Sampled]) -> list[dict[str, Any]]:
    """Stop sampling in ``replicas`` and gather their profiles (a gone one gives none)."""
    answers = await asyncio.gather(
        *(replica.request(ProfileStop, COLLECT_TIMEOUT_S) for replica in replicas)
    )
    profiles = []
    for replica, answer in zip(replicas, answers, strict=True):
        if isinstance(answer, ProfileData) and answer.profile is not None:
            profiles.append(
                {"replica": replica.id, "component": replica.spec.name, **answer.profile}
            )
    return profiles


def _ok(result: dict[str, Any]) -> JSONResponse:
    """The answer of an action; a lone surrogate (a frame's name can hold one) written as
    its escape, so it can be encoded."""
    return JSONResponse({"status": "ok", "result": without_surrogates(result)})


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(contract.error_envelope(code, message), status_code=status)


__all__ = ["InitProfiling", "Profiler", "Sampled"]
