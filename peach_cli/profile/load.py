"""The load a profile run sends while the replicas sample themselves: `peach bench`'s load
generator (``peach_cli.bench.loadgen``) on one request, and its figures::

    figures, interrupted = send_load(request, Load(None, 8, 10.0, 60.0))
    figures["requests"]["answered"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peach_cli.client.items import AskRequest

DEFAULT_CONCURRENCY = 8


@dataclass(frozen=True)
class Load:
    """The load sent while the profiler runs (`peach bench`'s)."""

    rate: float | None
    concurrency: int | None
    duration_s: float
    timeout_s: float


def send_load(request: AskRequest, load: Load) -> tuple[dict[str, Any], bool]:
    """`peach bench`'s load of ``request`` for ``load.duration_s``: its figures, and whether
    Ctrl-C stopped it."""
    from peach_cli.bench.loadgen import LoadPlan, address_of, encode, run_load
    from peach_cli.bench.summary import Tally

    plan = LoadPlan(
        [encode(request)],
        address_of(request.url),
        rate=load.rate,
        concurrency=load.concurrency or DEFAULT_CONCURRENCY,
        duration_s=load.duration_s,
        timeout_s=load.timeout_s,
    )
    tally = Tally()
    interrupted = run_load(plan, tally)
    figures = tally.summary(
        target=f"{request.method} {request.url}",
        mode="open" if load.rate is not None else "closed",
        rate=load.rate,
        concurrency=None if load.rate is not None else plan.concurrency,
        warmup_s=0.0,
        interrupted=interrupted,
    )
    return figures, interrupted
