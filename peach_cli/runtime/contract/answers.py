"""What the gateway answers: envelopes, the stream-required error, the fallback rule.

``answer`` runs the primary component bounded by ``timeout_s`` (``attempt``), settles
it when its result is a success (``succeeded``) and otherwise ``finish``es: the fallback
when it raised, timed out or returned nothing, else the error answer. Hosts supply only how
a component is reached (a ``ComponentCall``); ``contract.Flow`` calls these steps.

The attempt step is an object (``Attempt``) so that a host answering a call through a
callback instead of awaiting it (the dev gateway's fast lane) drives the same step: its
deadline, its timeout failure, its result naming the replica tried.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from peach_cli.runtime.contract.deadline import Deadline, bounded
from peach_cli.runtime.contract.errors import ERROR_STATUS
from peach_cli.runtime.plan import EndpointSpec

COMPONENT_HEADER = "X-Peach-Component"
REPLICA_HEADER = "X-Peach-Replica"


def ok_envelope(result: Any) -> dict[str, Any]:
    return {"result": result, "status": "ok"}


def ok_body(result: Any) -> bytes:
    """``ok_envelope(result)`` as JSON (``Answer.body_bytes``), without the envelope's dict.

    >>> ok_body({"x": "é"}) == Answer(200, ok_envelope({"x": "é"})).body_bytes()
    True
    """
    return b'{"result": ' + _ENVELOPE.encode(result).encode() + b', "status": "ok"}'


def error_envelope(code: str, message: str) -> dict[str, Any]:
    return {"status": "error", "error": {"code": code, "message": message}}


@dataclass
class Answer:
    """What the gateway sends back for a non-streaming call (``flow.answer_reply`` writes
    it out: the envelope and the component and replica headers)."""

    status: int
    body: dict[str, Any]
    component: str | None = None
    replica: str | None = None
    tried: str | None = None
    """The replica of the primary when the fallback answered: it served the request too."""
    covered: str | None = None
    """``code: message`` of the primary's error when the fallback answered in its place."""

    def body_bytes(self) -> bytes:
        return _ENVELOPE.encode(self.body).encode()


_ENVELOPE = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
"""``json.dumps(body, ensure_ascii=False, allow_nan=False)``, without a new encoder per call."""


def error_answer(
    code: str, message: str, *, component: str | None = None, replica: str | None = None
) -> Answer:
    return Answer(ERROR_STATUS[code], error_envelope(code, message), component, replica)


def not_found_answer(path: str, urls: Iterable[str]) -> Answer:
    """404 for a path no endpoint serves, listing the urls that exist."""
    listed = ", ".join(sorted(urls)) or "none"
    return error_answer("not_found", f"no endpoint at {path} (endpoints: {listed})")


def stream_required_message(url: str, kind: str = "async_generator") -> str:
    """What a generator method called without ``stream`` says: first what to send, then the
    platform's own words (``cannot pickle 'async_generator' object``, which users search for).

    >>> print(stream_required_message("/chat"))  # doctest: +NORMALIZE_WHITESPACE
    send stream=true: '/chat?stream=true', or "stream": "true" in the JSON body. /chat
    streams (its method is a generator), and without stream=true the platform answers:
    cannot pickle 'async_generator' object
    """
    return (
        f'send stream=true: \'{url}?stream=true\', or "stream": "true" in the JSON body. '
        f"{url} streams (its method is a generator), and without stream=true the platform "
        f"answers: cannot pickle '{kind}' object"
    )


def stream_required_answer(
    endpoint: EndpointSpec, kind: str = "async_generator", component: str | None = None
) -> Answer:
    """``stream_required``, naming ``component`` (default: the primary; an A/B arm)."""
    return error_answer(
        "stream_required",
        stream_required_message(endpoint.url, kind),
        component=component or endpoint.primary,
    )


@dataclass
class CallResult:
    """A replica's answer to one non-streaming call (plain data: it crosses processes)."""

    ok: bool
    result: Any = None
    empty: bool = False
    code: str | None = None
    message: str | None = None
    drift: bool = False
    replica: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CallResult:
        return cls(**data)

    @classmethod
    def failure(cls, code: str, message: str, replica: str | None = None) -> CallResult:
        return cls(ok=False, code=code, message=message, replica=replica)


@dataclass(slots=True, eq=False)
class Attempt:
    """One try of one component, bounded by ``timeout_s``: the host records which replica it
    picked. ``attempt`` drives one awaited; a host whose call is answered through a callback
    (the dev gateway's fast lane) drives one itself: ``bound`` starts its deadline before the
    call is sent, ``timed_out`` is the failure when it runs out, and ``ended`` takes the
    result (of either)."""

    component: str
    replica: str | None = None
    starting_since: float | None = None
    """When the component's replicas began starting (``time.monotonic()``), set by a host
    whose call waits for one: a timeout then says they are still starting, and for how long."""
    deadline: Deadline | None = None
    """The call's ``timeout_s``: a host registers it with the debugger relay, which suspends
    it while the call is stopped at a breakpoint."""

    def bound(
        self, loop: asyncio.AbstractEventLoop, timeout_s: float, expire: Callable[[], object]
    ) -> Deadline:
        """Start the attempt's ``timeout_s`` now, for a call answered through a callback:
        ``expire`` runs when it runs out (the caller then cancels the call and ends the
        attempt with ``timed_out``)."""
        deadline = self.deadline = Deadline(loop, timeout_s, expire)
        return deadline

    def timed_out(self, endpoint: EndpointSpec, timeout_s: float) -> CallResult:
        """The ``timeout`` failure of this attempt, which did not answer within ``timeout_s``."""
        message = (
            f"{endpoint.url} ({self.component}) did not answer within timeout_s = {timeout_s:g} s"
        )
        if self.replica is None and self.starting_since is not None:
            starting = time.monotonic() - self.starting_since
            message += f": its replicas are still starting ({starting:.0f} s so far)"
        return CallResult.failure("timeout", message, self.replica)

    def ended(self, result: CallResult) -> CallResult:
        """The attempt's ``result`` (its call answered, failed or timed out): the deadline
        ends, and the result names the replica tried."""
        deadline = self.deadline
        if deadline is not None:
            deadline.cancel()
        if result.replica is None:
            result.replica = self.replica
        return result


ComponentCall = Callable[[str, Attempt], Awaitable[CallResult]]
"""How a host reaches a component: ``call(component_name, attempt) -> CallResult``.

The host picks a healthy replica (setting ``attempt.replica``), sends the parameters and
returns the replica's ``CallResult``; with no healthy replica it returns an ``unavailable``
failure. It must not raise for anything a user did.
"""

_FALLBACK_CODES = frozenset({"method_error", "timeout"})


async def attempt(
    call: ComponentCall, endpoint: EndpointSpec, component: str, timeout_s: float
) -> CallResult:
    """One call of ``component`` bounded by ``timeout_s`` (its ``Attempt`` carries the
    ``Deadline``), awaited; running out is the ``timeout`` failure."""
    tried = Attempt(component)

    async def run(deadline: Deadline) -> CallResult:
        tried.deadline = deadline
        return await call(component, tried)

    try:
        result = await bounded(timeout_s, run)
    except TimeoutError:
        result = tried.timed_out(endpoint, timeout_s)
    return tried.ended(result)


def settles(primary: CallResult) -> bool:
    """The primary's result settles the request alone: a success that is not empty (no
    fallback is asked)."""
    return primary.ok and not primary.empty


def succeeded(primary: CallResult, name: str) -> Answer | None:
    """The answer when the primary's result settles it alone (``settles``), else None."""
    if settles(primary):
        return Answer(200, ok_envelope(primary.result), name, primary.replica)
    return None


async def answer(
    endpoint: EndpointSpec, call: ComponentCall, timeout_s: float, arm: str | None = None
) -> Answer:
    """Answer a non-streaming call: the primary, bounded by ``timeout_s``, then the fallback.

    ``arm`` is the component that plays the primary for this request (an A/B test's arm,
    from ``choose_arm``; default the endpoint's primary).
    """
    name = arm or endpoint.primary
    primary = await attempt(call, endpoint, name, timeout_s)
    return succeeded(primary, name) or await finish(endpoint, call, timeout_s, name, primary)


async def finish(
    endpoint: EndpointSpec, call: ComponentCall, timeout_s: float, name: str, primary: CallResult
) -> Answer:
    """The answer when ``primary`` (the result of ``name``) did not settle it alone.

    The fallback answers (with the same parameters: the host's ``call`` carries them) when
    the primary raised, timed out or returned nothing, whichever arm it was; caller
    mistakes (``bad_request``) and ``unavailable`` are returned as they are.
    """
    fallback_name = endpoint.fallback
    wants_fallback = primary.empty if primary.ok else primary.code in _FALLBACK_CODES
    if fallback_name and wants_fallback:
        fallback = await attempt(call, endpoint, fallback_name, timeout_s)
        if fallback.ok:
            covered = None if primary.ok else f"{primary.code}: {primary.message}"
            return Answer(
                200,
                ok_envelope(fallback.result),
                fallback_name,
                fallback.replica,
                primary.replica,
                covered,
            )
        if primary.ok:  # the primary's empty result stands when the fallback fails too
            return Answer(200, ok_envelope(primary.result), name, primary.replica)
        assert primary.code is not None and primary.message is not None
        message = f"{primary.message} (the fallback failed too: {fallback.message})"
        return error_answer(primary.code, message, component=name, replica=primary.replica)
    if primary.ok:
        return Answer(200, ok_envelope(primary.result), name, primary.replica)
    assert primary.code is not None
    return error_answer(
        primary.code, primary.message or primary.code, component=name, replica=primary.replica
    )
