"""Text from outside (request paths, headers, user output) made safe to print on one line.

A client must never forge a log line (a ``\\n`` in a path) or drive the terminal (an
``\\x1b[`` escape sequence): every line peach writes from request data goes through
``printable``, which writes control characters as Python escapes (``\\n``, ``\\x1b``).
Standard library only.

>>> printable("/x\\nGET /echo 200 FORGED\\x1b[41m")
'/x\\\\nGET /echo 200 FORGED\\\\x1b[41m'
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

Data = TypeVar("Data")

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_IN_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character (line breaks too) escaped: one line."""
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


def printable_lines(text: str) -> str:
    """``text`` with control characters escaped except line breaks and tabs (a traceback
    keeps its lines; no escape sequence, carriage return or backspace gets through)."""
    return _CONTROL_IN_LINES.sub(_escape, text) if _CONTROL_IN_LINES.search(text) else text


_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    r"""``text`` with each lone surrogate (no character: it cannot be encoded, printed or
    sent) written as its escape, ``\udcff``.

    >>> escape_surrogates("a\udcffb"), escape_surrogates("\U0001f600")
    ('a\\udcffb', '😀')
    """
    return _SURROGATE.sub(_escape, text) if _SURROGATE.search(text) else text


def has_surrogate(value: object) -> bool:
    r"""Whether JSON-like data holds a lone surrogate in a string (keys too); no recursion.

    >>> has_surrogate({"a": ["b", {"c\udcff": 1}]}), has_surrogate({"a": "b"})
    (True, False)
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def without_surrogates(value: Data) -> Data:
    r"""JSON-like data with ``escape_surrogates`` applied to its strings (keys too); the
    same object when it holds none.

    >>> without_surrogates({"doc": "x\udcff", "n": [1, "y"]})
    {'doc': 'x\\udcff', 'n': [1, 'y']}
    """
    if not has_surrogate(value):
        return value
    cleaned: Data = _cleaned(value)
    return cleaned


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return escape_surrogates(value)
    if isinstance(value, dict):
        return {_cleaned(k): _cleaned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cleaned(v) for v in value]
    return value
