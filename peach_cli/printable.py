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
