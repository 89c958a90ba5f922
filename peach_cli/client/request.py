"""A request on its way out: ``Prepared`` (what the command line asks for, before the host
it goes to is known) and ``AskRequest`` (the request sent to one base URL).

``peach_cli.client.items`` reads TARGET and the items into a ``Prepared`` — every file read,
every mistake a ``UsageError`` — and ``Prepared.at`` places it on a base URL, once the host
is known (`peach profile` reads its command line before it starts the project's
simulator, whose port is known only then)::

    prepared = prepare_request("/assistant", ["query=hi"])   # peach_cli.client.items
    prepared.at("http://127.0.0.1:8000")
    # AskRequest(method="GET", url="http://127.0.0.1:8000/assistant",
    #            params=(("query", "hi"),), ...)

Where a ``KEY=VALUE`` goes depends on that base: it travels in the query string while the
URL fits in ``URL_LIMIT`` bytes, else in the JSON body (``split_long_strings``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

DEFAULT_TIMEOUT_S = 60.0
URL_LIMIT = 2048  # bytes: KEY=VALUE items that would make the URL longer go in the body


@dataclass(frozen=True)
class AskRequest:
    """One fully resolved request: what `peach ask` will send."""

    method: str
    url: str
    params: tuple[tuple[str, str], ...] = ()
    body: dict[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    stream: bool = False


@dataclass(frozen=True)
class Prepared:
    """A request as the command line gives it, before its base URL is known: ``target`` a
    full URL (``absolute``) or a path joined to the base; ``query`` the ``KEY==VALUE``
    items, ``strings`` the ``KEY=VALUE`` ones, ``fields`` the ``KEY:=JSON`` ones when
    they go in the query string too (``get``), ``body`` the JSON body so far (None: no
    body yet), the headers to send, ``timeout_s`` and whether a stream is asked for."""

    target: str
    absolute: bool
    query: tuple[tuple[str, str], ...] = ()
    strings: tuple[tuple[str, str], ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    stream: bool = False
    get: bool = False

    def at(self, base: str) -> AskRequest:
        """The request sent to ``base`` (a checked base URL; a full-URL target keeps its
        own): its path joined to it, each ``KEY=VALUE`` in the query string while the URL
        fits, and a POST when there is a body."""
        url = self.target if self.absolute else base.rstrip("/") + "/" + self.target.lstrip("/")
        params = list(self.query)
        body = self.body
        if self.get:
            params += self.strings
            params += [
                (key, text) for key, value in self.fields.items() for text in _query_value(value)
            ]
            if self.stream:  # one stream=true, whatever the items said
                params = [(key, text) for key, text in params if key != "stream"]
                params.append(("stream", "true"))
        else:
            in_url, too_long = split_long_strings(url, self.query, self.strings)
            params += in_url
            if too_long:
                body = {**(body or {}), **too_long}
        return AskRequest(
            method="POST" if body is not None else "GET",
            url=url,
            params=tuple(params),
            body=body,
            headers=self.headers,
            timeout_s=self.timeout_s,
            stream=self.stream,
        )


def split_long_strings(
    url: str, query: Sequence[tuple[str, str]], strings: Sequence[tuple[str, str]]
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The ``KEY=VALUE`` items that fit in the URL, and the others as body fields.

    Keys are taken in command-line order; every value of a key stays in the query string
    while the URL, with the query so far, fits in ``URL_LIMIT`` bytes. A key that would
    pass it goes in the body, as a string (the last value, when it was repeated).
    """
    used = len(url) + sum(_encoded_length(key, value) for key, value in query)
    by_key: dict[str, list[str]] = {}
    for key, value in strings:
        by_key.setdefault(key, []).append(value)
    in_url: set[str] = set()
    body: dict[str, str] = {}
    for key, values in by_key.items():
        size = sum(_encoded_length(key, value) for value in values)
        if used + size <= URL_LIMIT:
            used += size
            in_url.add(key)
        else:
            body[key] = values[-1]
    return [(key, value) for key, value in strings if key in in_url], body


def _encoded_length(key: str, value: str) -> int:
    """Bytes ``&key=value`` takes in a URL, every reserved character percent-encoded."""
    return 2 + len(quote(key, safe="")) + len(quote(value, safe=""))


def _query_value(value: Any) -> list[str]:
    """A ``KEY:=JSON`` value as the query-string values ``--get`` sends."""
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, list):
        return [item for element in value for item in _query_value(element)]
    if value is None:
        return [""]
    if isinstance(value, str):
        return [value]
    if isinstance(value, int | float):
        return [json.dumps(value)]
    return [json.dumps(value, separators=(",", ":"))]


__all__ = ["DEFAULT_TIMEOUT_S", "URL_LIMIT", "AskRequest", "Prepared", "split_long_strings"]
