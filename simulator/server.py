"""``DevServer``: a project plan served locally — its replica pools, their plan's lifecycle.

Usage (inside a running event loop; ``simulator.session.DevSession`` assembles the three)::

    http = HttpServer("127.0.0.1", 0)
    gateway = DevGateway(RoutingTable.empty(plan), print)
    server = DevServer(plan, http=http, gateway=gateway, on_event=print)
    await server.start()          # binds (port 0 picks one), starts every replica
    print(server.url)             # the bound address
    await server.wait_ready()     # every replica healthy, unhealthy or restarting
    ...
    await server.apply_plan(new_plan)   # swap only the components that changed
    await server.stop()           # streams closed, replicas stopped, socket closed

``server.served`` is what it serves: the plan as applied and each component's fingerprint
(``simulator.changes.Snapshot``), the one record hot reload compares a save with. The HTTP
side (uvicorn, its protocol, ``LocalService``, the fast lane) is ``simulator.http_server``'s,
and the requests are the gateway's (``simulator.gateway``): the server hands the gateway
each routing table it serves.
The server reports what happens through ``on_event`` (see ``simulator.events``); it never
prints. Replica processes exit when the server stops, and on their own when its process
dies (their socket closes), so none is left behind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from peach_cli.boundary import Secrets
from peach_cli.runtime.plan import ProjectPlan
from simulator.changes import PlanChange, Snapshot
from simulator.environments import Environments
from simulator.events import Event, ReplicaState
from simulator.http_server import HttpServer, ServeError
from simulator.pool import PoolOptions, ReplicaPool
from simulator.profiling import InitProfiling
from simulator.replica import INIT_STUCK_S
from simulator.routing import RoutingTable
from simulator.spawn import Spawner, WorkerLaunch

if TYPE_CHECKING:
    from simulator.debug import DebugRelay
    from simulator.fastlane import FastLane
    from simulator.gateway import DevGateway

__all__ = ["DRAIN_TIMEOUT_S", "DevServer", "ServeError"]

DRAIN_TIMEOUT_S = 300.0
"""How long a retired component may keep serving in-flight streams after a reload."""


class DevServer:
    """Serves a ``ProjectPlan`` on ``host:port`` with the platform's semantics."""

    def __init__(
        self,
        plan: ProjectPlan,
        *,
        http: HttpServer,
        gateway: DevGateway,
        timeout_s: float | None = None,
        on_event: Callable[[Event], None] | None = None,
        environments: Environments | None = None,
        spawner: Spawner | None = None,
        init_stuck_s: float = INIT_STUCK_S,
        debugger: DebugRelay | None = None,
        init_profiling: InitProfiling | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        """``http`` serves ``gateway``, which this server hands each routing table;
        ``secrets``: the session's, where each pool's values are masked."""
        self.served = Snapshot.take(plan)
        """What is served: the plan as applied, each component's fingerprint (a component
        whose restart a reload refused keeps its previous version here)."""
        self.timeout_override = timeout_s
        self.environments = environments or Environments(plan.root, isolated=False)
        """The interpreters replicas run in (default: peach's own, shared by all)."""
        self.spawner = spawner or Spawner()
        """Starts replica processes (taking the spares hot reload keeps)."""
        self.http = http
        """The socket, uvicorn and the app in front of the gateway."""
        self.gateway = gateway
        """Answers the requests (its ``table`` is what this server serves, once started)."""
        self.init_stuck_s = init_stuck_s
        """A replica's start-up still running after this long is reported."""
        self.debugger = debugger
        """The session's pdb relay (``simulator.debug``): calls register with it."""
        self.init_profiling = init_profiling or InitProfiling()
        """``peach profile --init``: the replicas started while an init is profiled sample
        from their first line (the gateway's ``Profiler`` is handed the same)."""
        self._pool_options = PoolOptions(
            plan.root,
            self.emit,
            self.environments,
            spawner=self.spawner,
            init_stuck_s=init_stuck_s,
            debugger=debugger,
            first_messages=self.init_profiling.first_messages,
            secrets=secrets if secrets is not None else Secrets(),
        )
        """What each pool is made with (its replicas numbered on across reloads)."""
        self._on_event = on_event
        self._pools: dict[str, ReplicaPool] = {}
        self._starting: asyncio.Future[Any] | None = None
        self._draining: set[asyncio.Task[None]] = set()
        self._retiring: set[ReplicaPool] = set()
        """Pools a reload replaced that still finish what began on them."""
        self._stopped = False
        self._applying = asyncio.Lock()
        """Held by ``apply_plan``: a reload and an on-demand re-init never overlap."""

    @property
    def plan(self) -> ProjectPlan:
        """The plan served (``served.plan``)."""
        return self.served.plan

    @property
    def fast_lane(self) -> FastLane | None:
        """Answers plain calls without an ASGI cycle (``simulator.http_server``)."""
        return self.http.fast_lane

    # -- events --------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        if self._on_event is not None:
            self._on_event(event)

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.http.url

    async def start(self) -> None:
        """Bind, start serving, and start every replica (``wait_ready`` waits for them)."""
        self.http.bind()
        # Replica processes start first (a pool starts as it is made): they boot while the
        # HTTP stack is imported. Requests that arrive before their component is up wait
        # for it (or its init error).
        for spec in self.plan.components():
            self._pools[spec.key] = ReplicaPool(spec, self._pool_options)
        self._starting = asyncio.ensure_future(
            asyncio.gather(*(pool.starting for pool in self._pools.values()))
        )
        self.gateway.table = RoutingTable.of(self.plan, self._pools, self.timeout_override)
        await self.http.serve(self.gateway)

    async def wait_ready(self) -> None:
        """Wait until every replica has started (healthy) or failed (unhealthy, restarting)."""
        if self._starting is not None:
            await asyncio.shield(self._starting)

    async def wait_closed(self) -> None:
        """Wait until the HTTP server stops (it stops only through ``stop``)."""
        await self.http.wait_closed()

    async def stop(self) -> None:
        """Stop serving: close streams, stop every replica, close the socket."""
        if self._stopped:
            return
        self._stopped = True
        self.environments.close()  # an env build under way is stopped, not waited for
        try:
            await self._stop()
        finally:
            self.environments.release()  # every replica has stopped: prune may remove the envs

    async def _stop(self) -> None:
        self.http.begin_stop()
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()  # an init still running: nobody waits for it any more
            self._starting.add_done_callback(_consume)
        pools = self.all_pools()  # the retiring ones too: their streams must end as well
        draining = list(self._draining)
        for task in draining:
            task.cancel()
        await asyncio.gather(*draining, return_exceptions=True)
        # Stopping a replica closes its generators (their `finally` runs) and ends the
        # streams relaying them, so the HTTP connections can finish.
        await asyncio.gather(*(pool.stop() for pool in pools), return_exceptions=True)
        await self.http.stop()

    def kill_replicas(self) -> None:
        """Kill every replica process at once, without waiting (a second Ctrl-C)."""
        for pool in self.all_pools():
            for replica in pool.replicas:
                replica.kill_now()

    def all_pools(self) -> list[ReplicaPool]:
        """Every pool with replicas: served, and retired by a reload but still draining."""
        pools = list(self._pools.values())
        pools += [p for p in self.gateway.table.pools() if p not in pools]
        pools += [p for p in self._retiring if p not in pools]
        return pools

    # -- plans and reloads ---------------------------------------------------------------

    def launches(self) -> list[WorkerLaunch]:
        """How replicas are started, one per env in use (spares are kept for each)."""
        return self.environments.launches()

    async def apply_plan(
        self,
        new_plan: ProjectPlan | Snapshot,
        *,
        patch: Collection[str] = (),
        restart: Collection[str] = (),
    ) -> PlanChange:
        """Serve ``new_plan``: new replicas only for components that changed.

        A ``Snapshot`` (hot reload's, taken when the plan was built) says what changed by
        its fingerprints; a plan is snapshotted now. Changed and new components get new
        pools, started before the switch; unchanged ones keep their replicas and state. The
        routing table is swapped at once; requests and streams that began before finish on
        the old replicas, which are then stopped. A changed component whose new replicas do
        not become healthy keeps its old ones (``PlanChange.failed`` says why; ``served``
        keeps its previous version). Cancelled while the new replicas start (a newer save
        supersedes this one), it stops them and leaves everything as it was.

        The components in ``patch`` (their method alone changed) are patched in their
        running replicas instead (``simulator.hotpatch``); one that cannot be is restarted
        (``PlanChange.patch_failed`` says why). Those in ``restart`` get new replicas even
        if unchanged (``init`` re-run on demand).
        """
        snapshot = new_plan if isinstance(new_plan, Snapshot) else Snapshot.take(new_plan)
        async with self._applying:
            return await self._apply(snapshot, patch, restart)

    async def _apply(
        self, snapshot: Snapshot, patch: Collection[str], restart: Collection[str]
    ) -> PlanChange:
        from simulator.hotpatch import patch_pools

        new_plan = snapshot.plan
        specs = new_plan.components()
        change = PlanChange()
        for key, error in (await patch_pools(self._pools, specs, patch)).items():
            if error is None:  # its replicas serve the new code already
                change.patched.append(key)
            else:
                change.patch_failed[key] = error
        previous = self.served
        began = time.perf_counter()  # what follows is starting new replicas
        old_table = self.gateway.table
        old_pools = dict(self._pools)
        pools: dict[str, ReplicaPool] = {}
        fresh: list[ReplicaPool] = []
        for spec in specs:
            existing = old_pools.get(spec.key)
            same = spec.key in change.patched or (
                previous.fingerprints.get(spec.key) == snapshot.fingerprints[spec.key]
            )
            if existing is not None and same and spec.key not in restart:
                pools[spec.key] = existing
                if spec.key not in change.patched:
                    change.kept.append(spec.key)
            else:
                pools[spec.key] = ReplicaPool(spec, self._pool_options)  # starting now
                fresh.append(pools[spec.key])
                change.started.append(spec.key)
        try:
            await asyncio.gather(*(pool.starting for pool in fresh))
        except asyncio.CancelledError:  # a newer save supersedes this one: nothing changes
            for key in change.patched:  # but what was patched serves the new code
                previous = previous.replace(key, snapshot)
            self.served = previous
            await asyncio.shield(asyncio.gather(*(pool.stop() for pool in fresh)))
            raise
        served = snapshot
        rejected: list[ReplicaPool] = []
        for pool in fresh:
            if all(r.state is ReplicaState.HEALTHY for r in pool.replicas):
                continue
            # The new version cannot serve but the previous one can: keep it (on the
            # platform the new replicas would stay unhealthy; the caller says so).
            existing = old_pools.get(pool.key)
            if existing is None or not any(r.serving for r in existing.replicas):
                change.unstarted.append(pool.key)  # unhealthy, and nothing to keep serving
                continue
            pools[pool.key] = existing
            if pool.key not in change.patched:
                served = served.replace(pool.key, previous)
            change.started.remove(pool.key)
            change.kept.append(pool.key)
            errors = [r.error for r in pool.replicas if r.error]
            change.failed[pool.key] = errors[0] if errors else "its replicas did not become healthy"
            rejected.append(pool)
        self.served = served
        self._pools = pools
        self.gateway.table = RoutingTable.of(new_plan, pools, self.timeout_override)
        kept = {id(pool) for pool in pools.values()}
        retired = [pool for key, pool in old_pools.items() if id(pool) not in kept]
        change.retired = [pool.key for pool in retired]
        if retired:
            self._retiring.update(retired)
            task = asyncio.ensure_future(self._retire(old_table, retired))
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)
        await asyncio.gather(*(pool.stop() for pool in rejected))  # never routed to: no series
        change.seconds = time.perf_counter() - began
        return change

    def adopt(self, snapshot: Snapshot) -> None:
        """Take ``snapshot`` as what is served, where it needs no new replica, no patch
        and no new route (hot reload found nothing to apply: a task changed, say)."""
        self.served = snapshot

    async def reinit(self, keys: Collection[str]) -> PlanChange:
        """Re-run ``init`` of the components ``keys`` (``endpoint/component``) on demand.

        Each gets new replicas, started while the old ones serve (as a restart by a reload);
        one whose new ``init`` raises keeps its old replicas and state
        (``PlanChange.failed``). Reported as a ``Reinitialized`` event.
        """
        from simulator.events import Reinitialized

        began = time.perf_counter()
        change = await self.apply_plan(self.served, restart=keys)
        self.emit(Reinitialized(tuple(keys), time.perf_counter() - began, dict(change.failed)))
        return change

    async def _retire(self, old_table: RoutingTable, pools: list[ReplicaPool]) -> None:
        """Wait for requests that began on the old table and may reach ``pools`` (a stream
        on another endpoint does not hold them), then drain and stop ``pools``."""
        for pool in pools:
            pool.mark_draining()  # shown as such, and not restarted if a process dies
        retired = {id(pool) for pool in pools}
        routes = [
            route
            for route in old_table.routes.values()
            if any(id(pool) in retired for pool in route.pools.values())
        ]
        waits = [asyncio.ensure_future(route.idle.wait()) for route in routes]
        try:
            if waits:
                await asyncio.wait(waits, timeout=DRAIN_TIMEOUT_S)
        finally:  # also when the server stops first (it stops these pools itself)
            for task in waits:
                task.cancel()
        await asyncio.gather(*(pool.drain_and_stop(timeout_s=DRAIN_TIMEOUT_S) for pool in pools))
        self._retiring.difference_update(pools)
        self._forget(pools)

    def _forget(self, pools: list[ReplicaPool]) -> None:
        """Drop what the server kept of the replicas of ``pools``, stopped for good."""
        self.gateway.metrics.forget(r.id for pool in pools for r in pool.replicas)

    async def wait_retired(self) -> None:
        """Wait until every pool retired by ``apply_plan`` has stopped."""
        if self._draining:
            await asyncio.gather(*list(self._draining), return_exceptions=True)


def _consume(future: asyncio.Future[object]) -> None:
    """Retrieve a cancelled future's outcome, so asyncio does not log it at exit."""
    if not future.cancelled():
        future.exception()
