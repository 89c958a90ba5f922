"""The frames a gateway and a replica process exchange over their private Unix socket.

A frame is a 4-byte big-endian length followed by a pickled tuple ``(kind, request_id,
payload)``; payloads are plain tuples and dicts (dataclasses pickle several times slower). Both ends are this package, on one machine, over a socketpair nobody else can
open, so pickle is safe here and avoids re-encoding results and chunks.

Gateway → replica::

    ("start", 0, (ComponentSpec, root, replica_id, variables))
                                                       set its env_vars and secrets, load
                                                       the code, run init
    ("call", id, (query, body))                        one non-streaming call
    ("stream", id, (query, body))                      one stream
    ("cancel", id, None)                               the caller went away / timed out
    ("credit", id, (chunks, nbytes))                   the gateway consumed that much of a stream
    ("ping", id, None)                                 health and memory
    ("patch", id, ComponentSpec)                       execute new code, keep the state
    ("patch_commit", id, bool)                         serve the prepared code (False: drop it)
    ("stop", 0, None)                                  close streams and exit

Replica → gateway::

    ("ready", 0, {"method_kind", "pid"})               init done, serving
    ("init_error", 0, {"message", "details"})          init raised; the process exits
    ("result", id, CallResult fields as a tuple)
    ("started", id, None)                              the stream is bound and running
    ("chunk", id, bytes)                               one yielded chunk
    ("end", id, None)                                  the stream is over
    ("cut", id, {"message"})                           the generator raised: cut the stream
    ("stream_error", id, {"code", "message"})          the stream could not start
    ("pong", id, {"reinitializing"})          alive (memory is read by the gateway)
    ("state", 0, {"reinitializing", "error"})          drift re-init started / finished
    ("log", 0, {"level", "message"})                   a log record from the replica
    ("patch_ready", id, {"method_kind"})               the new code ran; waiting for commit
    ("patch_error", id, {"message", "details"})        the new code raised: the old one serves
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable
from typing import Any

HEADER_BYTES = 4
STREAM_WINDOW_CHUNKS = 256
STREAM_WINDOW_BYTES = 1 << 20
"""Flow control: a replica sends at most this much of one stream before the gateway has
consumed it (one chunk always goes, however large). A client that stops reading thus
stops the generator at its next yield instead of filling the gateway's memory."""
Frame = tuple[str, int, Any]


def encode_frame(kind: str, request_id: int, payload: Any = None) -> bytes:
    """A frame ready to write: length prefix and pickled body."""
    body = pickle.dumps((kind, request_id, payload), protocol=pickle.HIGHEST_PROTOCOL)
    return len(body).to_bytes(HEADER_BYTES, "big") + body


class FrameProtocol(asyncio.Protocol):
    """An asyncio protocol that splits the byte stream into frames and hands each on.

    ``on_frame`` is called for every complete frame, in order; ``on_lost`` once when the
    connection closes (the other process exited or closed its end).
    """

    def __init__(
        self, on_frame: Callable[[Frame], None], on_lost: Callable[[Exception | None], None]
    ) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        offset = 0
        size = len(buffer)
        while size - offset >= HEADER_BYTES:
            length = int.from_bytes(buffer[offset : offset + HEADER_BYTES], "big")
            end = offset + HEADER_BYTES + length
            if end > size:
                break
            frame = pickle.loads(buffer[offset + HEADER_BYTES : end])
            offset = end
            self._on_frame(frame)
        if offset:
            del buffer[:offset]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._on_lost(exc)

    def send(self, kind: str, request_id: int, payload: Any = None) -> bool:
        """Write one frame; False when the connection is already gone."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        transport.write(encode_frame(kind, request_id, payload))
        return True
