"""Keys typed in ``peach dev``'s terminal: one key, one action, no Enter needed.

``DevKeys.open`` puts the terminal on standard input in cbreak mode (keys arrive one by
one, not echoed; Ctrl-C still interrupts) and calls the action bound to each key typed, on
the running event loop. It does nothing when standard input is not a terminal (a pipe, CI,
``< /dev/null``), when ``peach dev`` runs in the background of its terminal, or when the
platform has no ``termios``. ``close`` gives the terminal back as it
was::

    keys = DevKeys.open({"i": rerun_init})
    ...
    if keys is not None:
        keys.close()
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any


class DevKeys:
    """Reads single keys from a terminal and runs the action bound to each."""

    def __init__(self, fd: int, actions: dict[str, Callable[[], None]], saved: Any) -> None:
        self.fd = fd
        self.actions = actions
        self._saved = saved
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def open(cls, actions: dict[str, Callable[[], None]]) -> DevKeys | None:
        """Start reading keys from standard input, or None when it is not a terminal."""
        try:
            import termios
            import tty
        except ImportError:  # not POSIX
            return None
        try:
            fd = sys.stdin.fileno()
        except (AttributeError, OSError, ValueError):
            return None
        if not os.isatty(fd):
            return None
        try:  # in the background (`peach dev &`), touching the terminal would stop peach
            if os.tcgetpgrp(fd) != os.getpgrp():
                return None
        except OSError:
            return None
        try:
            saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
        except termios.error:
            return None
        keys = cls(fd, actions, saved)
        keys._loop = asyncio.get_running_loop()
        keys._loop.add_reader(fd, keys._on_input)
        return keys

    def _on_input(self) -> None:
        try:
            data = os.read(self.fd, 64)
        except OSError:
            data = b""
        if not data:  # the terminal went away
            self._stop_reading()
            return
        for key in data.decode(errors="ignore"):
            action = self.actions.get(key.lower())
            if action is not None:
                action()

    def pause(self) -> None:
        """Give the terminal back as it was, keys unread (a pdb session takes it)."""
        import termios

        if self._loop is not None:
            self._loop.remove_reader(self.fd)
        try:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
        except termios.error:
            pass

    def resume(self) -> None:
        """Read keys again after ``pause``."""
        import termios
        import tty

        try:
            tty.setcbreak(self.fd)
        except termios.error:
            return
        if self._loop is not None:
            self._loop.add_reader(self.fd, self._on_input)

    def _stop_reading(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.fd)
            self._loop = None

    def close(self) -> None:
        """Stop reading and give the terminal its settings back."""
        self._stop_reading()
        import termios

        try:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
        except termios.error:
            pass
