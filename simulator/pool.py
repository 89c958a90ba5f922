"""The replicas of one component, and the choice of which one serves a request.

``ReplicaPool`` starts ``spec.replicas`` replicas as it is made (``starting``: in their env's
interpreter, with their env_vars and secrets), sends each request to the healthy replica
with the fewest outstanding requests (ties go round-robin), avoids a replica that is
re-running ``init`` after drift while another one is healthy, waits for replicas that are
still starting or restarting, and reports ``unavailable`` with the init error when none can
serve. ``drain_and_stop`` lets in-flight work finish before stopping the processes (how a
reload retires a component).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.boundary import Secrets
from peach_cli.runtime.contract import Attempt, CallResult, RequestParams, unavailable_message
from peach_cli.runtime.plan import ComponentSpec
from peach_cli.runtime.protocol import Message
from simulator.events import Event, ReplicaState
from simulator.replica import (
    INIT_STUCK_S,
    RESTARTED_WHEN_GONE,
    CallInFlight,
    NotSent,
    Replica,
    ReplicaStream,
)
from simulator.spawn import Spawner

if TYPE_CHECKING:
    from simulator.debug import DebugRelay
    from simulator.environments import Environments

STARTUP_WAIT_S = 60.0
"""How long a request waits for a replica that is starting or restarting."""

_WAITING = (ReplicaState.STARTING, ReplicaState.RESTARTING)
_SERVING = (ReplicaState.HEALTHY, ReplicaState.RELOADING, ReplicaState.DRAINING)
"""The states ``pick`` takes a replica in."""


class Unavailable(Exception):
    """No replica of the component can serve (the message says why)."""


class ReplicaNumbers:
    """Numbers replicas per component for one server: ``hello/main#1``, ``#2``, … — a
    reload's new replicas go on counting, so an id is never reused while it serves."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count[int]] = {}

    def next(self, key: str) -> int:
        return next(self._counters.setdefault(key, itertools.count(1)))


@dataclass(frozen=True)
class PoolOptions:
    """What every pool of one server is made with."""

    root: Path
    """The project folder (replicas run there)."""
    on_event: Callable[[Event], None]
    environments: Environments
    """The interpreters replicas run in."""
    numbers: ReplicaNumbers = field(default_factory=ReplicaNumbers)
    spawner: Spawner | None = None
    init_stuck_s: float = INIT_STUCK_S
    """A replica's start-up still running after this long is reported."""
    debugger: DebugRelay | None = None
    first_messages: Callable[[Replica], list[Message]] | None = None
    """What a replica's process gets before ``Start`` (``Replica.first_messages``)."""
    secrets: Secrets = field(default_factory=Secrets)
    """The session's secrets: each pool's values are masked in everything it shows."""


class ReplicaPool:
    """All replicas of one component."""

    def __init__(self, spec: ComponentSpec, options: PoolOptions) -> None:
        self.spec = spec
        self.root = Path(options.root)
        self.key = spec.key
        self.secrets = options.secrets
        self._changed = asyncio.Event()
        self._turn = 0
        self.retired = False
        self.starting: asyncio.Future[None] = asyncio.ensure_future(
            self._start_in(options.environments)
        )
        """The pool's start-up, begun as it is made (it runs once the replicas below exist):
        done when each replica is healthy, unhealthy or restarting."""
        self.replicas = [
            Replica(
                spec,
                self.root,
                f"{spec.key}#{options.numbers.next(spec.key)}",
                options.on_event,
                on_change=self._notify,
                spawner=options.spawner,
                init_stuck_s=options.init_stuck_s,
                debugger=options.debugger,
                first_messages=options.first_messages,
            )
            for _ in range(max(1, spec.replicas))
        ]

    async def _start_in(self, environments: Environments) -> None:
        """Start every replica at once in its env's interpreter (building the env first),
        with its env_vars and secrets (read once for all). A pool whose env cannot be built,
        or a secret of which is set nowhere, is unhealthy with that message: its requests
        get 503 with it."""
        from peach_cli.project.secrets import DotenvError, MissingSecret, variables_of
        from simulator.environments import EnvUnavailable

        try:
            variables = variables_of(self.spec, self.root)
            values = [variables[name] for name in self.spec.secrets]
            self.secrets.hide(values, source=f"component {self.key}")  # printed as ***
            launch = await environments.launch_for(self.spec)
        except (MissingSecret, DotenvError, EnvUnavailable) as error:
            for replica in self.replicas:
                replica.fail(str(error))
            return
        for replica in self.replicas:
            replica.launch = launch
            replica.variables = dict(variables)
        await asyncio.gather(*(replica.start() for replica in self.replicas))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    @property
    def method_kind(self) -> str | None:
        for replica in self.replicas:
            if replica.method_kind is not None:
                return replica.method_kind
        return None

    def pick(self) -> Replica | None:
        candidates = [r for r in self.replicas if r.state is ReplicaState.HEALTHY]
        if not candidates:
            candidates = [r for r in self.replicas if r.state is ReplicaState.RELOADING]
        if not candidates:  # a retired pool still serves the requests that began on it
            candidates = [r for r in self.replicas if r.state is ReplicaState.DRAINING]
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        self._turn += 1
        count = len(candidates)
        best = None
        for offset in range(count):
            replica = candidates[(self._turn + offset) % count]
            if best is None or replica.outstanding < best.outstanding:
                best = replica
        return best

    async def acquire(self) -> Replica:
        """The replica that should serve the next request; ``Unavailable`` if none can."""
        replica = self.pick()
        if replica is not None:
            return replica
        deadline = asyncio.get_running_loop().time() + STARTUP_WAIT_S
        while True:
            replica = self.pick()
            if replica is not None:
                return replica
            if not any(r.state in _WAITING for r in self.replicas) or self.retired:
                raise Unavailable(self._unavailable_message())
            if not await self._next_change(deadline):
                raise Unavailable(self._unavailable_message())

    async def _next_change(self, deadline: float) -> bool:
        """Wait for a replica's state to change, until ``deadline`` (the loop's clock);
        False when it had passed already."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        try:  # not wait_for: on 3.11 it can swallow the caller's cancellation (timeout_s)
            async with asyncio.timeout(remaining):
                await self._changed.wait()
        except TimeoutError:
            pass
        return True

    def _unavailable_message(self) -> str:
        errors = sorted({r.error for r in self.replicas if r.error})
        where = f"{self.spec.endpoint}/{self.spec.name}"
        if errors:
            return unavailable_message(where, "; ".join(errors))
        states = ", ".join(sorted({r.state.value for r in self.replicas}))
        return unavailable_message(where, f"(replicas are {states})")

    def send(
        self, params: RequestParams, call: CallInFlight, attempt: Attempt, line: str | None = None
    ) -> int | None:
        """Send a call to the best replica now (``Replica.send_call``: its result goes to
        ``call.answered``), recorded in ``attempt``, whose deadline it is bounded by; its
        request id, or None when no replica can take it now (none is ready, or its process
        has just died): ``call`` waits for one. ``line`` is the HTTP request it serves."""
        replica = self.pick()
        if replica is None:
            return None
        request_id = replica.send_call(params, call, attempt.deadline, line)
        if request_id is not None:
            attempt.replica = replica.id
        return request_id

    async def call(
        self, params: RequestParams, attempt: Attempt, line: str | None = None
    ) -> CallResult:
        """Call the component on the best replica, awaited; the contract's ``call`` for this
        pool (``line``: the HTTP request it serves). A call sent to a replica whose process
        had already died (``NotSent``) waits for the restart, as one arriving a moment later
        would (SPEC §2, starting replicas)."""
        while True:
            if not any(r.state in _SERVING for r in self.replicas):  # it waits for one to start
                waiting = [r.state_since for r in self.replicas if r.state in _WAITING]
                attempt.starting_since = min(waiting, default=None)
            try:
                replica = await self.acquire()
            except Unavailable as error:
                return CallResult.failure("unavailable", str(error))
            attempt.replica = replica.id
            try:
                return await replica.call(params, attempt.deadline, line)
            except NotSent:
                if not await self._left(replica):
                    return CallResult.failure(
                        "unavailable", f"the replica {replica.id} is not running", replica.id
                    )

    async def _left(self, replica: Replica) -> bool:
        """Wait until ``replica`` is seen to have left the serving states (its death noticed);
        False if that takes longer than ``STARTUP_WAIT_S``."""
        deadline = asyncio.get_running_loop().time() + STARTUP_WAIT_S
        while replica.state in RESTARTED_WHEN_GONE:
            if not await self._next_change(deadline):
                return False
        return True

    async def open_stream(
        self, params: RequestParams, attempt: Attempt, line: str | None = None
    ) -> ReplicaStream:
        """Open a stream on the best replica, recorded in ``attempt`` (raises ``Unavailable``,
        ``ContractError``, ``ReplicaGone``)."""
        replica = await self.acquire()
        attempt.replica = replica.id
        return await replica.open_stream(params, line)

    @property
    def outstanding(self) -> int:
        return sum(r.outstanding for r in self.replicas)

    def mark_draining(self) -> None:
        """Retired by a reload: its replicas only finish what began on them."""
        for replica in self.replicas:
            replica.mark_draining()

    async def drain_and_stop(self, timeout_s: float | None = None) -> None:
        """Let in-flight calls and streams finish (up to ``timeout_s``), then stop."""
        self.retired = True
        self.mark_draining()
        waits = [asyncio.ensure_future(r.wait_idle()) for r in self.replicas]
        try:
            if waits:
                await asyncio.wait(waits, timeout=timeout_s)
        finally:  # also when the server stops first (it stops this pool itself)
            for task in waits:
                task.cancel()
        await self.stop()

    async def stop(self) -> None:
        """Stop every replica now (their streams are closed by the replica processes)."""
        self.retired = True
        await asyncio.gather(*(replica.stop() for replica in self.replicas))
