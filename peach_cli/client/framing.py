"""Stream framing: tell plain text, JSON lines and Server-Sent Events apart, and parse them.

A streaming endpoint chooses its own framing (the platform sends chunks exactly as yielded).
``detect_framing`` decides from the content type and the first bytes; each decoder is fed
raw bytes as they arrive and returns the frames that are complete so far::

    decoder = make_decoder(detect_framing("text/event-stream", b"data: hi\\n\\n"))
    decoder.feed(b"data: hel")      # -> []           (the event is not complete yet)
    decoder.feed(b"lo\\n\\n")        # -> [Frame(data="hello", ...)]
    decoder.close()                 # -> frames still pending when the stream ended

Nothing here does I/O; the decoders are pure and incremental.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

PLAIN = "text"
JSON_LINES = "jsonl"
SSE = "sse"

_JSON_LINES_TYPES = (
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/x-jsonl",
    "application/jsonlines",
    "application/json-lines",
    "application/json-seq",
)
_TEXT_KEYS = ("text", "token", "delta", "content")


@dataclass(frozen=True)
class Frame:
    """One unit of a stream: a piece of text, one JSON line or one SSE event.

    ``data`` is the frame's text (the event's data for SSE, the line for JSON lines);
    ``value`` the parsed JSON when the data is JSON; ``text`` the human text to show when
    the JSON carries one (a ``text``/``token``/``delta`` field); ``done`` marks SSE
    ``[DONE]``.
    """

    data: str
    value: Any = None
    is_json: bool = False
    text: str | None = None
    event: str | None = None
    id: str | None = None
    done: bool = False


class FrameDecoder(Protocol):
    framing: str

    def feed(self, chunk: bytes) -> list[Frame]: ...

    def close(self) -> list[Frame]: ...


def detect_framing(content_type: str | None, head: bytes, *, final: bool = False) -> str | None:
    """Return PLAIN, JSON_LINES or SSE, or None when ``head`` is too short to tell yet.

    ``text/event-stream`` is SSE and a JSON lines type (``ndjson``…) JSON lines; any other
    type (``text/plain``, the platform's default) is shown as the text it is, whatever its
    first characters (SPEC §3) — except that a first line starting with ``{`` (after a
    byte order mark, if any) is JSON lines, as before. ``final`` says no more bytes will
    come, so a decision must be made.
    """
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime == "text/event-stream":
        return SSE
    if mime in _JSON_LINES_TYPES:
        return JSON_LINES
    if head.startswith(codecs.BOM_UTF8):
        head = head[len(codecs.BOM_UTF8) :]
    elif head and codecs.BOM_UTF8.startswith(head) and not final:
        return None  # the start of a byte order mark
    start = head.lstrip(b"\r\n\t ")
    if not start:
        return PLAIN if final else None
    return JSON_LINES if start[:1] == b"{" else PLAIN


def make_decoder(framing: str) -> FrameDecoder:
    """A fresh decoder for ``framing``."""
    if framing == SSE:
        return SSEDecoder()
    if framing == JSON_LINES:
        return JSONLinesDecoder()
    return PlainDecoder()


def extract_text(value: Any) -> str | None:
    """The human text a JSON chunk carries, or None.

    Understands ``{"text": …}``, ``{"token": …}``, ``{"delta": …}`` (and the same names one
    level down, as in ``{"delta": {"text": …}}`` or ``{"token": {"text": …}}``) and the
    OpenAI shape ``{"choices": [{"delta": {"content": …}}]}``.
    """
    if not isinstance(value, dict):
        return None
    for key in _TEXT_KEYS:
        inner = value.get(key)
        if isinstance(inner, str):
            return inner
        if isinstance(inner, dict):
            for sub in _TEXT_KEYS:
                if isinstance(inner.get(sub), str):
                    return inner[sub]
    choices = value.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return extract_text(choices[0])
    return None


def _parse_json(data: str) -> tuple[bool, Any]:
    stripped = data.strip()
    if not stripped or stripped[0] not in '{["0123456789-tfn':
        return False, None
    try:
        return True, json.loads(stripped)
    except ValueError:
        return False, None


def _utf8_decoder() -> codecs.IncrementalDecoder:
    """UTF-8 that never splits a character and drops one leading byte order mark."""
    return codecs.getincrementaldecoder("utf-8-sig")(errors="replace")


class PlainDecoder:
    """Plain text: every chunk is a frame (UTF-8 decoded without splitting characters)."""

    framing = PLAIN

    def __init__(self) -> None:
        self._decoder = _utf8_decoder()

    def feed(self, chunk: bytes) -> list[Frame]:
        text = self._decoder.decode(chunk)
        return [Frame(data=text, text=text)] if text else []

    def close(self) -> list[Frame]:
        text = self._decoder.decode(b"", final=True)
        return [Frame(data=text, text=text)] if text else []


class _Lines:
    """Complete lines out of text that arrives in pieces, in time linear in its length.

    Only the new text is searched for line ends; the unfinished line is kept as a list of
    pieces and joined once, when it ends. ``universal`` ends lines at CRLF, LF or CR (as
    Server-Sent Events do) — a CR at the end of a piece ends its line at once, and an LF
    that starts the next piece is then the rest of that CRLF; otherwise only LF ends one.
    """

    def __init__(self, *, universal: bool) -> None:
        self._universal = universal
        self._pieces: list[str] = []
        self._after_cr = False

    def feed(self, text: str) -> list[str]:
        if not text:
            return []
        if self._after_cr:
            self._after_cr = False
            if text.startswith("\n"):
                text = text[1:]
        if "\n" not in text and not (self._universal and "\r" in text):
            self._pieces.append(text)  # the common case of a long line: no search at all
            return []
        lines: list[str] = []
        start = 0
        for match in (_UNIVERSAL_EOL if self._universal else _LF).finditer(text):
            self._pieces.append(text[start : match.start()])
            lines.append("".join(self._pieces))
            self._pieces = []
            start = match.end()
        if start < len(text):
            self._pieces.append(text[start:])
        elif self._universal and text.endswith("\r"):
            self._after_cr = True
        return lines

    def rest(self) -> str:
        """The unfinished line (it is forgotten)."""
        rest, self._pieces = "".join(self._pieces), []
        return rest


_UNIVERSAL_EOL = re.compile(r"\r\n|\r|\n")
_LF = re.compile(r"\n")


class JSONLinesDecoder:
    """JSON lines: one frame per complete line; a line that is not JSON is kept as text."""

    framing = JSON_LINES

    def __init__(self) -> None:
        self._decoder = _utf8_decoder()
        self._lines = _Lines(universal=False)

    def feed(self, chunk: bytes) -> list[Frame]:
        lines = self._lines.feed(self._decoder.decode(chunk))
        return [frame for line in lines if (frame := self._frame(line)) is not None]

    def close(self) -> list[Frame]:
        self._lines.feed(self._decoder.decode(b"", final=True))
        frame = self._frame(self._lines.rest())
        return [frame] if frame is not None else []

    @staticmethod
    def _frame(line: str) -> Frame | None:
        line = line.rstrip("\r")
        if not line.strip():
            return None
        ok, value = _parse_json(line)
        if not ok:
            return Frame(data=line)
        return Frame(data=line, value=value, is_json=True, text=extract_text(value))


class SSEDecoder:
    """Server-Sent Events as the WHATWG HTML standard's event-stream algorithm parses them.

    One leading byte order mark is ignored; lines end in CRLF, LF or CR; a line starting
    with ``:`` is a comment; otherwise the field name is what comes before the first colon
    (the whole line when there is none) and one space after the colon is dropped. ``data``
    lines accumulate (joined with newlines), ``event`` sets the type (empty: ``message``),
    ``id`` the last event id (unless it holds a NUL), ``retry`` is read and ignored, other
    fields are ignored. An event is dispatched only at the blank line that ends it, and only
    when it has data: an unterminated last event is dropped at the end of the stream, as a
    browser drops it. An event whose data is ``[DONE]`` is marked ``done``.
    """

    framing = SSE

    def __init__(self) -> None:
        self._decoder = _utf8_decoder()
        self._lines = _Lines(universal=True)
        self._data: list[str] = []
        self._event: str | None = None
        self.last_id: str | None = None
        self.comments = 0
        self.dropped = False
        """Whether the stream ended in the middle of an event (it was not dispatched)."""

    def feed(self, chunk: bytes) -> list[Frame]:
        lines = self._lines.feed(self._decoder.decode(chunk))
        return [frame for line in lines if (frame := self._line(line)) is not None]

    def close(self) -> list[Frame]:
        """End of stream: complete events were dispatched already; the rest is dropped."""
        lines = self._lines.feed(self._decoder.decode(b"", final=True))
        frames = [frame for line in lines if (frame := self._line(line)) is not None]
        rest = self._lines.rest()
        if rest:
            self._line(rest)  # an unterminated line: its field counts for nothing shown
        self.dropped = bool(self._data)
        self._data, self._event = [], None
        return frames

    def _line(self, line: str) -> Frame | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value or None
        elif name == "id":
            if "\0" not in value:
                self.last_id = value
        return None

    def _dispatch(self) -> Frame | None:
        data, event = self._data, self._event
        self._data, self._event = [], None
        if not data:
            return None
        text = "\n".join(data)
        if text.strip() == "[DONE]":
            return Frame(data=text, event=event, id=self.last_id, done=True)
        ok, value = _parse_json(text)
        if ok:
            return Frame(
                data=text,
                value=value,
                is_json=True,
                text=extract_text(value),
                event=event,
                id=self.last_id,
            )
        return Frame(data=text, event=event, id=self.last_id)
