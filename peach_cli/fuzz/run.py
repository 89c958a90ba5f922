"""A fuzzing run: each target explored against one host, one request at a time.

    with Client(70) as client:
        explored = fuzz_targets(targets, client, url, examples=50, seed=1, watch=watch)

Each request is a SPEC §8 case (``peach_cli.testing.run.request_for``, marked ``x-peach-tool:
fuzz``), so a finding's ready case sends exactly the request that showed it. With a
``Watch`` (the simulator runs here) what the simulator said of each request is judged too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from peach_cli.fuzz.findings import Finding, judge
from peach_cli.fuzz.targets import Target

if TYPE_CHECKING:
    from peach_cli.client.send import Client
    from peach_cli.fuzz.strategies import Request
    from peach_cli.fuzz.watch import Watch
    from peach_cli.testing.outcome import Observed

STREAM_LIMIT_S = 0.25
"""How long a stream is read past its first chunk before the fuzzer closes it: a generator
may never end, and an endpoint gets 50 requests. A generator that fails later than this is
not seen (most fail on their input, before or at their first chunk)."""
RESTART_WAIT_S = 60.0
"""How long to wait for a replica that died to be healthy again before the next request."""


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

    def saw(self, observed: Observed) -> None:
        """Count one answer."""
        self.requests += 1
        if observed.error_code == "unavailable":
            self.unavailable += 1
            self.unavailable_message = self.unavailable_message or observed.error_message

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
    sent: Callable[[Observed], None] = lambda _observed: None,
) -> Callable[[Request], Finding | None]:
    """Sends one request to ``target`` and judges its answer."""
    from peach_cli.testing.cases import Case
    from peach_cli.testing.run import observe_request, request_for

    def probe(request: Request) -> Finding | None:
        case = Case.model_construct(
            name="fuzz",
            url=target.url,
            method=request.method,
            params=request.params,
            stream=target.streams,
        )
        mark = watch.mark() if watch is not None else None
        observed = observe_request(
            client,
            request_for(case, base, read_timeout_s, tool="fuzz"),
            stream_limit_s=STREAM_LIMIT_S,
        )
        sent(observed)
        heard = watch.settle(mark) if watch is not None and mark is not None else None
        if watch is not None and heard is not None and heard.died:
            watch.wait_restarted([r for _, r, _ in heard.died], RESTART_WAIT_S)
        return judge(target, request, observed, heard, timeout_s)

    return probe


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
    on_explored: Callable[[Explored], Any] = lambda _explored: None,
) -> list[Explored]:
    """Explore every target in turn (``on_explored`` hears of each as it is done)."""
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
                sent=explored.saw,
            )
            explored.findings = explore(target, probe, examples=examples, seed=seed)
            done.append(explored)
            on_explored(explored)
    return done
