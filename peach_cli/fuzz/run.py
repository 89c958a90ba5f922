"""A fuzzing run: each target explored against one host, one request at a time.

    with Client(70) as client:
        explored = fuzz_targets(targets, client, url, examples=50, seed=1, watch=watch)

Each request is a SPEC §8 case (``peach_cli.testing.run.request_for``, marked ``x-peach-tool:
fuzz``), so a finding's ready case sends exactly the request that showed it. With a
``Watch`` (the simulator runs here) what the simulator said of each request is judged too.

After each answer a ``recover`` puts the host back in shape for the next request:
``waiting_for_restarts`` (``--url``: a replica that died is waited for),
``restarting_busy_replicas`` (the simulator run here: a replica still busy on a call that
timed out is restarted). With a ``Margin`` each timeout finding is moved to a request that
times out with a margin (``peach_cli.fuzz.margin``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from peach_cli.fuzz.findings import Finding, judge
from peach_cli.fuzz.targets import Target, request_to
from peach_cli.internal import HEALTH_PATH

if TYPE_CHECKING:
    from peach_cli.client.send import Client
    from peach_cli.fuzz.margin import Margin
    from peach_cli.fuzz.strategies import Request
    from peach_cli.fuzz.watch import Watch
    from peach_cli.testing.host import Host
    from peach_cli.testing.outcome import Observed

STREAM_LIMIT_S = 0.25
"""How long a stream is read, by the clock, after its answer starts: then the fuzzer closes
it (the gateway closes its generator), whatever the generator does — a generator may sleep
or never end, and an endpoint gets 50 requests. A generator that fails later than this is
not seen (most fail on their input, before or at their first chunk)."""
RESTART_WAIT_S = 60.0
"""How long to wait for a replica that died to be healthy again before the next request."""
HEALTH_POLL_S = 0.1
BUSY_WINDOW_S = 0.3
BUSY_PERCENT = 5.0
"""A replica using this share of a core after its call timed out is still running it (an
idle one uses none; a busy one on a loaded machine may get little more than this)."""


@dataclass
class Explored:
    """One target's run: how many requests it took and what they found."""

    target: Target
    requests: int = 0
    findings: list[Finding] = field(default_factory=list)
    unavailable: int = 0
    """Answers ``503 unavailable`` (no healthy replica): not findings, but nothing was
    fuzzed when every answer is one."""
    unavailable_message: str | None = None
    timed_out: list[tuple[tuple[str, ...], Request]] = field(default_factory=list)
    """Each request that was a timeout finding, with its signature (``margin`` picks one
    with a margin among them)."""

    def saw(self, observed: Observed, finding: Finding | None, request: Request) -> None:
        """Count one answer (and keep a timeout's request)."""
        self.requests += 1
        if observed.error_code == "unavailable":
            self.unavailable += 1
            self.unavailable_message = self.unavailable_message or observed.error_message
        if finding is not None and finding.kind == "timeout":
            self.timed_out.append((finding.signature, request))

    @property
    def all_unavailable(self) -> bool:
        return self.requests > 0 and self.unavailable == self.requests


def prober(
    target: Target,
    client: Client,
    base: str,
    *,
    watch: Watch | None,
    timeout_s: float | None,
    read_timeout_s: float,
    sent: Callable[[Observed, Finding | None, Request], None] = lambda *_: None,
    recover: Callable[[Observed, Finding | None], None] = lambda *_: None,
) -> Callable[[Request], Finding | None]:
    """Sends one request to ``target`` and judges its answer; ``sent`` hears of each, and
    ``recover`` puts the host back in shape for the next one (with ``--url``: waits for a
    replica restarting; see ``commands.fuzz``)."""
    from peach_cli.testing.run import observe_request

    def probe(request: Request) -> Finding | None:
        mark = watch.mark() if watch is not None else None
        observed = observe_request(
            client,
            request_to(target, request.method, request.params, base, read_timeout_s),
            stream_limit_s=STREAM_LIMIT_S,
        )
        heard = watch.settle(mark) if watch is not None and mark is not None else None
        if watch is not None and heard is not None and heard.died:
            watch.wait_restarted([r for _, r, _ in heard.died], RESTART_WAIT_S)
        finding = judge(target, request, observed, heard, timeout_s)
        sent(observed, finding, request)
        recover(observed, finding)
        return finding

    return probe


def waiting_for_restarts(base: str, timeout_s: float = RESTART_WAIT_S) -> Callable[..., None]:
    """A ``recover`` for a host given by ``--url``: after an answer that may mean a replica
    died (a 5xx, or none), wait until the host's ``/_peach/health`` says every replica is
    ready again, so the next request does not meet one restarting (a host that serves no
    health is not waited for)."""

    def recover(observed: Observed, _finding: Finding | None) -> None:
        if observed.status < 500 and observed.failure is None:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            health = _health(base)
            if health is None or health.get("ready") is not False:
                return  # ready, or no health to ask
            time.sleep(HEALTH_POLL_S)

    return recover


def restarting_busy_replicas(base: str, watch: Watch) -> Callable[..., None]:
    """A ``recover`` for the simulator the fuzzer runs: a call past ``timeout_s`` keeps
    running in its replica (a thread cannot be stopped); when that replica is still busy
    on a core (``BUSY_PERCENT``), it is restarted — its process stopped, and waited for
    until it is healthy again —, so calls no one waits for do not slow the rest of the run."""
    import os
    import signal

    def recover(observed: Observed, finding: Finding | None) -> None:
        replica = observed.replica
        timed_out = observed.error_code == "timeout" or (
            finding is not None and finding.kind == "timeout"
        )
        if not timed_out or not replica:
            return
        pid = _pid_of(base, replica)
        if pid is None or not _busy(pid):
            return
        mark = watch.mark()
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            return  # gone already
        watch.wait_back(replica, mark, RESTART_WAIT_S)

    return recover


def _pid_of(base: str, replica: str) -> int | None:
    """The process id of ``replica``, as the simulator's ``/_peach/health`` gives it."""
    health = _health(base) or {}
    for component in health.get("components") or ():
        for entry in component.get("replicas") or () if isinstance(component, dict) else ():
            if isinstance(entry, dict) and entry.get("id") == replica:
                pid = entry.get("pid")
                return pid if isinstance(pid, int) else None
    return None


def _health(base: str) -> dict[str, Any] | None:
    """The host's ``/_peach/health`` answer, None when it serves none."""
    import httpx

    from peach_cli.client.items import TOOL_HEADER

    try:
        answer = httpx.get(base + HEALTH_PATH, headers={TOOL_HEADER: "fuzz"}, timeout=5.0)
        health = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return health if isinstance(health, dict) else None


def _busy(pid: int) -> bool:
    """Whether the process uses at least ``BUSY_PERCENT`` of a core over ``BUSY_WINDOW_S``,
    or is found waiting for a core in that time (``linux.a_thread_runs``: on a machine too
    busy to give it its share, a call spinning on a core is runnable, an idle replica
    sleeps)."""
    import psutil

    from peach_cli.runtime import linux

    try:
        process = psutil.Process(pid)
        process.cpu_percent(interval=None)
        deadline = time.monotonic() + BUSY_WINDOW_S
        runnable = False
        while time.monotonic() < deadline:
            runnable = runnable or linux.a_thread_runs(pid)
            time.sleep(BUSY_WINDOW_S / 6)
        return runnable or process.cpu_percent(interval=None) >= BUSY_PERCENT
    except psutil.Error:
        return False


def _counting(
    explored: Explored, on_answer: Callable[[Explored], Any]
) -> Callable[[Observed, Finding | None, Request], None]:
    def sent(observed: Observed, finding: Finding | None, request: Request) -> None:
        explored.saw(observed, finding, request)
        on_answer(explored)

    return sent


class Shown(Protocol):
    """What a run tells as it goes, and at its end (``peach_cli.views.fuzz.FuzzShown``)."""

    def start(self, targets: int) -> None: ...
    def answered(self, explored: Explored) -> None: ...
    def explored(self, explored: Explored) -> None: ...
    def clear(self) -> None: ...
    def finish(self, explored: list[Explored]) -> None: ...


def fuzz_host(
    host: Host, names: list[str], *, examples: int, seed: int, watch: Watch | None, shown: Shown
) -> list[Explored]:
    """Fuzz the endpoints of ``host`` that ``names`` select (every one when empty), as the
    OpenAPI document of what it serves describes them (``host.openapi``). ``watch`` hears
    the simulator's events (None: ``host`` is a ``--url``, whose replicas are waited for
    when they die); on the simulator a timeout is measured again with a margin
    (``_margin_of``). ``shown`` hears of the run as it goes, and of its end."""
    from peach_cli.errors import UsageError
    from peach_cli.fuzz.targets import select, targets_of

    assert host.openapi is not None, "the host is wired with openapi=True"
    targets = select(targets_of(host.openapi), names)
    if not targets:
        raise UsageError("the project has no endpoint to fuzz")
    shown.start(len(targets))
    timeout_s = host.plan.timeout_s if host.plan is not None else None
    base = host.base.rstrip("/")
    if watch is None:
        recover, margin = waiting_for_restarts(base), None
    else:
        recover = restarting_busy_replicas(base, watch)
        margin = _margin_of(host, host.plan.timeout_s) if host.plan and timeout_s else None
    try:
        explored = fuzz_targets(
            targets,
            host.client,
            base,
            examples=examples,
            seed=seed,
            watch=watch,
            timeout_s=timeout_s,
            read_timeout_s=host.timeout_s,
            margin=margin,
            recover=recover,
            on_explored=shown.explored,
            on_answer=shown.answered,
        )
    finally:
        shown.clear()  # an interrupted run leaves no half line
    shown.finish(explored)
    return explored


def _margin_of(host: Host, timeout_s: float) -> Margin:
    """The ``Margin`` of timeouts, measured on a spare simulator of ``host``'s project whose
    timeout is ``timeout_s`` plus the margin: started at the first timeout finding, stopped
    with the host."""
    from peach_cli.fuzz.margin import READ_SLACK_S, Margin, margin_s
    from peach_cli.fuzz.watch import Watch

    bound_s = timeout_s + margin_s(timeout_s)
    watch = Watch()
    urls: list[str] = []

    def spare() -> str:
        if not urls:
            urls.append(host.spare(bound_s, watch.on_event))
        return urls[0]

    def recover(observed: Observed, finding: None) -> None:
        if urls:
            restarting_busy_replicas(urls[0], watch)(observed, finding)

    client = host.new_client(bound_s + READ_SLACK_S)
    return Margin(spare, client, timeout_s=timeout_s, recover=recover)


def fuzz_targets(
    targets: list[Target],
    client: Client,
    base: str,
    *,
    examples: int,
    seed: int,
    watch: Watch | None = None,
    timeout_s: float | None = None,
    read_timeout_s: float = 60.0,
    margin: Margin | None = None,
    recover: Callable[[Observed, Finding | None], None] = lambda *_: None,
    on_explored: Callable[[Explored], Any] = lambda _explored: None,
    on_answer: Callable[[Explored], Any] = lambda _explored: None,
) -> list[Explored]:
    """Explore every target in turn (``on_answer`` hears of each answer, ``on_explored`` of
    each target as it is done); with a ``margin``, each timeout is moved to a request that
    times out with a margin (``peach_cli.fuzz.margin``)."""
    from peach_cli.fuzz.engine import explore, quiet_hypothesis

    done: list[Explored] = []
    with quiet_hypothesis():
        for target in targets:
            explored = Explored(target)
            probe = prober(
                target,
                client,
                base,
                watch=watch,
                timeout_s=timeout_s,
                read_timeout_s=read_timeout_s,
                sent=_counting(explored, on_answer),
                recover=recover,
            )
            resend = _with_margin(explored, margin) if margin is not None else None
            explored.findings = explore(target, probe, examples=examples, seed=seed, resend=resend)
            done.append(explored)
            on_explored(explored)
    return done


def _with_margin(explored: Explored, margin: Margin) -> Callable[[Finding], Request]:
    """The request to confirm a finding with: for a timeout, the least of those that timed
    out which times out with the margin (when one does); else its own."""
    from peach_cli.fuzz.engine import own_request

    def resend(finding: Finding) -> Request:
        if finding.kind != "timeout":
            return own_request(finding)
        timed_out = [r for signature, r in explored.timed_out if signature == finding.signature]
        return margin.widen(explored.target, timed_out) or own_request(finding)

    return resend
