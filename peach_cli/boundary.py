"""The one output boundary (SPEC §6): everything peach shows or writes passes here.

Two rules hold for every channel, whatever it renders:

- **Secret values are masked.** Every value a run learns is secret (``Secrets.hide``: a
  component's or a task's secrets, a deployment's, the project's `.env` values it declares)
  is replaced by ``***`` in that run's output, as is and in every form a client or a
  server writes text in (``Masker``: JSON-escaped
  once or more, percent-encoded in either case or with ``+``, base64 at any alignment and
  URL-safe). A multi-line value is masked as one value: wherever any of its lines of 4 or
  more characters appears, alone or inside another line, it is masked.
- **Control characters from data are escaped.** A path, a header, a method name, a notebook
  path or a user's print holding ``\\x1b`` or a line break is written as ``\\x1b`` / ``\\n``:
  no client, notebook or file name can forge a line or drive the terminal.

A run (one `peach` command, a `peach dev` session, the pytest plugin's session) makes one
``Output``: it holds the run's ``Secrets`` and is handed to whatever writes, so a secret one
run learns is never another run's, even in one process. A channel is a place output goes to
(``CHANNELS``: the terminal, the live view, log lines, pdb banners, ``peach test``'s
reports, record files, …). Writers get their stream or file from the run's ``Output`` —
``stdout``, ``stderr``, ``new_console``, ``write_report``, ``write_status``, ``write_file``,
``open_lines``, ``relay`` — and nothing else in peach writes to stdout, stderr or a report
file; Python's logging comes there too (``Output.logging``, while the run lasts).
``shown`` and its kin escape; the output masks (its consoles each text before layout).
``tests/test_structure.py`` checks it; ``tests/test_boundary.py`` plants a secret in each of
its forms and escape sequences in every channel, and fails when a channel is registered
without a probe; ``tests/test_run_secrets.py`` checks that runs share none.

    out = Output()                              # where a run starts: its secrets, its writers
    out.secrets.hide(["hunter2-secret"])        # what the run learns is secret
    out.stdout.print(f"GET {markup(path)}")     # masked before layout, escaped: GET /x?k=***
    out.write_report(json_text(data), channel="test-json")

Standard library only (Rich is imported lazily, for the consoles).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

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
    "openapi-served": "GET /_peach/openapi.json on peach dev and on the deployed app",
    "ask-stream": "peach ask --stream on a terminal (piped, the bytes stay as sent)",
    "python-logging": "Python's logging: uvicorn's, peach's and libraries' loggers",
    "defect": "an exception peach did not expect: one line and where to report it",
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

MIN_BASE64 = 6
"""A base64 form not at the encoding's start (the secret after other bytes, as in
``base64("user:" + secret)``) is masked from this many characters on: 4 or 5 base64
characters turn up by chance in any long text."""


class Secrets:
    """The secret values one run masks in everything it shows or writes: made where the run
    starts (``Output``), handed to what learns a value (the project's loading, a replica
    pool, a task run, a deploy), read by every writer of the run's ``Output``. Another run
    in the same process has its own: nothing is shared.

    A value hidden under a ``source`` (a component's pool, a task) replaces what that
    source hid two versions before: the values of the version serving and of the one whose
    replicas may still be finishing requests are masked, so a `peach dev` session that
    reloads a thousand times holds two versions' secrets, not a thousand.

    >>> secrets = Secrets()
    >>> secrets.hide(["hunter2-secret"])
    >>> secrets.mask("k=hunter2-secret")
    'k=***'
    >>> Secrets().mask("k=hunter2-secret")
    'k=hunter2-secret'
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._sources: dict[str | None, frozenset[str]] = {}
        self._previous: dict[str, frozenset[str]] = {}
        """Each source's values of the version before (its replicas may still answer)."""
        self._masker: Masker | None = None
        self._stale = False
        """Values were hidden since ``_masker`` was built."""
        self._lock = threading.Lock()
        self.hide(values)

    def hide(self, values: Iterable[str], *, source: str | None = None) -> None:
        """Mask ``values`` in everything this run shows or writes from now on; under
        ``source``, in place of the values that source hid the version before last."""
        values = frozenset(value for value in values if value)
        with self._lock:
            current = self._sources.get(source, frozenset())
            if source is None:
                values |= current
            if values == current:
                return
            if source is not None:
                self._previous[source] = current
            self._sources[source] = values
            self._stale = True

    @property
    def masker(self) -> Masker | None:
        """The masker of every value hidden (None: nothing to mask), built when it is first
        needed after a change: a reload that hides the values of many pools builds it once."""
        if self._stale:
            with self._lock:  # what is shown after ``hide`` returns waits for the new one
                if self._stale:
                    self._masker = masker_of(self.values)
                    self._stale = False
        return self._masker

    @property
    def values(self) -> frozenset[str]:
        """Every value hidden, from every source."""
        return frozenset().union(*self._sources.values(), *self._previous.values())

    def mask(self, text: str) -> str:
        """``text`` with every value hidden replaced by ``***``."""
        return text if self.masker is None else self.masker.sub(text)

    def mask_value(self, value: Any) -> Any:
        """A JSON-like value with every value hidden (keys too) replaced by ``***``."""
        return value if self.masker is None else _masked_value(value, self.masker)

    # Text for a report laid out outside a Rich console (YAML, XML, SVG, a cut column):
    # masked here, before the layout can wrap, entity-escape or cut a secret out of reach.

    def shown(self, text: object) -> str:
        """``shown(text)`` with these secrets masked first (one held whole even when it
        holds a control character)."""
        return printable(self.mask(str(text)))

    def shown_lines(self, text: object) -> str:
        """``shown_lines(text)`` with these secrets masked first."""
        return printable_lines(self.mask(str(text)))

    def shown_value(self, value: Any) -> Any:
        """``shown_value(value)`` with these secrets masked in its strings first."""
        return _escaped_value(self.mask_value(value))

    def json_text(self, value: Any, *, indent: int | None = 2) -> str:
        """``value`` as JSON for a channel (``shown_value`` first)."""
        return json.dumps(self.shown_value(value), indent=indent, ensure_ascii=False)


def pieces_of(values: Iterable[str]) -> list[str]:
    """What is masked of ``values``: each value and each line of 4+ characters of a
    multi-line one (stripped), the longest first.

    >>> pieces_of(["ab", "line-one\\nline-two"])
    ['line-one\\nline-two', 'line-one', 'line-two']
    >>> pieces_of(["ab"])
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
    return sorted(pieces, key=lambda piece: (-len(piece), piece))


class Masker:
    """Replaces every form of a set of secret values with ``***`` (``masker_of``).

    One regular expression matches every form (SPEC §10): as is; JSON-escaped once or more
    (``\\"``, ``\\\\\\"``, ``\\u00e9``); percent-encoded once or more, in either case,
    with ``+`` for a space (``quote``, ``quote_plus``); ``\\x1b``-escaped as peach shows
    control characters; base64, standard and URL-safe, at any of the three alignments (the
    characters that encode the secret's bytes alone, so a secret after other bytes is masked
    too), as is or in a URL. Text holding none of the secrets' *anchors* is left at once:
    each form keeps a run of characters no encoder changes (letters, digits, ``-._~``), so
    most lines cost a few substring searches, not a scan.
    """

    def __init__(self, pattern: re.Pattern[str], anchors: tuple[str, ...] | None) -> None:
        self.pattern = pattern
        self.anchors = anchors
        """None: a form without a run long enough to search for (every text is scanned)."""

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the secrets' forms are in ``text`` (start, end), left to right."""
        if self.anchors is not None and not any(anchor in text for anchor in self.anchors):
            return []
        return [match.span() for match in self.pattern.finditer(text)]

    def sub(self, text: str) -> str:
        """``text`` with every form of the secrets replaced by ``***``."""
        if self.anchors is None:
            return self.pattern.sub(MASK, text)
        for anchor in self.anchors:
            if anchor in text:
                return self.pattern.sub(MASK, text)
        return text


ANCHOR = 4
"""The shortest run of unchanged characters searched for before scanning a text."""


def masker_of(values: frozenset[str]) -> Masker | None:
    """The ``Masker`` of every piece of ``values`` (``None``: nothing to mask). A run's
    ``Secrets`` builds it once per change of its set, and keeps it: no cache of the
    process holds a run's values.

    >>> masker_of(frozenset(["p4ss word"])).sub("u=p4ss+word&v=p4ss%20word&w=p4ss")
    'u=***&v=***&w=p4ss'
    """
    alternatives: list[tuple[int, str]] = []
    anchors: set[str] | None = set()
    for piece in pieces_of(values):
        alternatives.append((len(piece), "".join(_char_pattern(c) for c in piece)))
        forms = _base64_forms(piece)
        alternatives.extend((len(form), _base64_pattern(form)) for form in forms)
        for text, unchanged in ((piece, _RUN_IN_TEXT), *((f, _RUN_IN_BASE64) for f in forms)):
            run = max(unchanged.findall(text), key=len, default="")
            if anchors is not None and len(run) >= ANCHOR:
                anchors.add(run)
            else:
                anchors = None
    if not alternatives:
        return None
    alternatives.sort(key=lambda item: -item[0])  # the longest form wins where two start
    pattern = re.compile("|".join(dict.fromkeys(source for _, source in alternatives)))
    if anchors is not None:  # one that holds another is found whenever the other is
        anchors = {a for a in anchors if not any(b != a and b in a for b in anchors)}
    return Masker(pattern, None if anchors is None else tuple(sorted(anchors)))


_RUN_IN_TEXT = re.compile(r"[A-Za-z0-9._~-]+")
_RUN_IN_BASE64 = re.compile(r"[A-Za-z0-9_-]+")
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
_SHORT_ESCAPES = {"\n": "n", "\r": "r", "\t": "t", "\b": "b", "\f": "f"}


def _char_pattern(char: str) -> str:
    """The ways ``char`` can be written in text that encodes a secret: as is, percent-encoded
    (once or more), JSON-escaped (once or more, the backslashes percent-encoded or not)."""
    if char in _PLAIN:  # no encoder changes it
        return re.escape(char)
    data = char.encode("utf-8", "surrogatepass")
    as_is = "(?:" + re.escape(char) + "|" + "".join(f"%(?:25)*(?i:{b:02x})" for b in data) + ")"
    ways = [as_is]
    if char in '"\\/':  # JSON escapes them (once per layer); "/" by some encoders
        ways.append(f"{_BACKSLASHES}{as_is}" if char != "\\" else _BACKSLASHES)
    code = ord(char)
    if code < 0x20 or code >= 0x7F:  # JSON's \u escapes (pairs above the BMP), peach's \x
        units = char.encode("utf-16-be", "surrogatepass")
        ways.append(
            "".join(
                f"{_BACKSLASHES}u(?i:{units[i : i + 2].hex()})" for i in range(0, len(units), 2)
            )
        )
        if char in _SHORT_ESCAPES:
            ways.append(_BACKSLASHES + _SHORT_ESCAPES[char])
        if code < 0x100:
            ways.append(f"{_BACKSLASHES}x(?i:{code:02x})")
    if char == " ":  # quote_plus's "+", itself percent-encoded by a second layer
        ways.append(r"\+|%(?:25)*(?i:2b)")
    return "(?:" + "|".join(ways) + ")"


_BACKSLASHES = r"(?:\\|%(?:25)*(?i:5c))+"
"""One backslash or more, as is or percent-encoded (JSON escaping applied again and again)."""


def _base64_forms(piece: str) -> list[str]:
    """The base64 characters that encode ``piece``'s bytes alone, at each alignment (0, 1
    or 2 bytes before it in the encoded data), standard and URL-safe; and the whole
    encoding of ``piece`` alone, padding included."""
    data = piece.encode("utf-8", "surrogatepass")
    whole = base64.b64encode(data).decode()
    forms = {whole}
    for before in range(3):
        encoded = base64.b64encode(b"\0" * before + data + b"\0\0").decode()
        first = -(-8 * before // 6)  # the first character whose six bits are all the piece's
        stable = encoded[first : 8 * (before + len(data)) // 6]
        if len(stable) >= (MIN_SECRET if before == 0 else MIN_BASE64):
            forms.add(stable)
    forms |= {form.replace("+", "-").replace("/", "_") for form in forms}
    return sorted(forms, key=len, reverse=True)


def _base64_pattern(form: str) -> str:
    """``form`` as it is, or in a URL (its ``+``, ``/`` and ``=`` percent-encoded)."""
    escaped = re.escape(form)
    for char, code in (("+", "2b"), ("/", "2f"), ("=", "3d")):
        escaped = escaped.replace(re.escape(char), f"(?:{re.escape(char)}|%(?:25)*(?i:{code}))")
    return escaped


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every form of ``secrets`` replaced by ``***`` (a run's own are masked by
    its ``Output``; this is for values known outside one, such as a dashboard's token)."""
    masker = masker_of(frozenset(secrets))
    return text if masker is None else masker.sub(text)


def mask_value(value: Any, secrets: Iterable[str]) -> Any:
    """A JSON-like value with every secret in its strings (keys too) replaced by ``***``."""
    masker = masker_of(frozenset(secrets))
    return value if masker is None else _masked_value(value, masker)


def _masked_value(value: Any, masker: Masker) -> Any:
    if isinstance(value, str):
        return masker.sub(value)
    if isinstance(value, dict):
        return {_masked_value(k, masker): _masked_value(v, masker) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked_value(v, masker) for v in value]
    return value


# -- text for a channel ---------------------------------------------------------------------


def shown(text: object) -> str:
    """``text`` as one line of output: every control character escaped (line breaks too).
    What every view does to a value from data; the run's ``Output`` masks its secrets when
    it writes (in their escaped forms too: ``\\x1b``, ``\\n``, ``\\u2028``)."""
    return printable(str(text))


def shown_lines(text: object) -> str:
    """``text`` as lines of output (a traceback, a user's print): control characters
    escaped except line breaks and tabs."""
    return printable_lines(str(text))


def shown_value(value: Any) -> Any:
    """A JSON-like value for machine output: the control characters JSON leaves raw
    (``\\x7f``–``\\x9f``, ``\\u2028``) escaped."""
    return _escaped_value(value)


_RAW_IN_JSON = re.compile(r"[\x7f-\x9f\u2028\u2029]")


def _json_escape(match: re.Match[str]) -> str:
    """A character JSON leaves raw, as its JSON escape (read back, the same character)."""
    return f"\\u{ord(match.group()):04x}"


def _escaped_value(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value) if _RAW_IN_JSON.search(value) else value
    if isinstance(value, dict):
        return {_escaped_value(k): _escaped_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped_value(v) for v in value]
    return value


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON for a channel (``shown_value`` first)."""
    return json.dumps(shown_value(value), indent=indent, ensure_ascii=False)


# -- writers --------------------------------------------------------------------------------


class MaskedStream:
    """A text stream whose every write is masked with a run's secrets: the last line of
    defence under a Rich console, for text a console could not mask before layout (a
    multi-line value is masked line by line, so a value split across writes at a line break
    is still caught)."""

    def __init__(self, stream: IO[str], secrets: Secrets) -> None:
        self._stream = stream
        self._secrets = secrets

    def write(self, text: str) -> int:
        return self._stream.write(self._secrets.mask(text))

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, flush, …
        return getattr(self._stream, name)


class _SysStream(MaskedStream):
    """``sys.stdout``/``sys.stderr`` looked up at each write (a test's ``capsys`` or a
    redirection replaces ``sys.stdout`` after the console was made)."""

    def __init__(self, which: Literal["stdout", "stderr"], secrets: Secrets) -> None:
        self._which = which
        self._secrets = secrets

    @property
    def _stream(self) -> IO[str]:  # type: ignore[override]
        return sys.stdout if self._which == "stdout" else sys.stderr


class Output:
    """Where one run's output goes, with the secrets it masks (``secrets``): made where the
    run starts (``peach_cli.cli.main`` for a command, a test for what it drives) and handed
    to what writes, which writes through it and nothing else. Two runs in one process have
    two outputs: a secret one run learns is masked in that run's output only.

    Every writer masks. The Rich consoles (``stdout``, ``stderr``, ``new_console``) mask
    each text before layout, so no wrap, column or ellipsis cuts a secret out of reach, and
    their stream masks again; reports, status lines, files, JSON lines, a relayed terminal
    and Python's logging (``logging``) are masked as they are written.
    """

    def __init__(self, secrets: Secrets | None = None) -> None:
        self.secrets = secrets if secrets is not None else Secrets()
        self._consoles: dict[str, Console] = {}

    @property
    def stdout(self) -> Console:
        """The Rich console on standard output."""
        return self.console("stdout")

    @property
    def stderr(self) -> Console:
        """The Rich console on standard error."""
        return self.console("stderr")

    def console(self, which: Literal["stdout", "stderr"] = "stdout") -> Console:
        """The run's Rich console on stdout or stderr (one each)."""
        found = self._consoles.get(which)
        if found is None:
            stream = _SysStream(which, self.secrets)
            found = self._consoles[which] = _masking_console(self.secrets, stream, highlight=False)
        return found

    def new_console(self, channel: str, file: IO[str] | None = None, **options: Any) -> Console:
        """A Rich console of a view's own for ``channel`` (a width, a file)."""
        channel_of(channel)
        target: MaskedStream = (
            _SysStream("stdout", self.secrets) if file is None else MaskedStream(file, self.secrets)
        )
        return _masking_console(self.secrets, target, **options)

    def stream(self, which: Literal["stdout", "stderr"]) -> MaskedStream:
        """Standard output or error as a masked stream (``sys.stdout`` as it is now, so a
        redirection made by a test or ``contextlib.redirect_stdout`` is honoured)."""
        return MaskedStream(sys.stdout if which == "stdout" else sys.stderr, self.secrets)

    def write_report(
        self, text: str, *, channel: str, to: Literal["stdout", "stderr"] = "stdout"
    ) -> None:
        """Write a report a view composed for ``channel`` (JSON, XML, YAML, a table): secrets
        masked; its data was escaped when the report was made, its layout kept."""
        channel_of(channel)
        out = self.stream(to)
        out.write(text)
        out.flush()

    def write_status(self, text: str) -> None:
        """A transient status line on stderr (``\\r`` and erase-line are the view's own)."""
        out = self.stream("stderr")
        out.write(text)
        out.flush()

    def write_file(self, path: Path, text: str, *, channel: str) -> None:
        """Write ``text`` (a report a view composed: SVG, JSON) to ``path``, secrets masked."""
        channel_of(channel)
        path.write_text(self.secrets.mask(text), encoding="utf-8")

    def open_lines(self, path: Path, *, channel: str) -> LinesFile:
        """A JSON-lines file for ``channel``, opened for appending, secrets masked."""
        return LinesFile(path, channel, self.secrets)

    def relay(self, data: bytes, *, fd: int | None = None) -> None:
        """``relay`` with this run's secrets."""
        relay(data, self.secrets, fd=fd)

    @contextlib.contextmanager
    def logging(self) -> Iterator[None]:
        """Python's logging through this output while the run lasts: the root logger gets a
        ``BoundaryHandler`` (in place of the interpreter's raw last resort), so uvicorn's and
        peach's loggers, which propagate to it, are masked and escaped; removed at the end."""
        handler = BoundaryHandler(self)
        root = logging.getLogger()
        root.addHandler(handler)
        try:
            yield
        finally:
            root.removeHandler(handler)


def relay(data: bytes, secrets: Secrets, *, fd: int | None = None) -> None:
    """Bytes of an interactive session (pdb's transcript) written to the terminal as they
    come, ``secrets`` masked (the session's own control sequences kept: it is the
    terminal's)."""
    if secrets.masker is not None:
        text = data.decode("utf-8", "surrogateescape")
        masked = secrets.mask(text)
        if masked != text:
            data = masked.encode("utf-8", "surrogateescape")
    sys.stdout.flush()
    os.write(sys.stdout.fileno() if fd is None else fd, data)


def _masking_console(secrets: Secrets, file: MaskedStream, **options: Any) -> Console:
    """A Rich console on ``file`` that masks ``secrets`` in every text before layout."""
    from rich.console import Console
    from rich.text import Text

    class MaskingConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Text:
            return masked_text(super().render_str(text, **kwargs), secrets)

        def render(self, renderable: Any, options: Any = None) -> Any:
            if isinstance(renderable, Text):
                renderable = masked_text(renderable, secrets)
            return super().render(renderable, options)

    return MaskingConsole(file=file, **options)  # type: ignore[arg-type]


def masked_text(text: Any, secrets: Secrets) -> Any:
    """A Rich ``Text`` with every form of ``secrets`` replaced by ``***`` (styled as the
    first character it replaces); the same ``Text`` when it holds none."""
    masker = secrets.masker
    found = [] if masker is None else masker.spans(text.plain)
    if not found:
        return text
    result = text.blank_copy()
    last = 0
    for start, end in found:
        if start > last:
            result.append_text(text[last:start])
        at = len(result)
        result.append(MASK)
        for span in text.spans:
            if span.start <= start < span.end:
                result.stylize(span.style, at, at + len(MASK))
        last = end
    if last < len(text):
        result.append_text(text[last:])
    return result


class LinesFile:
    """A file of JSON lines (``peach dev --record``): every value masked, and the control
    characters JSON leaves raw written as JSON escapes (``\\u0085``, ``\\u2028``), so a
    line read back is the same value; a batch in one write."""

    def __init__(self, path: Path, channel: str, secrets: Secrets) -> None:
        self.path = path
        self.channel = channel_of(channel)
        self._secrets = secrets
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, values: Iterable[Any]) -> None:
        """Append one line per value (a value JSON cannot encode is left out)."""
        lines = []
        for value in values:
            try:
                masked = self._secrets.mask_value(value)
                text = json.dumps(masked, ensure_ascii=False, separators=(",", ":"))
                lines.append(_RAW_IN_JSON.sub(_json_escape, text))
            except (ValueError, TypeError):
                continue
        if lines:
            self._file.write("\n".join(lines) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


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


# -- Python's logging ------------------------------------------------------------------------

CONTINUATION = "  | "
"""What starts each continuation line of a multi-line text from data in a log (an exception
message, a logged traceback): no line of it can pass for a line of peach's own, such as a
request line ``GET /admin 200 main …``. The replica runtime marks the text ending a user's
traceback with the same (``peach_cli.runtime.contract.results.CONTINUATION``)."""
LOG_LINE_MAX = 2000
"""A log record's message is cut past this many characters (a 70 KB header quoted in a
warning stays one readable line)."""


def continued(text: str) -> str:
    """``text``'s lines after the first, each marked with ``CONTINUATION``.

    >>> continued("RuntimeError: boom\\nGET /admin 200 main")
    'RuntimeError: boom\\n  | GET /admin 200 main'
    """
    return text.replace("\n", "\n" + CONTINUATION)


class BoundaryHandler(logging.Handler):
    """Python's logging (uvicorn's loggers, peach's own, any library's) on stderr through
    a run's ``Output``: a record is one masked line with its control characters escaped,
    cut at ``LOG_LINE_MAX`` characters; a traceback it carries follows as marked
    continuation lines, masked and escaped too."""

    def __init__(self, output: Output) -> None:
        super().__init__(logging.WARNING)
        self.output = output

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format
            message = f"{record.msg!r} {record.args!r}"
        line = shown(message)
        if len(line) > LOG_LINE_MAX:
            line = f"{line[:LOG_LINE_MAX]}… ({len(line) - LOG_LINE_MAX} more characters)"
        if record.levelno >= logging.WARNING:
            line = f"{record.levelname.lower()}: {line}"
        if record.exc_info and record.exc_info[1] is not None:
            import traceback

            details = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            line += "\n" + CONTINUATION + continued(shown_lines(details))
        try:
            out = self.output.stream("stderr")
            out.write(line + "\n")
            out.flush()
        except (OSError, ValueError):  # stderr closed: nothing left to tell
            pass
