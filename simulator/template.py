"""Warm templates: replicas forked from one warmed process per launch (Linux).

Starting an interpreter and importing peach's runtime costs each replica most of its
start-up and its own copy of the same pages. ``Templates`` keeps, per ``WorkerLaunch``,
one process (``peach_cli.runtime.template``) that has done that once; a replica is then a
fork of it: still its own process, with its own socket to the gateway, its own output
pipe and its own ``init``. The gateway holds a ``ForkedProcess``, which answers like the
``asyncio.subprocess.Process`` of a spawned worker (``pid``, ``returncode``, ``wait``,
``kill``, ``terminate``, ``stdout``): the template reports each child's exit code.

    templates = Templates()
    worker = await templates.fork(launch)   # (process, socket), or None: spawn it instead
    await templates.close()

No template where there is no ``fork`` (or ``PEACH_NO_TEMPLATE=1``, which benchmarks use
for the baseline), nor when a template fails to start: the caller spawns. A template that
dies takes its children with it (they are reported killed by SIGKILL and restarted); the
next fork starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
import subprocess
from collections.abc import Callable

from simulator.keeper import ForkedProcess
from simulator.spawn import (
    Keeper,
    Worker,
    WorkerLaunch,
    WorkerProcess,
    start_process,
    wait_or_kill,
)

TEMPLATE_MODULE = "peach_cli.runtime.template"
READY_TIMEOUT_S = 30.0
"""How long a template may take to import and warm up before peach spawns instead."""
FORK_TIMEOUT_S = 10.0
ORPHAN_WAIT_S = 5.0
"""How long the children of a dead template are given to die with it."""


def templates_possible() -> bool:
    """Whether replicas may be forked from a template here (``peach_cli.runtime.linux``)."""
    from peach_cli.runtime.linux import offers

    return offers("fork")


class Template:
    """One template process and the children it forked."""

    def __init__(self, launch: WorkerLaunch, keeper: Keeper | None = None) -> None:
        self.launch = launch
        self.keeper = keeper
        self.process: WorkerProcess | None = None
        self._control: socket.socket | None = None
        self._ready: asyncio.Future[bool] | None = None
        self._forks: dict[int, asyncio.Future[int]] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early: dict[int, int] = {}
        """Exit codes reported before ``fork`` made the child's handle."""
        self._tokens = itertools.count(1)
        self._burying: set[asyncio.Task[None]] = set()
        self._closing = False
        self.lost = False
        """The template is gone (or never started): fork no more from it."""
        self.failure = ""
        """Why it did not start (``start`` returned False)."""

    async def start(self) -> bool:
        """Start the process and wait until it is warm; whether it is."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fd = theirs.fileno()
        command = [self.launch.interpreter.python, "-P", "-m", TEMPLATE_MODULE, "--fd", str(fd)]
        try:  # what it prints is dropped: a template that fails to start is replaced by spawns
            self.process = await start_process(
                self.launch, command, fd, output=subprocess.DEVNULL, keeper=self.keeper
            )
        except OSError as error:
            ours.close()
            self.lost = True
            self.failure = f"could not start: {error}"
            return False
        finally:
            theirs.close()
        ours.setblocking(False)
        self._control = ours
        self._ready = loop.create_future()
        loop.add_reader(ours.fileno(), self._read)
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                ready = await asyncio.shield(self._ready)
        except TimeoutError:
            ready = False
            self.failure = f"was not ready within {READY_TIMEOUT_S:g} s"
        if not ready:
            await self.close()
            self.lost = True
            if not self.failure:
                code = self.process.returncode if self.process is not None else None
                self.failure = "exited at start" + (f" (code {code})" if code is not None else "")
        return ready

    async def fork(self) -> tuple[ForkedProcess, socket.socket] | None:
        """A new replica process and the gateway's end of its socket; None when the
        template cannot fork (it is gone)."""
        control = self._control
        if control is None or self.lost:
            return None
        loop = asyncio.get_running_loop()
        parent_end, child_end = socket.socketpair()
        read_end, write_end = os.pipe()
        token = next(self._tokens)
        started: asyncio.Future[int] = loop.create_future()
        self._forks[token] = started
        try:
            await _send(control, b"F %d" % token, [child_end.fileno(), write_end])
            async with asyncio.timeout(FORK_TIMEOUT_S):
                pid = await started
        except (OSError, TimeoutError):
            pid = 0
        finally:
            self._forks.pop(token, None)
            child_end.close()
            os.close(write_end)
        if pid <= 0:
            parent_end.close()
            os.close(read_end)
            return None
        reader = asyncio.StreamReader(limit=1 << 16)
        process = ForkedProcess(pid, reader)
        early = self._early.pop(pid, None)
        if early is not None:
            process.exited(early)
        elif self.lost:  # the template died meanwhile: so does this child
            self._bury([process])
        else:
            self._children[pid] = process
        pipe = os.fdopen(read_end, "rb", buffering=0)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        return process, parent_end

    def _read(self) -> None:
        while (control := self._control) is not None:  # ``_on_packet`` may close it
            try:
                packet = control.recv(64)
            except BlockingIOError:
                return
            except OSError:
                packet = b""
            if not packet:
                self._lose()
                return
            self._on_packet(packet)

    def _on_packet(self, packet: bytes) -> None:
        fields = packet.split()
        if fields[:1] == [b"R"] and self._ready is not None and not self._ready.done():
            self._ready.set_result(True)
        elif fields[:1] == [b"P"] and len(fields) == 3:
            started = self._forks.get(int(fields[1]))
            if started is not None and not started.done():
                started.set_result(int(fields[2]))
        elif fields[:1] == [b"X"] and len(fields) == 3:
            pid, code = int(fields[1]), int(fields[2])
            process = self._children.pop(pid, None)
            if process is not None:
                process.exited(code)
            else:  # it ended before ``fork`` had its handle
                self._early[pid] = code
            if self._closing and not self._children:
                self._shut()

    def _lose(self) -> None:
        """The template ended (or closed its socket): its children die with it."""
        self.lost = True
        self._shut()
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(False)
        for started in self._forks.values():
            if not started.done():
                started.set_result(0)
        orphans, self._children = self._children, {}
        if orphans:
            self._bury(list(orphans.values()))

    def _bury(self, orphans: list[ForkedProcess]) -> None:
        task = asyncio.get_running_loop().create_task(_bury(orphans))
        self._burying.add(task)
        task.add_done_callback(self._burying.discard)

    def _shut(self) -> None:
        control, self._control = self._control, None
        if control is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(control.fileno())
            control.close()

    async def close(self) -> None:
        """Fork no more; the template exits once its children have (they are not killed:
        the replicas are stopped by their gateway)."""
        self._closing = True
        self.lost = True
        if not self._children:
            self._shut()
        process = self.process
        if process is not None and not self._children:
            await wait_or_kill(process, 3.0)


async def _send(control: socket.socket, data: bytes, fds: list[int]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            socket.send_fds(control, [data], fds)
            return
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(control.fileno(), _settle, writable)
            try:
                await writable
            finally:
                loop.remove_writer(control.fileno())


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _bury(orphans: list[ForkedProcess]) -> None:
    """Report the children of a dead template once they are gone (Linux kills them with
    it: they end as killed by SIGKILL). Adopted by peach (a subreaper), they are reaped
    here."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ORPHAN_WAIT_S
    waiting = list(orphans)
    while waiting:
        for process in list(waiting):
            code = _reaped(process.pid)
            if code is None and loop.time() > deadline:
                with contextlib.suppress(OSError):
                    os.kill(process.pid, signal.SIGKILL)
                code = -signal.SIGKILL
            if code is not None:
                waiting.remove(process)
                process.exited(code)
        if waiting:
            await asyncio.sleep(0.02)


def _reaped(pid: int) -> int | None:
    """The exit code of ``pid`` once it is gone (None while it runs)."""
    try:
        found, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not ours (init adopted it): gone once it cannot be signalled
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -signal.SIGKILL
        return None
    if found == 0:
        return None
    return os.waitstatus_to_exitcode(status)


class Templates:
    """The templates of one session, one per launch, started on first use."""

    def __init__(
        self,
        on_failure: Callable[[str], None] | None = None,
        keeper: Keeper | None = None,
        *,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        """False: every replica is spawned, none forked (for comparing the two)."""
        self.on_failure = on_failure
        self.keeper = keeper
        """Starts the templates (``simulator.spawn.start_process``)."""
        """Told, once per launch, why its template did not start (its replicas are then
        spawned one by one, each its own interpreter)."""
        self._templates: dict[WorkerLaunch, Template] = {}
        self._starting: dict[WorkerLaunch, asyncio.Task[bool]] = {}
        self._failed: set[WorkerLaunch] = set()
        self.closed = False

    async def fork(self, launch: WorkerLaunch) -> Worker | None:
        """A replica forked from ``launch``'s template (started if need be), or None."""
        if self.closed or not self.enabled or launch in self._failed or not templates_possible():
            return None
        template = self._templates.get(launch)
        starting = self._starting.get(launch)
        if starting is None and (template is None or template.lost):
            template = self._templates[launch] = Template(launch, self.keeper)
            starting = asyncio.get_running_loop().create_task(template.start())
            self._starting[launch] = starting
            starting.add_done_callback(lambda _: self._starting.pop(launch, None))
        if starting is not None and not await asyncio.shield(starting):
            if launch not in self._failed:  # it cannot start here: spawn from now on
                self._failed.add(launch)
                failed = self._templates.get(launch)
                if self.on_failure is not None and failed is not None:
                    where = (
                        f"py_env {launch.interpreter.name}"
                        if launch.interpreter.name
                        else "peach's own interpreter"
                    )
                    self.on_failure(
                        f"the warm template of {where} {failed.failure}: its replicas are "
                        "spawned one by one instead (slower to start, more memory)"
                    )
            return None
        template = self._templates.get(launch)
        if template is None:
            return None
        return await template.fork()

    def pids(self) -> list[int]:
        """The pids of the running templates (for tests)."""
        return [
            t.process.pid
            for t in self._templates.values()
            if t.process is not None and t.process.returncode is None and not t.lost
        ]

    async def close(self) -> None:
        self.closed = True
        for starting in list(self._starting.values()):
            with contextlib.suppress(BaseException):
                await starting
        templates, self._templates = self._templates, {}
        for template in templates.values():
            await template.close()


__all__ = ["ForkedProcess", "Template", "Templates", "templates_possible"]
