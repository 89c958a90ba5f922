"""A lock file per env key, so two ``peach`` processes never build the same env at once;
and a second one that says an env is in use, so ``peach env prune`` never removes it then.

    with EnvLock(path, on_wait=lambda: print("waiting")):
        ...  # only one process (or thread) at a time gets here for ``path``

    use = InUse(path)       # held (shared) by every peach whose workers run in the env
    use.acquire(); ...; use.release()
    if not InUse.try_exclusive(path): ...   # someone uses it: keep it

``flock`` locks belong to the open file, so two threads of one process exclude each other
too, and the kernel releases the lock when its holder dies: a crashed build never leaves a
stale lock behind.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

POLL_S = 0.05


class LockTimeout(Exception):
    """The lock was still held by someone else after ``timeout_s``."""


def _try_lock(fd: int, *, shared: bool = False) -> bool:
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        if shared:  # msvcrt has no shared locks: an in-use mark is not kept there
            return True
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(fd: int) -> None:
    if sys.platform == "win32":  # pragma: no cover
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)


class EnvLock:
    """An exclusive (or ``shared``) lock on ``path`` (created if needed), waited for with a
    deadline."""

    def __init__(
        self,
        path: Path,
        *,
        timeout_s: float = 1800.0,
        on_wait: Callable[[], None] | None = None,
        cancel: threading.Event | None = None,
        shared: bool = False,
    ) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.on_wait = on_wait
        self.cancel = cancel
        self.shared = shared
        """Held with others that hold it shared (``InUse``), never with an exclusive one."""
        self._fd: int | None = None

    def acquire(self, *, blocking: bool = True) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout_s
        waited = False
        while not _try_lock(fd, shared=self.shared):
            if not blocking:
                os.close(fd)
                return False
            if not waited and self.on_wait is not None:
                self.on_wait()
            waited = True
            if self.cancel is not None and self.cancel.is_set():
                os.close(fd)
                from peach_cli.envs.uvrun import UvCancelled

                raise UvCancelled
            if time.monotonic() > deadline:
                os.close(fd)
                raise LockTimeout(f"{self.path} is still locked after {self.timeout_s:g} s")
            time.sleep(POLL_S)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                _unlock(fd)
            finally:
                os.close(fd)

    def __enter__(self) -> EnvLock:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


class InUse(EnvLock):
    """A shared lock on ``path``: any number of ``peach`` processes hold it while their
    workers run in one env (or staged runtime); ``peach env prune`` removes that env only
    while it holds the lock exclusively (``try_exclusive``), so never under a running one.
    The kernel drops the lock when its holder dies."""

    def __init__(self, path: Path, *, timeout_s: float = 60.0) -> None:
        super().__init__(path, timeout_s=timeout_s, shared=True)

    @staticmethod
    def try_exclusive(path: Path) -> EnvLock | None:
        """The lock held exclusively (nobody uses the env: release it when done), or None."""
        lock = EnvLock(path)
        return lock if lock.acquire(blocking=False) else None
