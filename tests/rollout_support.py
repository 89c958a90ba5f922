"""A rollout under steady load: the project, the load and the figures (the rollout test and
``benchmarks/rollout.py`` share them).

``RolloutLoad`` runs `peach bench`'s open-loop generator (``peach_cli.bench.loadgen``) in a
thread against a Serve proxy — unary calls to ``/hello`` and, every ``STREAM_EVERY``-th
request, a one-second stream from ``/ticks`` — and keeps when each request was due and how it
ended (``Timeline``); ``figures`` splits that into the steady window before a deploy and the
rollout window from the deploy's start to its end.
"""

from __future__ import annotations

import asyncio
import math
import selectors
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from projectkit import notebook_json

from peach_cli.bench.loadgen import LoadGenerator, LoadPlan, address_of, encode
from peach_cli.bench.summary import Tally
from peach_cli.client.items import AskRequest

INIT_S = 3.0
"""What ``init`` takes in the rollout project (a model loading): the gap a stop-first
rollout of one replica leaves."""
MAX_CONNECTIONS = 400
"""The open loop's connections at most: its event loop waits with ``select``, which takes
no descriptor above 1023 (a stall of the server would otherwise open one per request)."""
STREAM_EVERY = 10
STREAM_TICKS = 10
STREAM_GAP_S = 0.1

NOTEBOOK_CELL = """import asyncio
import time

VERSION = {version}


def load():
    time.sleep({init_s})  # a model loading: what a new replica takes to start
    return {{"version": VERSION}}


def hello(model, name: str = "world"):
    return {{"greeting": f"hello {{name}}", "version": model["version"]}}


async def ticks(model, n: int = 10, gap: float = 0.1):
    for i in range(n):
        yield f"{{model['version']}} {{i}}\\n"
        await asyncio.sleep(gap)
"""

CONF = """codops: {codops}
timeout_s: 30
endpoints:
  hello:
    url: /hello
    components:
      main: {{notebook: notebooks/Rollout.ipynb, init: load, method: hello, replicas: {replicas}, cpus: {cpus}}}
  ticks:
    url: /ticks
    components:
      main: {{notebook: notebooks/Rollout.ipynb, init: load, method: ticks, replicas: {replicas}, cpus: {cpus}}}
"""


def write_rollout_project(
    root: Path,
    *,
    version: int,
    replicas: int = 1,
    codops: str = "rollout",
    init_s: float = INIT_S,
    cpus: float = 0.1,
) -> Path:
    """A project whose two components (a unary method and a stream) come from one cell:
    a new ``version`` changes the code of both."""
    (root / "notebooks").mkdir(parents=True, exist_ok=True)
    (root / "peach.yaml").write_text(CONF.format(codops=codops, replicas=replicas, cpus=cpus))
    cell = NOTEBOOK_CELL.format(version=version, init_s=init_s)
    (root / "notebooks" / "Rollout.ipynb").write_text(notebook_json([cell]))
    return root


def replica_ids(dashboard_url: str, app: str) -> dict[str, set[str]]:
    """Deployment → the ids of its replicas, whatever their states."""
    from peach_cli.deploy.dashboard import DashboardClient

    with DashboardClient(dashboard_url) as dashboard:
        details = dashboard.serve_details()
    deployments = ((details.get("applications") or {}).get(app) or {}).get("deployments") or {}
    return {
        name: {r["replica_id"] for r in item.get("replicas") or ()}
        for name, item in deployments.items()
    }


def replica_pids(dashboard_url: str, app: str) -> dict[str, set[int]]:
    """Deployment → the process ids of its replicas (those Serve has started)."""
    from peach_cli.deploy.dashboard import DashboardClient

    with DashboardClient(dashboard_url) as dashboard:
        details = dashboard.serve_details()
    deployments = ((details.get("applications") or {}).get(app) or {}).get("deployments") or {}
    return {
        name: {r["pid"] for r in item.get("replicas") or () if r.get("pid")}
        for name, item in deployments.items()
    }


def watch_rollout(
    dashboard_url: str,
    app: str,
    before: dict[str, set[str]],
    names: list[str],
    *,
    timeout_s: float = 240,
    poll_s: float = 0.25,
    trace: list[tuple[float, dict[str, list[str]]]] | None = None,
) -> tuple[float, float]:
    """Poll Serve (as often as `peach deploy` does) from now until the deployments ``names``
    of ``app`` have no replica of ``before`` left and run all theirs; return when the first
    change showed (a new replica, or an old one not running) and when the last ended
    (monotonic). ``trace`` gets each poll's replica states."""
    from peach_cli.deploy.dashboard import DashboardClient

    deadline = time.monotonic() + timeout_s
    changed: float | None = None
    with DashboardClient(dashboard_url) as dashboard:
        while True:
            now = time.monotonic()
            details = dashboard.serve_details()
            application = (details.get("applications") or {}).get(app) or {}
            deployments = application.get("deployments") or {}
            done = True
            if trace is not None:
                states = {
                    name: [
                        f"{r['replica_id'][:4]}:{r.get('state')}"
                        for r in item.get("replicas") or ()
                    ]
                    for name, item in deployments.items()
                }
                trace.append((now, states))
            for name in names:
                replicas = (deployments.get(name) or {}).get("replicas") or ()
                old = before.get(name, set())
                ids = {r["replica_id"] for r in replicas}
                running = {r["replica_id"] for r in replicas if r.get("state") == "RUNNING"}
                if ids - old or (old & ids) - running or old - ids:
                    changed = now if changed is None else changed
                if ids & old or running != ids or not running:
                    done = False
            if done and changed is not None:
                return changed, now
            assert now < deadline, f"the rollout of {app} did not end: {deployments}"
            time.sleep(poll_s)


@dataclass
class Answer:
    due: float
    """When the request was due (``time.monotonic``)."""
    seconds: float
    """From then to its whole answer."""
    ok: bool
    stream: bool
    cut: bool = False


class Timeline(Tally):
    """A ``Tally`` that also keeps every request: when it was due and how it ended."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[Answer] = []
        self.failures_at: list[tuple[float, str]] = []

    def record_answer(  # type: ignore[override]
        self, seconds: float, status: int, component: Any, replica: Any, error_code: Any,
        recorded: bool, *, chunks: int | None = None, stream_s: float = 0.0, cut: bool = False,
    ) -> None:  # fmt: skip
        super().record_answer(
            seconds, status, component, replica, error_code, recorded,
            chunks=chunks, stream_s=stream_s, cut=cut,
        )  # fmt: skip
        ok = status == 200 and (chunks is None or chunks >= 1)
        self.answers.append(
            Answer(time.monotonic() - seconds, seconds, ok, chunks is not None, cut)
        )

    def record_failure(self, reason: str, recorded: bool) -> None:
        super().record_failure(reason, recorded)
        self.failures_at.append((time.monotonic(), reason))


class RolloutLoad:
    """The open loop against ``base`` (a proxy URL with the application's prefix), in a
    thread of its own from ``start`` to ``finish``."""

    def __init__(self, base: str, rate: float) -> None:
        shots = [encode(AskRequest("GET", f"{base}/hello", (("name", "load"),)))] * (
            STREAM_EVERY - 1
        )
        ticks = (("n", str(STREAM_TICKS)), ("gap", str(STREAM_GAP_S)), ("stream", "1"))
        shots.append(encode(AskRequest("GET", f"{base}/ticks", ticks, stream=True)))
        self.plan = LoadPlan(
            shots=shots,
            address=address_of(base),
            rate=rate,
            duration_s=3600,
            timeout_s=60,
            max_connections=MAX_CONNECTIONS,
        )
        self.timeline = Timeline()
        self.generator = LoadGenerator(self.plan, self.timeline)
        self.began = 0.0
        self._thread = threading.Thread(target=self._run, name="rollout-load", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
        try:
            loop.run_until_complete(self.generator.run())
        except BaseException as error:  # noqa: BLE001 - reported by finish
            self.error = error
        finally:
            loop.close()

    def start(self) -> RolloutLoad:
        self.began = time.monotonic()
        self._thread.start()
        return self

    def finish(self) -> Timeline:
        """Stop sending now; wait for what is in flight (streams included) to end."""
        self.plan.duration_s = max(0.0, time.monotonic() - self.generator.started)
        self._thread.join(self.plan.timeout_s + 60)
        assert not self._thread.is_alive(), "the load did not finish"
        if self.error is not None:
            raise self.error
        return self.timeline


@dataclass
class Figures:
    """A rollout's figures: requests lost (an answer other than 200, or none), streams cut,
    unary latencies (ms) of the steady window and of the rollout window."""

    requests: int
    lost: int
    streams: int
    cut: int
    steady_p99_ms: float
    rollout_p99_ms: float
    rollout_max_ms: float
    rollout_s: float
    reasons: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.rollout_p99_ms / max(self.steady_p99_ms, 1e-9)

    def line(self) -> str:
        return (
            f"lost {self.lost}/{self.requests}, streams cut {self.cut}/{self.streams}, "
            f"steady p99 {self.steady_p99_ms:.0f} ms, rollout p99 {self.rollout_p99_ms:.0f} ms "
            f"({self.ratio:.1f}x), max {self.rollout_max_ms:.0f} ms, rollout {self.rollout_s:.1f} s"
        )


def p99(values: list[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def figures(
    timeline: Timeline, steady: tuple[float, float], rollout: tuple[float, float]
) -> Figures:
    """Figures of the requests due in ``steady`` and in ``rollout`` (monotonic bounds);
    every request of the run counts for lost and cut."""
    answers = timeline.answers

    def unary(window: tuple[float, float]) -> list[float]:
        low, high = window
        return [a.seconds * 1000 for a in answers if not a.stream and a.ok and low <= a.due < high]

    lost = [a for a in answers if not a.ok] + timeline.failures_at
    in_rollout = unary(rollout)
    return Figures(
        requests=len(answers) + len(timeline.failures_at),
        lost=len(lost),
        streams=sum(1 for a in answers if a.stream),
        cut=sum(1 for a in answers if a.stream and a.cut),
        steady_p99_ms=p99(unary(steady)),
        rollout_p99_ms=p99(in_rollout),
        rollout_max_ms=max(in_rollout, default=math.nan),
        rollout_s=rollout[1] - rollout[0],
        reasons=sorted({reason for _, reason in timeline.failures_at}),
    )


def thread_niceness(pid: int) -> set[int]:
    """The ``nice`` values of every thread of ``pid`` (Linux keeps one per thread)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:  # the thread ended
            continue
        found.add(int(text[text.rfind(")") + 2 :].split()[16]))
    return found


def niceness_by_title(prefix: str) -> dict[str, set[int]]:
    """The ``nice`` values of this machine's processes whose title (Ray sets
    ``ray::ServeReplica:APP:DEPLOYMENT``, ``ray::ProxyActor``…) starts with ``prefix``, by
    title, every thread of each: the test cluster's nodes run here."""
    import psutil

    found: dict[str, set[int]] = {}
    for process in psutil.process_iter(["cmdline"]):
        title = " ".join(process.info["cmdline"] or ())
        if title.startswith(prefix):
            try:
                nices = thread_niceness(process.pid)
            except OSError:  # it ended
                continue
            found.setdefault(title.split(" ", 1)[0], set()).update(nices)
    return found


class NicenessWatch:
    """Every ``interval_s`` from ``start`` to ``stop``: each Ray worker process's title and
    the ``nice`` of its threads (``seen``: pid → [(title, nices)]), to tell at what
    priority a replica started and served."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self.seen: dict[int, list[tuple[str, set[int]]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="niceness", daemon=True)

    def start(self) -> NicenessWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            for process in psutil.process_iter(["cmdline"]):
                title = " ".join(process.info["cmdline"] or ())
                if title.startswith("ray::"):
                    try:
                        nices = thread_niceness(process.pid)
                    except OSError:
                        continue
                    self.seen.setdefault(process.pid, []).append((title.split(" ")[0], nices))
            self._stop.wait(self.interval_s)
