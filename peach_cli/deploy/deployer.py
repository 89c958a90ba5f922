"""The steps of `peach deploy`, `peach status` and `peach delete` against a dashboard.

``deploy``: build the bundle → connect → check resources → upload the zips the cluster
lacks (one project package whatever the component count, a small spec package per
component: see ``packaging``) → PUT our application alongside the cluster's other ones → poll until every replica
runs (or the first replica start failure, or the timeout). Progress goes to a ``Reporter``;
failures are raised (``DeployError`` and subclasses); nothing here prints.

Example::

    result = deploy(plan, address=None, reporter=Reporter())
    print(result.url)          # http://127.0.0.1:8000
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.deploy.config import (
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PORT,
    ROUTE_PREFIX,
    SCHEMA_SKIPPED,
    SURGE_OPTION,
    Bundle,
    TaskOptions,
    build_bundle,
    http_url,
    merge_applications,
    validate_config,
    without_surge,
)
from peach_cli.deploy.dashboard import DashboardClient, resolve_address
from peach_cli.deploy.progress import (
    ApplicationState,
    read_application,
    read_applications,
    starting_errors,
    startup_failure,
    with_replica_errors,
    with_tasks,
)
from peach_cli.deploy.release import (
    Changes,
    component_parts,
    current_release,
    plan_changes,
    stamp,
    task_fingerprints,
)
from peach_cli.deploy.resources import (
    Needs,
    application_needs,
    check_fits,
    cpus_text,
    fits_when_idle,
    gib_text,
    has_totals,
    replaced_running,
)
from peach_cli.deploy.variables import deployed_secrets
from peach_cli.errors import DeployError
from peach_cli.runtime.plan import ProjectPlan
from peach_cli.wording import count, human_size

if TYPE_CHECKING:
    from peach_cli.deploy.uploads import Selection

DEFAULT_TIMEOUT_S = 300.0
POLL_INTERVAL_S = 0.25


class ReplicaStartFailed(DeployError):
    """A replica could not start; ``error`` is the user's exception and traceback."""

    def __init__(self, app: str, deployment: str, error: str) -> None:
        where = f"a replica of {deployment}" if deployment else f"the application {app}"
        super().__init__(
            f"{where} failed to start:\n{error}",
            hint="fix the error and run `peach deploy` again; until then Serve keeps retrying "
            f"(`peach status` shows it, `peach delete {app}` removes it)",
        )
        self.deployment = deployment
        self.error = error


class DeployTimeout(DeployError):
    """Not every replica was running when ``--timeout`` ran out."""


@dataclass
class Reporter:
    """Where the steps report; the CLI renders them, tests collect them."""

    note: Callable[[str], None] = lambda message: None
    warn: Callable[[str], None] = lambda message: None
    progress: Callable[[ApplicationState, float], None] = lambda app, elapsed: None
    hide: Callable[[Iterable[str]], None] = lambda values: None
    """Values the steps learn are secret (the project's, the running version's): the CLI
    masks them in everything the run shows."""


@dataclass
class DeployResult:
    app: ApplicationState
    url: str
    elapsed_s: float
    uploaded: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    uploaded_bytes: int = 0


def dry_run_bundle(
    plan: ProjectPlan,
    *,
    http_host: str | None = None,
    http_port: int | None = None,
    route_prefix: str = ROUTE_PREFIX,
    reporter: Reporter | None = None,
    tasks: TaskOptions | None = None,
) -> Bundle:
    """The exact Serve config a deploy of ``plan`` would send (checked by Ray's schema
    when Ray is installed here; ``reporter`` is warned when it is not) and the packages it
    would upload to a cluster that has none of them (``Bundle.upload_bytes``)."""
    bundle = build_bundle(
        plan,
        http_host=http_host or DEFAULT_HTTP_HOST,
        http_port=http_port or DEFAULT_HTTP_PORT,
        route_prefix=route_prefix,
        tasks=tasks,
    )
    if not validate_config(bundle.config) and reporter is not None:
        reporter.warn(SCHEMA_SKIPPED)
    return bundle


def upload_selection(plan: ProjectPlan) -> Selection:
    """The project files a deploy of ``plan`` uploads, once, in the project package."""
    from peach_cli.deploy.uploads import select_files

    return select_files(plan.root, plan.watched_files)


def connect(address: str | None, reporter: Reporter) -> DashboardClient:
    url, warnings = resolve_address(address)
    for warning in warnings:
        reporter.warn(warning)
    return DashboardClient(url)


def _bundle_with_secrets(
    plan: ProjectPlan,
    reporter: Reporter,
    *,
    route_prefix: str,
    tasks: TaskOptions | None,
    http_host: str = DEFAULT_HTTP_HOST,
    http_port: int = DEFAULT_HTTP_PORT,
) -> Bundle:
    """``build_bundle`` for ``plan`` with the values of the secrets the project's
    components and tasks declare (each hidden from every output first, ``reporter.hide``; a missing one raises
    ``MissingSecret`` before anything changes on the cluster)."""
    from peach_cli.deploy.scheduler import task_secrets
    from peach_cli.project.secrets import secret_values

    needed = [s for c in plan.components() for s in c.secrets] + task_secrets(plan)
    secrets = secret_values(plan.root, needed)
    reporter.hide(secrets.values())
    return build_bundle(
        plan,
        http_host=http_host,
        http_port=http_port,
        route_prefix=route_prefix,
        secrets=secrets,
        tasks=tasks,
    )


def deploy(
    plan: ProjectPlan,
    *,
    address: str | None = None,
    http_host: str | None = None,
    http_port: int | None = None,
    route_prefix: str = ROUTE_PREFIX,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    reporter: Reporter | None = None,
    poll_interval_s: float = POLL_INTERVAL_S,
    tasks: TaskOptions | None = None,
    ref: tuple[Path, str] | None = None,
) -> DeployResult:
    """Deploy ``plan`` and wait until every replica runs; raise on the first failure.

    Nothing on the cluster changes before the route prefix, the config and the resources
    have been checked. ``tasks``: how the project's task scheduler runs its loop. The
    application records the release (``release.stamp``); ``ref`` is ``(project folder,
    revision)`` when ``plan`` was read from an export of that revision.
    """
    reporter = reporter or Reporter()
    started = time.monotonic()
    bundle = _bundle_with_secrets(
        plan,
        reporter,
        http_host=http_host or DEFAULT_HTTP_HOST,
        http_port=http_port or DEFAULT_HTTP_PORT,
        route_prefix=route_prefix,
        tasks=tasks,
    )
    source, revision = ref if ref is not None else (None, None)
    release = current_release(plan, bundle, source=source, ref=revision)
    stamp(bundle, release)
    with connect(address, reporter) as dashboard:
        version = dashboard.version()
        reporter.note(f"connected to Ray {version.get('ray_version', '?')} at {dashboard.shown}")
        details = dashboard.serve_details()
        reporter.hide(deployed_secrets(details))  # the running version's, in its errors
        config, warnings = merge_applications(
            bundle, details, http_host=http_host, http_port=http_port
        )
        for warning in warnings:
            reporter.warn(warning)
        validate_config(config)
        crowded = _check_resources(dashboard, bundle, details, reporter)
        if crowded:
            config = without_surge(config, bundle.app_name, crowded)
        uploaded, reused = _upload(dashboard, bundle)
        sent = sum(len(p.data) for p in bundle.packages if p.name in uploaded)
        reporter.note(
            f"code: {count(len(uploaded), 'package')} uploaded ({human_size(sent)}), "
            f"{len(reused)} already on the cluster"
        )
        current = (details.get("applications") or {}).get(bundle.app_name)
        replaced = starting_errors(read_application(bundle.app_name, current)) if current else {}
        _put(dashboard, config, reporter)
        reporter.note(f"application '{bundle.app_name}' submitted; waiting for its replicas")
        app = wait_until_running(
            dashboard,
            bundle.app_name,
            timeout_s=max(0.0, timeout_s - (time.monotonic() - started)),
            reporter=reporter,
            started=started,
            poll_interval_s=poll_interval_s,
            code=bundle.codes,
            replaced=replaced,
        )
        url = http_url(config, "" if route_prefix == ROUTE_PREFIX else route_prefix)
        _check_proxies(dashboard, url, reporter)
    return DeployResult(
        app=dataclasses.replace(app, release=release.to_dict()),
        url=url,
        elapsed_s=time.monotonic() - started,
        uploaded=uploaded,
        reused=reused,
        uploaded_bytes=sent,
    )


def diff(
    plan: ProjectPlan,
    *,
    address: str | None = None,
    route_prefix: str = "/",
    reporter: Reporter | None = None,
    tasks: TaskOptions | None = None,
) -> Changes:
    """``peach deploy --diff``: what a deploy of ``plan`` would change; nothing changes.
    The config is built as the deploy builds it (``build_bundle``, the project's secrets
    in it: a changed secret restarts its components; ``tasks``: the scheduler's loop)."""
    reporter = reporter or Reporter()
    bundle = _bundle_with_secrets(plan, reporter, route_prefix=route_prefix, tasks=tasks)
    with connect(address, reporter) as dashboard:
        details = dashboard.serve_details()
    reporter.hide(deployed_secrets(details))
    return plan_changes(bundle, details, component_parts(plan), task_fingerprints(plan, bundle))


RESOURCE_REPORT_WAIT_S = 15.0
RESOURCE_RELEASE_WAIT_S = 10.0
"""How long a shortage may be replicas still stopping (the report lags a few seconds)."""


def _check_resources(
    dashboard: DashboardClient, bundle: Bundle, details: dict[str, Any], reporter: Reporter
) -> list[str]:
    """Raise when the project cannot fit the cluster; return the deployments whose new
    replicas have no room beside the old ones they replace (said to ``reporter``): those
    roll as Ray does by default, old replicas first."""
    current = (details.get("applications") or {}).get(bundle.app_name) or {}
    held = surge = Needs()
    # the version being replaced gives back what it reserves, running or not (a redeploy
    # after a failed init replaces replicas that Serve keeps retrying) — once the new
    # replicas run: until then the running ones it replaces keep theirs
    if current.get("deployed_app_config") and current.get("status") != "DELETING":
        held = application_needs(current["deployed_app_config"])
        surge = replaced_running(bundle.application, current)
    # a cluster that just started has no resource report for a few seconds
    deadline = time.monotonic() + RESOURCE_REPORT_WAIT_S
    while True:
        report = dashboard.cluster_status()
        if has_totals(report):
            break
        if time.monotonic() >= deadline:
            reporter.warn("the cluster reports no resources yet: CPUs and memory not checked")
            return []
        time.sleep(0.5)
    needs = application_needs(bundle.application)
    deadline = time.monotonic() + RESOURCE_RELEASE_WAIT_S
    waiting = False
    while True:
        try:
            check_fits(needs + surge, report, held)
            return []
        except DeployError:
            pass
        try:
            check_fits(needs, report, held)
            return _no_room_for_surge(surge, reporter)
        except DeployError:
            # replicas just deleted or replaced still count as used for a few seconds
            if not fits_when_idle(needs, report) or time.monotonic() >= deadline:
                raise
        if not waiting:
            reporter.note("not enough free CPUs or memory yet: waiting for stopping replicas")
            waiting = True
        time.sleep(0.5)
        report = dashboard.cluster_status()


def _no_room_for_surge(surge: Needs, reporter: Reporter) -> list[str]:
    names = [name for name, _, _ in surge.replicas]
    more = f"{cpus_text(surge.cpus)} CPUs"
    if surge.memory:
        more += f" and {gib_text(surge.memory)} GiB"
    reporter.warn(
        f"the cluster has no room for the new replicas of {', '.join(names)} beside the old "
        f"ones ({more} more): the old ones stop first, as Ray rolls by default, and requests "
        "wait while the new ones start"
    )
    return names


def _put(dashboard: DashboardClient, config: dict[str, Any], reporter: Reporter) -> None:
    try:
        try:
            dashboard.put_applications(config)
        except DeployError as error:
            if SURGE_OPTION not in error.message:
                raise
            reporter.warn(
                f"the cluster's Ray has no `{SURGE_OPTION}`: a changed component's old "
                "replicas stop before its new ones start, and requests wait while they start"
            )
            dashboard.put_applications(without_surge(config))
    except DeployError as error:
        if "ProxyActor" not in error.message:
            raise
        options = config.get("http_options") or {}
        address = (
            f"{options.get('host', DEFAULT_HTTP_HOST)}:{options.get('port', DEFAULT_HTTP_PORT)}"
        )
        raise DeployError(
            f"Serve's HTTP proxy could not start on {address}: is the port in use?",
            hint="free the port (Serve keeps retrying it), or stop Serve (`serve shutdown`, "
            "which removes every application) and deploy with another --http-port",
        ) from None


PROXY_WAIT_S = 10.0


def _check_proxies(dashboard: DashboardClient, url: str, reporter: Reporter) -> None:
    """Warn when Serve's HTTP proxy is not healthy: the replicas run but nothing answers."""
    deadline = time.monotonic() + PROXY_WAIT_S
    while True:
        proxies = dashboard.serve_details().get("proxies") or {}
        states = sorted({str(p.get("status")) for p in proxies.values()})
        if not proxies or states == ["HEALTHY"]:
            return
        if time.monotonic() >= deadline:
            reporter.warn(
                f"Serve's HTTP proxy is {', '.join(states)}: requests to {url} may fail "
                "(another process may hold the port)"
            )
            return
        time.sleep(POLL_INTERVAL_S)


def _upload(dashboard: DashboardClient, bundle: Bundle) -> tuple[list[str], list[str]]:
    uploaded, reused = [], []
    for package in bundle.packages:
        if dashboard.package_exists(package.name):
            reused.append(package.name)
        else:
            dashboard.upload_package(package.name, package.data)
            uploaded.append(package.name)
    return uploaded, reused


def wait_until_running(
    dashboard: DashboardClient,
    app_name: str,
    *,
    timeout_s: float,
    reporter: Reporter,
    started: float | None = None,
    poll_interval_s: float = POLL_INTERVAL_S,
    code: dict[str, str] | None = None,
    replaced: dict[str, str] | None = None,
) -> ApplicationState:
    """Poll until every replica of ``app_name`` runs; raise at the first start failure.

    ``code`` and ``replaced`` keep a failure of the version being replaced from failing
    the wait (see ``startup_failure``).
    """
    started = time.monotonic() if started is None else started
    deadline = time.monotonic() + timeout_s
    app: ApplicationState | None = None
    while True:
        details = dashboard.serve_details()
        raw = (details.get("applications") or {}).get(app_name)
        if raw is not None:
            app = read_application(app_name, raw)
            reporter.progress(app, time.monotonic() - started)
            failure = startup_failure(app, code, replaced)
            if failure is not None:
                raise ReplicaStartFailed(app_name, failure.deployment, failure.error)
            if app.ready:
                return app
        if time.monotonic() >= deadline:
            raise DeployTimeout(
                # the whole wait, from the deploy's start (not what was left of it)
                f"not every replica of '{app_name}' was running after "
                f"{time.monotonic() - started:.0f} s",
                hint=_pending_hint(app),
            )
        time.sleep(poll_interval_s)


def _pending_hint(app: ApplicationState | None) -> str:
    if app is None:
        return "the application never appeared: see `peach status`"
    waiting = [
        f"{d.name}: {d.running}/{d.target} running" + (f" — {d.message}" if d.message else "")
        for d in app.deployments
        if not d.ready
    ]
    if waiting:
        return "; ".join(waiting)
    if app.message:
        return f"application status {app.status}: {app.message}"
    return f"application status {app.status}: its deployments are not created yet"


def status(address: str | None = None, reporter: Reporter | None = None) -> list[ApplicationState]:
    """Every Serve application on the cluster with its deployments and replicas, each
    replica's last error as its gateway reports it (a failed drift re-init), and its tasks'
    rows as its scheduler reports them."""
    from peach_cli.boundary import mask_value
    from peach_cli.deploy.gateway_health import read_health, replica_errors, task_rows

    reporter = reporter or Reporter()
    with connect(address, reporter) as dashboard:
        details = dashboard.serve_details()
        secrets = deployed_secrets(details)
        reporter.hide(secrets)  # a replica's error may quote its secret
        health = mask_value(read_health(details, dashboard.address), secrets)
        details = mask_value(details, secrets)
    errors, tasks = replica_errors(health), task_rows(health)
    return [
        with_tasks(
            with_replica_errors(app, errors[app.name]) if app.name in errors else app,
            tasks.get(app.name),
        )
        for app in read_applications(details)
    ]


def delete(
    app_name: str,
    *,
    address: str | None = None,
    reporter: Reporter | None = None,
    timeout_s: float = 60.0,
    poll_interval_s: float = POLL_INTERVAL_S,
) -> list[str]:
    """Remove ``app_name`` and keep the others: PUT the remaining declarative applications.

    (``DELETE /api/serve/applications/`` would shut down Serve and every application.)
    Returns the names of the applications left running.
    """
    reporter = reporter or Reporter()
    with connect(address, reporter) as dashboard:
        details = dashboard.serve_details()
        applications = details.get("applications") or {}
        if app_name not in applications:
            names = ", ".join(sorted(applications)) or "none"
            raise DeployError(
                f"there is no application '{app_name}' on this cluster (applications: {names})"
            )
        if applications[app_name].get("source") != "declarative":
            raise DeployError(
                f"'{app_name}' was not deployed from a config (it was started from Python); "
                "it cannot be removed without shutting down Serve",
                hint="use `serve shutdown` to stop every application",
            )
        others = []
        for name, app in sorted(applications.items()):
            if name == app_name:
                continue
            if app.get("source") == "declarative" and app.get("deployed_app_config"):
                others.append(app["deployed_app_config"])
        config: dict[str, Any] = {"applications": others}
        http_options = details.get("http_options")
        if http_options:
            config["http_options"] = {
                k: http_options[k] for k in ("host", "port") if http_options.get(k) is not None
            }
        dashboard.put_applications(config)
        reporter.note(f"application '{app_name}' removed; waiting for its replicas to stop")
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = dashboard.serve_details().get("applications") or {}
            if app_name not in remaining:
                return sorted(remaining)
            if time.monotonic() >= deadline:
                raise DeployTimeout(
                    f"'{app_name}' was still shutting down after {timeout_s:.0f} s",
                    hint="`peach status` shows what is left",
                )
            time.sleep(poll_interval_s)
