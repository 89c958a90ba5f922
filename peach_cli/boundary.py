"""The one output boundary (SPEC §6): everything peach shows or writes passes here.

Two rules hold for every channel, whatever it renders:

- **Secret values are masked.** Every value hidden with ``hide`` (a component's or a task's
  secrets, a deployment's, the project's `.env` values it declares) is replaced by ``***``
  as is and in the forms a server echoes text in (JSON-escaped, percent-encoded, base64). A
  multi-line value is masked as one value: wherever any of its lines of 4 or more characters
  appears, alone or inside another line, it is masked.
- **Control characters from data are escaped.** A path, a header, a method name, a notebook
  path or a user's print holding ``\\x1b`` or a line break is written as ``\\x1b`` / ``\\n``:
  no client, notebook or file name can forge a line or drive the terminal.

A channel is a place output goes to (``CHANNELS``: the terminal, the live view, log lines,
pdb banners, ``peach test``'s reports, record files, …). Writers get their stream or file
from here — ``console``, ``new_console``, ``write_report``, ``write_status``, ``open_lines``,
``relay`` — and nothing else in peach writes to stdout, stderr or a report file (``tests/test_structure.py`` checks it;
``tests/test_boundary.py`` plants a secret and escape sequences in every channel, and fails
when a channel is registered without a probe).

    hide(["hunter2-secret"])
    shown("GET /x?k=hunter2-secret\\x1b[2J")   # 'GET /x?k=***\\\\x1b[2J'
    console("stdout").print(...)               # a Rich console whose every write is masked

Standard library only (Rich is imported lazily, for ``console``).
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from peach_cli.printable import printable, printable_lines

if TYPE_CHECKING:
    from rich.console import Console

MASK = "***"
MIN_SECRET = 4
"""Values (and lines of a multi-line value) shorter than this are not masked: ``***`` in
place of every ``a`` would make output unreadable and hide nothing."""

CHANNELS: dict[str, str] = {
    "terminal": "errors, hints, summaries and command output on stdout and stderr",
    "live-view": "peach dev's live table: replica rows, their last error, A/B shares",
    "log-lines": "peach dev's and peach task run's log lines: requests, replica prints, reasons",
    "pdb": "debugger banners and post-mortem headers",
    "test-text": "peach test's text report",
    "test-json": "peach test --format json",
    "test-junit": "peach test --format junit",
    "pytest-plugin": "the pytest plugin's failure reports",
    "record": "peach dev --record files",
    "replay": "peach replay's report",
    "bench": "peach bench's report",
    "fuzz": "peach fuzz's findings and ready cases (text and JSON)",
    "profile": "peach profile's report, its flame graph and speedscope files",
    "validate": "peach validate's findings (text and JSON)",
    "deploy-dry-run": "peach deploy --dry-run's config and file list",
    "openapi": "peach openapi's document (JSON and YAML)",
    "cluster-logs": "peach logs and peach status",
}
"""Every channel peach writes to. A new one is registered here, and gets a probe in
``tests/test_boundary.py`` (the test fails until it has one)."""


def channel_of(name: str) -> str:
    """``name`` if it is a registered channel; a ``KeyError`` otherwise (a writer for a new
    channel fails until the channel is registered, and then until it has a probe)."""
    if name not in CHANNELS:
        raise KeyError(f"{name!r} is not a registered output channel (peach_cli.boundary)")
    return name


# -- secrets -------------------------------------------------------------------------------

_hidden: set[str] = set()
_forms: list[str] = []


def hide(values: Iterable[str]) -> None:
    """Mask ``values`` in everything this process shows or writes from now on."""
    added = {value for value in values if value and value not in _hidden}
    if added:
        _hidden.update(added)
        _forms[:] = forms_of(_hidden)


def forms_of(values: Iterable[str]) -> list[str]:
    """Every text to mask for ``values``, the longest first: each value and each line of
    4+ characters of a multi-line one, as is, JSON-escaped, percent-encoded and base64.

    >>> "line-two" in forms_of(["ab", "line-one\\nline-two"])
    True
    >>> forms_of(["ab"])
    []
    """
    pieces: set[str] = set()
    for value in values:
        if len(value) >= MIN_SECRET:
            pieces.add(value)
        for line in value.splitlines():
            line = line.strip()
            if len(line) >= MIN_SECRET:
                pieces.add(line)
    found: set[str] = set()
    for piece in pieces:
        found.update(_encodings(piece))
    return sorted((form for form in found if len(form) >= MIN_SECRET), key=len, reverse=True)


def _encodings(value: str) -> list[str]:
    encoded = base64.b64encode(value.encode()).decode()
    return [
        value,
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        quote(value, safe=""),
        quote(value),
        encoded,
        encoded.rstrip("="),
    ]


def mask(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with every secret value (default: those hidden) replaced by ``***``."""
    forms = _forms if secrets is None else forms_of(secrets)
    for form in forms:
        if form in text:
            text = text.replace(form, MASK)
    return text


def mask_value(value: Any, secrets: Iterable[str] | None = None) -> Any:
    """A JSON-like value with every secret in its strings (keys too) replaced by ``***``."""
    forms = _forms if secrets is None else forms_of(secrets)
    if not forms:
        return value
    return _masked_value(value, forms)


def _masked_value(value: Any, forms: list[str]) -> Any:
    if isinstance(value, str):
        for form in forms:
            if form in value:
                value = value.replace(form, MASK)
        return value
    if isinstance(value, dict):
        return {_masked_value(k, forms): _masked_value(v, forms) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked_value(v, forms) for v in value]
    return value


# -- text for a channel ---------------------------------------------------------------------


def shown(text: object) -> str:
    """``text`` as one line of output: secrets masked, every control character escaped
    (line breaks too). What every view does to a value from data."""
    masked = mask(str(text))  # first: a secret holding a control character is masked whole
    return printable(masked)


def shown_lines(text: object) -> str:
    """``text`` as lines of output (a traceback, a user's print): secrets masked, control
    characters escaped except line breaks and tabs."""
    masked = mask(str(text))  # first: a secret holding a control character is masked whole
    return printable_lines(masked)


def shown_value(value: Any) -> Any:
    """A JSON-like value for machine output: secrets masked in its strings, and the control
    characters JSON leaves raw (``\\x7f``–``\\x9f``, ``\\u2028``) escaped."""
    return _escaped_value(mask_value(value))


_RAW_IN_JSON = re.compile(r"[\x7f-\x9f\u2028\u2029]")


def _json_escape(match: re.Match[str]) -> str:
    """A character JSON leaves raw, as its JSON escape (read back, the same character)."""
    return f"\\u{ord(match.group()):04x}"


def _escaped_value(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value) if _RAW_IN_JSON.search(value) else value
    if isinstance(value, dict):
        return {_escaped_value(k): _escaped_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped_value(v) for v in value]
    return value


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON for a channel (``shown_value`` first)."""
    return json.dumps(shown_value(value), indent=indent, ensure_ascii=False)


# -- writers --------------------------------------------------------------------------------


class MaskedStream:
    """A text stream whose every write is masked: the last line of defence under a Rich
    console, for text a view forgot to pass through ``shown`` (a multi-line value is masked
    line by line, so a value split across writes at a line break is still caught)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if _forms:
            text = mask(text)
        return self._stream.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, flush, …
        return getattr(self._stream, name)


def stream(which: Literal["stdout", "stderr"]) -> MaskedStream:
    """peach's standard output or error as a masked stream (``sys.stdout`` as it is now, so
    that a redirection made by a test or by ``contextlib.redirect_stdout`` is honoured)."""
    return MaskedStream(sys.stdout if which == "stdout" else sys.stderr)


def write_report(text: str, *, channel: str, to: Literal["stdout", "stderr"] = "stdout") -> None:
    """Write a report a view composed for ``channel`` (JSON, XML, YAML, a table): secrets
    masked; its data was escaped when the report was made, its layout (line breaks) kept."""
    channel_of(channel)
    out = stream(to)
    out.write(text)
    out.flush()


def write_status(text: str) -> None:
    """A transient status line on stderr (``\\r`` and erase-line are the view's own)."""
    out = stream("stderr")
    out.write(text)
    out.flush()


@lru_cache(maxsize=2)
def console(which: Literal["stdout", "stderr"] = "stdout") -> Console:
    """The Rich console for stdout or stderr: its every write is masked."""
    from rich.console import Console

    return Console(file=_SysStream(which), highlight=False)  # type: ignore[arg-type]


class _SysStream(MaskedStream):
    """``sys.stdout``/``sys.stderr`` looked up at each write (Rich's console is cached; a
    test's ``capsys`` or a redirection replaces ``sys.stdout`` later)."""

    def __init__(self, which: Literal["stdout", "stderr"]) -> None:
        self._which = which

    @property
    def _stream(self) -> IO[str]:  # type: ignore[override]
        return sys.stdout if self._which == "stdout" else sys.stderr


def new_console(channel: str, file: IO[str] | None = None, **options: Any) -> Console:
    """A Rich console of a view's own for ``channel`` (a width, a file), on a masked
    stream."""
    from rich.console import Console

    channel_of(channel)
    target = MaskedStream(file) if file is not None else _SysStream("stdout")
    return Console(file=target, **options)  # type: ignore[arg-type]


class LinesFile:
    """A file of JSON lines (``peach dev --record``): every value masked, and the control
    characters JSON leaves raw written as JSON escapes (``\\u0085``, ``\\u2028``), so a
    line read back is the same value; a batch in one write."""

    def __init__(self, path: Path, channel: str) -> None:
        self.path = path
        self.channel = channel_of(channel)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, values: Iterable[Any]) -> None:
        """Append one line per value (a value JSON cannot encode is left out)."""
        lines = []
        for value in values:
            try:
                text = json.dumps(mask_value(value), ensure_ascii=False, separators=(",", ":"))
                lines.append(_RAW_IN_JSON.sub(_json_escape, text))
            except (ValueError, TypeError):
                continue
        if lines:
            self._file.write("\n".join(lines) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def write_file(path: Path, text: str, *, channel: str) -> None:
    """Write ``text`` (a report a view composed: SVG, JSON) to ``path``, secrets masked."""
    channel_of(channel)
    path.write_text(mask(text), encoding="utf-8")


def open_lines(path: Path, *, channel: str) -> LinesFile:
    """A JSON-lines file for ``channel``, opened for appending, through the boundary."""
    return LinesFile(path, channel)


# -- Rich markup ----------------------------------------------------------------------------


def markup(text: object) -> str:
    """``text`` from data for a Rich markup string: ``shown`` (masked, one line) with its
    ``[`` escaped, so a value cannot style the output or hide in it."""
    from rich.markup import escape

    return escape(shown(text))


def markup_lines(text: object) -> str:
    """``markup`` keeping line breaks and tabs (a traceback, a multi-line message)."""
    from rich.markup import escape

    return escape(shown_lines(text))


# -- a terminal handed over ------------------------------------------------------------------


def relay(data: bytes, *, fd: int | None = None) -> None:
    """Bytes of an interactive session (pdb's transcript) written to the terminal as they
    come, secrets masked (the session's own control sequences kept: it is the terminal's)."""
    if _forms:
        text = data.decode("utf-8", "surrogateescape")
        masked = mask(text)
        if masked != text:
            data = masked.encode("utf-8", "surrogateescape")
    sys.stdout.flush()
    os.write(sys.stdout.fileno() if fd is None else fd, data)
