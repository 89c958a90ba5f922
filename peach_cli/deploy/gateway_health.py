"""The replicas' last errors and the tasks' rows, as each deployed peach gateway reports them.

``peach status`` reads Serve's view of the cluster from the dashboard; a replica's last
failed drift re-init is known only to the application's gateway, which answers it at
``<proxy><route prefix>/_peach/health``, and so are its tasks (the scheduler's rows). The proxy is reached on the dashboard's host
(Serve's HTTP port); an application whose gateway does not answer in time has no errors
to add, and ``peach status`` shows what the dashboard says.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from peach_cli.deploy import APPLICATION_BUILDER
from peach_cli.internal import HEALTH_PATH

TIMEOUT_S = 2.0
_WILDCARD_OR_LOOPBACK = frozenset({"", "0.0.0.0", "::", "127.0.0.1", "localhost", "::1"})


def proxy_url(details: dict[str, Any], dashboard_address: str) -> str:
    """The Serve HTTP proxy's base URL, seen from where the dashboard is reached.

    >>> proxy_url({"http_options": {"host": "0.0.0.0", "port": 8001}}, "http://head:8265")
    'http://head:8001'
    """
    options = details.get("http_options") or {}
    host = str(options.get("host") or "")
    if host in _WILDCARD_OR_LOOPBACK:
        host = urlsplit(dashboard_address).hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{options.get('port') or 8000}"


def health_url(details: dict[str, Any], dashboard_address: str, app: dict[str, Any]) -> str:
    prefix = str(app.get("route_prefix") or "/").rstrip("/")
    return f"{proxy_url(details, dashboard_address)}{prefix}{HEALTH_PATH}"


def is_peach_application(app: dict[str, Any]) -> bool:
    return (app.get("deployed_app_config") or {}).get("import_path") == APPLICATION_BUILDER


def read_health(details: dict[str, Any], dashboard_address: str) -> dict[str, dict[str, Any]]:
    """Application → its gateway's ``/_peach/health`` answer, for the peach applications
    that answer in time."""
    import httpx

    bodies: dict[str, dict[str, Any]] = {}
    with httpx.Client(timeout=httpx.Timeout(TIMEOUT_S), follow_redirects=False) as client:
        for name, app in sorted((details.get("applications") or {}).items()):
            if not is_peach_application(app) or app.get("status") != "RUNNING":
                continue
            try:
                health = client.get(health_url(details, dashboard_address, app)).json()
            except (httpx.HTTPError, ValueError):
                continue
            if isinstance(health, dict):
                bodies[name] = health
    return bodies


def replica_errors(health: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Application → (Serve replica id → its last error), from ``read_health``."""
    errors: dict[str, dict[str, str]] = {}
    for name, body in health.items():
        components = body.get("components")
        if not isinstance(components, list):
            continue
        found = {
            str(replica["replica_id"]): str(replica["error"])
            for component in components
            if isinstance(component, dict)
            for replica in component.get("replicas") or []
            if isinstance(replica, dict) and replica.get("error") and replica.get("replica_id")
        }
        if found:
            errors[name] = found
    return errors


def task_rows(health: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Application → its tasks' rows as its scheduler reports them (SPEC §5), from
    ``read_health``; an application whose scheduler did not answer is left out."""
    return {
        name: [row for row in body["tasks"] if isinstance(row, dict)]
        for name, body in health.items()
        if isinstance(body.get("tasks"), list)
    }
