"""Small pieces of the wording every command shares.

>>> count(1, "error"), count(3, "chunk")
('1 error', '3 chunks')
"""

from __future__ import annotations


def count(number: int, word: str) -> str:
    """``number`` and ``word``, with an ``s`` unless there is exactly one."""
    return f"{number} {word}{'' if number == 1 else 's'}"
