"""Where the CPU goes, process by process: a sampler of ``/proc`` at ~10 Hz in a thread.

Each sample reads every process's CPU time and ``nice`` (``/proc/PID/stat``); processes are
grouped by title (Ray names its workers ``ray::ServeReplica:APP:DEPLOYMENT``,
``ray::ProxyActor``…; anything else by its program and first argument). ``rollout.py
--trace`` uses it to say which processes took the CPU in the rollout window and what ran
just before each slow request.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict

TICKS = os.sysconf("SC_CLK_TCK")


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            parts = handle.read().split(b"\0")
    except OSError:
        return "?"
    words = [p.decode(errors="replace") for p in parts if p]
    if not words:
        return "[kernel]"
    if words[0].startswith("ray::"):
        return words[0].split(" ", 1)[0]
    program = os.path.basename(words[0])
    rest = [w for w in words[1:] if not w.startswith("-")][:1]
    for word in words[1:]:
        if word.endswith(".py") or word.startswith("peach_cli") or word.startswith("ray."):
            rest = [os.path.basename(word)]
            break
    return " ".join([program, *rest])


def _stat(pid: int) -> tuple[int, int] | None:
    """(CPU ticks, nice) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12]), int(fields[16])


class ProcSampler:
    """Samples from ``start`` to ``stop``: ``samples`` holds (monotonic time, {pid: (CPU
    seconds, nice, title)}); a title is read again while the process uses CPU in its first
    30 CPU-seconds (a process execs, Ray retitles its workers)."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, tuple[float, int, str]]]] = []
        self.titles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="proc-sampler", daemon=True)

    def start(self) -> ProcSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last: dict[int, float] = {}
        while not self._stop.is_set():
            now = time.monotonic()
            sample: dict[int, tuple[float, int, str]] = {}
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                stat = _stat(pid)
                if stat is None:
                    continue
                cpu, nice = stat[0] / TICKS, stat[1]
                if pid not in self.titles or (cpu != last.get(pid) and cpu < 30):
                    self.titles[pid] = _title(pid)  # a process execs, Ray retitles its workers
                last[pid] = cpu
                sample[pid] = (cpu, nice, self.titles[pid])
            self.samples.append((now, sample))
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - now)))

    def by_title(self, low: float, high: float) -> dict[str, tuple[float, set[int]]]:
        """Title → (CPU seconds used between ``low`` and ``high``, the nice values seen);
        each interval's CPU goes to the title the process had at its end."""
        inside = [s for s in self.samples if low <= s[0] <= high]
        used: dict[str, float] = defaultdict(float)
        nices: dict[str, set[int]] = defaultdict(set)
        for (_, before), (_, after) in zip(inside, inside[1:], strict=False):
            for pid, (cpu, nice, title) in after.items():
                delta = cpu - before.get(pid, (cpu, 0, ""))[0]
                if delta > 0:
                    used[title] += delta
                    nices[title].add(nice)
        return {title: (used[title], nices[title]) for title in used}

    def busy(self, part: str, low: float, high: float) -> list[tuple[float, float]]:
        """The sample intervals between ``low`` and ``high`` in which a process whose title
        holds ``part`` used CPU."""
        inside = [s for s in self.samples if low <= s[0] <= high]
        found = []
        for (began, before), (ended, after) in zip(inside, inside[1:], strict=False):
            if any(
                part in title and cpu > before.get(pid, (cpu, 0, ""))[0]
                for pid, (cpu, _, title) in after.items()
            ):
                found.append((began, ended))
        return found

    def table(self, low: float, high: float, top: int = 14) -> str:
        rows = sorted(self.by_title(low, high).items(), key=lambda item: -item[1][0])
        span = max(high - low, 1e-9)
        total = sum(cpu for cpu, _ in self.by_title(low, high).values())
        lines = [f"    {total:6.2f} CPU-s in {span:.1f} s ({total / span:.2f} cores)"]
        for title, (cpu, nices) in rows[:top]:
            lines.append(f"    {cpu:6.2f} {cpu / span:5.2f}  nice {sorted(nices)}  {title[:70]}")
        return "\n".join(lines)
