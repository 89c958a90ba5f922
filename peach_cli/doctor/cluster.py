"""Checks of a Ray cluster, through its dashboard's REST API (read-only calls only).

Example::

    check_cluster("http://127.0.0.1:8265", plan)
    # dashboard: it answers · token: needed and found, or not needed · ray_version: the
    # cluster's against the installed one · resources: its CPUs and memory against the plan's

Without an address (``--address`` or env ``PEACH_RAY_ADDRESS``) the cluster is not checked.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from peach_cli.doctor import Check
from peach_cli.errors import DeployError, UsageError

if TYPE_CHECKING:
    from peach_cli.deploy.dashboard import DashboardClient
    from peach_cli.deploy.resources import Needs
    from peach_cli.runtime.plan import ProjectPlan

_AFTER_DASHBOARD = ("token", "ray_version", "resources")


def check_cluster(address: str | None, plan: ProjectPlan | None) -> list[Check]:
    """The dashboard, its token, its Ray version and its resources (empty list: skipped)."""
    from peach_cli.deploy.dashboard import ADDRESS_ENV, resolve_address

    given = address or os.environ.get(ADDRESS_ENV)
    if not given:
        return [
            Check(
                "dashboard",
                "skip",
                "no cluster to check",
                advice=f"pass --address URL (or set {ADDRESS_ENV}) to check a Ray cluster",
            )
        ]
    try:
        url, warnings = resolve_address(given)
    except UsageError as error:
        return [Check("dashboard", "fail", error.message, error.hint), *_skipped("no dashboard")]
    return _check_dashboard(url, warnings, plan)


def _skipped(reason: str, names: tuple[str, ...] = _AFTER_DASHBOARD) -> list[Check]:
    return [Check(name, "skip", f"not checked: {reason}") for name in names]


def find_token() -> tuple[str | None, str, str | None]:
    """The token ``DashboardClient`` sends, where it was found (for messages), and why none
    could be read: as Ray's tools read it (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``,
    ``~/.ray/auth_token``)."""
    from peach_cli.deploy.dashboard import TOKEN_ENV, auth_token

    try:
        token, source = auth_token()
    except DeployError as error:  # RAY_AUTH_TOKEN_PATH names a file that cannot be read
        return None, TOKEN_ENV, error.message
    return token, source or TOKEN_ENV, None


def _check_dashboard(url: str, warnings: list[str], plan: ProjectPlan | None) -> list[Check]:
    from peach_cli.deploy.dashboard import DashboardClient, DashboardRefused

    token, source, unreadable = find_token()
    with DashboardClient(url, token="") as probe:  # without a token first: is one needed?
        try:
            version: dict[str, Any] | None = probe.version()
        except DashboardRefused:
            version = None
        except DeployError as error:
            details = {"address": probe.shown}
            return [
                Check("dashboard", "fail", error.message, error.hint, details),
                *_skipped("the dashboard does not answer"),
            ]
        note = f" ({'; '.join(warnings)})" if warnings else ""
        checks = [
            Check(
                "dashboard",
                "ok",
                f"Ray dashboard at {probe.shown} answers{note}",
                details={"address": probe.shown},
            )
        ]
        if version is not None:
            extra = f" ({source} is set but not needed)" if token else ""
            checks.append(
                Check("token", "ok", f"no token needed{extra}", details={"needed": False})
            )
            return checks + _check_ray(version) + _check_resources(probe, plan)
    if token is None:
        checks.append(
            Check(
                "token",
                "fail",
                f"the cluster needs a token: {unreadable}"
                if unreadable
                else f"the cluster needs a token and {source} is not set",
                advice=f"set {source} to the cluster's token",
                details={"needed": True, "found": False},
            )
        )
        return checks + _skipped("no token", _AFTER_DASHBOARD[1:])
    with DashboardClient(url, token=token) as dashboard:
        try:
            version = dashboard.version()
        except DeployError as error:  # 403: not the cluster's token
            checks.append(
                Check(
                    "token",
                    "fail",
                    f"the cluster refused the token in {source}: {error.message}",
                    advice=f"check {source}: it must be the cluster's token",
                    details={"needed": True, "found": True, "accepted": False},
                )
            )
            return checks + _skipped("the token is refused", _AFTER_DASHBOARD[1:])
        checks.append(
            Check(
                "token",
                "ok",
                f"the cluster needs a token: the one in {source} is accepted",
                details={"needed": True, "found": True, "accepted": True},
            )
        )
        return checks + _check_ray(version) + _check_resources(dashboard, plan)


def installed_ray_version() -> str | None:
    """The version of Ray installed here, without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ray")
    except PackageNotFoundError:
        return None


def compare_ray(cluster: str | None, local: str | None) -> Check:
    """The same version ok; the same major.minor a warning; anything else a failure; no
    Ray installed here ok (peach needs only the dashboard).

    >>> compare_ray("2.60.0", "2.60.0").status, compare_ray("2.60.1", "2.60.0").status
    ('ok', 'warn')
    >>> compare_ray("2.41.0", "2.60.0").status, compare_ray("2.60.0", None).status
    ('fail', 'ok')
    """
    details = {"cluster": cluster, "installed": local}
    advice = f"install the cluster's version here: python -m pip install 'ray[serve]=={cluster}'"
    if cluster is None:
        return Check(
            "ray_version", "warn", "the dashboard did not say its Ray version", None, details
        )
    if local is None:  # nothing peach runs here imports Ray: it is an extra
        summary = (
            f"Ray {cluster} on the cluster, not installed here (not needed: peach talks to "
            "the dashboard; the extra peach-cli[ray] checks Serve configs locally)"
        )
        return Check("ray_version", "ok", summary, details=details)
    summary = f"Ray {cluster} on the cluster, {local} installed here"
    if local == cluster:
        return Check("ray_version", "ok", summary, details=details)
    if local is not None and cluster.split(".")[:2] == local.split(".")[:2]:
        return Check("ray_version", "warn", summary, advice, details)
    return Check("ray_version", "fail", summary, advice, details)


def _check_ray(version: dict[str, Any]) -> list[Check]:
    cluster = version.get("ray_version")
    return [compare_ray(str(cluster) if cluster else None, installed_ray_version())]


def plan_needs(plan: ProjectPlan) -> Needs:
    """What a deploy of ``plan`` reserves: the gateway, then replicas × (CPUs, memory)."""
    from peach_cli.deploy.config import GATEWAY, GATEWAY_CPUS, deployment_name
    from peach_cli.deploy.resources import application_needs

    deployments: list[dict[str, Any]] = [
        {"name": GATEWAY, "num_replicas": 1, "ray_actor_options": {"num_cpus": GATEWAY_CPUS}}
    ]
    for spec in plan.components():
        options: dict[str, Any] = {"num_cpus": spec.cpus}
        if spec.memory:
            options["memory"] = spec.memory
        deployments.append(
            {
                "name": deployment_name(spec),
                "num_replicas": spec.replicas,
                "ray_actor_options": options,
            }
        )
    return application_needs({"deployments": deployments})


def _check_resources(dashboard: DashboardClient, plan: ProjectPlan | None) -> list[Check]:
    from peach_cli.deploy.resources import (
        application_needs,
        check_fits,
        cpus_text,
        gib_text,
        has_totals,
        pair,
    )

    try:
        report = dashboard.cluster_status()
        applications = dashboard.serve_details().get("applications") or {}
    except DeployError as error:
        return [Check("resources", "fail", error.message, error.hint)]
    usage = report.get("usage") or {}
    used_cpus, total_cpus = pair(usage.get("CPU"))
    used_memory, total_memory = pair(usage.get("memory"))
    details: dict[str, Any] = {
        "cpus": total_cpus,
        "cpus_free": total_cpus - used_cpus,
        "memory": total_memory,
        "memory_free": total_memory - used_memory,
    }
    has = (
        f"the cluster has {cpus_text(total_cpus)} CPUs ({cpus_text(total_cpus - used_cpus)} free) "
        f"and {gib_text(total_memory)} GiB ({gib_text(total_memory - used_memory)} "
        "free)"
    )
    if not has_totals(report):
        return [
            Check(
                "resources",
                "warn",
                "the cluster reports no resources yet (it may have just started)",
                "run peach doctor again in a few seconds",
                details,
            )
        ]
    if plan is None:
        return [
            Check(
                "resources",
                "skip",
                f"{has}; no valid project to compare with",
                "fix the project (peach validate) to compare what it asks for",
                details,
            )
        ]
    needs = plan_needs(plan)
    current = applications.get(plan.codops) or {}
    held = None
    if current.get("deployed_app_config") and current.get("status") != "DELETING":
        held = application_needs(current["deployed_app_config"])  # a redeploy gives it back
    details.update(asks_cpus=needs.cpus, asks_memory=needs.memory)
    asks = f"the project asks for {cpus_text(needs.cpus)} CPUs and {gib_text(needs.memory)} GiB"
    try:
        check_fits(needs, report, held)
    except DeployError as error:
        return [Check("resources", "fail", error.message, error.hint, details)]
    return [Check("resources", "ok", f"{asks}; {has}", details=details)]
