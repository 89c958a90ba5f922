"""Peach's side of the keeper (``peach_cli.runtime.keeper``): the one process that starts
every worker, so that a worker's whole tree dies with peach, even when peach is killed.

The keeper is peach's child and the *subreaper* of everything it starts: a daemon a replica
made with ``setsid`` stays below it, not init. When peach's end of its socket closes —
peach exited, or was killed with SIGKILL — the keeper kills every process below it and
exits. A session has one keeper (``simulator.spawn.Keeper``), started with its first worker and
told to go when the session stops. Linux only: elsewhere
workers are peach's own children and what they orphan may outlive it (best effort).

    channel = KeeperChannel(sock)       # ``simulator.spawn.Keeper`` starts the process
    process = await channel.start(argv, env=..., cwd=..., fds={0: devnull, 1: out, ...})
    await process.wait()                # its exit code, as the keeper saw it
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import threading

START_TIMEOUT_S = 30.0
"""How long the keeper may take to start a worker (it is busy starting Python at first)."""


class KeeperGone(OSError):
    """The keeper cannot take a request (it was killed): start the worker directly."""


class ForkedProcess:
    """A worker peach did not start itself (the keeper started it, or a template forked
    it), seen like an ``asyncio.subprocess.Process``: its exit code is reported to peach."""

    def __init__(self, pid: int, stdout: asyncio.StreamReader | None) -> None:
        self.pid = pid
        self.stdout: asyncio.StreamReader | None = stdout
        self.returncode: int | None = None
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._exit.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    def send_signal(self, number: int) -> None:
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class _Status(asyncio.Protocol):
    """Reads a worker's status pipe: ``P pid``, then ``X code`` (or ``E errno``)."""

    def __init__(self, stdout: asyncio.StreamReader | None) -> None:
        self.stdout = stdout
        self.started: asyncio.Future[ForkedProcess] = asyncio.get_running_loop().create_future()
        self.process: ForkedProcess | None = None
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            kind, _, value = line.partition(b" ")
            number = int(value or b"0")
            if kind == b"P" and not self.started.done():
                self.process = ForkedProcess(number, self.stdout)
                self.started.set_result(self.process)
            elif kind == b"E" and not self.started.done():
                self.started.set_exception(OSError(number, os.strerror(number)))
            elif kind == b"X" and self.process is not None:
                self.process.exited(number)

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.started.done():
            self.started.set_exception(KeeperGone("the keeper did not start the worker"))
        elif self.process is not None:  # the keeper died: so did its workers
            self.process.exited(-signal.SIGKILL)


class KeeperChannel:
    """Peach's end of its keeper's socket."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self._lock = threading.Lock()  # one request at a time, whichever thread sends it

    async def start(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        fds: dict[int, int],
        stdout: asyncio.StreamReader | None = None,
    ) -> ForkedProcess:
        """Have the keeper start ``argv`` with ``fds`` (target number → peach's fd, which
        stays open here: close it after); ``stdout`` is what the handle reads the worker's
        output from. Raises ``KeeperGone``, or OSError for an ``argv`` that cannot run."""
        loop = asyncio.get_running_loop()
        read_end, write_end = os.pipe()
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd, "targets": list(fds)})
        try:
            with self._lock:
                socket.send_fds(self.control, [request.encode()], [write_end, *fds.values()])
        except OSError as error:
            os.close(read_end)
            raise KeeperGone(f"the keeper cannot start workers: {error}") from error
        finally:
            os.close(write_end)
        status = _Status(stdout)
        pipe = os.fdopen(read_end, "rb", buffering=0)
        await loop.connect_read_pipe(lambda: status, pipe)
        async with asyncio.timeout(START_TIMEOUT_S):
            return await status.started

    def close(self) -> None:
        """Let the keeper go: it kills whatever is still below it, and exits."""
        with contextlib.suppress(OSError):
            self.control.close()


__all__ = ["ForkedProcess", "KeeperChannel", "KeeperGone"]
