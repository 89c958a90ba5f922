"""The bounds on a payload (SPEC §6): at most 10 MiB, JSON nested at most 100 levels.

One place for every way a payload reaches peach — a request body, ``--payload @FILE``,
``peach ask KEY=@FILE``, a trigger on the scheduler's socket — so each refuses the same
input with the same words, and none holds an unbounded read or recurses without bound::

    value = loads_bounded(read_bounded(path), what="--payload @big.json")
    # PayloadError("--payload @big.json is over the limit of 10 MiB (10485760 bytes)")
    # PayloadError("... is JSON nested deeper than 100 levels")

Standard library only: the replica runtime imports it.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO

PAYLOAD_LIMIT = 10 * 1024 * 1024
"""Bytes a payload may have."""
MAX_DEPTH = 100
"""Levels of arrays and objects a payload may nest (``[[1]]`` nests 2)."""


class PayloadError(ValueError):
    """A payload over the size limit, nested too deeply, or not JSON."""


def nests_deeper(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON data has containers nested more than ``limit`` levels (no recursion).

    >>> nests_deeper([[1]], 2), nests_deeper([[1]], 1)
    (False, True)
    """
    if not isinstance(value, dict | list):
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def too_deep_message(what: str) -> str:
    return f"{what} is JSON nested deeper than {MAX_DEPTH} levels"


def too_large_message(what: str, limit: int = PAYLOAD_LIMIT) -> str:
    return f"{what} is over the limit of {limit // (1024 * 1024)} MiB ({limit} bytes)"


def check_depth(value: Any, what: str = "the payload") -> None:
    """Raise ``PayloadError`` when ``value`` nests deeper than ``MAX_DEPTH`` levels."""
    if nests_deeper(value, MAX_DEPTH):
        raise PayloadError(too_deep_message(what))


def loads_bounded(text: str | bytes, what: str = "the payload") -> Any:
    """``json.loads`` of a payload, refusing one over the size or the depth limit.

    Every failure is a ``PayloadError`` naming ``what``: never a ``RecursionError``.
    """
    if len(text) > PAYLOAD_LIMIT:
        raise PayloadError(too_large_message(what))
    try:
        value = json.loads(text)
    except RecursionError:
        raise PayloadError(too_deep_message(what)) from None
    except UnicodeDecodeError:
        raise PayloadError(f"{what} is not UTF-8 JSON") from None
    except ValueError as error:
        raise PayloadError(f"{what} is not JSON: {error}") from None
    check_depth(value, what)
    return value


def dumps_bounded(value: Any, what: str = "the payload") -> str:
    """``json.dumps`` of a payload, refusing one nested too deeply or too large."""
    check_depth(value, what)
    try:
        text = json.dumps(value, allow_nan=False)
    except RecursionError:  # pragma: no cover - check_depth ran first
        raise PayloadError(too_deep_message(what)) from None
    if len(text) > PAYLOAD_LIMIT:
        raise PayloadError(too_large_message(what))
    return text


def read_bounded(source: str | BinaryIO, what: str | None = None) -> bytes:
    """A file's bytes (a path, or an open binary file), reading at most the limit and one
    byte more: ``/dev/zero`` or a huge file is refused, never held whole.

    ``OSError`` when the file cannot be read; ``PayloadError`` when it is too large.
    """
    if isinstance(source, str):
        with open(source, "rb") as handle:
            data = handle.read(PAYLOAD_LIMIT + 1)
        name = what or source
    else:
        data = source.read(PAYLOAD_LIMIT + 1)
        name = what or "the input"
    if len(data) > PAYLOAD_LIMIT:
        raise PayloadError(too_large_message(name))
    return data
