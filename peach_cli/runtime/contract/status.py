"""What both hosts answer at ``GET /_peach/routes`` and ``GET /_peach/health``, built once.

A host supplies what only it knows — whether an endpoint streams (``peach dev`` knows it
from its replicas; Ray's gateway does not: ``None``), its replicas and their states — and
these functions give each answer its one shape, whichever host serves it::

    routes_body(codops, [(endpoint, streams), ...], arm_requests)
    {"codops": ..., "endpoints": [{"name", "url", "components", "streams", "ab"?}, ...]}

    health_body(codops, [component_health(spec, deployment, replicas, error), ...],
                host="dev" | "ray", starting=..., healthy=...)
    {"status": "ok" | "starting" | "degraded", "ready": ..., "host": "dev" | "ray",
     "codops": ...,
     "components": [{"component", "deployment", "memory", "cpus", "error", "replicas"}]}

``host`` is which host answers, declared by the host itself: ``dev`` for `peach dev` (its
replicas are processes of this machine), ``ray`` for a deployed app's gateway (its replicas
are Serve's, on the cluster's nodes). A client that must know (`peach profile`, `peach
bench`'s capacity) reads it here (``peach_cli.testing.host``), never guesses it.

Each replica is ``replica_health(id, state, pid, error, **details)``: the four fields every
host has, then the host's own figures (``outstanding``, ``rss``, ``pss`` under ``peach
dev``; ``replica_id``, ``node_ip`` on Ray).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from peach_cli.runtime.contract.ab import ab_route
from peach_cli.runtime.plan import ComponentSpec, EndpointSpec


def routes_body(
    codops: str,
    endpoints: Iterable[tuple[EndpointSpec, bool | None]],
    arm_requests: Mapping[str, Mapping[str, int]],
) -> dict[str, Any]:
    """``/_peach/routes``: every endpoint by url, whether it streams (None: not known
    here), and its A/B test with the requests each arm got (``arm_requests``: endpoint →
    arm → requests)."""
    listed: list[dict[str, Any]] = []
    for endpoint, streams in sorted(endpoints, key=lambda item: item[0].url):
        item: dict[str, Any] = {
            "name": endpoint.name,
            "url": endpoint.url,
            "components": list(endpoint.components),
            "streams": streams,
        }
        ab = ab_route(endpoint, arm_requests.get(endpoint.name, {}))
        if ab is not None:
            item["ab"] = ab
        listed.append(item)
    return {"codops": codops, "endpoints": listed}


def replica_health(
    name: str, state: str, pid: int | None, error: str | None, /, **details: Any
) -> dict[str, Any]:
    """One replica of ``/_peach/health``: its id, state, process id and last error, then
    what only its host reports (``details``)."""
    return {"id": name, "state": state, "pid": pid, "error": error, **details}


def component_health(
    spec: ComponentSpec,
    deployment: str,
    replicas: list[dict[str, Any]],
    error: str | None = None,
) -> dict[str, Any]:
    """One component of ``/_peach/health``: its key, its deployment name, its ``memory``
    and ``cpus``, the error none of its replicas got past (``init`` raised), its
    replicas (``replica_health``)."""
    return {
        "component": spec.key,
        "deployment": deployment,
        "memory": spec.memory,
        "cpus": spec.cpus,
        "error": error,
        "replicas": replicas,
    }


HostKind = Literal["dev", "ray"]
"""What ``/_peach/health`` declares its host to be (its ``host`` field)."""
HOST_KINDS: tuple[HostKind, ...] = ("dev", "ray")


def health_body(
    codops: str,
    components: Iterable[dict[str, Any]],
    *,
    host: HostKind,
    starting: bool,
    healthy: bool,
) -> dict[str, Any]:
    """``/_peach/health``: ``ok`` when every replica is healthy, ``starting`` while one
    still starts (``ready`` is False), else ``degraded``; which ``host`` answers; and the
    components (``component_health``)."""
    status = "ok" if healthy else ("starting" if starting else "degraded")
    return {
        "status": status,
        "ready": not starting,
        "host": host,
        "codops": codops,
        "components": list(components),
    }
