"""Small pieces of the wording every command shares.

>>> count(1, "error"), count(3, "chunk")
('1 error', '3 chunks')
"""

from __future__ import annotations


def count(number: int, word: str) -> str:
    """``number`` and ``word``, with an ``s`` unless there is exactly one."""
    return f"{number} {word}{'' if number == 1 else 's'}"


def human_size(size: float | None) -> str:
    """A size in bytes as every command shows one (powers of 1024, as ``memory: 512Mi``).

    >>> human_size(5), human_size(1536), human_size(600 * 1024**2), human_size(3 * 1024**3 // 2)
    ('5 B', '1.5 KiB', '600.0 MiB', '1.5 GiB')
    >>> human_size(None)
    '-'
    """
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
