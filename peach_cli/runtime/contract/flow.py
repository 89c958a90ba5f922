"""The request flow of SPEC §2, written once: what a gateway does with a request to an endpoint.

``Flow.handle`` is the whole sequence, for ``peach dev`` and for Ray alike::

    read_body → parse_request → choose_arm → count the arm → stream, or call → the reply

A gateway is only a transport around it, as an httpx transport is around the client's
logic. It hands over the request (``HttpRequest``: method, query string, headers and the
ASGI ``receive`` the body comes from), provides a ``Host`` — how the endpoint's components
are reached: one ``call``, or ``open_stream`` on a replica — and sends back the ``HttpReply``
the flow returns: a status, the headers and either the body or the chunks of a stream.
The flow never knows which host it runs on; every header of an answer is written here.

A host's part, for each component of the endpoint:

* ``call(component, params, attempt)`` — one non-streaming call on a replica (recorded in
  ``attempt.replica``), waiting for one that is starting. It returns the replica's
  ``CallResult`` and never raises for anything a user did: no replica that can serve is an
  ``unavailable`` failure. The flow bounds it by ``timeout_s`` (``answers.answer``).
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

from peach_cli.runtime.contract.ab import choose_arm
from peach_cli.runtime.contract.answers import (
    COMPONENT_HEADER,
    REPLICA_HEADER,
    Answer,
    Attempt,
    CallResult,
    answer,
    error_answer,
)
from peach_cli.runtime.contract.errors import ContractError, StreamCut
from peach_cli.runtime.contract.request import (
    MAX_BODY_BYTES,
    RequestParams,
    parse_query_string,
    parse_request,
)
from peach_cli.runtime.contract.transport import Receive, read_body
from peach_cli.runtime.plan import EndpointSpec

Headers = list[tuple[bytes, bytes]]
"""Response headers as ASGI sends them: lower-case names and values, as bytes."""

_JSON = (b"content-type", b"application/json")
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


class Host(Protocol):
    """How a gateway reaches the components of one endpoint (see the module docstring)."""

    async def call(self, component: str, params: RequestParams, attempt: Attempt) -> CallResult:
        """One non-streaming call of ``component``; failures are ``CallResult``s."""
        ...

    async def open_stream(self, component: str, params: RequestParams, attempt: Attempt) -> Opened:
        """A stream request to ``component``; raises ``ContractError`` or ``ClientGone``."""
        ...


class ClientGone(Exception):
    """The client went away before its answer began: there is nothing to send."""


@dataclass(eq=False)
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

    async def aclose(self) -> None:
        """Stop the host's stream (the user's generator) if it still runs."""
        if self.source is not None:
            await self.source.aclose()


def answer_reply(answer: Answer, arm: str | None = None) -> HttpReply:
    """The reply carrying an envelope answer: JSON, with the component and replica headers."""
    body = answer.body_bytes()
    headers = [_JSON, (b"content-length", str(len(body)).encode())]
    if answer.component:
        headers.append((_COMPONENT, answer.component.encode()))
    if answer.replica:
        headers.append((_REPLICA, answer.replica.encode()))
    error = None
    if answer.status >= 400:
        details = answer.body.get("error") or {}
        error = f"{details.get('code')}: {details.get('message')}"
    return HttpReply(
        answer.status,
        headers,
        body,
        None,
        answer.component,
        answer.replica,
        arm,
        error,
        tried=answer.tried,
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


class Flow:
    """SPEC §2 for one gateway; ``arm_requests`` counts the requests routed to each A/B arm."""

    def __init__(self, *, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.max_body_bytes = max_body_bytes
        self.arm_requests: dict[str, dict[str, int]] = {}
        """Endpoint name → A/B arm → requests routed to it."""

    async def handle(
        self, endpoint: EndpointSpec, request: HttpRequest, host: Host, timeout_s: float
    ) -> HttpReply:
        """Serve one request to ``endpoint``: the reply to send (see the module docstring)."""
        limit = self.max_body_bytes
        try:
            body = await read_body(request.receive, request.headers, limit)
            if body is None:
                return HttpReply(CLIENT_GONE, [], error="client disconnected", gone=True)
            query = parse_query_string(request.query_string)
            params, wants_stream = parse_request(request.method, query, body, max_body_bytes=limit)
        except ContractError as error:  # 405, 413 (before the body is all in memory), 400
            return answer_reply(error_answer(error.code, error.message))
        arm = choose_arm(endpoint, params)
        logged_arm = None
        if endpoint.ab is not None:
            counts = self.arm_requests.setdefault(endpoint.name, {})
            counts[arm] = counts.get(arm, 0) + 1
            logged_arm = arm
        opened: Opened | None = None
        opened_on: str | None = None
        if wants_stream:
            attempt = Attempt(arm)
            try:
                opened = await host.open_stream(arm, params, attempt)
            except ContractError as error:
                refused = error_answer(
                    error.code, error.message, component=arm, replica=attempt.replica
                )
                return answer_reply(refused, logged_arm)
            except ClientGone:
                return HttpReply(
                    CLIENT_GONE,
                    [],
                    component=arm,
                    arm=logged_arm,
                    error="client disconnected",
                    stream=True,
                    gone=True,
                )
            if opened.chunks is not None:
                media_type = endpoint.components[arm].media_type
                return stream_reply(media_type, arm, attempt.replica, opened.chunks, logged_arm)
            opened_on = attempt.replica  # not a generator: the envelope answers

        async def call(component: str, attempt: Attempt) -> CallResult:
            nonlocal opened
            if opened is not None and opened.result is not None and component == arm:
                result, opened = opened.result, None  # the opening call answers (once)
                attempt.replica = opened_on
                return await result(attempt)
            return await host.call(component, params, attempt)

        return answer_reply(await answer(endpoint, call, timeout_s, arm), logged_arm)
