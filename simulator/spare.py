"""Spare replica processes, started ahead of need so a reload skips the interpreter start-up.

A replica process (``python -m simulator.worker``) spends most of its start-up importing
Python and peach before it even reads which component to host. With hot reload on,
``peach dev`` keeps one such process waiting per project; ``Replica`` takes it instead of
spawning one, so a reload costs only the user's code and ``init``. The spare is replaced a
moment after it is taken, once the new replica has started.

    spares = keep_spares(root)      # after the first replicas are up
    await spares.fill()
    ...
    take_spare(root)                # (process, socket) or None: Replica._spawn uses it
    await release_spares(root)      # when the server stops

A spare that is never used exits with the server: its socket closes, and on Linux its
parent's death kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
from pathlib import Path

REFILL_DELAY_S = 0.5
"""How long after a spare is taken its replacement starts (not to slow the new replica)."""

Spare = tuple[asyncio.subprocess.Process, socket.socket]


async def spawn_worker(root: Path) -> Spare:
    """Start a replica process for ``root`` that waits for its component; raises OSError."""
    from simulator.replica import _worker_command, _worker_env

    parent_end, child_end = socket.socketpair()
    try:
        process = await asyncio.create_subprocess_exec(
            *_worker_command(),
            "--fd",
            str(child_end.fileno()),
            pass_fds=(child_end.fileno(),),
            cwd=str(root),
            env=_worker_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    except OSError:
        parent_end.close()
        raise
    finally:
        child_end.close()
    return process, parent_end


class SpareWorkers:
    """Keeps ``count`` idle replica processes ready for one project root."""

    def __init__(self, root: Path, *, count: int = 1) -> None:
        self.root = Path(root).resolve()
        self.count = count
        self._spares: list[Spare] = []
        self._filling: asyncio.Task[None] | None = None
        self._closed = False

    async def fill(self) -> None:
        """Start spares until ``count`` are waiting."""
        while not self._closed and len(self._live()) < self.count:
            try:
                spare = await spawn_worker(self.root)
            except OSError:
                return
            if self._closed:
                _discard(spare)
                return
            self._spares.append(spare)

    def _live(self) -> list[Spare]:
        live = [s for s in self._spares if s[0].returncode is None]
        for spare in self._spares:
            if spare[0].returncode is not None:
                spare[1].close()
        self._spares = live
        return live

    def take(self) -> Spare | None:
        """A waiting process, or None; a replacement starts after ``REFILL_DELAY_S``."""
        live = self._live()
        if not live or self._closed:
            return None
        spare = live.pop(0)
        self._spares = live
        if self._filling is None or self._filling.done():
            self._filling = asyncio.get_running_loop().create_task(self._refill())
        return spare

    async def _refill(self) -> None:
        await asyncio.sleep(REFILL_DELAY_S)
        await self.fill()

    async def close(self) -> None:
        """Stop every spare (closing its socket ends it)."""
        self._closed = True
        if self._filling is not None:
            self._filling.cancel()
            with contextlib.suppress(BaseException):
                await self._filling
        spares, self._spares = self._spares, []
        for spare in spares:
            _discard(spare)
        for process, _ in spares:
            try:
                await asyncio.wait_for(process.wait(), 3.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


def _discard(spare: Spare) -> None:
    process, sock = spare
    sock.close()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()


_kept: dict[Path, SpareWorkers] = {}


def keep_spares(root: Path, *, count: int = 1) -> SpareWorkers:
    """Keep spares for ``root`` from now on (call ``fill`` to start them)."""
    key = Path(root).resolve()
    spares = _kept.get(key)
    if spares is None or spares._closed:
        spares = _kept[key] = SpareWorkers(key, count=count)
    return spares


def take_spare(root: Path) -> Spare | None:
    """A waiting replica process for ``root``, if spares are kept for it."""
    spares = _kept.get(Path(root))
    if spares is None:
        spares = _kept.get(Path(root).resolve())
    return spares.take() if spares is not None else None


async def release_spares(root: Path) -> None:
    """Stop keeping spares for ``root`` and stop the waiting ones."""
    spares = _kept.pop(Path(root).resolve(), None)
    if spares is not None:
        await spares.close()


def spare_pids(root: Path) -> list[int]:
    """The pids of the waiting spares of ``root`` (for tests)."""
    spares = _kept.get(Path(root).resolve())
    return [p.pid for p, _ in spares._live()] if spares is not None else []


__all__ = [
    "SpareWorkers",
    "keep_spares",
    "release_spares",
    "spare_pids",
    "spawn_worker",
    "take_spare",
]
