"""What ``peach ask`` shows: one answer, or a stream as it arrives, and the status lines.

On a terminal the answer is pretty-printed and a stream is rendered from its framing (plain
text, JSON lines, SSE), optionally as live Markdown, its control characters shown escaped
(``\\x1b``: an endpoint cannot drive the terminal; ``--raw`` writes them as sent). Piped,
stdout receives the payload only: the result JSON, or the stream's bytes exactly as they
arrive, each written and flushed at once. Status lines and the end-of-stream summary go to
stderr.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, BinaryIO

from peach_cli.boundary import shown_lines
from peach_cli.client.framing import (
    JSON_LINES,
    PLAIN,
    SSE,
    Frame,
    FrameDecoder,
    detect_framing,
    make_decoder,
)
from peach_cli.wording import count, human_size

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.client.send import Client, CompleteResponse, Stream, StreamStats

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


# --------------------------------------------------------------------------- one answer


def render_answer(
    output: Output,
    answer: CompleteResponse,
    client: Client,
    url: str,
    *,
    tty: bool,
    raw: bool,
    md: bool = False,
) -> int:
    from peach_cli.client.send import check_answer, is_ok_envelope

    if tty:
        _status_line(output, answer.status, answer.reason, answer.latency_s, answer.headers)
    if raw:
        _write_bytes(sys.stdout.buffer, answer.body)
    is_json, value = check_answer(answer, client, url)  # raises on an error answer
    if raw:
        return 0
    enveloped = is_json and is_ok_envelope(value)
    if enveloped:
        value = value["result"]
    if tty:
        if md and isinstance(value, str):
            from rich.markdown import Markdown

            output.stdout.print(Markdown(value))
        elif is_json:
            output.stdout.print_json(data=value)
        else:
            output.stdout.print(answer.body.decode("utf-8", "replace"), markup=False)
    elif enveloped:
        import json

        _write_bytes(sys.stdout.buffer, json.dumps(value, ensure_ascii=False).encode() + b"\n")
    else:
        _write_bytes(sys.stdout.buffer, answer.body)
    return 0


def _status_line(
    output: Output, status: int, reason: str, latency_s: float, headers: dict[str, str]
) -> None:
    parts = _status(status, reason, headers)
    parts.insert(1, _duration(latency_s))
    _dim_line(output, parts)


def _status(status: int, reason: str, headers: dict[str, str]) -> list[str]:
    """Status, and the component and replica that answered (from the X-Peach-* headers)."""
    parts = [f"{status} {reason}".strip()]
    if component := headers.get("x-peach-component"):
        parts.append(f"component {component}")
    if replica := headers.get("x-peach-replica"):
        parts.append(f"replica {replica}")
    return parts


def _dim_line(output: Output, parts: list[str]) -> None:
    from peach_cli.boundary import markup

    output.stderr.print(f"[dim]{markup(' · '.join(parts))}[/]", soft_wrap=True)


# --------------------------------------------------------------------------- streams


def render_stream(output: Output, response: Stream, *, tty: bool, raw: bool, markdown: bool) -> int:
    out = sys.stdout.buffer
    renderer: _Renderer
    if raw or not tty:
        renderer = _RawRenderer(out)
    elif markdown:
        renderer = _MarkdownRenderer(output, response.content_type)
    else:
        renderer = _TextRenderer(out, response.content_type)
    from peach_cli.client.send import ResponseCut
    from peach_cli.errors import ClientError

    outcome: str | None = "done"
    try:
        for chunk in response.chunks():
            renderer.feed(chunk)
        renderer.close()
    except KeyboardInterrupt:
        outcome = "interrupted"
    except BrokenPipeError:
        outcome = None
        raise
    except ClientError as error:  # cut or stalled: what arrived stays printed
        outcome = "failed"
        if isinstance(error, ResponseCut):
            outcome = "cut"
            error.hint = error.hint or _CUT_HINT
        renderer.close()
        raise
    except BaseException:
        outcome = "failed"
        raise
    finally:
        renderer.stop()
        if outcome is not None:
            if tty:
                renderer.end_line()
            status = _status(response.status, response.reason, response.headers) if tty else []
            _summary(output, response.stats, renderer.frames, renderer.framing, outcome, status)
    if outcome == "interrupted":
        # Leaving the `with client.stream(...)` closes the connection, which is what tells
        # the server (and the endpoint's generator) that the client went away.
        return EXIT_INTERRUPTED
    return 0


_CUT_HINT = "an endpoint whose generator raises cuts its stream; the server's log has the error"


class _Renderer:
    framing: str | None = None
    frames: int | None = None

    def feed(self, chunk: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def end_line(self) -> None:
        pass


class _RawRenderer(_Renderer):
    """The bytes exactly as they arrive, flushed at once (piped output, or --raw)."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._last = b"\n"

    def feed(self, chunk: bytes) -> None:
        self._out.write(chunk)
        self._out.flush()
        self._last = chunk[-1:]

    def end_line(self) -> None:
        if self._last != b"\n":
            _write_bytes(self._out, b"\n")
            self._last = b"\n"


class _FramedRenderer(_Renderer):
    """Detects the framing from the content type and the first bytes, then decodes frames."""

    def __init__(self, content_type: str) -> None:
        self._content_type = content_type
        self._head = b""
        self._decoder: FrameDecoder | None = None
        self._at_line_start = True
        self.frames = 0

    def feed(self, chunk: bytes) -> None:
        if self._decoder is None:
            self._head += chunk
            framing = detect_framing(self._content_type, self._head)
            if framing is None:
                return
            self.framing = framing
            self._decoder = make_decoder(framing)
            chunk, self._head = self._head, b""
        self._show(self._decoder.feed(chunk))

    def close(self) -> None:
        if self._decoder is None:
            self.framing = detect_framing(self._content_type, self._head, final=True) or PLAIN
            self._decoder = make_decoder(self.framing)
            self._show(self._decoder.feed(self._head))
        self._show(self._decoder.close())

    def _show(self, frames: list[Frame]) -> None:
        if not frames:
            return
        self.frames = (self.frames or 0) + sum(1 for f in frames if not f.done)
        for frame in frames:
            text, whole_line = _frame_text(frame, self.framing)
            if whole_line and not self._at_line_start:
                text = "\n" + text
            if text:
                # on a terminal: no escape sequence, no lone "\r" from the stream (CRLF is a
                # line break)
                text = shown_lines(text.replace("\r\n", "\n"))
                self._write(text)
                self._at_line_start = text.endswith("\n")

    def _write(self, text: str) -> None:
        raise NotImplementedError


def _frame_text(frame: Frame, framing: str | None) -> tuple[str, bool]:
    """How one frame reads on a terminal, and whether it is a line of its own.

    Text (plain chunks, ``text``/``token``/``delta`` fields) flows on; any other frame (a
    JSON line, an SSE event's data) is shown as its own line.
    """
    if frame.done:
        return "", False
    if framing == PLAIN:
        return frame.data, False
    if frame.text is not None:
        return frame.text, False
    label = f"[{frame.event}] " if frame.event and frame.event != "message" else ""
    return label + frame.data + "\n", True


class _TextRenderer(_FramedRenderer):
    """Frames as text on the terminal, written and flushed as each one completes."""

    def __init__(self, out: BinaryIO, content_type: str) -> None:
        super().__init__(content_type)
        self._out = out
        self._last = "\n"

    def _write(self, text: str) -> None:
        self._out.write(text.encode("utf-8", "replace"))
        self._out.flush()
        self._last = text[-1]

    def end_line(self) -> None:
        if self._last != "\n":
            _write_bytes(self._out, b"\n")
            self._last = "\n"


class _MarkdownRenderer(_FramedRenderer):
    """Live Markdown that neither flickers nor duplicates lines on long answers.

    Finished blocks (up to the last blank line outside a code fence) are printed once, above
    the live area, and never redrawn; only the block still being written stays live, cropped
    to its last lines so the live area always fits the terminal. Redraws happen at most 12
    times a second, from one thread at a time: printing a block and redrawing the live area
    share a lock, or two redraws could each erase only the previous (smaller) live area.
    """

    refresh_per_second = 12

    def __init__(self, output: Output, content_type: str) -> None:
        super().__init__(content_type)
        from rich.live import Live

        self._text = ""
        self._committed = 0
        self._printed_blocks = 0
        self._tail = _MarkdownTail()
        self._lock = threading.Lock()
        self._dirty = False
        self._stopped = threading.Event()
        self._live = Live(
            self._tail,
            console=output.stdout,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()
        self._refresher = threading.Thread(target=self._refresh_loop, daemon=True)
        self._refresher.start()

    def _refresh_loop(self) -> None:
        while not self._stopped.wait(1 / self.refresh_per_second):
            with self._lock:
                if self._dirty and not self._stopped.is_set():
                    self._dirty = False
                    self._live.refresh()

    def _write(self, text: str) -> None:
        with self._lock:
            self._text += text
            boundary = _last_block_boundary(self._text, self._committed)
            block = self._text[self._committed : boundary]
            self._committed = max(boundary, self._committed)
            self._tail.text = self._text[self._committed :]
            if block:
                self._print_block(block)  # also redraws the live area, with the new tail
            self._dirty = True

    def _print_block(self, block: str) -> None:
        from rich.markdown import Markdown

        if not block.strip():
            return
        if self._printed_blocks:
            self._live.console.print()
        self._live.console.print(Markdown(block.strip("\n")))
        self._printed_blocks += 1

    def stop(self) -> None:
        self._stopped.set()
        self._refresher.join(timeout=2)
        with self._lock:
            self._tail.text = ""
            self._live.stop()
            self._print_block(self._text[self._committed :])
            self._committed = len(self._text)


class _MarkdownTail:
    """The live part of the Markdown: rendered, then cropped to the lines that fit."""

    def __init__(self) -> None:
        self.text = ""

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.markdown import Markdown
        from rich.segment import Segment

        if not self.text.strip():
            return
        lines = console.render_lines(Markdown(self.text), options, pad=False)
        room = max(1, (options.height or console.height) - 1)
        shown = lines[-room:]
        for index, line in enumerate(shown):
            yield from line
            if index < len(shown) - 1:
                yield Segment.line()


def _last_block_boundary(text: str, start: int) -> int:
    """Index just after the last blank line in ``text[start:]`` that is outside a code fence."""
    boundary = start
    in_fence = False
    position = start
    previous_blank = True
    for line in text[start:].splitlines(keepends=True):
        position += len(line)
        if not line.endswith("\n"):
            break  # the line is still being written
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
        blank = not stripped
        if blank and not in_fence and not previous_blank:
            boundary = position
        previous_blank = blank
    return boundary


# --------------------------------------------------------------------------- output helpers


def _summary(
    output: Output,
    stats: StreamStats,
    frames: int | None,
    framing: str | None,
    outcome: str,
    status: list[str],
) -> None:
    """The end-of-stream line on stderr (printed after the stream, so it never delays it)."""
    end = stats.ended or time.perf_counter()
    if stats.last_chunk is not None:
        # The wait after the last chunk counts too: it is the gap a stall or a slow end shows.
        stats.largest_gap = max(stats.largest_gap, end - stats.last_chunk)
    parts = list(status)
    if outcome == "interrupted":
        parts.append("interrupted")
    if stats.first_chunk is None:
        parts.append("no data")
    else:
        parts.append(f"first chunk {_duration(stats.first_chunk - stats.started)}")
    chunks = count(stats.chunks, "chunk")
    parts.append(f"cut after {chunks}" if outcome == "cut" else chunks)
    if frames is not None and framing in (SSE, JSON_LINES):
        parts.append(count(frames, "event" if framing == SSE else "line"))
    parts.append(human_size(stats.bytes))
    parts.append(f"total {_duration(end - stats.started)}")
    parts.append(f"largest gap {_duration(stats.largest_gap)}")
    _dim_line(output, parts)


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


def _write_bytes(out: BinaryIO, data: bytes) -> None:
    out.write(data)
    out.flush()


def detach_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
