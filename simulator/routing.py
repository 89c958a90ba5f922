"""The routing table: which pools serve which url, swapped whole when the plan changes.

Kept apart from the gateway (and free of web-framework imports) so replicas can start
while the HTTP stack is still being imported.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from peach_cli.runtime.plan import EndpointSpec, ProjectPlan, url_key
from simulator.pool import ReplicaPool


@dataclass(eq=False)
class Route:
    """One endpoint in one routing table: its spec and the pools serving its components."""

    endpoint: EndpointSpec
    pools: dict[str, ReplicaPool]
    inflight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def method_kind(self, component: str) -> str | None:
        """The kind of ``component``'s method, once one of its replicas has said it."""
        return self.pools[component].method_kind

    def enter(self) -> None:
        self.inflight += 1
        self.idle.clear()

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self.idle.set()


@dataclass(eq=False)
class RoutingTable:
    """What the gateway serves: replaced whole, never edited, when the plan changes."""

    codops: str
    timeout_s: float
    routes: dict[str, Route]

    @classmethod
    def of(
        cls, plan: ProjectPlan, pools: dict[str, ReplicaPool], timeout_s: float | None = None
    ) -> RoutingTable:
        """The table serving ``plan`` with ``pools`` (by component key); every call bounded
        by ``timeout_s`` (``peach dev --timeout-s``), else by the plan's timeout."""
        routes = {}
        for endpoint in plan.endpoints.values():
            routes[url_key(endpoint.url)] = Route(
                endpoint,
                {name: pools[spec.key] for name, spec in endpoint.components.items()},
            )
        return cls(plan.codops, plan.timeout_s if timeout_s is None else timeout_s, routes)

    @classmethod
    def empty(cls, plan: ProjectPlan) -> RoutingTable:
        """The table of a server not started yet: no route (its pools start with it)."""
        return cls(plan.codops, plan.timeout_s, {})

    def pools(self) -> list[ReplicaPool]:
        seen: dict[int, ReplicaPool] = {}
        for route in self.routes.values():
            for pool in route.pools.values():
                seen[id(pool)] = pool
        return list(seen.values())
