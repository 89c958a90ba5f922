"""`peach logs`: the replicas' output of one application, through the dashboard's log API.

Each replica of a Serve deployment is a Ray actor of class ``ServeReplica:<app>:<deployment>``;
its stdout (what the user's code printed) and stderr (tracebacks, init errors, failed drift
re-inits) are log files on its node, which the dashboard serves by actor id
(``/api/v0/logs/file``, ``/api/v0/logs/stream``) whichever node the replica ran on. Replicas
that stopped — one whose init failed, one a redeploy replaced — are still known to the
cluster for a while: the newest few of each deployment that wrote anything are read too, so
an init error shows (and not a replica a delete stopped before it ran the user's code).

Example::

    with DashboardClient(address) as dashboard:
        for line in read_logs(dashboard, find_replicas(dashboard, "zzacc"), tail=50):
            print(line.prefix, line.text)
"""

from __future__ import annotations

import dataclasses
import difflib
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from peach_cli.errors import DeployError, UsageError

if TYPE_CHECKING:
    from peach_cli.deploy.dashboard import DashboardClient

STREAMS = ("out", "err")
STOPPED_SHOWN = 2
"""Stopped replicas shown per deployment, newest first, among those that wrote a line."""
STOPPED_TRIED = 8
"""Stopped replicas read per deployment at most, to find those (the cluster may keep hundreds
after Serve's retries)."""
RELIST_S = 3.0
"""How often ``--follow`` looks for replicas started since (a redeploy, a restart)."""
_RAY_HEADERS = (":job_id:", ":actor_name:", ":task_name:", ":task_attempt_number:")
_ALIVE = frozenset({"ALIVE", "PENDING_CREATION", "DEPENDENCIES_UNREADY", "RESTARTING"})


@dataclass(frozen=True)
class ServeReplicaLog:
    """One replica whose log files can be read."""

    deployment: str
    replica: str
    """Serve's replica id (``jgkg4hxb``), as `peach status` shows it."""
    actor_id: str
    alive: bool
    ended_ms: int = 0
    """When a stopped replica's process exited (0 when the cluster no longer knows)."""

    @property
    def prefix(self) -> str:
        return f"{self.deployment}#{self.replica}" + ("" if self.alive else " (stopped)")


@dataclass(frozen=True)
class LogLine:
    replica: ServeReplicaLog
    stream: str
    """``out`` or ``err``."""
    text: str

    @property
    def prefix(self) -> str:
        return self.replica.prefix


def choose_application(details: dict, app: str | None) -> str:
    """``app``, checked against the cluster's applications; without it, the only one."""
    applications = sorted(details.get("applications") or {})
    listed = ", ".join(applications) or "none"
    if app is None:
        if len(applications) == 1:
            return applications[0]
        if not applications:
            raise DeployError("no applications are deployed on this cluster")
        raise UsageError(
            f"the cluster runs several applications ({listed}): name one",
            hint=f"peach logs {applications[0]}",
        )
    if app not in applications:
        close = difflib.get_close_matches(app, applications, n=1)
        raise DeployError(
            f"there is no application '{app}' on this cluster (applications: {listed})",
            hint=f"did you mean {close[0]}?" if close else None,
        )
    return app


def find_replicas(
    dashboard: DashboardClient, app: str | None, deployment: str | None = None
) -> tuple[str, list[ServeReplicaLog]]:
    """The application's name and the replicas to read: per deployment the running ones,
    then up to ``STOPPED_TRIED`` stopped ones, newest first."""
    details = dashboard.serve_details()
    app = choose_application(details, app)
    deployments = sorted(((details.get("applications") or {})[app].get("deployments")) or {})
    if deployment is not None:
        if deployment not in deployments:
            close = difflib.get_close_matches(deployment, deployments, n=1)
            raise UsageError(
                f"'{app}' has no deployment '{deployment}' (deployments: "
                f"{', '.join(deployments) or 'none'})",
                hint=f"did you mean {close[0]}?" if close else None,
            )
        deployments = [deployment]
    replicas: list[ServeReplicaLog] = []
    ended: dict[tuple[str, int], int] | None = None
    for name in deployments:
        alive: list[ServeReplicaLog] = []
        stopped: list[ServeReplicaLog] = []
        for actor in dashboard.list_actors(f"ServeReplica:{app}:{name}"):
            replica = ServeReplicaLog(
                deployment=name,
                replica=str(actor.get("name") or "").rsplit("#", 1)[-1] or "?",
                actor_id=str(actor.get("actor_id")),
                alive=str(actor.get("state")) in _ALIVE,
            )
            if replica.alive:
                alive.append(replica)
                continue
            if ended is None:  # one read of the workers table, only when something stopped
                try:
                    ended = dashboard.worker_end_times()
                except DeployError:  # an older Ray, a busy dashboard: in replica id order
                    ended = {}
            key = (str(actor.get("node_id")), int(actor.get("pid") or 0))
            stopped.append(dataclasses.replace(replica, ended_ms=ended.get(key, 0)))
        replicas += sorted(alive, key=lambda r: r.replica)
        replicas += sorted(stopped, key=lambda r: (-r.ended_ms, r.replica))[:STOPPED_TRIED]
    return app, replicas


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(_RAY_HEADERS)]


def read_logs(
    dashboard: DashboardClient, replicas: list[ServeReplicaLog], tail: int
) -> Iterator[LogLine]:
    """The last ``tail`` lines of each replica's stdout, then of its stderr; of the stopped
    replicas of a deployment, the first ``STOPPED_SHOWN`` that wrote a line."""
    if tail == 0:
        return
    stopped_shown: dict[str, int] = {}
    for replica in replicas:
        if not replica.alive and stopped_shown.get(replica.deployment, 0) >= STOPPED_SHOWN:
            continue
        lines = []
        for stream in STREAMS:
            text = dashboard.actor_log(replica.actor_id, stream, tail)
            if text is not None:  # Ray's header lines left out
                lines += [LogLine(replica, stream, line) for line in _lines(text)[-tail:]]
        if not replica.alive and lines:
            stopped_shown[replica.deployment] = stopped_shown.get(replica.deployment, 0) + 1
        yield from lines


def follow_logs(
    dashboard: DashboardClient,
    replicas: list[ServeReplicaLog],
    tail: int,
    *,
    app: str,
    deployment: str | None = None,
    stop: threading.Event | None = None,
) -> Iterator[LogLine]:
    """The last ``tail`` lines of every running replica, then each new line as it is
    written, replicas started later included, until ``stop`` is set (or Ctrl-C)."""
    stop = stop or threading.Event()
    lines: queue.Queue[LogLine] = queue.Queue()
    followed: set[str] = set()

    def follow(replica: ServeReplicaLog, stream: str) -> None:
        # Ray reads "0 lines" as its default (1000): for none, ask for one and drop it
        # (a log file always has Ray's header lines, so that line exists)
        skip = 1 if tail == 0 else 0
        for text in dashboard.follow_actor_log(replica.actor_id, stream, max(tail, 1)):
            if stop.is_set():
                return
            if skip:
                skip -= 1
                continue
            if not text.startswith(_RAY_HEADERS):
                lines.put(LogLine(replica, stream, text))

    def start(found: list[ServeReplicaLog]) -> None:
        for replica in found:
            if replica.alive and replica.actor_id not in followed:
                followed.add(replica.actor_id)
                for stream in STREAMS:
                    threading.Thread(target=follow, args=(replica, stream), daemon=True).start()

    start(replicas)
    relist_at = time.monotonic() + RELIST_S
    while not stop.is_set():
        try:
            yield lines.get(timeout=0.2)
            continue
        except queue.Empty:
            pass
        if time.monotonic() >= relist_at:
            relist_at = time.monotonic() + RELIST_S
            try:
                start(find_replicas(dashboard, app, deployment)[1])
            except DeployError:
                pass  # the application was deleted, or the dashboard is busy: keep following
