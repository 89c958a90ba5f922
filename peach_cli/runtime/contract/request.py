"""Reading a request: its query string, its body up to the limit, and ``stream``.

Both hosts hand the raw pieces of an HTTP request to this module, so that a query string
or a body means the same thing under ``peach dev`` and on Ray.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from peach_cli.runtime.contract.errors import ContractError
from peach_cli.runtime.jsonlimits import MAX_DEPTH, PAYLOAD_LIMIT, nests_deeper

MAX_BODY_BYTES = PAYLOAD_LIMIT
MAX_BODY_DEPTH = MAX_DEPTH
"""How deeply a request's JSON body may nest; deeper is a 400 (it could not be passed on)."""
ALLOWED_METHODS = frozenset({"GET", "POST"})
_TRUTHY = frozenset({"true", "1", "yes", "y", "on"})
_FALSY = frozenset({"false", "0", "no", "n", "off", ""})


@dataclass
class RequestParams:
    """A request's parameters: query-string values (strings) and JSON body values."""

    query: dict[str, str | list[str]] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "body": self.body}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestParams:
        return cls(query=dict(data.get("query") or {}), body=dict(data.get("body") or {}))


_RAW_BYTE = re.compile(rb"[^\x21-\x7e]")


def parse_query_string(raw: bytes) -> list[tuple[str, str]]:
    r"""A raw query string as ``(key, value)`` pairs, in order, repeated keys kept.

    The one parser of both hosts. Percent-escapes and raw bytes outside printable ASCII
    (which some clients send unescaped) decode alike, as UTF-8, an invalid sequence
    becoming U+FFFD; ``+`` is a space; a key without ``=`` has the value ``""``.

    >>> parse_query_string(b"q=caf%C3%A9&q=caf\xc3\xa9&flag&a+b=1%2B1")
    [('q', 'café'), ('q', 'café'), ('flag', ''), ('a b', '1+1')]
    """
    if not raw:
        return []
    escaped = _RAW_BYTE.sub(lambda m: b"%%%02X" % m.group()[0], raw)
    return parse_qsl(
        escaped.decode("ascii"), keep_blank_values=True, encoding="utf-8", errors="replace"
    )


def is_truthy(value: Any) -> bool:
    """Whether a ``stream`` value asks for a stream: ``true``, ``1``, ``yes`` or JSON true.

    >>> [is_truthy(v) for v in ("true", "1", "yes", True, "false", 0, None)]
    [True, True, True, True, False, False, False]
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value == 1
    if isinstance(value, str):
        return value.strip().lower() in _TRUTHY
    if isinstance(value, list) and value:
        return is_truthy(value[-1])
    return False


def parse_request(
    http_method: str,
    query_items: Iterable[tuple[str, str]],
    body: bytes,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> tuple[RequestParams, bool]:
    """Turn an HTTP request into parameters and the stream decision.

    ``stream`` is taken out of both the query and the body (the body wins) before any
    ``args`` default could apply, and is never passed on.

    >>> params, stream = parse_request("POST", [("size", "3")], b'{"stream": "true", "q": "x"}')
    >>> (params.query, params.body, stream)
    ({'size': '3'}, {'q': 'x'}, True)
    """
    if http_method.upper() not in ALLOWED_METHODS:
        raise ContractError(
            "method_not_allowed", f"method {http_method.upper()} is not allowed: use GET or POST"
        )
    if len(body) > max_body_bytes:
        raise ContractError(
            "payload_too_large",
            f"the request body is {len(body)} bytes, over the limit of {max_body_bytes} bytes",
        )
    query: dict[str, str | list[str]] = {}
    for key, value in query_items:
        previous = query.get(key)
        if previous is None:
            query[key] = value
        elif isinstance(previous, list):
            previous.append(value)
        else:
            query[key] = [previous, value]
    payload: dict[str, Any] = {}
    if body.strip():
        try:
            decoded = json.loads(body)
        except UnicodeDecodeError:
            raise ContractError("bad_request", "the request body is not UTF-8 JSON") from None
        except ValueError as error:
            raise ContractError(
                "bad_request", f"the request body is not valid JSON: {error}"
            ) from None
        except RecursionError:
            raise ContractError("bad_request", "the request body is nested too deeply") from None
        if not isinstance(decoded, dict):
            raise ContractError(
                "bad_request",
                f"the request body must be a JSON object, not {_json_kind(decoded)}",
            )
        brackets = body.count(b"{") + body.count(b"[")  # a cheap bound on the depth
        if brackets > MAX_BODY_DEPTH and nests_deeper(decoded, MAX_BODY_DEPTH):
            raise ContractError(
                "bad_request", f"the request body is nested more than {MAX_BODY_DEPTH} levels deep"
            )
        if (b"\\u" in body or b"\xed" in body) and (found := lone_surrogate(decoded)):
            raise ContractError(
                "bad_request",
                f"the request body holds a lone surrogate ({found}), which is no character: "
                "JSON text must be valid Unicode",
            )
        payload = decoded
    stream = False
    if "stream" in query:
        stream = is_truthy(query.pop("stream"))
    if "stream" in payload:
        stream = is_truthy(payload.pop("stream"))
    return RequestParams(query=query, body=payload), stream


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(value: Any) -> str | None:
    r"""The first lone surrogate in the strings (keys too) of JSON data, as its escape and
    where it is, or None (no recursion: the data may be deep).

    >>> lone_surrogate({"word": "a\ud800b"}), lone_surrogate(["\U0001f600"])
    ('\\ud800 in "word"', None)
    """
    stack: list[tuple[Any, str | None]] = [(value, None)]
    while stack:
        item, key = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                where = "" if key is None else f" in {json.dumps(key[:40])}"  # ASCII
                return f"\\u{ord(found.group()):04x}{where}"
        elif isinstance(item, dict):
            for name, child in item.items():
                stack.append((name, None))
                stack.append((child, name if key is None else key))
        elif isinstance(item, list):
            stack.extend((child, key) for child in item)
    return None


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null"
