"""What the simulator says about each request `peach fuzz` sends it: the events an answer
alone does not show — the primary's error that a fallback covered (``RequestLogged.covered``)
and a replica process that died (``ReplicaChanged`` to ``restarting``).

The simulator runs in a thread of its own (``peach_cli.testing.host.local_host``) and hands
its events to ``Watch.on_event``; the fuzzer sends one request at a time and, once the
answer is in, ``Watch.settle`` waits for the gateway's log of that request::

    watch = Watch()
    with local_host(root, plan, on_event=watch.on_event) as url:
        mark = watch.mark()
        ...send one request...
        heard = watch.settle(mark)      # Heard(covered="method_error: …", died=[…])
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

SETTLE_S = 10.0
"""How long to wait for the log of a request already answered (it follows the answer)."""


@dataclass
class Heard:
    """What the simulator said while one request was served."""

    logged: bool = False
    """The gateway logged the request (False: it did not within ``SETTLE_S``)."""
    status: int = 0
    covered: str | None = None
    """``code: message`` of the primary's error that the fallback covered."""
    arm: str | None = None
    error: str | None = None
    """``code: message`` of the error answer, or how a stream was cut."""
    died: list[tuple[str, str, str]] = field(default_factory=list)
    """``(component key, replica id, why)`` of each replica process that died meanwhile."""


class Watch:
    """The simulator's events, for the fuzzer's thread (see the module docstring)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._requests = 0
        self._last: Any = None
        self._died: list[tuple[int, tuple[str, str, str]]] = []
        self._healthy: dict[str, int] = {}
        self._events = 0

    def on_event(self, event: Any) -> None:
        from simulator.events import ReplicaChanged, ReplicaState, RequestLogged

        with self._changed:
            self._events += 1
            if isinstance(event, RequestLogged):
                self._requests += 1
                self._last = event
            elif isinstance(event, ReplicaChanged):
                if event.state is ReplicaState.RESTARTING:
                    why = event.error or event.message or "the replica process died"
                    self._died.append((self._events, (event.component, event.replica, why)))
                elif event.state is ReplicaState.HEALTHY:
                    self._healthy[event.replica] = self._events
            else:
                return
            self._changed.notify_all()

    def mark(self) -> tuple[int, int]:
        """Where the events stand before a request is sent."""
        with self._changed:
            return self._requests, self._events

    def settle(self, mark: tuple[int, int], timeout_s: float = SETTLE_S) -> Heard:
        """What was said about the one request sent since ``mark`` (waits for its log)."""
        requests, events = mark
        with self._changed:
            self._changed.wait_for(lambda: self._requests > requests, timeout_s)
            heard = Heard()
            if self._requests > requests and self._last is not None:
                last = self._last
                heard = Heard(True, last.status, last.covered, last.arm, last.error)
            heard.died = [what for at, what in self._died if at > events]
            return heard

    def wait_restarted(self, replicas: list[str], timeout_s: float) -> bool:
        """Wait until each replica that died is healthy again (False: not in time)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            died_at = {replica: at for at, (_, replica, _why) in self._died}
            return self._changed.wait_for(
                lambda: all(self._healthy.get(r, 0) > died_at.get(r, 0) for r in replicas),
                max(0.0, deadline - time.monotonic()),
            )

    def wait_back(self, replica: str, mark: tuple[int, int], timeout_s: float) -> bool:
        """Wait until ``replica`` has died since ``mark`` and is healthy again (False: not
        in time) — after the fuzzer stopped it itself."""
        _requests, events = mark
        deadline = time.monotonic() + timeout_s

        def back() -> bool:
            died = [at for at, (_, r, _why) in self._died if r == replica and at > events]
            return bool(died) and self._healthy.get(replica, 0) > died[-1]

        with self._changed:
            return self._changed.wait_for(back, max(0.0, deadline - time.monotonic()))
