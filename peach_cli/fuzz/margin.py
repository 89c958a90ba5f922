"""Timeouts with a margin (SPEC §11): the request Hypothesis shrinks a timeout to is the least
one past ``timeout_s`` — on the boundary, where the answer comes at ``timeout_s`` give or
take the machine's jitter, so its ready case may pass under `peach test`. ``Margin.widen``
picks instead, among the requests that timed out during the run, the least one that still
times out at ``timeout_s`` plus a margin (a quarter of it, at least half a second)::

    margin = Margin(lambda: margin_host_url, client, timeout_s=1.0)
    request = margin.widen(target, timed_out)     # None: none of them has the margin

It is measured on a second simulator of the project whose every timeout is ``timeout_s``
plus the margin (``host`` starts it at the first timeout finding): there an answer later
than that bound is a timeout with the margin. Nothing here imports Hypothesis.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from peach_cli.client.send import Client
    from peach_cli.fuzz.strategies import Request
    from peach_cli.fuzz.targets import Target
    from peach_cli.testing.outcome import Observed

MARGIN_FRACTION = 0.25
MIN_MARGIN_S = 0.5
READ_SLACK_S = 30.0
"""Past the margin host's timeout, how long its answer may take before it counts as none."""
EARLY_MS = 5.0
"""A timer may fire this much before its time: an answer this close to the bound meets it."""


def margin_s(timeout_s: float) -> float:
    """How far past ``timeout_s`` a reported timeout's request must run.

    >>> margin_s(1), margin_s(30)
    (0.5, 7.5)
    """
    return max(MIN_MARGIN_S, MARGIN_FRACTION * timeout_s)


def size_key(request: Request) -> tuple[int, str]:
    """Smaller first: the shorter JSON text of the parameters, then the text itself.

    >>> from peach_cli.fuzz.strategies import Request
    >>> sorted(["9", "10", "101"], key=lambda n: size_key(Request("GET", {"n": int(n)})))
    ['9', '10', '101']
    """
    text = json.dumps(request.params, sort_keys=True, ensure_ascii=False)
    return len(text), text


class Margin:
    """Measures requests on the margin host (see the module docstring)."""

    def __init__(
        self,
        host: Callable[[], str],
        client: Client,
        *,
        timeout_s: float,
        recover: Callable[[Observed, None], None] = lambda *_: None,
    ) -> None:
        self.host = host
        self.client = client
        self.recover = recover
        """Puts the margin host back in shape after each request (a replica still busy on
        a call that timed out is restarted, as on the run's own host)."""
        self.bound_s = timeout_s + margin_s(timeout_s)
        """The margin host's timeout: a request running past it times out with the margin."""

    def times_out(self, target: Target, request: Request) -> bool:
        """Whether ``request`` runs past ``timeout_s`` and its margin."""
        from peach_cli.fuzz.targets import request_to
        from peach_cli.testing.run import observe_request

        sent = request_to(
            target, request.method, request.params, self.host(), self.bound_s + READ_SLACK_S
        )
        observed = observe_request(self.client, sent)
        self.recover(observed, None)
        return observed.elapsed_ms >= self.bound_s * 1000 - EARLY_MS

    def widen(self, target: Target, timed_out: list[Request]) -> Request | None:
        """The least of ``timed_out`` that times out with the margin (a binary search over
        them ordered by ``size_key``: a longer run for a larger input), None when none does."""
        unique = {size_key(r): r for r in timed_out}
        ordered = [unique[key] for key in sorted(unique)]
        low, high = 0, len(ordered) - 1
        best: Request | None = None
        while low <= high:
            middle = (low + high) // 2
            if self.times_out(target, ordered[middle]):
                best, high = ordered[middle], middle - 1
            else:
                low = middle + 1
        return best
