"""Waiting in tests: poll a condition with a deadline, never sleep as synchronisation."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


def poll(
    check: Callable[[], T],
    what: str,
    timeout_s: float = 30.0,
    *,
    interval_s: float = 0.02,
    tolerate: tuple[type[BaseException], ...] = (httpx.HTTPError,),
) -> T:
    """Call ``check`` until it returns something truthy, and return that; an exception of
    ``tolerate`` (a server still starting, or restarting) counts as not yet. Fails with
    ``what`` and the last value after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value: Any = check()
        except tolerate:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        time.sleep(interval_s)


def wait_until(
    predicate: Callable[[], Any], timeout_s: float = 15.0, what: str = "condition"
) -> None:
    """``poll`` for a predicate, with nothing tolerated: its exceptions fail the test."""
    poll(predicate, what, timeout_s, tolerate=())


def assert_gone(pid: int, timeout_s: float = 10.0) -> None:
    """Wait until the process ``pid`` is dead (or a zombie waiting to be reaped)."""
    import psutil

    def gone() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    poll(gone, f"process {pid} to stop", timeout_s, tolerate=())
