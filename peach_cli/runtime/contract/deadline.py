"""``timeout_s`` of one call (SPEC §2): one loop timer, on every path and every host.

A ``Deadline`` calls ``expire`` when the call has run ``timeout_s`` seconds. The debugger
relay (``simulator.debug``) suspends it while the call sits at a breakpoint
(``reschedule(None)``) and lets the rest of it run afterwards (``reschedule(when)``), as
``asyncio.Timeout`` allows; ``cancel`` stops it for good when the call has answered.

A call awaited in a task is bounded by ``bounded``: the deadline cancels the task, and the
cancellation comes out as ``TimeoutError`` (as with ``asyncio.timeout``, without a second
mechanism). A call answered through a callback (the dev gateway's fast lane) gives its own
``expire``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class Deadline:
    """A call's ``timeout_s``: ``expire`` is called when it runs out (see the module).

    Once ended (cancelled or run out) it lets go of ``expire``: a caller that keeps its
    deadline (the fast lane's call, whose ``expire`` is its own method) makes no reference
    cycle, and is freed as soon as it is answered, not by the garbage collector."""

    __slots__ = ("timeout_s", "expired", "_loop", "_expire", "_when", "_timer")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, timeout_s: float, expire: Callable[[], object]
    ) -> None:
        self.timeout_s = timeout_s
        self.expired = False
        """It ran out (``expire`` was called)."""
        self._loop = loop
        self._expire: Callable[[], object] | None = expire
        """None once ended."""
        self._when: float | None = loop.time() + timeout_s
        self._timer: asyncio.TimerHandle | None = loop.call_at(self._when, self._run_out)

    def when(self) -> float | None:
        """The loop's time at which it runs out (None: suspended)."""
        return self._when

    def reschedule(self, when: float | None) -> None:
        """Run out at ``when`` instead (None: not until rescheduled). Nothing, once ended."""
        if self._expire is None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._when = when
        if when is not None:
            self._timer = self._loop.call_at(when, self._run_out)

    def cancel(self) -> None:
        """The call answered: the deadline ends without running out."""
        self._expire = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _run_out(self) -> None:
        expire = self._expire
        self._timer = self._expire = None
        if expire is not None:
            self.expired = True
            expire()


async def bounded(timeout_s: float, run: Callable[[Deadline], Awaitable[T]]) -> T:
    """``await run(deadline)`` in the current task, cancelled when ``deadline`` runs out:
    ``TimeoutError`` then (a cancellation from elsewhere stays one)."""
    task = asyncio.current_task()
    assert task is not None
    cancelling = task.cancelling()
    deadline = Deadline(asyncio.get_running_loop(), timeout_s, task.cancel)
    try:
        return await run(deadline)
    except asyncio.CancelledError:
        if deadline.expired and task.uncancel() <= cancelling:
            raise TimeoutError from None
        raise
    finally:
        deadline.cancel()
