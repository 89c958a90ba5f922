"""`peach profile`: where an endpoint spends its time, as notebook positions (SPEC §12).

It loads the endpoint with `peach bench`'s load generator (``peach_cli.bench.loadgen``)
while every replica of the endpoint's components samples itself (``/_peach/profile/start``
and ``/stop`` on `peach dev`: ``simulator.profiling``); ``--init`` instead restarts the
components that have an ``init`` with the sampler on (``/_peach/profile/init``) and sends
no load. Without ``--url`` the project's simulator is started here (as `peach test` does).
The profiles are merged and folded (``peach_cli.profile.model``) and shown as the hottest
lines (``peach_cli.views.profile``), or as JSON; ``-o FILE.svg`` writes a flame graph,
``-o FILE.json`` a speedscope file. ``--url`` of a deployed app (its gateway's health
declares ``host: "ray"``, ``peach_cli.testing.host.declared_host``): its replicas are
profiled by the Ray dashboard (``deploy.profiling``) while the same load runs, and shown
the same way.

Exit codes: 0 profiled · 2 bad command line, or a host peach cannot profile (a dashboard
that cannot, ``--init`` on a deployed app) · 3 no request got an answer · 130 Ctrl-C.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from peach_cli.client.items import build_request, with_tool
from peach_cli.commands.bench import check_load_options
from peach_cli.errors import PeachError, UsageError

if TYPE_CHECKING:
    from peach_cli.commands.host_options import ProfileOptions
    from peach_cli.testing.host import FoundProject

EXIT_NO_ANSWER = 3
EXIT_INTERRUPTED = 130
DEFAULT_DURATION_S = 10.0
DEFAULT_CONCURRENCY = 8
INTERVAL_S = 0.01
"""The sampling interval in every replica (100 a second)."""
OUTPUT_SUFFIXES = (".svg", ".json")


class ProfileFailed(PeachError):
    """The host refused or failed a profile action (the message says why)."""


def run_profile(options: ProfileOptions) -> int:
    """Run `peach profile`; return the exit code (usage mistakes raise ``UsageError``)."""
    target, items, project, url = options.target, options.items or (), options.project, options.url
    rate, concurrency, duration_s = options.rate, options.concurrency, options.duration_s
    init, cpu, output_file, output = (
        options.init, options.cpu, options.output_file, options.output_format
    )  # fmt: skip
    headers, timeout_s, address = options.headers or (), options.timeout_s, options.address
    check_load_options(output, rate, concurrency, duration_s)
    if output_file is not None and output_file.suffix.lower() not in OUTPUT_SUFFIXES:
        raise UsageError(
            f"-o {output_file}: give a file ending in .svg (a flame graph) or .json (speedscope)"
        )
    if init and (rate is not None or concurrency is not None or duration_s is not None):
        raise UsageError("--init profiles init and sends no load: leave out --rate, "
                         "--concurrency and --duration")  # fmt: skip
    from peach_cli.testing.host import FoundProject, served

    # its conf found and read once: with --url, for the secrets to mask and the lines to name
    found = FoundProject.at(project or Path.cwd(), need_conf=url is None)
    load = Load(rate, concurrency, duration_s or DEFAULT_DURATION_S, timeout_s)
    shown = Shown(cpu, init, output_file, output)
    with served(found, url, doing="profiling", tool="profile") as (base, host):
        request = with_tool(
            build_request(target, items, base=base, headers=headers, timeout_s=timeout_s),
            "profile",
        )
        origin, path = _split(request.url)
        if host == "ray":
            if init:
                raise UsageError(
                    f"--init is not offered on a deployed app ({origin}): its replicas cannot "
                    "be restarted under the profiler from outside the cluster",
                    hint="profile init locally: `peach profile TARGET --init` in the project folder",
                )  # fmt: skip
            line_maps = _line_maps(found, named=project is not None)
            return _profile_deployed(request, path, address, load, shown, line_maps)
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
            session = _action(origin, "start", {**settings, "duration_s": load.duration_s})
            try:
                figures, interrupted = _load(request, load)
            finally:
                result = _action(origin, "stop", {"session": session["session"]})
            duration = figures["duration_s"]
    return _report(
        target, request.method, path, result["profiles"], duration, figures, shown, interrupted
    )


@dataclass(frozen=True)
class Load:
    """The load sent while the profiler runs (`peach bench`'s)."""

    rate: float | None
    concurrency: int | None
    duration_s: float
    timeout_s: float


@dataclass(frozen=True)
class Shown:
    """What is profiled (``cpu``: CPU time, ``init``: the components' init) and how the
    profile is shown: ``output`` (text or json), and the file ``-o`` writes."""

    cpu: bool
    init: bool
    output_file: Path | None
    output: str


def _report(
    target: str,
    method: str,
    path: str,
    profiles: list[dict[str, Any]],
    duration: float,
    figures: dict[str, Any] | None,
    shown: Shown,
    interrupted: bool,
) -> int:
    from peach_cli.profile.model import Profile

    init, cpu, output_file, output = shown.init, shown.cpu, shown.output_file, shown.output

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


def _split(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}", parts.path or "/"


def _profile_deployed(
    request: Any, path: str, address: str | None, load: Load, shown: Shown, line_maps: Any
) -> int:
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
            dashboard, replicas, load.duration_s, cpu=shown.cpu, line_maps=line_maps
        )
        figures, interrupted = _load(request, load)
        profiles = pending()
    return _report(
        request.url, request.method, path, profiles, figures["duration_s"], figures, shown,
        interrupted,
    )  # fmt: skip


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
    from peach_cli.testing.host import Unreachable, peach_post

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


def _load(request: Any, load: Load) -> tuple[dict[str, Any], bool]:
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


__all__ = ["run_profile"]
