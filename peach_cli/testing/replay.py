"""`peach replay`: send recorded requests again and compare the answers (SPEC §8).

A recording is what ``peach dev --record FILE`` wrote (``simulator.record``): one JSON line
per request. Each request is sent, in order, to host A; its answer is compared with the
recorded one, or with host B's answer to the same request (``--against``)::

    entries = read_recording(Path("traffic.jsonl"))
    outcomes = replay(entries, url="http://cluster:8000/shop", ignore=["$.result.generated_at"])

A recorded request is a path and a query, never a host: every request goes to the ``--url``
base, and a file with a line whose url names a scheme, a host or a port (``http://…``,
``//host/…``, ``host:port/…``, ``:9000/…``) is refused at that line before anything is sent.
Every request carries ``x-peach-tool: replay`` (or ``bench``), so a recording server does not
record it again.

What is compared is the answer's ``status``, ``error_code``, ``component``, ``result`` (JSON
equality) and a stream's ``text``, as one JSON object; ``--ignore`` paths are removed from
it first (``$.result.generated_at``, ``$.result.items[*].score``, ``$.component``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, quote

from peach_cli.errors import UsageError
from peach_cli.printable import printable

if TYPE_CHECKING:
    from peach_cli.boundary import Secrets
    from peach_cli.client.send import Client
    from peach_cli.testing.outcome import Observed

Verdict = Literal["same", "differ", "failed"]
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}")
"""An HTTP method is a token (RFC 9110)."""
_PATH_SAFE = "/:@!$&'()*+,;=~%"
"""What a recorded path keeps as is; the rest (spaces, ``?``, ``#``, controls, non-ASCII) is
percent-encoded, so the path stays one path on the host replayed to."""
_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\[(\d+)\]|\[\*\]|\.\*|\['([^']*)'\]|\[\"([^\"]*)\"\]")
WILDCARD = object()


@dataclass(frozen=True)
class Entry:
    line: int
    data: dict[str, Any]

    @property
    def label(self) -> str:
        query = self.data.get("query") or ""
        return f"{self.data.get('method', 'GET')} {self.data.get('url', '/')}" + (
            f"?{query}" if query else ""
        )


@dataclass
class ReplayOutcome:
    entry: Entry
    verdict: Verdict
    expected: dict[str, Any] | None = None
    observed: dict[str, Any] | None = None
    error: str | None = None
    diff: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.entry.line,
            "request": self.entry.label,
            "outcome": self.verdict,
            "error": self.error,
            "diff": list(self.diff),
        }


def read_recording(path: Path) -> list[Entry]:
    """The recorded requests of ``path``; ``UsageError`` for a file that is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a recording (not UTF-8 text)") from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            raise UsageError(
                f"{path}:{number}: not a JSON line",
                hint="a recording is what peach dev --record writes",
            ) from None
        if isinstance(data, dict) and "not_recorded" in data and "url" not in data:
            continue  # the recorder fell behind here: a count, no request
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            raise UsageError(f"{path}:{number}: not a recorded request (no url)")
        _check_request(data, f"{path}:{number}")
        entries.append(Entry(number, data))
    if not entries:
        raise UsageError(f"{path} holds no recorded request")
    return entries


def _check_request(data: dict[str, Any], place: str) -> None:
    """Refuse a recorded request that names a host or is no HTTP request (at ``place``)."""
    url, method = data["url"], data.get("method")
    if not url.startswith("/") or url.startswith("//"):
        raise UsageError(
            f"{place}: url '{printable(url)}' names a host: a recorded request is a path and"
            " a query, sent only to --url (nothing was sent)",
            hint="write the path (like /greet) in the file and the host with --url",
        )
    if method is not None and (not isinstance(method, str) or not _METHOD.fullmatch(method)):
        raise UsageError(
            f"{place}: method '{printable(str(method))}' is not an HTTP method (nothing was sent)"
        )


def parse_path(path: str) -> list[Any]:
    """``$.result.items[*].score`` → ``["result", "items", WILDCARD, "score"]``."""
    text = path.strip()
    if not text.startswith("$"):
        raise UsageError(f"--ignore {path!r}: a JSONPath starts with $, like $.result.generated_at")
    steps: list[Any] = []
    index = 1
    while index < len(text):
        match = _STEP.match(text, index)
        if match is None:
            raise UsageError(f"--ignore {path!r}: cannot read it from {text[index:]!r}")
        name, number, quoted, double = match.groups()
        if name is not None:
            steps.append(name)
        elif number is not None:
            steps.append(int(number))
        elif quoted is not None or double is not None:
            steps.append(quoted if quoted is not None else double)
        else:
            steps.append(WILDCARD)
        index = match.end()
    if not steps:
        raise UsageError(f"--ignore {path!r}: it names the whole answer")
    return steps


def drop(value: Any, steps: list[Any]) -> None:
    """Remove what ``steps`` names from ``value`` (in place); a missing step is no error."""
    step, rest = steps[0], steps[1:]
    if isinstance(value, dict):
        keys = list(value) if step is WILDCARD else [step] if step in value else []
        for key in keys:
            if rest:
                drop(value[key], rest)
            else:
                del value[key]
    elif isinstance(value, list):
        if step is WILDCARD:
            indexes = list(range(len(value)))
        elif isinstance(step, int) and step < len(value):
            indexes = [step]
        else:
            indexes = []
        for position in reversed(indexes):
            if rest:
                drop(value[position], rest)
            else:
                del value[position]


def recorded_answer(data: dict[str, Any]) -> dict[str, Any]:
    """What is compared of a recorded answer."""
    answer: dict[str, Any] = {
        "status": data.get("status"),
        "error_code": (data.get("error") or {}).get("code")
        if isinstance(data.get("error"), dict)
        else None,
        "component": data.get("component"),
    }
    if "result" in data:
        answer["result"] = data["result"]
    if "text" in data:
        answer["text"] = data["text"]
    return answer


def observed_answer(observed: Observed) -> dict[str, Any]:
    """What is compared of an answer just received."""
    from peach_cli.testing.outcome import MISSING

    answer: dict[str, Any] = {
        "status": observed.status,
        "error_code": observed.error_code,
        "component": observed.component,
    }
    if observed.result is not MISSING:
        answer["result"] = observed.result
    text = observed.raw_text if observed.stream else observed.text
    if text is not None:
        answer["text"] = text
    return answer


def request_of(entry: Entry, base: str | None, timeout_s: float, tool: str = "replay") -> Any:
    """The ``AskRequest`` of a recorded request: its path on ``base``, marked as ``tool``'s.

    The query is the recorder's string, or (written by hand) an object or a list of pairs;
    without a method, a request with a body is a POST.
    """
    from peach_cli.client.items import TOOL_HEADER, AskRequest, url_on_base

    data = entry.data
    stream = bool(data.get("stream"))
    headers = [("User-Agent", f"peach-{tool}"), (TOOL_HEADER, tool)]
    if stream:
        headers.append(("Accept-Encoding", "identity"))
    body = data.get("body")
    return AskRequest(
        method=str(data.get("method") or ("POST" if body is not None else "GET")),
        url=url_on_base(quote(data["url"], safe=_PATH_SAFE), base),
        params=_query_pairs(data.get("query")),
        body=body if isinstance(body, dict) else None,
        headers=tuple(headers),
        timeout_s=timeout_s,
        stream=stream,
    )


def _query_pairs(query: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(query, dict):
        return tuple(
            (str(k), str(v))
            for k, values in query.items()
            for v in (values if isinstance(values, list) else [values])
        )
    if isinstance(query, list):
        return tuple(
            (str(pair[0]), str(pair[1]))
            for pair in query
            if isinstance(pair, list) and len(pair) == 2
        )
    return tuple(parse_qsl(str(query or ""), keep_blank_values=True))


def replay(
    entries: list[Entry],
    *,
    url: str | None,
    against: str | None = None,
    ignore: list[str] | None = None,
    timeout_s: float = 60.0,
    secrets: Secrets | None = None,
) -> list[ReplayOutcome]:
    """Send every entry to ``url`` (and ``against``) in order; compare each answer.
    ``ServerUnreachable`` when a host refuses a connection: the rest is not sent (every
    request would fail the same way). ``secrets``: masked in both answers before they are
    compared (a recording holds them as ``***``)."""
    from peach_cli.boundary import Secrets
    from peach_cli.client.send import Client
    from peach_cli.testing.outcome import json_diff, json_equal

    secrets = secrets if secrets is not None else Secrets()
    paths = [parse_path(p) for p in ignore or []]
    names = ("recorded", "replayed") if against is None else (url or "A", against)
    outcomes = []
    with Client(timeout_s) as client:
        for entry in entries:
            if "body_omitted" in entry.data or "omitted" in entry.data:
                why = entry.data.get("body_omitted_why") or "over 1 MiB"
                omitted = (
                    f"its body ({why}) was not recorded"
                    if "body_omitted" in entry.data
                    else str(entry.data["omitted"])
                )
                outcomes.append(ReplayOutcome(entry, "failed", error=omitted))
                continue
            first, error = _answer(client, entry, url, timeout_s)
            expected: dict[str, Any] | None
            if against is None:
                expected, observed = recorded_answer(entry.data), first
            else:
                expected = first
                observed, other_error = _answer(client, entry, against, timeout_s)
                error = error or other_error
            if error is not None or expected is None or observed is None:
                outcomes.append(ReplayOutcome(entry, "failed", error=error))
                continue
            # a recording holds secret values as ***: the answers are compared masked
            expected, observed = secrets.mask_value(expected), secrets.mask_value(observed)
            for steps in paths:
                drop(expected, steps)
                drop(observed, steps)
            if json_equal(expected, observed):
                outcomes.append(ReplayOutcome(entry, "same", expected, observed))
            else:
                diff = json_diff(expected, observed, names=names)
                outcomes.append(ReplayOutcome(entry, "differ", expected, observed, diff=diff))
    return outcomes


def _answer(
    client: Client, entry: Entry, base: str | None, timeout_s: float
) -> tuple[dict[str, Any] | None, str | None]:
    from peach_cli.testing.run import observe_request

    observed = observe_request(client, request_of(entry, base, timeout_s))
    if observed.refused:
        from peach_cli.client.send import ServerUnreachable

        raise ServerUnreachable(
            f"{observed.failure}: replay stopped at the recording's line {entry.line}, "
            "nothing more was sent",
            hint="start the server (`peach dev`), or give its address with --url",
        )
    if observed.failure is not None:
        return None, observed.failure
    return observed_answer(observed), None


def counts(outcomes: list[ReplayOutcome]) -> dict[str, int]:
    return {v: sum(o.verdict == v for o in outcomes) for v in ("same", "differ", "failed")}
