"""``DevSession``: one local run of a project — its envs, tasks, server and reloader.

Built from one ``SessionConfig``, it owns every part of the run and starts and stops them
in order; it assembles them — the HTTP side (``HttpServer``), the gateway (``DevGateway``)
and the server of replicas (``DevServer``) among them — and nothing is wired after
construction. ``peach dev`` serves with it, ``peach task
run`` runs a task with it (``serve=False``), and a test can start the simulator quietly on
a free port::

    async with DevSession(SessionConfig(plan)) as session:   # port 0, no reload, no view
        await session.wait_ready()                           # every replica started
        httpx.get(f"{session.url}/hello")

Start-up: the server binds and answers at once (``Serving``; requests wait for their
replicas), the task scheduler listens for triggers, the reloader watches the project, and
once every replica has started (``ReplicasStarted``) the task loop may run. ``stop`` undoes
it in reverse, so nothing outlives it: a running task is killed with its process tree, the
reloader stops (no reload may start replicas while they stop), the spare workers go, then
the server closes its streams and stops every replica, and the envs are unmarked in use.

The session reports through ``on_event`` (``simulator.events``, ``simulator.tasks.events``)
and never prints; signals stay with the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from peach_cli.boundary import Secrets
from peach_cli.devtoken import DevToken
from simulator.debug import DebugRelay, skipped_env, skipped_once
from simulator.environments import Environments
from simulator.events import ReplicasStarted, ServerNote, Serving
from simulator.profiling import InitProfiling
from simulator.replica import INIT_STUCK_S
from simulator.routing import RoutingTable
from simulator.server import DevServer
from simulator.spawn import Keeper, Spawner
from simulator.tasks.scheduler import DEFAULT_INTERVAL_S, TaskScheduler, TriggerSocket
from simulator.template import Templates

if TYPE_CHECKING:
    from peach_cli.runtime.plan import ProjectPlan
    from simulator.changes import PlanChange
    from simulator.gateway import DevGateway
    from simulator.reload import ReloadMode
    from simulator.tasks.events import TaskRunEnded


@dataclass(frozen=True)
class Knobs:
    """The ``PEACH_*`` environment variables that tune the simulator or switch a part of it
    off, for tests and benchmarks; read once, when a ``SessionConfig`` is made (``read``)."""

    init_stuck_s: float = INIT_STUCK_S
    """``PEACH_INIT_STUCK_S``: a replica's init (or code) still running after this long is
    reported (it goes on waiting)."""
    fast_lane: bool = True
    """``PEACH_NO_FAST_LANE`` set (to anything): every request takes the gateway's general
    path, for comparing the two."""
    head_timeout_s: float | None = None
    """``PEACH_HEAD_TIMEOUT_S``: a request head (or body) stalled this long closes its
    connection (None: 30 s), unless ``SessionConfig.head_timeout_s`` says."""
    keeper: bool = True
    """``PEACH_NO_KEEPER=1``: peach starts its workers itself, without a keeper process."""
    templates: bool = True
    """``PEACH_NO_TEMPLATE=1``: every replica is spawned, none forked from a warm template."""

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Knobs:
        """The knobs ``environ`` (default: this process's environment) sets; a value that
        is no number is ignored."""
        env = os.environ if environ is None else environ
        return cls(
            init_stuck_s=_number(env.get("PEACH_INIT_STUCK_S")) or INIT_STUCK_S,
            fast_lane=not env.get("PEACH_NO_FAST_LANE"),
            head_timeout_s=_number(env.get("PEACH_HEAD_TIMEOUT_S")),
            keeper=env.get("PEACH_NO_KEEPER", "") in ("", "0"),
            templates=env.get("PEACH_NO_TEMPLATE", "") in ("", "0"),
        )


def _number(text: str | None) -> float | None:
    """A positive number of seconds, or None."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if value > 0 else None


@dataclass(frozen=True)
class SessionConfig:
    """Everything a ``DevSession`` is built from (the defaults: a quiet server on a free
    loopback port, no reload, envs isolated)."""

    plan: ProjectPlan
    project: Path | None = None
    """The folder (or conf file) the plan was built from: reloads and the task scheduler
    re-read it (None: they never do, and there is no reload)."""
    serve: bool = True
    """False: no server, only the tasks ``run_task`` asks for (``peach task run``)."""
    host: str = "127.0.0.1"
    port: int = 0
    """0 picks a free port (``url`` says which)."""
    timeout_s: float | None = None
    """Overrides every endpoint's request timeout."""
    reload: bool = False
    reload_mode: ReloadMode = "patch"
    shared_env: bool = False
    """Every worker runs peach's own interpreter instead of its py_env's env."""
    inherit_env: bool = False
    """Replicas and tasks get peach's whole environment, not the minimal one of SPEC §10."""
    offline: bool = False
    task_loop: bool = False
    """Run every task in turn, forever (``peach dev --tasks``)."""
    task_interval_s: float = DEFAULT_INTERVAL_S
    task_timeout_s: float | None = None
    """Overrides every task's timeout."""
    keep_warm: bool = True
    """Keep a spare task worker of each env a task ran in."""
    allow_hosts: tuple[str, ...] = ()
    """Host names answered besides loopback and the bound address (``--allow-host``)."""
    allow_origins: tuple[str, ...] = ()
    """Web origins answered besides loopback ones (``--allow-origin``)."""
    head_timeout_s: float | None = None
    """Closes a connection whose request head is incomplete for this long (None: 30 s)."""
    debug: bool = False
    """``breakpoint()`` opens pdb in peach's terminal (``simulator.debug``); False: skipped."""
    debug_skipped: str = "no terminal to debug in"
    """Why breakpoints are skipped when ``debug`` is False (the workers' log line says)."""
    post_mortem: bool = False
    """``--pdb``: an exception escaping a method, init or task opens pdb first."""
    record: Path | None = None
    """Append one JSON line per answered request to this file (``peach dev --record``)."""
    knobs: Knobs = field(default_factory=Knobs.read)
    """The ``PEACH_*`` variables of the environment this config was made in."""


class DevSession:
    """The parts of one local run, started and stopped in order."""

    def __init__(
        self,
        config: SessionConfig,
        *,
        on_event: Callable[[Any], None] | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        """``secrets``: where the session's secret values go as it reads them (the run's
        output masks them); a session of its own by default."""
        self.config = config
        self.secrets = secrets if secrets is not None else Secrets()
        plan = config.plan
        on_event = skipped_once(on_event)  # "breakpoint() skipped": once per component
        self.on_event = on_event
        knobs = config.knobs
        keeper = self.keeper = Keeper(enabled=knobs.keeper)
        """Starts every worker: their trees die with peach, even a killed one (Linux)."""
        self.spawner = Spawner(
            templates=Templates(on_failure=self._warn, keeper=keeper, enabled=knobs.templates),
            keeper=keeper,
        )
        """Starts every worker process of the session (replicas forked from a warm template
        per env where it can) and keeps its spares."""
        trigger = TriggerSocket()
        self.debugger: DebugRelay | None = None
        """Relays breakpoints to the terminal (``config.debug``)."""
        if config.debug:
            self.debugger = DebugRelay(
                on_event, post_mortem=config.post_mortem, secrets=self.secrets
            )
            self.debugger.open()
            debug_env = self.debugger.env
        else:
            debug_env = skipped_env(config.debug_skipped)
        self.environments = Environments(
            plan.root,
            isolated=not config.shared_env,
            offline=config.offline,
            on_event=on_event,
            env=trigger.env + debug_env,  # replicas and tasks can trigger tasks
            inherit_env=config.inherit_env,
        )
        # Triggered runs are served with or without the loop; ``task_loop`` adds it.
        self.scheduler = TaskScheduler(
            plan,
            self.environments,
            project=config.project,
            loop=config.task_loop,
            interval_s=config.task_interval_s,
            timeout_s=config.task_timeout_s,
            keep_warm=config.keep_warm,
            held=config.serve,  # the loop's first round waits for the replicas
            trigger=trigger,
            spawner=self.spawner,
            on_event=on_event,
            debugger=self.debugger,
            secrets=self.secrets,
        )
        self.server: DevServer | None = None
        self.gateway: DevGateway | None = None
        """Answers the server's requests (``simulator.gateway``)."""
        if config.serve:
            self.gateway, self.server = self._serving(config, on_event)
        self._starting: asyncio.Task[None] | None = None
        self._stopped = False
        self._stopping = asyncio.Event()
        """Set first thing at ``stop``: the reloader's watcher ends."""
        self._reloading: asyncio.Task[None] | None = None
        self._reporting: asyncio.Task[None] | None = None
        self._reinits: set[asyncio.Task[Any]] = set()

    def _serving(
        self, config: SessionConfig, on_event: Callable[[Any], None] | None
    ) -> tuple[DevGateway, DevServer]:
        """The gateway and the server of ``config.plan``, behind the HTTP side."""
        from simulator.gateway import DevGateway
        from simulator.http_server import HttpServer

        knobs = config.knobs
        http = HttpServer(
            config.host,
            config.port,
            allow_hosts=config.allow_hosts,
            allow_origins=config.allow_origins,
            head_timeout_s=(
                knobs.head_timeout_s if config.head_timeout_s is None else config.head_timeout_s
            ),
            fast_lane=knobs.fast_lane,
        )
        recorder = None
        if config.record is not None:
            from simulator.record import RecordWriter

            recorder = RecordWriter(config.record, on_note=self._warn, secrets=self.secrets)
        init_profiling = (
            InitProfiling()
        )  # `peach profile --init`: the gateway asks, replicas sample
        gateway = DevGateway(
            RoutingTable.empty(config.plan),
            on_event,
            debugger=self.debugger,
            token=DevToken.new(),
            task_rows=self.scheduler.task_rows,
            init_profiling=init_profiling,
            reinit=self.reinit,
            recorder=recorder,
            secrets=self.secrets,
        )
        server = DevServer(
            config.plan,
            http=http,
            gateway=gateway,
            timeout_s=config.timeout_s,
            on_event=on_event,
            environments=self.environments,
            spawner=self.spawner,
            init_stuck_s=knobs.init_stuck_s,
            debugger=self.debugger,
            init_profiling=init_profiling,
            secrets=self.secrets,
        )
        return gateway, server

    def emit(self, event: object) -> None:
        if self.on_event is not None:
            self.on_event(event)

    @property
    def url(self) -> str:
        """The server's address (``http://127.0.0.1:PORT``), once started."""
        assert self.server is not None, "a session with serve=False has no server"
        return self.server.url

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every part; returns once the server answers (replicas may still start:
        ``wait_ready``). Raises ``ServeError`` when the address cannot be bound, and
        ``CancelledError`` when ``stop`` is called before it returns."""
        if self._starting is not None or self._stopped:
            raise RuntimeError("a session starts once, and not after stop()")
        # A task: ``stop`` during start-up cancels what is still starting.
        self._starting = asyncio.ensure_future(self._start())
        await self._starting

    def _warn(self, message: str) -> None:
        if self.on_event is not None:
            self.on_event(ServerNote(message, "warning"))

    async def _start(self) -> None:
        began = time.perf_counter()
        if self.debugger is not None:
            await self.debugger.start()
        server = self.server
        if server is None:
            await self.scheduler.start(run_loop=False)
            return
        await server.start()
        self._write_token(server.url)
        self.emit(Serving(server.url))
        await self.scheduler.start()
        if self.config.plan.tasks:
            self.scheduler.warm_up()
        loop = asyncio.get_running_loop()
        if self.config.reload and self.config.project is not None:
            from simulator.reload import Reloader

            reloader = Reloader(
                server, self.config.project, on_event=self.on_event, mode=self.config.reload_mode
            )
            self._reloading = loop.create_task(reloader.run(self._stopping))
        self._reporting = loop.create_task(self._report_started(began))

    def _write_token(self, url: str) -> None:
        """Write the gateway's session token where peach's own tools read it (SPEC §6)."""
        assert self.gateway is not None
        port = int(url.rsplit(":", 1)[1])
        try:
            self.gateway.token.write(port)
        except OSError as error:
            self.emit(
                ServerNote(
                    f"cannot write the session token ({error}): `peach profile` cannot "
                    "profile this server",
                    "warning",
                )
            )

    async def _report_started(self, began: float) -> None:
        assert self.server is not None
        await self.server.wait_ready()
        self.emit(ReplicasStarted(time.perf_counter() - began))
        self.scheduler.ready.set()

    async def wait_ready(self) -> None:
        """Wait until every replica has started (healthy) or failed (unhealthy, restarting)."""
        if self.server is not None:
            await self.server.wait_ready()

    async def stop(self) -> None:
        """Stop every part, in order (also when ``start`` has not finished); once."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        starting = self._starting
        if starting is not None and not starting.done():
            starting.cancel()
        if self._reporting is not None:
            self._reporting.cancel()
        if starting is not None:
            with contextlib.suppress(BaseException):
                await starting
        try:
            if self.debugger is not None:  # pdb sessions read the end of their input
                await self.debugger.stop()
            await self.scheduler.stop()  # a running task is killed with its process tree
            # No reload (nor re-init) may start replicas while they stop.
            for task in [t for t in (self._reloading,) if t is not None] + list(self._reinits):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            await self.spawner.close()
            if self.server is not None:
                await self.server.stop()  # streams closed, every replica stopped
            if self.gateway is not None and self.gateway.recorder is not None:
                self.gateway.recorder.close()  # every line written
        finally:
            if self.gateway is not None:
                self.gateway.token.remove()
            await self.keeper.close()  # what is left below it dies (a crashed replica's)
            self.environments.release()  # nothing runs in them any more: prune may go on

    def kill_now(self) -> None:
        """Kill every replica process at once, without waiting (a second Ctrl-C)."""
        if self.server is not None:
            self.server.kill_replicas()

    async def __aenter__(self) -> DevSession:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- what runs in a session ------------------------------------------------------------

    async def run_task(self, name: str, payload: str | None = None) -> list[TaskRunEnded]:
        """Run the task ``name`` once (payload: JSON text), then what it triggers, in order;
        every run's end. Raises ``UnknownTask``."""
        self.scheduler.trigger(name, payload, triggered=False)
        return await self.scheduler.run_until_idle()

    async def reinit(self, keys: Collection[str]) -> PlanChange:
        """Re-run ``init`` of the components ``keys`` (``DevServer.reinit``): the dev keys'
        and ``/_peach/reinit``'s."""
        assert self.server is not None, "a session with serve=False has no server"
        return await self.server.reinit(keys)

    def start_reinit(self, keys: Collection[str]) -> None:
        """Re-run ``init`` of the components ``keys`` in the background (``Reinitialized``
        reports it)."""
        task = asyncio.get_running_loop().create_task(self.reinit(keys))
        self._reinits.add(task)
        task.add_done_callback(self._reinits.discard)


__all__ = ["DevSession", "Knobs", "SessionConfig"]
