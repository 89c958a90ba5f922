"""What `peach fuzz` reports: an answer (and what the simulator said of it) judged, and each
finding's ready case for a ``*.peach-test.yaml`` file (SPEC §8).

A finding is one of (SPEC §11):

* ``method_error`` — a component raised: a 500 ``method_error`` envelope, the error a
  fallback covered (the simulator's log says so), or a stream cut by its generator;
* ``timeout`` — past ``timeout_s``: a 504 ``timeout`` envelope, a timeout the fallback
  covered, or no answer at all in time;
* ``server_error`` — a 5xx that is no documented error envelope, or no HTTP answer;
* ``replica_died`` — a replica process died while the request was served.

The ready case expects what a fixed endpoint answers: 200 from the primary (within
``timeout_s`` for a timeout), so `peach test` fails on it the same way until it is fixed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peach_cli.fuzz.strategies import Request
    from peach_cli.fuzz.targets import Target
    from peach_cli.fuzz.watch import Heard
    from peach_cli.testing.outcome import Observed

KINDS = ("method_error", "timeout", "server_error", "replica_died")
DOCUMENTED_5XX = {"method_error": 500, "unavailable": 503, "timeout": 504}
"""The error envelopes SPEC §2 documents with a 5xx status."""
PRIMARY = "main"
STREAM_CUT = "stream cut"
"""How the simulator's log of a stream cut by its generator begins (a stream the fuzzer
closes early is no cut)."""

_RAISED = re.compile(r"(?:\braised |^stream cut after \d+ chunks?: )([A-Za-z_][\w.]*)")
"""The exception's type in a method_error's message, or in the log of a cut stream."""


@dataclass(frozen=True)
class Finding:
    """One thing to fix, with the request that shows it."""

    endpoint: str
    url: str
    component: str
    kind: str
    method: str
    params: dict[str, Any]
    status: int
    error: str
    stream: bool = False
    timeout_s: float | None = None
    """The endpoint's ``timeout_s`` when known (the ready case of a timeout bounds it)."""

    @property
    def signature(self) -> tuple[str, str, str, str]:
        """What makes two findings the same bug: the endpoint, kind, component and the
        exception's type (or the error code)."""
        raised = _RAISED.search(self.error) if self.kind == "method_error" else None
        return (self.endpoint, self.kind, self.component, raised.group(1) if raised else "")

    @property
    def name(self) -> str:
        """The ready case's name: ``divide: method_error in main (ZeroDivisionError)``."""
        what = self.signature[3]
        return f"{self.endpoint}: {self.kind} in {self.component}" + (f" ({what})" if what else "")

    def case(self) -> dict[str, Any]:
        """The ready case (SPEC §8) as a mapping."""
        case: dict[str, Any] = {"name": self.name, "url": self.url}
        if self.method != "GET":
            case["method"] = self.method
        case["params"] = self.params
        if self.stream:
            case["stream"] = True
        expect: dict[str, Any] = {"status": 200, "component": self.component}
        if self.stream:
            expect["cut"] = False
        if self.kind == "timeout" and self.timeout_s:
            expect["max_ms"] = round(self.timeout_s * 1000)
        case["expect"] = expect
        return case

    def case_yaml(self) -> str:
        """The ready case as the YAML of a one-case list, to paste in a case file."""
        import yaml

        return yaml.safe_dump(
            [self.case()], sort_keys=False, allow_unicode=True, default_flow_style=None, width=100
        )

    def to_json(self) -> dict[str, Any]:
        """The finding as SPEC §11's ``--format json`` shows it."""
        return {
            "endpoint": self.endpoint,
            "url": self.url,
            "component": self.component,
            "kind": self.kind,
            "method": self.method,
            "params": self.params,
            "status": self.status,
            "error": self.error,
            "case": self.case_yaml(),
        }


def _split(error: str | None) -> tuple[str, str]:
    """``code: message`` as its two parts."""
    code, _, message = (error or "").partition(": ")
    return code, message or code


def judge(
    target: Target,
    request: Request,
    observed: Observed,
    heard: Heard | None,
    timeout_s: float | None = None,
) -> Finding | None:
    """The finding an answer shows (with what the simulator said, when it ran it), or None."""
    component = observed.component or (heard.arm if heard and heard.arm else PRIMARY)

    def found(kind: str, error: str, who: str = component) -> Finding:
        return Finding(
            target.endpoint,
            target.url,
            who,
            kind,
            request.method,
            request.params,
            observed.status,
            error,
            target.streams,
            timeout_s,
        )

    if heard is not None and heard.died:
        key, replica, why = heard.died[0]
        return found("replica_died", f"replica {replica}: {why}", key.rsplit("/", 1)[-1])
    if observed.failure is not None and not observed.status:
        kind = "timeout" if "timed out" in observed.failure.lower() else "server_error"
        return found(kind, observed.failure)
    if heard is not None and heard.covered:
        covered, message = _split(heard.covered)
        primary = heard.arm or PRIMARY
        if covered == "timeout":
            return found("timeout", message, primary)
        return found("method_error", message, primary)
    code = observed.error_code
    if code == "timeout" and observed.status == DOCUMENTED_5XX["timeout"]:
        return found("timeout", observed.error_message or code)
    if code == "method_error" and observed.status == DOCUMENTED_5XX["method_error"]:
        return found("method_error", observed.error_message or code)
    if observed.status >= 500 and DOCUMENTED_5XX.get(code or "") != observed.status:
        body = (observed.error_message or observed.text or "").strip()
        return found("server_error", f"HTTP {observed.status}: {body[:300]}".rstrip(": "))
    if observed.stream and heard is not None:  # the log says how the stream ended
        if heard.error and heard.error.startswith(STREAM_CUT):
            return found("method_error", heard.error)
    elif observed.cut:
        return found("method_error", f"the stream was cut after {observed.chunks} chunks")
    return None
