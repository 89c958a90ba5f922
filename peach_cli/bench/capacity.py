"""Each replica's peak memory and CPU during a `peach bench` run against `peach dev`.

`peach dev` lists its replicas, their pids and their component's ``memory`` and ``cpus``
requests at ``GET /_peach/health``; when it runs on this machine (a loopback address), a
thread samples every replica's resident memory and CPU time five times a second while the
load runs. A replica restarted meanwhile is picked up at the next listing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from peach_cli.internal import HEALTH_PATH

SAMPLE_S = 0.2
LIST_S = 2.0


@dataclass
class ReplicaUse:
    component: str
    replica: str
    pid: int
    memory: int | None
    cpus: float | None
    peak_rss: int = 0
    peak_pss: int = 0
    cpu_first: float | None = None
    cpu_last: float = 0.0
    seen_first: float = 0.0
    seen_last: float = 0.0
    peak_cpu: float = 0.0
    _previous: tuple[float, float] | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        span = self.seen_last - self.seen_first
        used = self.cpu_last - (self.cpu_first or 0.0)
        return {
            "component": self.component,
            "replica": self.replica,
            "pid": self.pid,
            "peak_rss_bytes": self.peak_rss,
            "peak_pss_bytes": self.peak_pss,
            "memory_request_bytes": self.memory,
            "over_memory": self.memory is not None and self.peak_rss > self.memory,
            "cpu_percent_mean": round(100.0 * used / span, 1) if span > 0 else None,
            "cpu_percent_peak": round(self.peak_cpu, 1),
            "cpus": self.cpus,
        }


class CapacitySampler:
    """Samples the replicas a `peach dev` at ``base_url`` lists, in a thread."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.replicas: dict[tuple[str, int], ReplicaUse] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._processes: dict[int, Any] = {}

    @classmethod
    def for_dev(cls, origin: str) -> CapacitySampler | None:
        """A sampler when ``origin`` is a `peach dev` on this machine (a loopback host whose
        ``/_peach/health`` declares ``host: "dev"``), else None."""
        from urllib.parse import urlsplit

        from peach_cli.addresses import is_loopback

        if not is_loopback(urlsplit(origin).hostname):
            return None
        sampler = cls(origin)
        return sampler if sampler._list() else None

    def _list(self) -> bool:
        import httpx

        try:
            health = httpx.get(self.base_url + HEALTH_PATH, timeout=2.0).json()
        except (httpx.HTTPError, ValueError):
            return False
        if (
            not isinstance(health, dict)
            or health.get("host") != "dev"
            or "components" not in health
        ):
            return False
        for component in health["components"]:
            for replica in component.get("replicas", []):
                pid = replica.get("pid")
                if not isinstance(pid, int):
                    continue
                key = (str(replica.get("id")), pid)
                if key not in self.replicas:
                    self.replicas[key] = ReplicaUse(
                        component["component"],
                        str(replica.get("id")),
                        pid,
                        component.get("memory"),
                        component.get("cpus"),
                    )
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="peach-bench-capacity", daemon=True)
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sample()
        return [use.to_json() for use in self.replicas.values() if use.cpu_first is not None]

    def _run(self) -> None:
        listed = time.monotonic()
        while not self._stop.wait(SAMPLE_S):
            self._sample()
            if time.monotonic() - listed > LIST_S:
                listed = time.monotonic()
                self._list()

    def _sample(self) -> None:
        import psutil

        from peach_cli.procmem import process_memory

        now = time.monotonic()
        for use in self.replicas.values():
            try:
                process = self._processes.get(use.pid)
                if process is None:
                    process = self._processes[use.pid] = psutil.Process(use.pid)
                with process.oneshot():
                    rss, pss = process_memory(process)
                    times = process.cpu_times()
            except (psutil.Error, OSError):
                continue
            cpu = times.user + times.system
            use.peak_rss = max(use.peak_rss, rss)
            use.peak_pss = max(use.peak_pss, pss)
            if use.cpu_first is None:
                use.cpu_first, use.seen_first = cpu, now
            elif use._previous is not None and now > use._previous[0]:
                rate = 100.0 * (cpu - use._previous[1]) / (now - use._previous[0])
                use.peak_cpu = max(use.peak_cpu, rate)
            use._previous = (now, cpu)
            use.cpu_last, use.seen_last = cpu, now


__all__ = ["CapacitySampler", "ReplicaUse"]
