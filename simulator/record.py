"""``peach dev --record FILE``: one JSON line per request the gateway answers (SPEC §8).

The gateway hands the request's raw pieces over as it finishes it (``RecordWriter.begin`` wraps
``receive`` to keep the body, ``Recording.wrap`` keeps a stream's chunks); turning them into
JSON and writing the line happen in a writer thread, off the request path. A line::

    {"time": "2026-12-01T23:30:00.123Z", "method": "GET", "url": "/recommend",
     "query": "item_id=apple", "body": null, "stream": false, "status": 200,
     "component": "main", "replica": "recommend/main#1", "result": ["pear", "banana"],
     "ms": 3.1}

An error answer has ``"error": {"code", "message"}`` instead of ``result``; a stream has
``"text"`` (its chunks joined, as UTF-8) and ``"cut"``. A body over ``MAX_BODY_BYTES`` is
recorded as ``"body": null, "body_omitted": SIZE``, a stream's text past it is truncated
(``"text_truncated": true``). Secret values are stored as ``***`` (the output boundary,
``peach_cli.boundary``). ``peach replay`` reads the file back. A request that one of
peach's own tools sent (it carries ``x-peach-tool``) is not recorded: replaying or benching
against the recording server never feeds the file.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from peach_cli.boundary import open_lines
from peach_cli.client.items import TOOL_HEADER

MAX_BODY_BYTES = 1024 * 1024
WRITE_INTERVAL_S = 0.05
"""How often the writer writes what has gathered: a line is on disk within this."""
_TOOL_HEADER = TOOL_HEADER.encode()


class Recording:
    """The pieces of one request, kept while it is served."""

    __slots__ = ("body", "body_size", "chunks", "chunk_size", "started", "wall")

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.body_size = 0
        self.chunks: list[bytes] = []
        self.chunk_size = 0
        self.started = time.perf_counter()
        self.wall = time.time()

    def receive(self, receive: Any) -> Any:
        async def recording_receive() -> Any:
            message = await receive()
            if message.get("type") == "http.request":
                body = message.get("body", b"")
                self.body_size += len(body)
                if self.body_size <= MAX_BODY_BYTES:
                    self.body.append(body)
            return message

        return recording_receive

    async def wrap(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in chunks:
            if self.chunk_size < MAX_BODY_BYTES:
                self.chunks.append(chunk)
            self.chunk_size += len(chunk)
            yield chunk


class RecordWriter:
    """Appends one JSON line per finished request to ``path``, from a writer thread.

    The request path only appends a tuple to a deque; the writer wakes every
    ``WRITE_INTERVAL_S``, encodes what has gathered and writes it at once, so recording
    costs a request no syscall and no thread switch.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open_lines(path, channel="record")  # secret values stored as ***
        self._pending: deque[tuple[Any, ...]] = deque()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._write, name="peach-record", daemon=True)
        self._thread.start()

    def begin(self, scope: dict[str, Any]) -> Recording | None:
        """A new recording for the request of ``scope``; None for one of peach's tools."""
        if any(name == _TOOL_HEADER for name, _ in scope.get("headers", ())):
            return None
        return Recording()

    def finish(self, recording: Recording, scope: dict[str, Any], reply: Any) -> None:
        """Hand the finished request over to the writer (cheap: no encoding here)."""
        ms = (time.perf_counter() - recording.started) * 1000
        self._pending.append(
            (
                recording,
                scope["method"],
                scope["path"],
                scope.get("query_string", b""),
                reply.status,
                reply.component,
                reply.replica,
                reply.stream,
                reply.body,
                reply.error,
                ms,
            )
        )

    def close(self) -> None:
        """Write what is pending and close the file."""
        self._closing.set()
        self._thread.join(timeout=10)
        self._file.close()

    def _write(self) -> None:
        while True:
            closing = self._closing.wait(WRITE_INTERVAL_S)
            entries = []
            while self._pending:
                entries.append(entry(*self._pending.popleft()))
            try:
                self._file.write(entries)
            except OSError:
                pass  # a full disk loses lines, never a request
            if closing:
                return


def entry(
    recording: Recording,
    method: str,
    path: str,
    query: bytes,
    status: int,
    component: str | None,
    replica: str | None,
    stream: bool,
    body: bytes,
    error: str | None,
    ms: float,
) -> dict[str, Any]:
    """The JSON line of one request."""
    stamp = datetime.fromtimestamp(recording.wall, UTC).isoformat(timespec="milliseconds")
    line: dict[str, Any] = {
        "time": stamp.replace("+00:00", "Z"),
        "method": method,
        "url": path,
        "query": query.decode("latin-1"),
        "body": None,
        "stream": stream,
        "status": status,
        "component": component,
        "replica": replica,
    }
    if recording.body_size > MAX_BODY_BYTES:
        line["body_omitted"] = recording.body_size
    elif recording.body_size:
        raw = b"".join(recording.body)
        try:
            line["body"] = json.loads(raw)
        except ValueError:
            line["body"] = raw.decode("utf-8", "replace")
    if stream:
        line["text"] = b"".join(recording.chunks).decode("utf-8", "replace")
        if recording.chunk_size > MAX_BODY_BYTES:
            line["text_truncated"] = True
        line["cut"] = error is not None and status < 400
    else:
        try:
            value = json.loads(body) if body else None
        except ValueError:
            value = None
        if isinstance(value, dict) and value.get("status") == "error":
            details = value.get("error")
            line["error"] = details if isinstance(details, dict) else {"code": str(details)}
        elif isinstance(value, dict) and "result" in value:
            line["result"] = value["result"]
        elif body:
            line["text"] = body.decode("utf-8", "replace")
    line["ms"] = round(ms, 2)
    return line
