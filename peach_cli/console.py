"""The one module that owns terminal output (Rich): errors, diagnostics, tables.

Everything else returns data or raises; this module decides how it looks. ``NO_COLOR`` is
honoured by Rich itself.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from peach_cli.errors import PeachError


@lru_cache(maxsize=1)
def stdout() -> Console:
    from rich.console import Console

    return Console(highlight=False)


@lru_cache(maxsize=1)
def stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def print_error(error: PeachError) -> None:
    """Render a PeachError as one line (and a hint) on stderr."""
    from rich.markup import escape

    stderr().print(f"[bold red]error:[/] {escape(error.message)}")
    if error.hint:
        stderr().print(f"[dim]hint:[/] {escape(error.hint)}")
