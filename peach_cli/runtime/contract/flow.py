"""The request flow of SPEC §2, written once: what a gateway does with a request to an endpoint.

``Flow.handle`` is the whole sequence, for ``peach dev`` and for Ray alike::

    read_body → prepare → stream, or call → settle, or finish → the reply

and each step but the reading and the call is a method any driver of the flow calls:

* ``prepare`` (synchronous): parse the request, choose the A/B arm, count it, and say
  whether it streams or is a call (``Prepared``), or the contract's refusal (400, 405, 413);
* the call of the arm, bounded by ``timeout_s`` (a ``Deadline``, which the debugger
  relay suspends at a breakpoint);
* ``settle`` (synchronous): the reply when the arm's result is a success on its own;
* ``finish``: the fallback and the error answers, for a result ``settle`` did not settle.

The dev gateway's fast lane (``simulator.fastlane``) drives the same steps with the call
answered through a callback instead of awaited; it decides nothing of its own.

A gateway is only a transport around it, as an httpx transport is around the client's
logic. It hands over the request (``HttpRequest``: method, query string, headers and the
ASGI ``receive`` the body comes from), provides the endpoint's ``Components`` — how they
are reached: one ``call``, or ``open_stream`` on a replica — and sends back the ``HttpReply``
the flow returns: a status, the headers and either the body or the chunks of a stream.
The flow never knows which host it runs on; every header of an answer is written here.

What ``Components`` does, for each component of the endpoint:

* ``call(component, params, attempt)`` — one non-streaming call on a replica (recorded in
  ``attempt.replica``), waiting for one that is starting. It returns the replica's
  ``CallResult`` and never raises for anything a user did: no replica that can serve is an
  ``unavailable`` failure. The flow bounds it by ``timeout_s`` (``attempt.deadline``).
* ``open_stream(component, params, attempt)`` — a request that asked for a stream. The host
  waits for a replica (streams are not bounded by ``timeout_s``) and returns ``Opened``:
  with ``chunks`` when the method is a generator (bytes, each as it is yielded, raising
  ``StreamCut`` when the stream is cut), without when it is not — then the method answers
  in the envelope, through ``Opened.result`` when the opening call already carries its
  result (one remote call on Ray), else through ``call``. A stream that cannot start is a
  ``ContractError`` (``unavailable``, a binding error); a client gone before it started is
  ``ClientGone``.

A request without ``stream`` is always a call, so a generator method answers
``stream_required`` from its replica — the endpoint tried to return the generator as an
ordinary value, as on the platform — with the replica's id, after the wait for a replica
(bounded by ``timeout_s``, like any call).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import peach_cli.runtime.contract.answers as answers
from peach_cli.runtime.contract.ab import choose_arm
from peach_cli.runtime.contract.answers import (
    COMPONENT_HEADER,
    REPLICA_HEADER,
    Answer,
    Attempt,
    CallResult,
    error_answer,
    ok_body,
    settles,
)
from peach_cli.runtime.contract.errors import ContractError, StreamCut
from peach_cli.runtime.contract.request import (
    ALLOWED_METHODS,
    MAX_BODY_BYTES,
    RequestParams,
    parse_query_string,
    parse_request,
)
from peach_cli.runtime.contract.transport import STREAMING_KINDS, Receive, read_body
from peach_cli.runtime.plan import EndpointSpec

Headers = list[tuple[bytes, bytes]]
"""Response headers as ASGI sends them: lower-case names and values, as bytes."""

_JSON = (b"content-type", b"application/json")
_ALLOW = (b"allow", ", ".join(sorted(ALLOWED_METHODS)).encode())
_COMPONENT = COMPONENT_HEADER.lower().encode()
_REPLICA = REPLICA_HEADER.lower().encode()
_STREAM_HEADERS = ((b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"))
"""A stream is neither cached nor buffered by a proxy on the way."""
CLIENT_GONE = 499
"""The status logged for a client that went away before its answer began (nginx's)."""


@dataclass
class HttpRequest:
    """What the flow needs of an HTTP request; the body is read from ``receive``."""

    method: str
    query_string: bytes
    headers: Iterable[tuple[bytes, bytes]]
    receive: Receive


class ChunkStream(Protocol):
    """A stream's chunks from a replica: ``aclose()`` stops the user's generator."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


@dataclass
class Opened:
    """What a host's ``open_stream`` found: a stream, or a method that does not stream."""

    chunks: ChunkStream | None = None
    """The method is a generator: its chunks."""
    result: Callable[[Attempt], Awaitable[CallResult]] | None = None
    """The method is not one and the opening call carries its result (else it is called)."""


class Caller(Protocol):
    """What ``finish`` needs of a host: the non-streaming calls (the fallback's)."""

    async def call(self, component: str, params: RequestParams, attempt: Attempt) -> CallResult:
        """One non-streaming call of ``component``; failures are ``CallResult``s."""
        ...


class Components(Caller, Protocol):
    """The components of one endpoint, as a gateway reaches them (see the module docstring)."""

    async def open_stream(self, component: str, params: RequestParams, attempt: Attempt) -> Opened:
        """A stream request to ``component``; raises ``ContractError`` or ``ClientGone``."""
        ...


class ClientGone(Exception):
    """The client went away before its answer began: there is nothing to send."""


@dataclass(eq=False, slots=True)
class HttpReply:
    """What a gateway sends back, and what happened, for its log.

    ``chunks`` is set for a stream (send each chunk as it comes, no envelope; a
    ``StreamCut`` from it cuts the response), ``body`` otherwise. ``gone``: the client went
    away, nothing is sent. After a stream, a host that can calls ``aclose()``.
    """

    status: int
    headers: Headers
    body: bytes = b""
    chunks: AsyncIterator[bytes] | None = None
    component: str | None = None
    replica: str | None = None
    arm: str | None = None
    """The A/B arm the request was routed to (endpoints with an A/B test only)."""
    error: str | None = None
    """``code: message`` of an error answer, how a stream was cut, or why nothing was sent."""
    stream: bool = False
    gone: bool = False
    source: ChunkStream | None = None
    """The host's stream behind ``chunks``."""
    tried: str | None = None
    """The primary's replica when the fallback answered (``Answer.tried``)."""
    covered: str | None = None
    """The primary's error the fallback covered (``Answer.covered``)."""

    async def aclose(self) -> None:
        """Stop the host's stream (the user's generator) if it still runs."""
        if self.source is not None:
            await self.source.aclose()


def answer_reply(answer: Answer, arm: str | None = None) -> HttpReply:
    """The reply carrying an envelope answer: JSON, with the component and replica headers."""
    error = None
    if answer.status >= 400:
        details = answer.body.get("error") or {}
        error = f"{details.get('code')}: {details.get('message')}"
    return _envelope_reply(
        answer.status,
        answer.body_bytes(),
        answer.component,
        answer.replica,
        arm,
        error,
        answer.tried,
        answer.covered,
    )


def _envelope_reply(
    status: int,
    body: bytes,
    component: str | None,
    replica: str | None,
    arm: str | None,
    error: str | None = None,
    tried: str | None = None,
    covered: str | None = None,
) -> HttpReply:
    """The reply of an envelope already encoded (``body``), with its headers."""
    headers = [_JSON, (b"content-length", str(len(body)).encode())]
    if component:
        headers.append((_COMPONENT, component.encode()))
    if replica:
        headers.append((_REPLICA, replica.encode()))
    if status == 405:  # RFC 9110: a 405 lists the methods the resource allows
        headers.append(_ALLOW)
    return HttpReply(
        status,
        headers,
        body,
        component=component,
        replica=replica,
        arm=arm,
        error=error,
        tried=tried,
        covered=covered,
    )


def stream_reply(
    media_type: str,
    component: str,
    replica: str | None,
    chunks: ChunkStream,
    arm: str | None = None,
) -> HttpReply:
    """The reply relaying a stream: the component's media type, no caching, no buffering."""
    headers = [(b"content-type", media_type.encode()), *_STREAM_HEADERS]
    headers.append((_COMPONENT, component.encode()))
    if replica:
        headers.append((_REPLICA, replica.encode()))
    reply = HttpReply(200, headers, component=component, replica=replica, arm=arm, stream=True)
    reply.source = chunks
    reply.chunks = _relay(chunks, reply)
    return reply


async def _relay(chunks: ChunkStream, reply: HttpReply) -> AsyncIterator[bytes]:
    """The chunks, as they come; a cut is recorded in ``reply.error`` and raised on."""
    count = 0
    try:
        async for chunk in chunks:
            count += 1
            yield chunk
    except StreamCut as cut:
        reply.error = f"stream cut after {count} chunk{'' if count == 1 else 's'}: {cut}"
        raise


@dataclass(slots=True, eq=False)
class Prepared:
    """A request ``prepare`` has read: what the rest of the flow serves."""

    endpoint: EndpointSpec
    params: RequestParams
    arm: str
    """The component that answers as the primary (an A/B test's arm, else the primary)."""
    logged_arm: str | None
    """``arm`` for an endpoint with an A/B test (the log and the reply name it), else None."""
    stream: bool
    """The request asked for a stream (the host's ``open_stream`` serves it)."""


MethodKinds = Callable[[str], str | None]
"""A component's method kind (``runner.method_kind``), None while it is not known yet."""


class Flow:
    """SPEC §2 for one gateway; ``arm_requests`` counts the requests routed to each A/B arm."""

    def __init__(self, *, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.max_body_bytes = max_body_bytes
        self.arm_requests: dict[str, dict[str, int]] = {}
        """Endpoint name → A/B arm → requests routed to it."""

    def prepare(
        self,
        endpoint: EndpointSpec,
        method: str,
        query_string: bytes,
        body: bytes,
        *,
        calls_only: MethodKinds | None = None,
    ) -> Prepared | HttpReply | None:
        """Parse the request, choose its arm and count it: a ``Prepared`` request, or the
        reply refusing it (405, 413, 400).

        ``calls_only``: the caller serves calls only (it relays no stream), knowing the arms'
        method kinds through it; a request that streams or may — it asks for a stream, its
        arm's method is a generator or not known yet — is None then, and nothing is counted:
        the caller hands it to the general path, which prepares it again.
        """
        try:
            query = parse_query_string(query_string)
            params, wants_stream = parse_request(
                method, query, body, max_body_bytes=self.max_body_bytes
            )
        except ContractError as error:  # 405, 413, 400
            return answer_reply(error_answer(error.code, error.message))
        arm = choose_arm(endpoint, params)
        if calls_only is not None:
            kind = calls_only(arm)
            if wants_stream or kind is None or kind in STREAMING_KINDS:
                return None
        logged_arm = None
        if endpoint.ab is not None:
            counts = self.arm_requests.setdefault(endpoint.name, {})
            counts[arm] = counts.get(arm, 0) + 1
            logged_arm = arm
        return Prepared(endpoint, params, arm, logged_arm, wants_stream)

    def settle(self, prepared: Prepared, primary: CallResult) -> HttpReply | None:
        """The reply when the arm's result settles the request alone (a success that is not
        empty: no fallback is asked), else None: ``finish`` answers."""
        if not settles(primary):
            return None
        # the envelope succeeded() would build, encoded without its dict
        body = ok_body(primary.result)
        return _envelope_reply(200, body, prepared.arm, primary.replica, prepared.logged_arm)

    async def finish(
        self, prepared: Prepared, primary: CallResult, components: Caller, timeout_s: float
    ) -> HttpReply:
        """The reply for an arm's result ``settle`` did not settle: the fallback's (each of
        its calls bounded by ``timeout_s``), or the error answer."""
        params = prepared.params

        async def call(component: str, attempt: Attempt) -> CallResult:
            return await components.call(component, params, attempt)

        answered = await answers.finish(prepared.endpoint, call, timeout_s, prepared.arm, primary)
        return answer_reply(answered, prepared.logged_arm)

    async def handle(
        self, endpoint: EndpointSpec, request: HttpRequest, components: Components, timeout_s: float
    ) -> HttpReply:
        """Serve one request to ``endpoint``: the reply to send (see the module docstring)."""
        try:
            body = await read_body(request.receive, request.headers, self.max_body_bytes)
        except ContractError as error:  # 413 before the body is all in memory
            return answer_reply(error_answer(error.code, error.message))
        if body is None:
            return HttpReply(CLIENT_GONE, [], error="client disconnected", gone=True)
        prepared = self.prepare(endpoint, request.method, request.query_string, body)
        assert prepared is not None  # (None is for a caller that serves calls only)
        if isinstance(prepared, HttpReply):
            return prepared
        arm, params = prepared.arm, prepared.params
        opened: Opened | None = None
        opened_on: str | None = None
        if prepared.stream:
            attempt = Attempt(arm)
            try:
                opened = await components.open_stream(arm, params, attempt)
            except ContractError as error:
                refused = error_answer(
                    error.code, error.message, component=arm, replica=attempt.replica
                )
                return answer_reply(refused, prepared.logged_arm)
            except ClientGone:
                return HttpReply(
                    CLIENT_GONE,
                    [],
                    component=arm,
                    arm=prepared.logged_arm,
                    error="client disconnected",
                    stream=True,
                    gone=True,
                )
            if opened.chunks is not None:
                media_type = endpoint.components[arm].media_type
                return stream_reply(
                    media_type, arm, attempt.replica, opened.chunks, prepared.logged_arm
                )
            opened_on = attempt.replica  # not a generator: the envelope answers

        caller: Caller = components
        if opened is not None and opened.result is not None:
            caller = _OpeningCall(components, arm, opened.result, opened_on)
        return await self.serve_call(prepared, caller, timeout_s)

    async def serve_call(
        self, prepared: Prepared, components: Caller, timeout_s: float
    ) -> HttpReply:
        """A call, awaited: the arm bounded by ``timeout_s``, then ``settle`` or ``finish``."""
        params = prepared.params

        async def call(component: str, attempt: Attempt) -> CallResult:
            return await components.call(component, params, attempt)

        primary = await answers.attempt(call, prepared.endpoint, prepared.arm, timeout_s)
        settled = self.settle(prepared, primary)
        if settled is not None:
            return settled
        return await self.finish(prepared, primary, components, timeout_s)


class _OpeningCall:
    """The components, but for the arm's call when the call that opened a stream carries its
    result (on Ray): that call answers it, once (the fallback is called through them)."""

    __slots__ = ("components", "arm", "result", "replica")

    def __init__(
        self,
        components: Caller,
        arm: str,
        result: Callable[[Attempt], Awaitable[CallResult]],
        replica: str | None,
    ) -> None:
        self.components = components
        self.arm = arm
        self.result: Callable[[Attempt], Awaitable[CallResult]] | None = result
        self.replica = replica

    async def call(self, component: str, params: RequestParams, attempt: Attempt) -> CallResult:
        result = self.result
        if result is None or component != self.arm:
            return await self.components.call(component, params, attempt)
        self.result = None
        attempt.replica = self.replica
        return await result(attempt)
