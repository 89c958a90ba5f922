"""What the simulator reports while it serves: plain data for whoever renders it.

The simulator never prints; ``DevServer`` hands each of these to the ``on_event`` callback
it was given (``peach dev`` renders them, tests collect them).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ReplicaState(StrEnum):
    STARTING = "starting"
    HEALTHY = "healthy"
    RELOADING = "reloading"
    """Re-running ``init`` after a drift signal."""
    UNHEALTHY = "unhealthy"
    """``init`` raised; the error says why."""
    RESTARTING = "restarting"
    """The process died and is being started again."""
    DRAINING = "draining"
    """Retired by a reload: finishing in-flight work."""
    STOPPED = "stopped"


@dataclass(frozen=True)
class ReplicaChanged:
    """A replica changed state (or reported an error without changing state)."""

    component: str
    """``endpoint/component``."""
    replica: str
    state: ReplicaState
    pid: int | None = None
    error: str | None = None
    message: str | None = None
    """What happened, in a sentence (``restarted after exit code 17``)."""


@dataclass(frozen=True)
class ReplicaLog:
    """A log record or a line of output from a replica process (tracebacks included)."""

    component: str
    replica: str
    level: str
    message: str


@dataclass(frozen=True)
class ReplicaMemory:
    """A replica's resident memory, sampled about once a second."""

    component: str
    replica: str
    rss: int
    limit: int | None

    @property
    def over_limit(self) -> bool:
        return self.limit is not None and self.rss > self.limit


@dataclass(frozen=True)
class MemoryWarning:
    """A replica's resident memory went over the component's ``memory`` request."""

    component: str
    replica: str
    rss: int
    limit: int


@dataclass(frozen=True)
class RequestLogged:
    """One request answered (or one stream ended)."""

    method: str
    path: str
    status: int
    endpoint: str | None
    component: str | None
    replica: str | None
    latency_s: float
    stream: bool = False
    error: str | None = None
    """The error code and message of an error envelope."""


@dataclass(frozen=True)
class ServerNote:
    """Something about the server itself (started, stopping, a plan applied)."""

    message: str
    level: str = "info"


Event = ReplicaChanged | ReplicaLog | ReplicaMemory | MemoryWarning | RequestLogged | ServerNote
