"""Soak `peach dev`: many clients, every kind of call, hot reloads, and nothing may be lost.

Starts ``peach dev`` (hot reload on) on a temporary copy of ``tests/projects/faults/soak``,
on a free loopback port, and runs ``--clients`` concurrent keep-alive clients for
``--seconds``, each pacing itself at about ``--rate`` requests a second and mixing:

* normal calls (GET with a query string, POST with a JSON body)        -> 200
* streams read to their end                                             -> 200, every chunk
* streams dropped by the client after the first chunk                   -> the server carries on
* calls past ``timeout_s`` (1 s)                                        -> 504 at the bound
* calls whose primary raises, answered by the fallback                  -> 200 from ``fallback``
* drift signals (the replica re-runs ``init``)                          -> 200
* calls to a method that raises (the endpoint asks for its 500)         -> 500 method_error
* calls to the component whose notebook is edited every ``--edit-every`` s (hot reload)
  -> 200, and a client never sees an older version after a newer one

Any other outcome is an *unexpected error*: a status the call did not ask for, a 5xx the
endpoint did not raise, a connection reset or cut-off response, a request past its deadline.
At the start (after a short warm-up) and at the end (after in-flight work has settled) it
records the RSS of the gateway and of the replicas, the gateway's open file descriptors and
its child processes; after Ctrl-C it checks that ``peach dev`` exits 0 and leaves no process.

Usage::

    python benchmarks/soak.py                          # 64 clients, 60 s; updates RESULTS.md
    python benchmarks/soak.py --clients 8 --seconds 5 --no-write
    python benchmarks/soak.py --long                   # 10 minutes, 1,000+ reloads
    python benchmarks/soak.py --long --edit-every 0    # 10 minutes, no edit at all

``--long`` runs for 10 minutes (``--seconds`` may say otherwise) and prints, every 10 s, the
RSS of the gateway and of the replicas with the requests and reloads so far, and, every
minute, the p99 of that minute's normal calls. The notebook is saved every 0.3 s for the
first 60 % of the run (over 1,000 reloads), then the minutes alternate between no edit and
an edit every 3 s, so that the p99 of calls while edits arrive is compared with the p99
without, in the same run. Its targets, after a 30 s warm-up: the gateway and the replicas
grow by at most 1 MiB per 1,000 reloads (the edit phase) and per 100,000 requests (the whole
run; both figures charge all the growth to one cause, so they are upper bounds), and the
p99 with edits every 3 s is within 1.5x the p99 without. With ``--edit-every 0`` nothing is
edited: whether the growth of drift re-inits, timeouts and streams levels off.

The exit code is 0 when every target holds: 0 unexpected errors, no leaked descriptor or
process, RSS growth within 10 %. Loopback only; bounded in clients, time and requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "tests" / "projects" / "faults" / "soak"
RESULTS = REPO / "benchmarks" / "RESULTS.md"
SECTION_START = "<!-- reliability: written by benchmarks/soak.py -->"
SECTION_END = "<!-- /reliability -->"
URL_LINE = re.compile(r"peach dev serving on (http://\S+)")
HOST = "127.0.0.1"
MAX_CLIENTS = 512
MAX_SECONDS = 3600
RSS_GROWTH_LIMIT = 0.10
P99_TARGET_S = 0.050
WARMUP_S = 2.0
SETTLE_S = 20.0
DEADLINE_S = 5.0
"""How long a call may take past what it asked for before it counts as hung."""
TIMEOUT_S = 1.0
"""timeout_s of the soak project."""
LONG_SECONDS = 600.0
LONG_WARMUP_S = 30.0
"""The long soak's growth is measured from here on (caches filled, first series made)."""
SAMPLE_EVERY_S = 10.0
FAST_EDIT_S = 0.3
"""The long soak's edit interval in its reload phase (its first ``FAST_SHARE``)."""
FAST_SHARE = 0.6
SLOW_EDIT_S = 3.0
MIB_PER_1000_RELOADS = 1.0
MIB_PER_100K_REQUESTS = 1.0
P99_EDIT_RATIO = 1.5

# (kind, weight): the mix of calls each client draws from.
MIX = (
    ("normal", 55),
    ("normal_post", 10),
    ("stream", 10),
    ("disconnect", 5),
    ("timeout", 3),
    ("fallback", 6),
    ("drift", 4),
    ("raises", 2),
    ("edited", 5),
)
# -- a small HTTP/1.1 client (keep-alive, chunked), cheap enough to leave the CPU to the server


class ProtocolError(Exception):
    """The server closed or cut the connection, or sent something that is not HTTP."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


class Connection:
    """One keep-alive HTTP/1.1 connection to the server."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _ensure(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self.reader, self.writer

    def close(self, abort: bool = False) -> None:
        if self.writer is not None:
            if abort:
                self.writer.transport.abort()
            else:
                self.writer.close()
        self.reader = self.writer = None

    async def send(self, method: str, target: str, body: bytes | None = None) -> None:
        _, writer = await self._ensure()
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
        await writer.drain()

    async def head(self) -> tuple[int, dict[str, str]]:
        reader, _ = await self._ensure()
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as error:
            raise ProtocolError(f"no response head: {error!r}") from None
        status_line, *header_lines = raw.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP status line: {status_line!r}")
        headers = {}
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        return int(parts[1]), headers

    async def chunks(self, headers: dict[str, str]):
        """The body, piece by piece (chunked transfer or Content-Length)."""
        reader, _ = await self._ensure()
        try:
            if headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";")[0].strip(), 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")
                        return
                    data = await reader.readexactly(size + 2)
                    yield data[:-2]
            else:
                length = int(headers.get("content-length", "0"))
                if length:
                    yield await reader.readexactly(length)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as error:
            raise ProtocolError(f"the response was cut short: {error!r}") from None
        finally:
            if headers.get("connection", "").lower() == "close":
                self.close()

    async def request(self, method: str, target: str, body: bytes | None = None) -> Response:
        await self.send(method, target, body)
        status, headers = await self.head()
        parts = [chunk async for chunk in self.chunks(headers)]
        return Response(status, headers, b"".join(parts))


# -- the figures ----------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren, ...)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return sorted(found)


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


@dataclass
class Sample:
    """The server's footprint at one moment."""

    gateway_rss: int
    replica_rss: int
    replicas: int
    children: int
    fds: int

    @classmethod
    def take(cls, gateway: int) -> Sample:
        children = descendants(gateway)
        replicas = [pid for pid in children if _is_replica(pid)]
        return cls(
            gateway_rss=rss_bytes(gateway),
            replica_rss=sum(rss_bytes(pid) for pid in replicas),
            replicas=len(replicas),
            children=len(children),
            fds=open_fds(gateway),
        )


def _is_replica(pid: int) -> bool:
    """A replica: spawned (``replica_worker``) or forked from a warm template (a
    ``template`` process whose parent is the template)."""
    command = _cmdline(pid)
    if b"peach_cli.runtime.replica_worker" in command:
        return True
    return b"peach_cli.runtime.template" in command and b"peach_cli.runtime.template" in (
        _cmdline(_parent(pid))
    )


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:
        return b""


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class Point:
    """One sample of the long soak: when, the footprint, and the work done so far."""

    seconds: float
    gateway_rss: int
    replica_rss: int
    replicas: int
    answered: int
    reloads: int


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass
class Report:
    clients: int
    seconds: float
    rate: float
    edit_every: float
    sent: int = 0
    answered: int = 0
    by_status: Counter[int] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    disconnected: int = 0
    normal_latencies: list[float] = field(default_factory=list)
    normal_times: list[float] = field(default_factory=list)
    """When each normal call ended, seconds from the start (the long soak's minutes)."""
    edits: int = 0
    long: bool = False
    series: list[Point] = field(default_factory=list)
    """The long soak's samples, every ``SAMPLE_EVERY_S``."""
    edited_minutes: dict[int, float | None] = field(default_factory=dict)
    """The long soak's minutes after its reload phase: minute -> edit interval (None: none)."""
    versions_seen: int = 0
    start: Sample | None = None
    end: Sample | None = None
    exit_code: int | None = None
    leftover: list[int] = field(default_factory=list)
    elapsed: float = 0.0

    def percentile(self, fraction: float) -> float:
        return percentile(self.normal_latencies, fraction)

    def edit_schedule(self) -> str:
        if self.edit_every <= 0:
            return "never"
        if not self.long:
            return f"every {self.edit_every:g} s"
        return (
            f"every {FAST_EDIT_S:g} s for {FAST_SHARE:.0%} of the run, then minutes without "
            f"edits and minutes with one every {SLOW_EDIT_S:g} s in turn"
        )

    def minute_p99(self) -> dict[int, float]:
        """The long soak's p99 of normal calls, minute by minute."""
        minutes: dict[int, list[float]] = {}
        for when, latency in zip(self.normal_times, self.normal_latencies, strict=True):
            minutes.setdefault(int(when // 60), []).append(latency)
        return {minute: percentile(values, 0.99) for minute, values in sorted(minutes.items())}

    def p99_during(self, edited: bool) -> float:
        """The p99 of normal calls in the minutes after the reload phase with edits every
        ``SLOW_EDIT_S`` (``edited``) or with none."""
        minutes = {m for m, every in self.edited_minutes.items() if (every is not None) == edited}
        values = [
            latency
            for when, latency in zip(self.normal_times, self.normal_latencies, strict=True)
            if int(when // 60) in minutes
        ]
        return percentile(values, 0.99)

    def slopes(self, which: str, since: float = LONG_WARMUP_S) -> tuple[float, float] | None:
        """MiB of ``which`` (gateway or replica) RSS per 1,000 reloads (over the reload
        phase) and per 100,000 requests (over the whole run), from ``since`` (the warm-up)
        on; each charges all of the growth to its cause (an upper bound). None: too short a
        run."""
        after = [p for p in self.series if p.seconds >= since]
        if len(after) < 2:
            return None
        first, last = after[0], after[-1]
        phase = [p for p in after if p.reloads > 0 and p.seconds <= self.seconds * FAST_SHARE]
        phase_end = phase[-1] if phase else last

        def mib(point: Point) -> float:
            return getattr(point, f"{which}_rss") / (1024 * 1024)

        reloads = phase_end.reloads - first.reloads
        per_reloads = (mib(phase_end) - mib(first)) / reloads * 1000 if reloads > 0 else 0.0
        requests = last.answered - first.answered
        per_requests = (mib(last) - mib(first)) / requests * 100_000 if requests > 0 else 0.0
        return per_reloads, per_requests

    def long_failures(self) -> list[str]:
        problems = []
        for which in ("gateway", "replica"):
            slopes = self.slopes(which)
            if slopes is None:
                continue
            if slopes[0] > MIB_PER_1000_RELOADS:
                problems.append(f"{which} RSS {slopes[0]:+.2f} MiB per 1,000 reloads")
            if slopes[1] > MIB_PER_100K_REQUESTS:
                problems.append(f"{which} RSS {slopes[1]:+.2f} MiB per 100,000 requests")
        quiet, edited = self.p99_during(False), self.p99_during(True)
        if quiet == quiet and edited == edited and edited > P99_EDIT_RATIO * quiet:  # not nan
            problems.append(
                f"p99 with edits every {SLOW_EDIT_S:g} s {edited * 1000:.1f} ms, "
                f"{edited / quiet:.2f}x the {quiet * 1000:.1f} ms without"
            )
        return problems

    def long_summary(self) -> str:
        """The long soak's figures: the growth slopes and the p99 with and without edits."""
        lines = []
        for which in ("gateway", "replica"):
            slopes = self.slopes(which)
            if slopes is not None:
                lines.append(
                    f"{which} RSS after the {LONG_WARMUP_S:g} s warm-up: "
                    f"{slopes[0]:+.3f} MiB per 1,000 reloads, "
                    f"{slopes[1]:+.3f} MiB per 100,000 requests"
                )
            half = self.seconds * FAST_SHARE / 2
            later = self.slopes(which, since=half)
            if later is not None and half > LONG_WARMUP_S:
                lines.append(
                    f"{which} RSS from {half:g} s on (the reload phase's second half): "
                    f"{later[0]:+.3f} MiB per 1,000 reloads, "
                    f"{later[1]:+.3f} MiB per 100,000 requests"
                )
        if self.series:
            lines.append(f"reloads {self.series[-1].reloads}, answered {self.series[-1].answered}")
        quiet, edited = self.p99_during(False), self.p99_during(True)
        if self.edited_minutes:
            lines.append(
                f"p99 of normal calls after the reload phase: {edited * 1000:.1f} ms in the "
                f"minutes with an edit every {SLOW_EDIT_S:g} s, {quiet * 1000:.1f} ms in those "
                f"without ({edited / quiet:.2f}x)"
            )
        return "\n".join(lines)

    @staticmethod
    def growth(before: int, after: int) -> float:
        return (after - before) / before if before else 0.0

    @property
    def gateway_growth(self) -> float:
        assert self.start and self.end
        return self.growth(self.start.gateway_rss, self.end.gateway_rss)

    @property
    def replica_growth(self) -> float:
        assert self.start and self.end
        return self.growth(self.start.replica_rss, self.end.replica_rss)

    @property
    def failures(self) -> list[str]:
        """Which targets were missed (empty: all held)."""
        problems = []
        if self.unexpected:
            problems.append(f"{len(self.unexpected)} unexpected errors")
        assert self.start and self.end
        if self.end.fds > self.start.fds:
            problems.append(f"open descriptors {self.start.fds} -> {self.end.fds}")
        if self.end.children != self.start.children:
            problems.append(f"child processes {self.start.children} -> {self.end.children}")
        if self.gateway_growth > RSS_GROWTH_LIMIT:
            problems.append(f"gateway RSS grew {self.gateway_growth:.1%}")
        if self.replica_growth > RSS_GROWTH_LIMIT:
            problems.append(f"replica RSS grew {self.replica_growth:.1%}")
        if self.percentile(0.99) > P99_TARGET_S:
            problems.append(f"p99 of normal calls {self.percentile(0.99) * 1000:.1f} ms")
        if self.exit_code != 0:
            problems.append(f"peach dev exited with {self.exit_code} after Ctrl-C")
        if self.leftover:
            problems.append(f"processes left after exit: {self.leftover}")
        if self.long:
            problems += self.long_failures()
        return problems

    def summary(self) -> str:
        assert self.start and self.end
        mb = 1024 * 1024
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.by_status.items()))
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
        lines = [
            f"clients {self.clients}, {self.seconds:g} s, ~{self.rate:g} req/s each, "
            f"notebook edited {self.edit_schedule()} ({self.edits} edits, "
            f"{self.versions_seen} versions served)",
            f"requests sent {self.sent}, answered {self.answered} "
            f"({self.answered / max(self.elapsed, 1e-9):.0f}/s), "
            f"streams dropped by the client {self.disconnected}",
            f"by status: {statuses}",
            f"by kind: {kinds}",
            f"unexpected errors: {len(self.unexpected)}",
            f"normal calls: p50 {self.percentile(0.5) * 1000:.1f} ms, "
            f"p99 {self.percentile(0.99) * 1000:.1f} ms "
            f"(n = {len(self.normal_latencies)})",
            f"gateway RSS {self.start.gateway_rss / mb:.1f} -> {self.end.gateway_rss / mb:.1f} MiB "
            f"({self.gateway_growth:+.1%}); replicas RSS {self.start.replica_rss / mb:.1f} -> "
            f"{self.end.replica_rss / mb:.1f} MiB ({self.replica_growth:+.1%}, "
            f"{self.start.replicas} -> {self.end.replicas} processes)",
            f"gateway open fds {self.start.fds} -> {self.end.fds}; child processes "
            f"{self.start.children} -> {self.end.children}; exit code after Ctrl-C "
            f"{self.exit_code}; processes left {len(self.leftover)}",
        ]
        if self.long:
            lines.append(self.long_summary())
        for problem in self.unexpected[:20]:
            lines.append(f"  unexpected: {problem}")
        return "\n".join(lines)


# -- the clients ----------------------------------------------------------------------------


class Soak:
    def __init__(self, host: str, port: int, report: Report, stop_at: float, seed: int) -> None:
        self.host = host
        self.port = port
        self.report = report
        self.stop_at = stop_at
        self.seed = seed
        self.kinds = [kind for kind, _ in MIX]
        self.weights = [weight for _, weight in MIX]
        self.versions: set[int] = set()
        self.began = time.monotonic()

    def unexpected(self, kind: str, what: str) -> None:
        self.report.unexpected.append(f"{kind}: {what}")

    async def client(self, number: int) -> None:
        rng = random.Random(self.seed * 1000 + number)
        connection = Connection(self.host, self.port)
        newest_version = -1
        try:
            while time.monotonic() < self.stop_at:
                kind = rng.choices(self.kinds, self.weights)[0]
                self.report.sent += 1
                self.report.by_kind[kind] += 1
                began = time.monotonic()
                limit = DEADLINE_S + (TIMEOUT_S if kind == "timeout" else 0.0)
                try:
                    outcome = await asyncio.wait_for(
                        self.call(connection, kind, number, rng), limit
                    )
                except TimeoutError:
                    self.unexpected(kind, f"no answer within {limit:g} s (hung)")
                    connection.close(abort=True)
                    continue
                except (ProtocolError, ConnectionError, OSError) as error:
                    self.unexpected(kind, f"connection error: {error!r}")
                    connection.close(abort=True)
                    continue
                elapsed = time.monotonic() - began
                if outcome is None:  # a stream the client dropped on purpose
                    self.report.disconnected += 1
                else:
                    status, version = outcome
                    self.report.answered += 1
                    self.report.by_status[status] += 1
                    if kind in ("normal", "normal_post") and status == 200:
                        self.report.normal_latencies.append(elapsed)
                        self.report.normal_times.append(time.monotonic() - self.began)
                    if version is not None:
                        if version < newest_version:
                            self.unexpected(kind, f"version {version} after {newest_version}")
                        newest_version = max(newest_version, version)
                        self.versions.add(version)
                pause = rng.expovariate(self.report.rate) if self.report.rate > 0 else 0.0
                await asyncio.sleep(min(pause, max(0.0, self.stop_at - time.monotonic())))
        finally:
            connection.close()

    async def call(
        self, connection: Connection, kind: str, number: int, rng: random.Random
    ) -> tuple[int, int | None] | None:
        """One call of ``kind``; returns (status, version) or None for a dropped stream."""
        expect_component = "main"
        if kind == "normal":
            response = await connection.request(
                "GET", f"/recommend?user=u{number}-{rng.randrange(1000)}&size=10"
            )
            expected = 200
        elif kind == "normal_post":
            body = json.dumps({"user": f"p{number}", "size": 5}).encode()
            response = await connection.request("POST", "/recommend", body)
            expected = 200
        elif kind == "stream":
            count = rng.randrange(1, 8)
            response = await connection.request("GET", f"/stream?stream=true&count={count}")
            if response.status == 200:
                wanted = "".join(f"word-{i}\n" for i in range(count)).encode()
                if response.body != wanted:
                    self.unexpected(kind, f"stream body {response.body[:80]!r} != {wanted!r}")
            expected = 200
        elif kind == "disconnect":
            await connection.send("GET", "/stream?stream=true&count=200&delay=0.01")
            status, headers = await connection.head()
            if status != 200:
                self.unexpected(kind, f"status {status}")
                connection.close(abort=True)
                return status, None
            chunks = connection.chunks(headers)
            await chunks.__anext__()  # the first chunk, then hang up
            await chunks.aclose()
            connection.close(abort=True)
            return None
        elif kind == "timeout":
            began = time.monotonic()
            response = await connection.request("GET", "/slow?seconds=3")
            expected = 504
            if time.monotonic() - began > TIMEOUT_S + 2.0:
                self.unexpected(kind, f"504 came {time.monotonic() - began:.2f} s after the call")
        elif kind == "fallback":
            response = await connection.request("GET", "/fallback")
            expected = 200
            expect_component = "fallback"
        elif kind == "drift":
            response = await connection.request("GET", "/drift?signal=true")
            expected = 200
        elif kind == "raises":
            response = await connection.request("GET", "/fails")
            expected = 500
            if response.status == 500:
                code = json.loads(response.body)["error"]["code"]
                if code != "method_error":
                    self.unexpected(kind, f"500 with code {code}")
        else:  # edited
            response = await connection.request("GET", "/edited")
            expected = 200
            if response.status == 200:
                version = json.loads(response.body)["result"]["version"]
                return response.status, version
        if response.status != expected:
            self.unexpected(kind, f"status {response.status}: {response.body[:200]!r}")
        elif expected != 504 and response.headers.get("x-peach-component") != expect_component:
            self.unexpected(kind, f"answered by {response.headers.get('x-peach-component')}")
        return response.status, None


# -- running it -----------------------------------------------------------------------------


def edited_notebook(version: int) -> str:
    source = f'VERSION = {version}\n\n\ndef version():\n    return {{"version": VERSION}}\n'
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": source.splitlines(True),
    }
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(notebook, indent=1) + "\n"


def wait_for(predicate, timeout_s: float, what: str, log: Path | None = None):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise RuntimeError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.05)


def health(url: str) -> dict | None:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        connection.request("GET", "/_peach/health")
        return json.loads(connection.getresponse().read())
    except (OSError, ValueError):
        return None
    finally:
        connection.close()


def settled(url: str, gateway: int, replicas: int) -> bool:
    state = health(url)
    if not state or state["status"] != "ok":
        return False
    return Sample.take(gateway).replicas == replicas


class ReloadCounter:
    """Counts the reloads `peach dev`'s log reports (read on from where it last stopped)."""

    LINE = re.compile(rb"(patched|restarted) edited/main")

    def __init__(self, log: Path | None) -> None:
        self.log = log
        self.offset = 0
        self.count = 0
        self.rest = b""

    def read(self) -> int:
        if self.log is None:
            return 0
        with self.log.open("rb") as handle:
            handle.seek(self.offset)
            data = self.rest + handle.read()
        self.offset += len(data) - len(self.rest)
        lines = data.split(b"\n")
        self.rest = lines.pop()
        self.count += sum(1 for line in lines if self.LINE.search(line))
        return self.count


def long_schedule(report: Report) -> Callable[[float], float | None]:
    """The long soak's edit interval at each moment of the run (None: no edit then), and
    the minutes after its reload phase in ``report.edited_minutes``."""
    if not report.long:
        every = report.edit_every
        return lambda _elapsed: every if every > 0 else None
    if report.edit_every == 0:
        return lambda _elapsed: None
    fast_end = int(report.seconds * FAST_SHARE // 60) * 60
    minutes = range(fast_end // 60, int(report.seconds // 60))
    report.edited_minutes = {m: (SLOW_EDIT_S if (m - minutes.start) % 2 else None) for m in minutes}

    def interval(elapsed: float) -> float | None:
        if elapsed < fast_end:
            return FAST_EDIT_S
        return report.edited_minutes.get(int(elapsed // 60))

    return interval


async def drive(
    report: Report, url: str, project: Path, seed: int, gateway: int, log: Path | None = None
) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    began = time.monotonic()
    # Warm up (every endpoint once, a few rounds), then take the starting figures.
    warm = Soak(parts.hostname or HOST, parts.port or 0, Report(4, WARMUP_S, 20, 0), 0.0, seed)
    warm.stop_at = time.monotonic() + WARMUP_S
    await asyncio.gather(*(warm.client(n) for n in range(min(report.clients, 8))))
    if warm.report.unexpected:
        report.unexpected += [f"warm-up {u}" for u in warm.report.unexpected]
    replicas = Sample.take(gateway).replicas
    await asyncio.to_thread(wait_for, lambda: settled(url, gateway, replicas), SETTLE_S, "settle")
    report.start = Sample.take(gateway)
    began = time.monotonic()
    soak = Soak(parts.hostname or HOST, parts.port or 0, report, began + report.seconds, seed)
    notebook = project / "notebooks" / "Edited.ipynb"

    schedule = long_schedule(report)
    reloads = ReloadCounter(log)
    reloads.read()  # the start: only the soak's reloads count

    async def edit() -> None:
        version = 0
        while True:
            every = schedule(time.monotonic() - began)
            if time.monotonic() + (every or 1.0) >= soak.stop_at:
                return
            await asyncio.sleep(every or 1.0)
            if every is None or schedule(time.monotonic() - began) is None:
                continue
            version += 1
            notebook.write_text(edited_notebook(version))
            report.edits += 1

    async def sample() -> None:
        """The long soak's time series: RSS every ``SAMPLE_EVERY_S``, p99 every minute."""
        minute = 0
        print("    s  gateway MiB  replicas MiB  replicas  answered  reloads  edits", flush=True)
        while True:
            await asyncio.sleep(SAMPLE_EVERY_S - (time.monotonic() - began) % SAMPLE_EVERY_S)
            elapsed = time.monotonic() - began
            taken = await asyncio.to_thread(Sample.take, gateway)
            count = await asyncio.to_thread(reloads.read)
            point = Point(
                elapsed, taken.gateway_rss, taken.replica_rss, taken.replicas,
                report.answered, count,
            )  # fmt: skip
            report.series.append(point)
            print(
                f"{elapsed:5.0f}  {point.gateway_rss / 2**20:11.1f}  "
                f"{point.replica_rss / 2**20:12.1f}  {point.replicas:8d}  "
                f"{point.answered:8d}  {count:7d}  {report.edits:5d}",
                flush=True,
            )
            if int(elapsed // 60) > minute:
                p99 = report.minute_p99().get(minute, float("nan"))
                every = schedule(minute * 60 + 30)
                edits = f"an edit every {every:g} s" if every else "no edits"
                print(f"minute {minute + 1}: p99 of normal calls {p99 * 1000:.1f} ms ({edits})")
                minute = int(elapsed // 60)

    editing = asyncio.ensure_future(edit())
    sampling = asyncio.ensure_future(sample()) if report.long else None
    await asyncio.gather(*(soak.client(n) for n in range(report.clients)))
    report.elapsed = time.monotonic() - began
    for task in (editing, sampling):
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    report.versions_seen = len(soak.versions)
    # Let the last reload finish and retired replicas drain before the end figures.
    await asyncio.sleep(1.0)
    await asyncio.to_thread(
        wait_for, lambda: settled(url, gateway, replicas), SETTLE_S, "the server to settle"
    )
    report.end = Sample.take(gateway)


def run_soak(
    clients: int = 64,
    seconds: float = 60.0,
    rate: float = 5.0,
    edit_every: float = 3.0,
    seed: int = 7,
    workdir: Path | None = None,
    long: bool = False,
) -> Report:
    """Run one soak against a fresh `peach dev` and return its report (``long``: with the
    long soak's time series, edit schedule and targets)."""
    if not 1 <= clients <= MAX_CLIENTS:
        raise ValueError(f"--clients must be between 1 and {MAX_CLIENTS}")
    if not 0 < seconds <= MAX_SECONDS:
        raise ValueError(f"--seconds must be between 0 and {MAX_SECONDS}")
    report = Report(clients, seconds, rate, edit_every, long=long)
    with tempfile.TemporaryDirectory(prefix="peach-soak-", dir=workdir) as folder:
        project = Path(folder) / "soak"
        shutil.copytree(PROJECT, project)
        log_path = Path(folder) / "peach-dev.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "peach_cli.cli", "dev", str(project), "--host", HOST]
                + ["--port", "0"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                env=dict(os.environ, NO_COLOR="1", COLUMNS="200", PYTHONUNBUFFERED="1"),
                start_new_session=True,
            )
        try:
            match = wait_for(
                lambda: URL_LINE.search(log_path.read_text(errors="replace")),
                60,
                "peach dev to start",
                log_path,
            )
            url = match.group(1)
            wait_for(lambda: (health(url) or {}).get("status") == "ok", 60, "replicas", log_path)
            wait_for(
                lambda: "watching" in log_path.read_text(errors="replace"),
                30,
                "the watcher",
                log_path,
            )
            asyncio.run(drive(report, url, project, seed, process.pid, log_path))
            pids = descendants(process.pid)
            os.kill(process.pid, signal.SIGINT)
            try:
                report.exit_code = process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                report.exit_code = None
            # Replicas exit right after the gateway: wait for them, up to a deadline.
            deadline = time.monotonic() + 10
            report.leftover = [pid for pid in pids if _running(pid)]
            while report.leftover and time.monotonic() < deadline:
                time.sleep(0.05)
                report.leftover = [pid for pid in report.leftover if _running(pid)]
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            for pid in report.leftover:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    return report


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def command_line(args: argparse.Namespace) -> str:
    return (
        f"python benchmarks/soak.py {'--long ' if args.long else ''}--clients {args.clients} "
        f"--seconds {args.seconds:g} --rate {args.rate:g} --edit-every {args.edit_every:g}"
    )


def provenance() -> str:
    """Which run this is: the date, the commit (``+changes`` when the tree differs from
    it) and the machine."""
    commit = "unknown commit"
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if head.returncode == 0:
            commit = "commit " + head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
    except OSError:
        pass
    machine = f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python "
    machine += platform.python_version()
    return f"{time.strftime('%Y-%m-%d', time.gmtime())}, {commit} ({machine})"


def write_results(report: Report, command: str, path: Path = RESULTS) -> None:
    """Replace the reliability section of RESULTS.md (other sections are kept)."""
    assert report.start and report.end
    failures = report.failures
    verdict = "all targets met" if not failures else "targets missed: " + "; ".join(failures)
    lines = [
        SECTION_START,
        "## Reliability: soak",
        "",
        f"Produced by `{command}` on {provenance()}; re-run it to regenerate this section.",
        "",
        f"Result: **{verdict}**.",
        "",
        "```",
        report.summary(),
        "```",
        "",
        "Targets: 0 unexpected errors (a status the call did not ask for, a 5xx the endpoint "
        "did not raise, a reset or cut-off connection, a call past its deadline); no leaked "
        "descriptor or process; RSS growth of the gateway and of the replicas <= "
        f"{RSS_GROWTH_LIMIT:.0%} (start taken after a {WARMUP_S:g} s warm-up); p99 of normal "
        f"calls <= {P99_TARGET_S * 1000:g} ms. Only the figures above were measured by this run.",
        SECTION_END,
    ]
    section = "\n".join(lines) + "\n"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    if SECTION_START in text and SECTION_END in text:
        head, rest = text.split(SECTION_START, 1)
        tail = rest.split(SECTION_END, 1)[1].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=None, help="60; --long: 600")
    parser.add_argument("--rate", type=float, default=5.0, help="requests/s per client")
    parser.add_argument("--edit-every", type=float, default=3.0, help="seconds; 0: no edits")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--long", action="store_true", help="RSS and p99 as time series")
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = LONG_SECONDS if args.long else 60.0
    try:
        report = run_soak(
            args.clients, args.seconds, args.rate, args.edit_every, args.seed, long=args.long
        )
    except (ValueError, RuntimeError) as error:
        print(f"soak: {error}", file=sys.stderr)
        return 2
    print(report.summary())
    failures = report.failures
    print("targets: " + ("all met" if not failures else "; ".join(failures)))
    if not args.no_write:
        write_results(report, command_line(args))
        print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
