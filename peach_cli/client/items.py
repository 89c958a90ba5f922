"""What `peach ask` sends: TARGET, httpie's items, ``--json``, ``--get``, headers.

``build_request`` turns the command line into one ``AskRequest`` (method, absolute URL,
query, JSON body, headers, timeout); every mistake in it is a ``UsageError``::

    build_request("/assistant", ["query=hi", "size:=3"], stream=True)
    # AskRequest(method="POST", url="http://127.0.0.1:8000/assistant",
    #            params=(("query", "hi"),), body={"size": 3, "stream": True}, ...)

``prepare_request`` reads the same command line before the host is known (`peach profile`
reads it before it starts the project's simulator): a ``peach_cli.client.request.Prepared``,
which ``Prepared.at(base)`` turns into the ``AskRequest`` for the host's base URL once
there is one.

``KEY=VALUE`` travels in the query string, so the endpoint converts it to the parameter's
annotation exactly as it converts ``curl '/assistant?KEY=VALUE'``; only a value too long for
a URL (one that would take it past ``client.request.URL_LIMIT`` bytes) goes in the JSON body,
as a string: where each goes is decided by ``Prepared.at``, once the base URL is known.

Items are split exactly as httpie splits them (``split_item``); the forms peach does not send
(file uploads, ``Name;``, ``Name:@FILE``, ``KEY==@FILE``, nested keys) are refused by name.

Nothing here does I/O except reading ``--json @file`` and ``KEY=@FILE`` / ``KEY:=@FILE``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload
from urllib.parse import urlsplit

from peach_cli.client.request import DEFAULT_TIMEOUT_S, AskRequest, Prepared
from peach_cli.errors import UsageError
from peach_cli.internal import TOOL_HEADER
from peach_cli.runtime.jsonlimits import PayloadError, loads_bounded, read_bounded

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
USER_AGENT = "peach-ask"
"""Sent with the name of the peach tool that sends a request (``test``, ``replay``,
``bench``): ``peach dev --record`` records none of them (SPEC §8)."""
_HOST_PORT = re.compile(r"^(localhost|[\w.-]+:\d+)(/|\?|$)")


def resolve_url(target: str, base: str | None = None) -> str:
    """The absolute URL for TARGET: a full URL as is, a path joined to ``base``.

    ``base`` defaults to env ``PEACH_URL``, then ``http://127.0.0.1:8000``. A base with a
    path (a route prefix) keeps it: ``resolve_url("/a", "http://h/zzebu") == "http://h/zzebu/a"``.
    ``:9000/a`` is shorthand for ``http://127.0.0.1:9000/a``, and ``localhost:9000/a`` (a
    host and port without a scheme) means ``http://localhost:9000/a``.
    """
    url = absolute_url(target)
    if url is None:
        url = url_on_base(target, base)
        check_url(url, what="TARGET")
    return url


def absolute_url(target: str) -> str | None:
    """TARGET as a full URL, checked, when it names its host (as ``resolve_url`` reads
    it); None when it is a path, to be joined to a base."""
    if "://" in target:
        url = target
    elif target.startswith(":"):
        url = "http://127.0.0.1" + target
    elif _HOST_PORT.match(target):
        url = "http://" + target
    else:
        return None
    check_url(url, what="TARGET")
    return url


def url_on_base(path: str, base: str | None = None) -> str:
    """``path`` joined to ``base`` (default as ``resolve_url``'s), whatever ``path`` holds:
    the URL's host is always the base's."""
    base_url = (base or os.environ.get("PEACH_URL") or DEFAULT_BASE_URL).strip()
    if "://" not in base_url:
        base_url = "http://" + base_url
    check_url(base_url, what="--url" if base else "PEACH_URL")
    return base_url.rstrip("/") + "/" + path.lstrip("/")


def with_tool(request: AskRequest, tool: str) -> AskRequest:
    """``request`` marked as sent by peach's own ``tool`` (``TOOL_HEADER``)."""
    return dataclasses.replace(request, headers=(*request.headers, (TOOL_HEADER, tool)))


@overload
def base_url(url: str, *, what: str = ...) -> str: ...
@overload
def base_url(url: None, *, what: str = ...) -> None: ...
def base_url(url: str | None, *, what: str = "--url") -> str | None:
    """The base URL of ``url`` (``http://`` when it names no scheme), checked: ``UsageError``
    unless it is an http(s) URL with a host. None when no ``--url`` was given."""
    if url is None:
        return None
    base = url if "://" in url else "http://" + url
    check_url(base, what=what)
    return base


def check_url(url: str, *, what: str) -> None:
    """Raise UsageError unless ``url`` is an http(s) URL with a host."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as error:
        raise UsageError(f"{what}: {url!r} is not a valid URL ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"{what}: {url!r} is not an http:// or https:// URL",
            hint="give a path like /assistant, or a full URL like http://127.0.0.1:8000/assistant",
        )


@dataclass
class Items:
    """The httpie-style items of one command line, by where they go."""

    strings: list[tuple[str, str]] = field(default_factory=list)  # KEY=VALUE, in order
    fields: dict[str, Any] = field(default_factory=dict)  # KEY:=JSON
    query: list[tuple[str, str]] = field(default_factory=list)  # KEY==VALUE
    headers: list[tuple[str, str]] = field(default_factory=list)  # Name:Value ("" unsets)


@dataclass(frozen=True)
class Item:
    """One item split as httpie splits it: ``key``, ``sep``, ``value`` (escapes resolved)."""

    key: str
    sep: str
    value: str


SEPARATORS = (":", ";", ":@", "==", "==@", "=", ":=", "@", "=@", ":=@")
"""httpie's item separators, all of them: an item is split by the same rules as in httpie
(so `a@b=c` is a file upload there and refused here, never sent as a field ``a@b``)."""
SUPPORTED = {
    ":": "a header",
    "==": "a query parameter",
    "=": "a parameter",
    ":=": "a JSON body field",
    "=@": "a parameter read from a file",
    ":=@": "a JSON body field read from a file",
}
UNSUPPORTED = {
    ";": "an empty header (Name;)",
    ":@": "a header read from a file (Name:@FILE)",
    "==@": "a query parameter read from a file (KEY==@FILE)",
    "@": "a file upload (KEY@FILE: peach sends JSON, not multipart forms)",
}
_SPECIAL = frozenset("".join(SEPARATORS))
_ITEM_HINT = (
    'parameters as query=hello or n=3, raw JSON as tags:=\'["a","b"]\', query parameters '
    "as page==2, headers as Name:Value (X-Trace:7); escape a separator with \\ (a\\=b=c)"
)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)


def split_item(item: str) -> Item:
    r"""Split one item as httpie does; ``UsageError`` when it has no separator.

    The separator is the earliest of ``SEPARATORS`` in the item (the longest at the same
    place); a backslash before a separator character makes it part of the key or value (a
    backslash before any other character stays as it is)::

        split_item(r"baz\=bar=foo")   # Item(key="baz=bar", sep="=", value="foo")
        split_item("X-Trace:7")        # Item(key="X-Trace", sep=":", value="7")
    """
    tokens: list[str] = [""]
    escaped: set[int] = set()  # indexes of tokens that are one escaped character
    characters = iter(item)
    for char in characters:
        if char == "\\":
            following = next(characters, "")
            if following in _SPECIAL and following:
                escaped.add(len(tokens))
                tokens.extend([following, ""])
            else:
                tokens[-1] += "\\" + following
        else:
            tokens[-1] += char
    for index, token in enumerate(tokens):
        if index in escaped:
            continue
        found: dict[int, str] = {}
        for sep in sorted(SEPARATORS, key=len):  # a longer one at the same place wins
            position = token.find(sep)
            if position != -1:
                found[position] = sep
        if found:
            sep = found[min(found)]
            key, value = token.split(sep, 1)
            return Item("".join(tokens[:index]) + key, sep, value + "".join(tokens[index + 1 :]))
    raise UsageError(
        f"{item!r} is not KEY=VALUE, KEY:=JSON, KEY==VALUE or Name:Value", hint=_ITEM_HINT
    )


def parse_items(items: Sequence[str]) -> Items:
    """Split httpie-style items into strings, JSON fields, query parameters and headers.

    ``KEY=VALUE`` is a string parameter (repeat the key for a list, as in a query string),
    ``KEY:=JSON`` a raw JSON body field, ``KEY==VALUE`` a query parameter, ``Name:Value`` a
    header (``Name:`` leaves out a header peach would send), ``KEY=@FILE`` the file's text
    as a parameter, ``KEY:=@FILE`` the file's JSON as a body field. Between ``KEY=`` and
    ``KEY:=`` for the same key, the later item wins. httpie's other forms (file uploads,
    ``Name;``, ``Name:@FILE``, ``KEY==@FILE``) and its nested keys (``a[b]=c``) are refused,
    naming the item.
    """
    parsed = Items()
    for item in items:
        split = split_item(item)
        key, sep, value = split.key, split.sep, split.value
        if sep in UNSUPPORTED:
            raise UsageError(
                f"{item!r} is {UNSUPPORTED[sep]}, which peach ask does not send",
                hint=_ITEM_HINT,
            )
        if not key:
            raise UsageError(f"{item!r} has no name before {sep!r}", hint=_ITEM_HINT)
        if sep == ":":
            if not _HEADER_NAME.match(key):
                raise UsageError(f"{item!r}: {key!r} is not a header name", hint=_ITEM_HINT)
            parsed.headers.append((key, value.strip()))
            continue
        if sep != "==":
            key = _plain_key(item, key)
        if sep in ("=@", ":=@"):
            value = _read_item_file(item, value)
        if sep in (":=", ":=@"):
            try:
                parsed.fields[key] = loads_bounded(value, what=f"{item!r}: the value")
            except PayloadError as error:
                raise UsageError(str(error)) from None
            parsed.strings = [pair for pair in parsed.strings if pair[0] != key]
        elif sep == "==":
            parsed.query.append((key, value))
        else:
            parsed.strings.append((key, value))
            parsed.fields.pop(key, None)
    return parsed


def _plain_key(item: str, key: str) -> str:
    """A body or parameter key without httpie's nested-JSON syntax (``\\[`` is a ``[``)."""
    if re.search(r"(?<!\\)[\[\]]", key):
        raise UsageError(
            f"{item!r} uses a nested key (httpie's a[b]=c), which peach ask does not send",
            hint='send the whole value as JSON, like a:=\'{"b": "c"}\'; write \\[ for a [ in a name',
        )
    return key.replace("\\[", "[").replace("\\]", "]")


def _read_item_file(item: str, path: str) -> str:
    """The text of the file ``KEY=@FILE`` / ``KEY:=@FILE`` names (10 MiB at most)."""
    try:
        return read_bounded(os.path.expanduser(path), what=item).decode("utf-8")
    except PayloadError as error:
        raise UsageError(str(error)) from None
    except UnicodeDecodeError:
        raise UsageError(f"{item!r}: {path} is not UTF-8 text") from None
    except OSError as error:
        raise UsageError(f"{item!r}: cannot read {path} ({error.strerror or error})") from None


def load_json_body(source: str) -> Any:
    """``--json``: a JSON text, or ``@path`` to read it from a file (``@-`` for stdin).

    At most 10 MiB is read, and JSON nested deeper than 100 levels is refused (SPEC §6).
    """
    text: str | bytes = source
    if source.startswith("@"):
        path = source[1:]
        try:
            if path == "-":
                text = read_bounded(sys.stdin.buffer, what="--json @-")
            else:
                text = read_bounded(os.path.expanduser(path), what=f"--json {source}")
        except PayloadError as error:
            raise UsageError(str(error)) from None
        except OSError as error:
            raise UsageError(f"--json {source}: cannot read it ({error.strerror})") from None
    try:
        return loads_bounded(text, what="--json")
    except PayloadError as error:
        raise UsageError(str(error)) from None


def parse_headers(headers: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``-H NAME:VALUE`` options as (name, value) pairs."""
    pairs = []
    for header in headers:
        name, sep, value = header.partition(":")
        if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
            raise UsageError(f"-H {header!r}: expected NAME:VALUE, like -H 'X-Request-Id: 42'")
        pairs.append((name.strip(), value.strip()))
    return tuple(pairs)


def _truthy(value: Any) -> bool:
    """Whether a server reads ``stream=value`` as asking for a stream (SPEC §2)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return value is True or (type(value) is int and value == 1)


def build_request(
    target: str,
    items: Sequence[str] = (),
    *,
    base: str | None = None,
    stream: bool = False,
    get: bool = False,
    json_body: str | None = None,
    headers: Sequence[str] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> AskRequest:
    """Resolve TARGET (a path joined to ``base``), items, ``--json``, ``--get`` and
    ``--stream`` into one AskRequest, as ``prepare_request`` reads them."""
    _check_timeout(timeout_s)
    url = resolve_url(target, base)
    prepared = prepare_request(
        url,
        items,
        stream=stream,
        get=get,
        json_body=json_body,
        headers=headers,
        timeout_s=timeout_s,
    )
    return prepared.at(url)


def prepare_request(
    target: str,
    items: Sequence[str] = (),
    *,
    stream: bool = False,
    get: bool = False,
    json_body: str | None = None,
    headers: Sequence[str] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    tool: str | None = None,
) -> Prepared:
    """TARGET (a full URL, or a path for the host's base), items, ``--json``, ``--get`` and
    ``--stream`` read into one ``Prepared`` request, before its host is known (sent as
    peach's own ``tool``'s, when given).

    ``Name:Value`` items and ``-H`` are headers; ``KEY=VALUE`` and ``KEY==VALUE`` go in the query string (a ``KEY=VALUE`` too long for
    the URL goes in the body); ``KEY:=JSON`` and ``--json`` travel as a JSON object body
    (POST). With ``--get`` everything goes in the query string (GET); with nothing for a
    body, the request is a GET. ``--stream`` adds ``stream=true``; a truthy ``stream``
    among the parameters (``stream==true``) asks for the stream too.
    """
    _check_timeout(timeout_s)
    url = absolute_url(target)
    parsed = parse_items(items)
    fields, query, strings = parsed.fields, parsed.query, parsed.strings
    body: dict[str, Any] | None = None
    if json_body is not None:
        if get:
            raise UsageError("--json sends a body; it cannot be combined with --get")
        loaded = load_json_body(json_body)
        if not isinstance(loaded, dict):
            raise UsageError(
                f"--json must be a JSON object (the endpoint's parameters), not {type(loaded).__name__}"
            )
        # Items win over --json: a KEY=VALUE in the query must not lose to the body's KEY.
        body = {k: v for k, v in loaded.items() if k not in dict(strings)} | fields
    elif fields and not get:
        body = dict(fields)
    sent = [v for k, v in [*query, *strings] if k == "stream"] + [
        source["stream"] for source in (fields, body or {}) if "stream" in source
    ]
    stream = stream or any(_truthy(value) for value in sent)  # `stream==true` means --stream
    if stream:
        strings = [(key, text) for key, text in strings if key != "stream"]
        if body is None and not get:
            body = {}
        if body is not None:
            body["stream"] = True
    # The item `Name:` (an empty value) leaves the header out, as in httpie.
    extra = tuple((n, v) for n, v in parsed.headers if v) + parse_headers(headers)
    names = {name.lower() for name, _ in (*parsed.headers, *extra)}
    defaults = [("User-Agent", USER_AGENT)]
    if stream:
        # A compressed stream arrives in bursts: ask for the bytes as they are.
        defaults.append(("Accept-Encoding", "identity"))
    merged = tuple((n, v) for n, v in defaults if n.lower() not in names) + extra
    return Prepared(
        target=url or target,
        absolute=url is not None,
        query=tuple(query),
        strings=tuple(strings),
        fields=fields if get else {},
        body=body,
        headers=merged + (((TOOL_HEADER, tool),) if tool is not None else ()),
        timeout_s=timeout_s,
        stream=stream,
        get=get,
    )


def _check_timeout(timeout_s: float) -> None:
    if timeout_s <= 0:
        raise UsageError(f"--timeout must be more than 0 seconds, not {timeout_s:g}")
