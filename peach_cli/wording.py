"""Small pieces of the wording every command shares.

>>> count(1, "error"), count(3, "chunk")
('1 error', '3 chunks')
"""

from __future__ import annotations


def count(number: int, word: str) -> str:
    """``number`` and ``word``, with an ``s`` unless there is exactly one."""
    return f"{number} {word}{'' if number == 1 else 's'}"


def human_size(size: int | None) -> str:
    """``12.3 MB``-style sizes (powers of 1000, as ``du --si``)."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"
