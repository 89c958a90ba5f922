"""``GET /_peach/metrics``: what `peach dev` served, in the Prometheus text format (SPEC §9).

Written with ``prometheus_client``, under the names Ray Serve exports for the same figures
(Ray prefixes its metrics with ``ray_`` and counters end in ``_total``), so a dashboard
built for the cluster reads the laptop too:

- ``ray_serve_num_http_requests_total{route, method, application, status_code}``
- ``ray_serve_num_http_error_requests_total{route, error_code, method, application}``
  (``error_code`` is the HTTP status, as Ray writes it)
- ``ray_serve_http_request_latency_ms{method, route, application, status_code}``: a
  histogram with Ray's default buckets (1 ms … 10 min)
- ``ray_serve_deployment_request_counter_total{deployment, replica, route, application}``
- ``ray_serve_num_deployment_http_error_requests_total{deployment, error_code, method,
  route, application}``
- ``ray_serve_deployment_replica_healthy{deployment, replica, application}``: 1 or 0
- ``ray_serve_replica_processing_queries{deployment, replica, application}``: in flight

and two Ray has no name for: ``peach_replica_rss_bytes{deployment, replica,
application}`` (the replica's resident memory, as the dev view shows it) and
``peach_requests_total{endpoint, component, status_code}`` (who answered: the fallback's
share is ``component="fallback"``).

``route`` is the endpoint's url, ``application`` the codops (``""`` for a request no route
took, as Ray's proxy labels it: a 404, and the dev server's refusals — ``403`` of a foreign
Host or Origin, ``408`` of a stalled head or body, ``431`` of an oversized head), ``deployment``
``endpoint.component`` as `peach deploy` names it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.pool import ReplicaPool

# Ray Serve's DEFAULT_LATENCY_BUCKET_MS (ray/serve/_private/constants.py).
LATENCY_BUCKETS_MS = (
    1, 2, 5, 10, 20, 50, 100, 200, 300, 400, 500, 1000, 2000, 5000, 10000, 60000, 120000,
    300000, 600000,
)  # fmt: skip
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def deployment_name(endpoint: str, component: str) -> str:
    """``endpoint.component``, the deployment name `peach deploy` gives a component."""
    return f"{endpoint}.{component}"


class DevMetrics:
    """The counters and histograms of one `peach dev`, and the replicas' gauges."""

    def __init__(self, pools: Callable[[], Iterable[ReplicaPool]], codops: Callable[[], str]):
        from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

        disable_created_metrics()  # Ray's exporter writes no *_created series
        self._codops = codops
        self.registry = CollectorRegistry(auto_describe=False)
        registry = self.registry
        self.requests = Counter(
            "ray_serve_num_http_requests",
            "The number of HTTP requests processed.",
            ("route", "method", "application", "status_code"),
            registry=registry,
        )
        self.errors = Counter(
            "ray_serve_num_http_error_requests",
            "The number of errored HTTP responses.",
            ("route", "error_code", "method", "application"),
            registry=registry,
        )
        self.latency = Histogram(
            "ray_serve_http_request_latency_ms",
            "The end-to-end latency of HTTP requests (measured from the gateway).",
            ("method", "route", "application", "status_code"),
            buckets=LATENCY_BUCKETS_MS,
            registry=registry,
        )
        self.deployment_requests = Counter(
            "ray_serve_deployment_request_counter",
            "The number of queries that have been processed in this replica.",
            ("deployment", "replica", "route", "application"),
            registry=registry,
        )
        self.deployment_errors = Counter(
            "ray_serve_num_deployment_http_error_requests",
            "The number of errored HTTP responses returned by each deployment.",
            ("deployment", "error_code", "method", "route", "application"),
            registry=registry,
        )
        self.answered_by = Counter(
            "peach_requests",
            "Requests by endpoint and the component that answered (fallback included).",
            ("endpoint", "component", "status_code"),
            registry=registry,
        )
        registry.register(_ReplicaCollector(pools, codops))
        self._series: dict[
            tuple[Any, ...], tuple[tuple[Callable[[], None], ...], Callable[[float], None]]
        ] = {}
        """Request kind → what it counts (``_series_of``)."""

    def observe(
        self,
        method: str,
        route: str,
        status: int,
        seconds: float,
        endpoint: str | None,
        component: str | None,
        replica: str | None,
    ) -> None:
        """One answered request (called as the gateway logs it)."""
        # a request no route took belongs to no application (Ray's proxy labels it "")
        application = self._codops() if endpoint is not None else ""
        key = (method, route, status, endpoint, component, replica, application)
        series = self._series.get(key)
        if series is None:  # the first request of its kind: find its labelled series
            series = self._series[key] = self._series_of(*key)
        counters, latency = series
        for increment in counters:
            increment()
        latency(seconds * 1000.0)

    def forget(self, replicas: Iterable[str]) -> None:
        """Drop the series of ``replicas``, stopped for good (a reload or a re-init retired
        them): as on the cluster, a replica that is gone takes its series with it, so a day
        of reloads does not pile up series nor what counts them."""
        gone = set(replicas)
        for key in [key for key in self._series if key[5] in gone]:
            del self._series[key]
            method, route, status, endpoint, component, replica, application = key
            if endpoint and component:
                deployment = deployment_name(endpoint, component)
                with contextlib.suppress(KeyError):  # the same series under another status
                    self.deployment_requests.remove(deployment, replica or "", route, application)

    def refused(self, method: str, status: int) -> None:
        """One request the server refused before any route took it, with no latency to
        tell (a head or body that stopped arriving, a head over its limit): counted under
        ``route=""`` and ``application=""``, as Ray's proxy labels a request no route took;
        ``method`` is ``""`` when the head never said it."""
        code = str(status)
        self.requests.labels("", method, "", code).inc()
        self.errors.labels("", code, method, "").inc()

    def _series_of(
        self,
        method: str,
        route: str,
        status: int,
        endpoint: str | None,
        component: str | None,
        replica: str | None,
        application: str,
    ) -> tuple[tuple[Callable[[], None], ...], Callable[[float], None]]:
        """What one request of this kind counts: the counters' ``inc``, the histogram's
        ``observe`` (``labels`` is looked up once per kind, not per request)."""
        code = str(status)
        counters: list[Callable[[], None]] = [
            self.requests.labels(route, method, application, code).inc
        ]
        deployment = deployment_name(endpoint, component) if endpoint and component else ""
        if deployment:
            counters.append(
                self.deployment_requests.labels(deployment, replica or "", route, application).inc
            )
        if endpoint is not None:
            counters.append(self.answered_by.labels(endpoint, component or "", code).inc)
        if status >= 400:
            counters.append(self.errors.labels(route, code, method, application).inc)
            if deployment:
                counters.append(
                    self.deployment_errors.labels(deployment, code, method, route, application).inc
                )
        latency = self.latency.labels(method, route, application, code).observe
        return tuple(counters), latency

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _ReplicaCollector:
    """Gauges read from the replica pools at each scrape."""

    def __init__(self, pools: Callable[[], Iterable[ReplicaPool]], codops: Callable[[], str]):
        self._pools = pools
        self._codops = codops

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from simulator.events import ReplicaState

        labels = ("deployment", "replica", "application")
        healthy = GaugeMetricFamily(
            "ray_serve_deployment_replica_healthy",
            "Tracks whether each replica is healthy (1) or not (0).",
            labels=labels,
        )
        queries = GaugeMetricFamily(
            "ray_serve_replica_processing_queries",
            "The current number of queries being processed.",
            labels=labels,
        )
        rss = GaugeMetricFamily(
            "peach_replica_rss_bytes", "The replica process's resident memory.", labels=labels
        )
        application = self._codops()
        for pool in self._pools():
            deployment = deployment_name(pool.spec.endpoint, pool.spec.name)
            for replica in pool.replicas:
                values = [deployment, replica.id, application]
                healthy.add_metric(values, 1.0 if replica.state is ReplicaState.HEALTHY else 0.0)
                queries.add_metric(values, float(replica.outstanding))
                if replica.memory.rss:
                    rss.add_metric(values, float(replica.memory.rss))
        yield healthy
        yield queries
        yield rss


__all__ = ["CONTENT_TYPE", "DevMetrics", "LATENCY_BUCKETS_MS"]
