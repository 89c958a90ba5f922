"""The debugger relay: pdb sessions of replicas and tasks, in peach's terminal (SPEC §7).

``peach dev`` and ``peach task run`` in a terminal start one ``DebugRelay``: a Unix socket
in a private folder, named to every worker process by ``PEACH_DEBUG_SOCKET``. A process
that reaches ``breakpoint()`` (``peach_cli.runtime.debug``) connects and sends one JSON
line — who it is, the request id, the notebook position. The relay queues the sessions and
runs one at a time: it suspends the call's timeout, reports ``DebugStarted`` (the view
pauses and prints the banner), gives the terminal back its line mode, answers ``go``, then
copies the terminal's lines to the process and the process's output to the terminal until
the process closes the connection (``c``, ``q``, or the call returned); then the call's
timeout runs on for what was left of it, ``DebugEnded`` resumes the view, and the next
waiting session starts. Replicas never get the terminal themselves.

The relay knows which HTTP request a replica's call serves: the gateway names it
(``request_line``) and hands the line to the replica with the call, and the replica
registers each call and stream (``register``) with its deadline (the contract's
``Deadline``, from the call's ``Attempt``) while it is in flight — one place, the replica's
table of requests in flight, for both of the gateway's paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from peach_cli.boundary import Secrets, continued
from peach_cli.runtime.debug import POST_MORTEM_ENV, SKIPPED_ENV, SOCKET_ENV


@dataclass(frozen=True)
class DebugStarted:
    """A pdb session took the terminal: ``banner`` says who stopped, for what, where."""

    banner: str


@dataclass(frozen=True)
class DebugEnded:
    """The session ended: the view comes back."""

    who: str


@dataclass(frozen=True)
class DebugQueued:
    """A breakpoint was reached while a session holds the terminal: it waits its turn."""

    message: str


DEBUG_EVENTS = (DebugStarted, DebugEnded, DebugQueued)

_SKIPPED_LINE = re.compile(r"peach: .+: breakpoint\(\) at .+ skipped \(")


def skipped_once(on_event: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """``on_event`` showing a "breakpoint() skipped" line once per component or task (each
    replica process and each run says it once: several replicas, or runs, would repeat it)."""
    if on_event is None:
        return None
    from simulator.events import ReplicaLog
    from simulator.tasks.events import TaskOutput

    said: set[str] = set()

    def filtered(event: Any) -> None:
        if isinstance(event, ReplicaLog) and event.level == "output":
            key, text = event.component, event.message
        elif isinstance(event, TaskOutput):
            key, text = f"task {event.task}", event.line
        else:
            on_event(event)
            return
        if _SKIPPED_LINE.match(text):
            if key in said:
                return
            said.add(key)
        on_event(event)

    return filtered


def skipped_env(reason: str) -> tuple[tuple[str, str], ...]:
    """The environment telling workers why their breakpoints are skipped."""
    return ((SKIPPED_ENV, reason),)


def terminal_reason() -> str | None:
    """Why there is no terminal to debug in (None: standard input is peach's terminal)."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return "standard input is not a terminal"
    if not os.isatty(fd):
        return "standard input is not a terminal"
    try:
        if os.tcgetpgrp(fd) != os.getpgrp():
            return "peach runs in the background of its terminal"
    except OSError:
        return "standard input is not peach's terminal"
    return None


def request_line(method: str, path: str, query: bytes) -> str:
    """How a breakpoint's banner names the request: ``GET /greet?name=Ada``."""
    return f"{method} {path}" + (f"?{query.decode('latin-1')}" if query else "")


class Deadline(Protocol):
    """A call's or a task run's ``timeout_s`` bound as the relay suspends it: the
    contract's ``Deadline`` (``peach_cli.runtime.contract.deadline``)."""

    def when(self) -> float | None: ...

    def reschedule(self, when: float | None) -> None: ...


@dataclass
class _Call:
    line: str | None
    deadline: Deadline | None


@dataclass
class _Session:
    who: str
    request: int | None
    where: str
    error: str | None
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    done: asyncio.Event = field(default_factory=asyncio.Event)


class DebugRelay:
    """One process's debugger relay (see the module docstring)."""

    def __init__(
        self,
        on_event: Callable[[Any], None] | None,
        *,
        post_mortem: bool,
        secrets: Secrets | None = None,
    ) -> None:
        self.on_event = on_event
        self.secrets = secrets if secrets is not None else Secrets()
        """The session's secrets, masked in what is relayed to the terminal."""
        self.post_mortem = post_mortem
        self.calls: dict[tuple[str, int | None], _Call] = {}
        self.pause_hooks: list[Callable[[], None]] = []
        """Called before a session takes the terminal (the dev keys let it go)."""
        self.resume_hooks: list[Callable[[], None]] = []
        self._folder: str | None = None
        self._server: asyncio.Server | None = None
        self._waiting: deque[_Session] = deque()
        self._current: _Session | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stopping = False
        self.path = ""

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        """What every worker's environment gets: the socket (and ``--pdb``)."""
        pairs = [(SOCKET_ENV, self.path)]
        if self.post_mortem:
            pairs.append((POST_MORTEM_ENV, "1"))
        return tuple(pairs)

    def open(self) -> None:
        """Choose the socket's path (the server starts with ``start``)."""
        self._folder = tempfile.mkdtemp(prefix="peach-debug-")
        self.path = os.path.join(self._folder, "pdb.sock")

    async def start(self) -> None:
        if not self.path:
            self.open()
        self._server = await asyncio.start_unix_server(self._accept, self.path)
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        """End every session (their pdb reads end of file) and remove the socket."""
        self._stopping = True
        for session in [*self._waiting, *([self._current] if self._current else [])]:
            session.writer.close()
        self._waiting.clear()
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(BaseException):
                await self._runner
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    # -- the gateway's calls ---------------------------------------------------------------

    def register(
        self,
        replica: str,
        request_id: int | None,
        deadline: Deadline | None,
        line: str | None = None,
    ) -> None:
        """A replica's call or stream (or, ``request_id`` None, a task's run) under way;
        ``line`` is the HTTP request it serves (``request_line``), None for a task's run."""
        self.calls[(replica, request_id)] = _Call(line, deadline)

    def unregister(self, replica: str, request_id: int | None) -> None:
        self.calls.pop((replica, request_id), None)

    # -- sessions --------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello = json.loads(await reader.readline())
        except (ValueError, ConnectionError):
            writer.close()
            return
        session = _Session(
            str(hello.get("who") or "?"),
            hello.get("request"),
            str(hello.get("where") or ""),
            hello.get("error"),
            reader,
            writer,
        )
        if self._stopping:
            writer.close()
            return
        self._waiting.append(session)
        if self._current is not None:
            count = len(self._waiting)
            self._emit(
                DebugQueued(
                    f"another breakpoint waits: {self._describe(session)} "
                    f"({count} waiting; it opens when this session ends)"
                )
            )
            await self._write_now(
                f"\n*** another breakpoint waits: {self._describe(session)} ({count} waiting)\n"
            )
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run_all())
        await session.done.wait()

    async def _write_now(self, text: str) -> None:
        from peach_cli.boundary import relay, shown_lines

        with contextlib.suppress(OSError):
            relay(shown_lines(text).encode(), self.secrets)

    def _describe(self, session: _Session) -> str:
        parts = [session.who]
        call = self.calls.get((session.who, session.request))
        if call is not None and call.line:
            parts.append(call.line)
        elif session.request is None and not session.who.startswith("task "):
            parts.append("init")
        if session.where:
            parts.append(session.where)
        return " · ".join(parts)

    async def _run_all(self) -> None:
        while self._waiting and not self._stopping:
            session = self._waiting.popleft()
            self._current = session
            try:
                await self._run(session)
            finally:
                self._current = None
                session.done.set()

    async def _run(self, session: _Session) -> None:
        loop = asyncio.get_running_loop()
        call = self.calls.get((session.who, session.request))
        remaining: float | None = None
        deadline = call.deadline if call is not None else None
        if deadline is not None and deadline.when() is not None:
            remaining = max(0.0, (deadline.when() or 0.0) - loop.time())
            deadline.reschedule(None)  # the call waits for the debugger (SPEC §7)
        kind = "post-mortem" if session.error else "breakpoint"
        banner = f"{kind}: {self._describe(session)}"
        if session.error:  # a multi-line text: each continuation line marked
            banner += f"\n  {continued(session.error)}"
        if self._waiting:
            banner += f"\n  {len(self._waiting)} more waiting"
        banner += "\n  pdb commands: c continues, q quits, h helps"
        for hook in self.pause_hooks:
            hook()
        self._emit(DebugStarted(banner))
        terminal = _Terminal.take()
        writer = session.writer
        if terminal is not None:
            loop.add_reader(terminal.fd, self._relay_input, terminal.fd, writer)
        try:
            writer.write(b"go\n")
            from peach_cli.boundary import relay

            fd = sys.stdout.fileno()
            while True:
                data = await session.reader.read(1 << 16)
                if not data:
                    break
                with contextlib.suppress(OSError):
                    relay(data, self.secrets, fd=fd)
        except (ConnectionError, OSError):
            pass
        finally:
            if terminal is not None:
                loop.remove_reader(terminal.fd)
                terminal.give_back()
            writer.close()
            if deadline is not None and remaining is not None:
                with contextlib.suppress(RuntimeError):  # the call already ended
                    deadline.reschedule(loop.time() + remaining)
            self._emit(DebugEnded(session.who))
            for hook in self.resume_hooks:
                hook()

    def _relay_input(self, fd: int, writer: asyncio.StreamWriter) -> None:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:  # Ctrl-D, or the terminal went away: pdb reads the end of its input
            asyncio.get_running_loop().remove_reader(fd)
            with contextlib.suppress(OSError):
                writer.write_eof()
            return
        writer.write(data)

    def _emit(self, event: object) -> None:
        if self.on_event is not None:
            self.on_event(event)


class _Terminal:
    """Standard input in line mode (echo, editing, Ctrl-C) for a session, then as it was."""

    def __init__(self, fd: int, saved: Any) -> None:
        self.fd = fd
        self.saved = saved

    @classmethod
    def take(cls) -> _Terminal | None:
        try:
            import termios

            fd = sys.stdin.fileno()
            saved = termios.tcgetattr(fd)
            mode = termios.tcgetattr(fd)
            mode[3] |= termios.ICANON | termios.ECHO | termios.ISIG
            mode[0] |= termios.ICRNL
            termios.tcsetattr(fd, termios.TCSADRAIN, mode)
        except (ImportError, OSError, ValueError, AttributeError):
            return None
        except Exception:  # noqa: BLE001 - termios.error: no terminal after all
            return None
        return cls(fd, saved)

    def give_back(self) -> None:
        import termios

        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
