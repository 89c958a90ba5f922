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

The recorder never stops on a request it cannot write as is (SPEC §6): a lone surrogate in a
string is stored escaped (``"\\udcff"``, the line says ``"escaped": true``), a body nested
deeper than 100 levels is omitted (``"body_omitted": SIZE, "body_omitted_why": "…"``), and
a line that still cannot be made is written with what is known of the request and
``"omitted"``. The queue to the writer is bounded (``MAX_PENDING`` requests,
``MAX_PENDING_BYTES`` of bodies): past it a request is not recorded, and once there is room
again a line ``{"time": …, "not_recorded": N}`` (which replay skips) and a note in the dev
log say how many were not.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from peach_cli.boundary import LinesFile, Secrets
from peach_cli.internal import TOOL_HEADER
from peach_cli.printable import escape_surrogates, has_surrogate, without_surrogates
from peach_cli.runtime.jsonlimits import MAX_DEPTH, nests_deeper

MAX_BODY_BYTES = 1024 * 1024
MAX_PENDING = 10_000
"""Requests waiting for the writer at most; past it a request is not recorded."""
MAX_PENDING_BYTES = 32 * 1024 * 1024
"""Bytes of bodies, streams and answers waiting for the writer (or being written) at most."""
WRITE_BATCH_BYTES = 1024 * 1024
"""The writer writes what it took from the queue once it holds about this much."""
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
    costs a request no syscall and no thread switch. ``on_note`` (called on the request
    path, never from the writer) is told how many requests were not recorded.
    """

    def __init__(
        self,
        path: Path,
        on_note: Callable[[str], None] | None = None,
        *,
        secrets: Secrets | None = None,
    ) -> None:
        self.path = path
        self.on_note = on_note
        secrets = secrets if secrets is not None else Secrets()
        self._file = LinesFile(path, "record", secrets)  # secret values stored as ***
        self._pending: deque[tuple[Any, ...]] = deque()
        self._pending_bytes = 0
        """Bytes held by ``_pending`` (bodies, stream chunks, answers)."""
        self._size_lock = threading.Lock()
        self.dropped = 0
        """Requests not recorded since the last note (the queue was full)."""
        self._dropped_lines: deque[int] = deque()
        """Counts of not-recorded requests for the writer to put in the file."""
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._write, name="peach-record", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> tuple[int, int]:
        """Requests, and bytes of theirs, waiting for the writer."""
        return len(self._pending), self._pending_bytes

    def begin(self, scope: dict[str, Any]) -> Recording | None:
        """A new recording for the request of ``scope``; None for one of peach's tools."""
        if any(name == _TOOL_HEADER for name, _ in scope.get("headers", ())):
            return None
        return Recording()

    def finish(self, recording: Recording, scope: dict[str, Any], reply: Any) -> None:
        """Hand the finished request over to the writer (cheap: no encoding here), or
        count it as not recorded when the writer is that far behind."""
        ms = (time.perf_counter() - recording.started) * 1000
        size = (
            min(recording.body_size, MAX_BODY_BYTES)
            + min(recording.chunk_size, MAX_BODY_BYTES)
            + len(reply.body or b"")
        )
        if len(self._pending) >= MAX_PENDING or self._pending_bytes + size > MAX_PENDING_BYTES:
            self.dropped += 1
            return
        if self.dropped:
            self._report_dropped()
        with self._size_lock:
            self._pending_bytes += size
        self._pending.append(
            (
                size,
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

    def _report_dropped(self) -> None:
        count, self.dropped = self.dropped, 0
        self._dropped_lines.append(count)
        if self.on_note is not None:
            self.on_note(
                f"--record: {count} request{'s' if count != 1 else ''} not recorded "
                f"(the writer to {self.path.name} fell behind)"
            )

    def close(self) -> None:
        """Write what is pending and close the file."""
        if self.dropped:
            self._report_dropped()
        self._closing.set()
        self._thread.join(timeout=10)
        self._file.close()

    def _write(self) -> None:
        while True:
            closing = self._closing.wait(WRITE_INTERVAL_S)
            try:
                self._write_pending()
            except Exception:  # noqa: BLE001 - the recorder never stops (SPEC §6)
                pass
            if closing:
                return

    def _write_pending(self) -> None:
        lines: list[dict[str, Any]] = []
        while self._dropped_lines:
            count = self._dropped_lines.popleft()
            lines.append({"time": _stamp(time.time()), "not_recorded": count})
        while lines or self._pending:  # in batches: what is being written counts too
            held = 0
            while self._pending and held < WRITE_BATCH_BYTES and len(lines) < 1000:
                size, *item = self._pending.popleft()
                held += size
                lines.append(writable_entry(*item))
            try:
                self._file.write(lines)
            except (OSError, ValueError):
                pass  # a full disk loses lines, never a request
            finally:
                lines = []
                with self._size_lock:
                    self._pending_bytes -= held


def writable_entry(recording: Recording, method: str, path: str, *rest: Any) -> dict[str, Any]:
    """``entry``, made writable: its lone surrogates escaped; a line with what is known of
    the request and ``"omitted"`` when it cannot be made at all."""
    try:
        line = entry(recording, method, path, *rest)
        return {**without_surrogates(line), "escaped": True} if has_surrogate(line) else line
    except Exception as error:  # noqa: BLE001 - the recorder never stops (SPEC §6)
        return {
            "time": _stamp(recording.wall),
            "method": str(method),
            "url": escape_surrogates(str(path)),
            "body": None,
            "omitted": f"this request could not be recorded ({type(error).__name__})",
        }


def _stamp(wall: float) -> str:
    stamp = datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _loads(raw: bytes) -> tuple[Any, str | None]:
    """JSON data of ``raw`` and None, or None and why it is not kept (``ValueError``: not
    JSON, the caller keeps the text)."""
    try:
        value = json.loads(raw)
    except RecursionError:
        return None, f"nested deeper than {MAX_DEPTH} levels"
    if nests_deeper(value, MAX_DEPTH):
        return None, f"nested deeper than {MAX_DEPTH} levels"
    return value, None


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
    line: dict[str, Any] = {
        "time": _stamp(recording.wall),
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
            line["body"], why = _loads(raw)
        except ValueError:
            line["body"], why = raw.decode("utf-8", "replace"), None
        if why is not None:
            line["body_omitted"] = recording.body_size
            line["body_omitted_why"] = why
    if stream:
        line["text"] = b"".join(recording.chunks).decode("utf-8", "replace")
        if recording.chunk_size > MAX_BODY_BYTES:
            line["text_truncated"] = True
        line["cut"] = error is not None and status < 400
    else:
        why = None
        try:
            value, why = _loads(body) if body else (None, None)
        except ValueError:
            value = None
        if why is not None:
            line["result_omitted"] = f"the answer is {why}"
        if isinstance(value, dict) and value.get("status") == "error":
            details = value.get("error")
            line["error"] = details if isinstance(details, dict) else {"code": str(details)}
        elif isinstance(value, dict) and "result" in value:
            line["result"] = value["result"]
        elif body:
            line["text"] = body.decode("utf-8", "replace")
    line["ms"] = round(ms, 2)
    return line
