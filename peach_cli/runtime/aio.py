"""Running the simulator's event loop: uvloop when it is installed, asyncio otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh loop (uvloop if available).

    Example:
        >>> async def answer():
        ...     return 42
        >>> run(answer())
        42
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    if hasattr(asyncio, "Runner"):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return uvloop.run(main)  # pragma: no cover - Python 3.10
