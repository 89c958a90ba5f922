"""A profiling run against one host: `peach profile`'s work between its command line and
what it shows.

``profile_host`` loads the endpoint with `peach bench`'s load generator
(``peach_cli.bench.loadgen``) while every replica of its components samples itself. On a
`peach dev` (the project's simulator, or a ``--url`` on this machine whose health declares
``host: "dev"``) the samplers are started and stopped by ``/_peach/profile/start`` and
``/stop`` (``simulator.profiling``); ``init`` instead restarts the components that have an
``init`` with the sampler on (``/_peach/profile/init``) and sends no load. On a deployed app
(``host: "ray"``) the Ray dashboard profiles its replicas (``deploy.profiling``) while the
same load runs::

    with Host(Path("examples/quickstart"), None, doing="profiling", tool="profile") as host:
        profiled = profile_host(host, "/hot", Load(None, 8, 10.0, 60.0))
    profiled.profiles   # one raw profile a replica (``peach_cli.profile.model``)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from peach_cli.errors import PeachError, UsageError

if TYPE_CHECKING:
    from peach_cli.client.items import AskRequest
    from peach_cli.testing.host import FoundProject, Host

DEFAULT_CONCURRENCY = 8
INTERVAL_S = 0.01
"""The sampling interval in every replica (100 a second)."""


class ProfileFailed(PeachError):
    """The host refused or failed a profile action (the message says why)."""


@dataclass(frozen=True)
class Load:
    """The load sent while the profiler runs (`peach bench`'s)."""

    rate: float | None
    concurrency: int | None
    duration_s: float
    timeout_s: float


@dataclass(frozen=True)
class Profiled:
    """What a run measured: the replicas' raw profiles, how long it took, and the load's
    figures (None for ``init``) and whether Ctrl-C stopped it."""

    method: str
    path: str
    profiles: list[dict[str, Any]]
    duration_s: float
    figures: dict[str, Any] | None
    interrupted: bool


def profile_host(
    host: Host,
    target: str,
    load: Load,
    *,
    items: Sequence[str] = (),
    headers: Sequence[str] = (),
    cpu: bool = False,
    init: bool = False,
    address: str | None = None,
    named: bool = False,
) -> Profiled:
    """Profile ``target`` (a path joined to the host's base, or a full URL) on ``host``:
    the replicas sample CPU time with ``cpu``, else wall-clock time; ``init`` profiles the
    components' init instead of the load. A deployed app is profiled through the dashboard
    at ``address``, its lines named by the project here (``named``: the project was given,
    so it must be one)."""
    from peach_cli.client.items import build_request, with_tool

    request = with_tool(
        build_request(target, items, base=host.base, headers=headers, timeout_s=load.timeout_s),
        "profile",
    )
    origin, path = _split(request.url)
    if host.kind == "ray":
        if init:
            raise UsageError(
                f"--init is not offered on a deployed app ({origin}): its replicas cannot "
                "be restarted under the profiler from outside the cluster",
                hint="profile init locally: `peach profile TARGET --init` in the project folder",
            )  # fmt: skip
        line_maps = _line_maps(host.found, named=named)
        return _profile_deployed(request, path, address, load, cpu, line_maps)
    if named and host.url is not None:
        raise UsageError("give --url or --project, not both (with --url the project runs "
                         "where that server runs)")  # fmt: skip
    settings = {"url": path, "interval_s": INTERVAL_S, "cpu": cpu}
    if init:
        began = time.perf_counter()
        result = _action(origin, "init", settings, timeout_s=600.0)
        return Profiled(
            request.method, path, result["profiles"], time.perf_counter() - began, None, False
        )
    # the server ends the session by itself if this process dies before it stops it
    session = _action(origin, "start", {**settings, "duration_s": load.duration_s})
    try:
        figures, interrupted = _load(request, load)
    finally:
        result = _action(origin, "stop", {"session": session["session"]})
    return Profiled(
        request.method, path, result["profiles"], figures["duration_s"], figures, interrupted
    )


def _profile_deployed(
    request: AskRequest, path: str, address: str | None, load: Load, cpu: bool, line_maps: Any
) -> Profiled:
    """Profile a deployed app's replicas through the Ray dashboard (``deploy.profiling``)."""
    from peach_cli.deploy.dashboard import DashboardClient, resolve_address
    from peach_cli.deploy.profiling import check_profiling, find_replicas, profile_replicas
    from peach_cli.errors import DeployError

    origin, _ = _split(request.url)
    dashboard_url, _ = resolve_address(address)
    with DashboardClient(dashboard_url) as dashboard:
        try:
            dashboard.version()
        except DeployError as error:
            raise UsageError(
                f"peach profile cannot profile {origin}: no Ray dashboard to profile its "
                f"replicas with ({error})",
                hint="pass the cluster's dashboard with --address (env PEACH_RAY_ADDRESS)",
            ) from None
        replicas = find_replicas(dashboard, origin, path)
        check_profiling(dashboard, replicas[0])
        pending = profile_replicas(
            dashboard, replicas, load.duration_s, cpu=cpu, line_maps=line_maps
        )
        figures, interrupted = _load(request, load)
        profiles = pending()
    return Profiled(request.method, path, profiles, figures["duration_s"], figures, interrupted)


def _line_maps(found: FoundProject, *, named: bool) -> dict[str, dict[str, Any]]:
    """By deployment, its component's notebook code by compiled name (``notebooks/X.ipynb``),
    to name the lines py-spy reports as cells; empty when there is no project here (a
    project ``named`` with ``--project`` must be one)."""
    if named:
        found.require()
    plan = found.built()
    if plan is None:
        return {}
    from peach_cli.deploy.config import deployment_name

    return {deployment_name(spec): {spec.source_name: spec} for spec in plan.components()}


def _action(
    origin: str, action: str, settings: dict[str, Any], timeout_s: float = 30.0
) -> dict[str, Any]:
    from peach_cli.client.actions import Unreachable, peach_post

    try:
        answer = peach_post(
            origin, f"profile/{action}", settings, tool="profile", timeout_s=timeout_s
        )
    except Unreachable as error:
        raise ProfileFailed(error.message) from None
    body = answer.body if isinstance(answer.body, dict) else {}
    refusal = body.get("error") if isinstance(body.get("error"), dict) else None
    if answer.status == 404 and refusal is None:
        raise UsageError(
            f"the server at {origin} cannot profile (an older `peach dev`?)",
            hint="restart `peach dev` with this version of peach",
        )
    if answer.status != 200 or body.get("status") != "ok":
        message = (refusal or {}).get("message") or f"HTTP {answer.status}"
        if answer.status in (400, 403, 404):
            raise UsageError(f"cannot profile: {message}")
        raise ProfileFailed(f"cannot profile: {message}")
    result = body.get("result")
    return result if isinstance(result, dict) else {}


def _split(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}", parts.path or "/"


def _load(request: AskRequest, load: Load) -> tuple[dict[str, Any], bool]:
    """`peach bench`'s load for ``load.duration_s``: its figures, and whether Ctrl-C
    stopped it."""
    from peach_cli.bench.loadgen import LoadPlan, address_of, encode, run_load
    from peach_cli.bench.summary import Tally

    plan = LoadPlan(
        [encode(request)],
        address_of(request.url),
        rate=load.rate,
        concurrency=load.concurrency or DEFAULT_CONCURRENCY,
        duration_s=load.duration_s,
        timeout_s=load.timeout_s,
    )
    tally = Tally()
    interrupted = run_load(plan, tally)
    figures = tally.summary(
        target=f"{request.method} {request.url}",
        mode="open" if load.rate is not None else "closed",
        rate=load.rate,
        concurrency=None if load.rate is not None else plan.concurrency,
        warmup_s=0.0,
        interrupted=interrupted,
    )
    return figures, interrupted
