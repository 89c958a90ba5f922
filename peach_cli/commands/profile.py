"""`peach profile`: where an endpoint spends its time, as notebook positions (SPEC §12).

It loads the endpoint with `peach bench`'s load generator (``peach_cli.bench.loadgen``)
while every replica of the endpoint's components samples itself (``/_peach/profile/start``
and ``/stop`` on `peach dev`: ``simulator.profiling``); ``--init`` instead restarts the
components that have an ``init`` with the sampler on (``/_peach/profile/init``) and sends
no load. Without ``--url`` the project's simulator is started here (as `peach test` does).
The profiles are merged and folded (``peach_cli.profile.model``) and shown as the hottest
lines (``peach_cli.views.profile``), or as JSON; ``-o FILE.svg`` writes a flame graph,
``-o FILE.json`` a speedscope file. ``--url`` of a deployed app (its gateway's health names
Serve deployments): its replicas are profiled by the Ray dashboard (``deploy.profiling``)
while the same load runs, and shown the same way.

Exit codes: 0 profiled · 2 bad command line, or a host peach cannot profile (a dashboard
that cannot, ``--init`` on a deployed app) · 3 no request got an answer · 130 Ctrl-C.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from peach_cli.client.items import DEFAULT_TIMEOUT_S, build_request, with_tool
from peach_cli.commands.bench import check_load_options
from peach_cli.errors import PeachError, UsageError

EXIT_NO_ANSWER = 3
EXIT_INTERRUPTED = 130
DEFAULT_DURATION_S = 10.0
DEFAULT_CONCURRENCY = 8
INTERVAL_S = 0.01
"""The sampling interval in every replica (100 a second)."""
OUTPUT_SUFFIXES = (".svg", ".json")


class ProfileFailed(PeachError):
    """The host refused or failed a profile action (the message says why)."""


def run_profile(
    target: str,
    items: Sequence[str] = (),
    *,
    project: Path | None = None,
    url: str | None = None,
    rate: float | None = None,
    concurrency: int | None = None,
    duration_s: float | None = None,
    init: bool = False,
    cpu: bool = False,
    output_file: Path | None = None,
    output: str = "text",
    headers: Sequence[str] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    address: str | None = None,
) -> int:
    """Run `peach profile`; return the exit code (usage mistakes raise ``UsageError``)."""
    check_load_options(output, rate, concurrency, duration_s)
    if output_file is not None and output_file.suffix.lower() not in OUTPUT_SUFFIXES:
        raise UsageError(
            f"-o {output_file}: give a file ending in .svg (a flame graph) or .json (speedscope)"
        )
    if init and (rate is not None or concurrency is not None or duration_s is not None):
        raise UsageError("--init profiles init and sends no load: leave out --rate, "
                         "--concurrency and --duration")  # fmt: skip
    with _host(project, url) as base:
        request = with_tool(
            build_request(target, items, base=base, headers=headers, timeout_s=timeout_s),
            "profile",
        )
        origin, path = _split(request.url)
        if url is not None and _deployed(origin):
            if init:
                raise UsageError(
                    f"--init is not offered on a deployed app ({origin}): its replicas cannot "
                    "be restarted under the profiler from outside the cluster",
                    hint="profile init locally: `peach profile TARGET --init` in the project folder",
                )  # fmt: skip
            return _profile_deployed(
                request, origin, path, project, address, rate, concurrency, duration_s, cpu,
                output_file, output, timeout_s,
            )  # fmt: skip
        if project is not None and url is not None:
            raise UsageError("give --url or --project, not both (with --url the project runs "
                             "where that server runs)")  # fmt: skip
        settings = {"url": path, "interval_s": INTERVAL_S, "cpu": cpu}
        if init:
            began = time.perf_counter()
            result = _action(origin, "init", settings, timeout_s=600.0)
            figures, interrupted = None, False
            duration = time.perf_counter() - began
        else:
            # the server ends the session by itself if this process dies before it stops it
            limit = {"duration_s": duration_s or DEFAULT_DURATION_S}
            session = _action(origin, "start", {**settings, **limit})["session"]
            try:
                figures, interrupted = _load(request, rate, concurrency, duration_s, timeout_s)
            finally:
                result = _action(origin, "stop", {"session": session})
            duration = figures["duration_s"]
    return _report(
        target, request.method, path, result["profiles"], duration, figures, init, cpu,
        output_file, output, interrupted,
    )  # fmt: skip


def _report(
    target: str,
    method: str,
    path: str,
    profiles: list[dict[str, Any]],
    duration: float,
    figures: dict[str, Any] | None,
    init: bool,
    cpu: bool,
    output_file: Path | None,
    output: str,
    interrupted: bool,
) -> int:
    from peach_cli.profile.model import Profile

    profile = Profile.merge(profiles, duration_s=duration)
    what = f"init of {path}" if init else f"{method} {path}"
    title = f"peach profile: {what} ({'CPU time' if cpu else 'wall-clock'})"
    if output_file is not None:
        _write(output_file, profile, title)
    if output == "json":
        from peach_cli.views.console import print_json

        print_json(profile.to_json(), channel="profile")
    else:
        from peach_cli.views.profile import render_profile

        render_profile(profile, what, figures, output_file)
    if interrupted:
        return EXIT_INTERRUPTED
    if figures is not None and figures["requests"]["answered"] == 0:
        return EXIT_NO_ANSWER
    return 0


def _write(path: Path, profile: Any, title: str) -> None:
    import json

    from peach_cli.boundary import json_text, write_file

    if path.suffix.lower() == ".svg":
        from peach_cli.profile.flame import flame_graph

        text = flame_graph(profile, title)
    else:
        from peach_cli.profile.model import speedscope

        text = json_text(speedscope(profile, title), indent=None)
        json.loads(text)  # what speedscope reads
    try:
        write_file(path, text, channel="profile")
    except OSError as error:
        raise UsageError(f"-o {path}: cannot write it ({error.strerror})") from None


@contextmanager
def _host(project: Path | None, url: str | None) -> Iterator[str | None]:
    if url is not None:
        from peach_cli.commands.loading import masked_root

        masked_root(project or Path.cwd())  # frame names and answers shown masked, as test --url
        yield url
        return
    from peach_cli.checks.build import checked_plan
    from peach_cli.commands.loading import project_root
    from peach_cli.testing.host import local_host

    root = project_root(project or Path.cwd(), need_conf=True)
    plan, _ = checked_plan(root, "profiling")  # "2 errors in X: not profiling"
    with local_host(root, plan) as served:
        yield served


def _split(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}", parts.path or "/"


def _deployed(origin: str) -> bool:
    """Whether ``origin`` is a deployed peach app (its replicas on a Ray cluster) rather than
    a `peach dev` on this machine; refuses (exit 2) what is neither, saying why."""
    import httpx

    from peach_cli.addresses import is_loopback

    if not is_loopback(urlsplit(origin).hostname):
        return True
    try:
        health = httpx.get(f"{origin}/_peach/health", timeout=5.0)
    except httpx.HTTPError as error:
        raise UsageError(
            f"nothing answers at {origin} ({type(error).__name__})",
            hint="start `peach dev` first, or leave out --url to let peach profile start it",
        ) from None
    try:
        body = health.json()
    except ValueError:
        body = None
    components = body.get("components") if isinstance(body, dict) else None
    if health.status_code not in (200, 503) or not isinstance(components, list):
        raise UsageError(
            f"peach profile cannot profile {origin}: it is neither a `peach dev` nor a "
            "deployed peach app (it does not answer /_peach/health as they do)",
            hint="give --url of a running `peach dev` or of a deployed app's proxy",
        )
    return any(  # a replica on Ray names its node; `peach dev`'s run here
        isinstance(replica, dict) and "node_ip" in replica
        for component in components
        if isinstance(component, dict)
        for replica in component.get("replicas") or []
    )


def _profile_deployed(
    request: Any,
    origin: str,
    path: str,
    project: Path | None,
    address: str | None,
    rate: float | None,
    concurrency: int | None,
    duration_s: float | None,
    cpu: bool,
    output_file: Path | None,
    output: str,
    timeout_s: float,
) -> int:
    """Profile a deployed app's replicas through the Ray dashboard (``deploy.profiling``)."""
    from peach_cli.deploy.dashboard import DashboardClient, resolve_address
    from peach_cli.deploy.profiling import check_profiling, find_replicas, profile_replicas
    from peach_cli.errors import DeployError

    dashboard_url, _ = resolve_address(address)
    seconds = duration_s or DEFAULT_DURATION_S
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
            dashboard, replicas, seconds, cpu=cpu, line_maps=_line_maps(project)
        )
        figures, interrupted = _load(request, rate, concurrency, seconds, timeout_s)
        profiles = pending()
    return _report(
        request.url, request.method, path, profiles, figures["duration_s"], figures, False, cpu,
        output_file, output, interrupted,
    )  # fmt: skip


def _line_maps(project: Path | None) -> dict[str, dict[str, Any]]:
    """By deployment, its component's notebook code by compiled name (``notebooks/X.ipynb``),
    to name the lines py-spy reports as cells; empty when there is no project here."""
    from peach_cli.checks.build import build_plan
    from peach_cli.commands.loading import project_root

    try:
        root = project_root(project or Path.cwd(), need_conf=True)
    except UsageError:
        if project is not None:
            raise
        return {}
    plan, _ = build_plan(root)
    if plan is None:
        return {}
    from peach_cli.deploy.config import deployment_name

    return {deployment_name(spec): {spec.source_name: spec} for spec in plan.components()}


def _action(
    origin: str, action: str, settings: dict[str, Any], timeout_s: float = 30.0
) -> dict[str, Any]:
    import httpx

    from peach_cli.devtoken import token_headers

    try:
        answer = httpx.post(
            f"{origin}/_peach/profile/{action}",
            json=settings,
            headers={"x-peach-tool": "profile", **token_headers(origin)},
            timeout=timeout_s,
        )
    except httpx.HTTPError as error:
        raise ProfileFailed(f"/_peach/profile/{action} failed: {type(error).__name__}") from None
    try:
        body = answer.json()
    except ValueError:
        body = {}
    if answer.status_code == 404 and not isinstance(body.get("error"), dict):
        raise UsageError(
            f"the server at {origin} cannot profile (an older `peach dev`?)",
            hint="restart `peach dev` with this version of peach",
        )
    if answer.status_code != 200 or body.get("status") != "ok":
        refusal = body.get("error") if isinstance(body.get("error"), dict) else {}
        message = refusal.get("message") or f"HTTP {answer.status_code}"
        if answer.status_code in (400, 403, 404):
            raise UsageError(f"cannot profile: {message}")
        raise ProfileFailed(f"cannot profile: {message}")
    result = body.get("result")
    return result if isinstance(result, dict) else {}


def _load(
    request: Any,
    rate: float | None,
    concurrency: int | None,
    duration_s: float | None,
    timeout_s: float,
) -> tuple[dict[str, Any], bool]:
    """`peach bench`'s load for ``duration_s``: its figures, and whether Ctrl-C stopped it."""
    from peach_cli.bench.loadgen import LoadPlan, address_of, encode, run_load
    from peach_cli.bench.summary import Tally

    plan = LoadPlan(
        [encode(request)],
        address_of(request.url),
        rate=rate,
        concurrency=concurrency or DEFAULT_CONCURRENCY,
        duration_s=duration_s or DEFAULT_DURATION_S,
        timeout_s=timeout_s,
    )
    tally = Tally()
    interrupted = run_load(plan, tally)
    figures = tally.summary(
        target=f"{request.method} {request.url}",
        mode="open" if rate is not None else "closed",
        rate=rate,
        concurrency=None if rate is not None else plan.concurrency,
        warmup_s=0.0,
        interrupted=interrupted,
    )
    return figures, interrupted


__all__ = ["run_profile"]
