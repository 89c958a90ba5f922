"""Transport policy both hosts share: reading the body, the dispatch, the 503 message.

``peach dev``'s gateway and the Ray gateway differ only in how bytes reach a replica; what
a client can see of the transport is decided here once:

* ``read_body``: the request body, refused with ``payload_too_large`` as soon as the
  declared length or the bytes received pass the limit (a huge body is never held whole);
* ``dispatch``: whether a request is a stream, a ``stream_required`` error or a plain call;
* ``unavailable_message``: what a 503 says when a component has no healthy replica;
* ``send_stream``: a stream's chunks sent as they come, stopped when the client hangs up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Literal

from peach_cli.runtime.contract.errors import ContractError

STREAMING_KINDS = frozenset({"generator", "async_generator"})
"""Method kinds whose calls must ask for a stream (SPEC §2 "Streaming")."""

Dispatch = Literal["stream", "stream_required", "call"]

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
"""An ASGI ``receive`` callable."""
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
"""An ASGI ``send`` callable."""


def dispatch(method_kind: str | None, wants_stream: bool) -> Dispatch:
    """How to serve a request to a method of ``method_kind``.

    A generator method streams when asked and is a ``stream_required`` error otherwise; a
    request that asks a plain method for a stream gets the normal envelope.

    >>> dispatch("async_generator", True), dispatch("generator", False), dispatch("function", True)
    ('stream', 'stream_required', 'call')
    """
    if method_kind in STREAMING_KINDS:
        return "stream" if wants_stream else "stream_required"
    return "call"


def unavailable_message(where: str, reason: str) -> str:
    """What a 503 says: ``no healthy replica of assistant/main: <the init error>``.

    ``where`` is ``endpoint/component``; ``reason`` the replicas' errors or states.
    """
    separator = " " if reason.startswith("(") else ": "
    return f"no healthy replica of {where}{separator}{reason}"


def too_large(limit: int, size: int | None = None) -> ContractError:
    """The ``payload_too_large`` refusal for a body over ``limit`` bytes."""
    size_text = f"{size} bytes, " if size is not None else ""
    return ContractError(
        "payload_too_large",
        f"the request body is {size_text}over the limit of {limit} bytes",
    )


async def read_body(
    receive: Receive, headers: Iterable[tuple[bytes, bytes]], limit: int
) -> bytes | None:
    """The whole request body from an ASGI ``receive`` (None if the client disconnected).

    Raises ``ContractError('payload_too_large')`` as soon as the declared length or the
    bytes received pass ``limit``: a huge body is never held in memory.
    """
    for name, value in headers:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise too_large(limit, int(value))
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            raise too_large(limit)
        if not message.get("more_body", False):
            if not parts:
                return part
            parts.append(part)
            return b"".join(parts)
        parts.append(part)


async def send_stream(
    send: Send,
    receive: Receive,
    status: int,
    headers: Iterable[tuple[bytes, bytes]],
    chunks: AsyncIterator[bytes],
) -> None:
    """Send a stream's ``chunks`` as they come; stop them as soon as the client hangs up.

    What Starlette's ``StreamingResponse`` does, with two asyncio tasks instead of an anyio
    task group: a task group ended by a hang-up, or cancelled from outside (Ray Serve
    cancels the request of a client that left), leaves a reference cycle behind (its
    ``CancelledError``, whose traceback holds the frame that holds it), which kept the cut
    stream and its whole connection in memory until a full garbage collection: over a day
    of dropped streams, steps in the gateway's memory. An error of the stream
    (``StreamCut``) is raised here.
    """

    async def pump() -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    streaming = asyncio.ensure_future(pump())
    hang_up = asyncio.ensure_future(wait_disconnect(receive))
    try:
        await asyncio.wait((streaming, hang_up), return_when=asyncio.FIRST_COMPLETED)
    finally:  # one of them is done (or this request is cancelled): the other ends too
        hang_up.cancel()
        if not streaming.done():
            streaming.cancel()
            await asyncio.wait((streaming,))
    if not streaming.cancelled():
        streaming.result()


async def wait_disconnect(receive: Receive) -> None:
    """Return once the client has hung up (ASGI ``http.disconnect``)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
