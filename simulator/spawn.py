"""Starting Python worker processes: the one place that spawns them, and the warm spares.

Every process ``peach dev`` runs for a user's code — a replica today — is started here from
a ``WorkerLaunch``: which interpreter (peach's own, or an environment's), what it can
import, its environment variables and its working directory. A worker talks to its parent
over one end of a socket pair, passed as ``--fd``; what it prints comes back on a pipe.

A worker spends most of its start-up importing Python and peach before it even reads what
to host. With hot reload on, ``peach dev`` keeps spare workers waiting, one set per launch
(one per project and interpreter); ``Replica`` takes one instead of spawning, so a reload
costs only the user's code and ``init``. A spare is replaced a moment after it is taken.

    spawner = Spawner()                            # one per session (``simulator.session``)
    launch = WorkerLaunch(root)                    # peach's interpreter, the project folder
    process, sock = await spawner.worker(launch)   # a spare if one waits, else a new one
    await spawner.keep(launch).fill()              # after the first replicas are up
    await spawner.close()                          # when the session stops

A spare that is never used exits with the server: its socket closes, and on Linux its
parent's death kills it.

A session's ``Spawner(templates=Templates())`` forks a replica that no spare waits for from
its launch's warm template (``simulator.template``, Linux), and spawns it where it cannot.
With a ``Keeper`` (a session has one, Linux), the keeper process starts every worker
(``simulator.keeper``): what a worker starts then stays below it and dies with peach, even
when peach is killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from simulator.keeper import KeeperChannel, KeeperGone

REFILL_DELAY_S = 0.5
"""How long after a spare is taken its replacement starts (not to slow the new replica)."""

REPLICA_MODULE = "peach_cli.runtime.replica_worker"
KEEPER_MODULE = "peach_cli.runtime.keeper"

_SOURCE_ROOT = str(Path(__file__).resolve().parent.parent)
"""The folder holding ``simulator`` and ``peach_cli`` (a source checkout or site-packages)."""


@dataclass(frozen=True)
class Interpreter:
    """The Python that runs a worker and what it may import besides its own packages.

    ``Interpreter()`` is the one running peach (everything installed beside peach is
    importable). An isolated environment gives its own ``python`` and, as ``path``, the
    folder holding peach's standard-library-only runtime; ``isolated`` then keeps
    peach's own ``PYTHONPATH`` out.
    """

    python: str = field(default_factory=lambda: sys.executable)
    path: tuple[str, ...] = (_SOURCE_ROOT,)
    isolated: bool = False
    name: str = ""
    """The environment's name, for messages ("" for peach's own interpreter)."""


@dataclass(frozen=True)
class WorkerLaunch:
    """Everything needed to start one kind of worker process (hashable: spares key on it)."""

    root: Path
    interpreter: Interpreter = field(default_factory=Interpreter)
    module: str = REPLICA_MODULE
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables (peach's own, such as the task scheduler's socket)."""
    inherit_env: bool = False
    """Start from peach's whole environment instead of the minimal one (``--inherit-env``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).resolve())

    def command(self, fd: int) -> list[str]:
        # -P: a project folder holding a module named like ours must not shadow it
        return [self.interpreter.python, "-P", "-m", self.module, "--fd", str(fd)]

    def environment(self) -> dict[str, str]:
        """The worker's environment: the minimal one (``simulator.worker_env``), what its
        interpreter needs to import the runtime, and ``env``."""
        from simulator.worker_env import minimal_environment

        interpreter = self.interpreter
        base = minimal_environment(os.environ, inherit=self.inherit_env)
        if interpreter.isolated:  # the env's own: nothing of the host's packages gets in
            from peach_cli.envs.builder import isolated_environment

            prefix = Path(interpreter.python).parent.parent  # <env>/bin/python
            env = isolated_environment(prefix, base, interpreter.path)
        else:
            env = base
            entries = (*interpreter.path, os.environ.get("PYTHONPATH"))
            env["PYTHONPATH"] = os.pathsep.join(p for p in entries if p)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env)
        return env


class WorkerProcess(Protocol):
    """What the gateway uses of a worker's process: an ``asyncio.subprocess.Process``, or
    a replica forked from a template (``simulator.template.ForkedProcess``)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    stdout: asyncio.StreamReader | None

    async def wait(self) -> int: ...

    def kill(self) -> None: ...

    def terminate(self) -> None: ...


Worker = tuple[WorkerProcess, socket.socket]
"""A started worker: its process and the parent's end of its socket."""


class Forker(Protocol):
    """Starts replicas by forking a warm process (``simulator.template.Templates``)."""

    async def fork(self, launch: WorkerLaunch) -> Worker | None:
        """A worker of ``launch``, or None: spawn it instead."""

    async def close(self) -> None: ...


class Keeper:
    """A session's keeper process (``simulator.keeper``), started with its first worker
    (Linux; elsewhere, or ``enabled`` False, peach starts its workers itself)."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._process: asyncio.subprocess.Process | None = None
        self._channel: KeeperChannel | None = None
        self._lock = asyncio.Lock()
        self.closed = False

    @property
    def pid(self) -> int | None:
        """The keeper's pid while it runs (for tests)."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    async def channel(self) -> KeeperChannel | None:
        """The running keeper's channel (started if need be), or None: start it directly."""
        if self.closed or not self.enabled or not keepers_possible():
            return None
        async with self._lock:
            if self._channel is not None and self.pid is not None:
                return self._channel
            self._drop()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            fd = theirs.fileno()
            try:
                self._process = await asyncio.create_subprocess_exec(
                    *(sys.executable, "-P", "-m", KEEPER_MODULE, "--fd", str(fd)),
                    pass_fds=(fd,),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            except OSError:
                ours.close()
                return None
            finally:
                theirs.close()
            self._channel = KeeperChannel(ours)
            return self._channel

    def _drop(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    async def close(self) -> None:
        """Let the keeper go: it kills whatever is still below it (what a crashed replica
        left behind), then exits."""
        self.closed = True
        self._drop()
        if self._process is not None:
            await wait_or_kill(self._process, 5.0)


def keepers_possible() -> bool:
    """Whether workers may be started by a keeper here (it needs a subreaper:
    ``peach_cli.runtime.linux``)."""
    from peach_cli.runtime.linux import offers

    return offers("subreaper")


async def start_process(
    launch: WorkerLaunch,
    command: list[str],
    fd: int,
    *,
    output: int | IO[bytes] | None,
    keeper: Keeper | None = None,
) -> WorkerProcess:
    """Start ``command`` as a worker of ``launch`` (its cwd and environment), passing it
    file descriptor ``fd``; what it prints goes to ``output`` (``subprocess.PIPE``: read
    it from ``process.stdout``). With a ``keeper``, the keeper starts it (it and all it
    starts then die with peach, even a killed peach); without, or when the keeper cannot,
    peach does."""
    channel = await keeper.channel() if keeper is not None else None
    if channel is not None:
        try:
            return await _start_kept(channel, launch, command, fd, output)
        except KeeperGone:
            pass
    return await asyncio.create_subprocess_exec(
        *command,
        pass_fds=(fd,),
        cwd=str(launch.root),
        env=launch.environment(),
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT,
    )


async def _start_kept(
    channel: KeeperChannel,
    launch: WorkerLaunch,
    command: list[str],
    fd: int,
    output: int | IO[bytes] | None,
) -> WorkerProcess:
    """``start_process`` through the keeper: the same fds, cwd and environment."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    opened = [stdin]
    reader: asyncio.StreamReader | None = None
    if output == subprocess.PIPE:
        read_end, out = os.pipe()
        opened.append(out)
        stream = reader = asyncio.StreamReader(limit=1 << 16)
        pipe = os.fdopen(read_end, "rb", buffering=0)
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), pipe
        )
    elif output == subprocess.DEVNULL:
        out = os.open(os.devnull, os.O_WRONLY)
        opened.append(out)
    elif output is None or isinstance(output, int):
        out = 1 if output is None else output
    else:
        out = output.fileno()
    try:
        return await channel.start(
            command,
            env=launch.environment(),
            cwd=str(launch.root),
            fds={0: stdin, 1: out, 2: out, fd: fd},
            stdout=reader,
        )
    finally:
        for opened_fd in opened:
            os.close(opened_fd)


async def spawn_worker(launch: WorkerLaunch, keeper: Keeper | None = None) -> Worker:
    """Start a worker that waits on its socket for what to run (by ``keeper`` if given);
    raises OSError."""
    parent_end, child_end = socket.socketpair()
    fd = child_end.fileno()
    try:
        process = await start_process(
            launch, launch.command(fd), fd, output=subprocess.PIPE, keeper=keeper
        )
    except OSError:
        parent_end.close()
        raise
    finally:
        child_end.close()
    return process, parent_end


class SpareWorkers:
    """Keeps ``count`` idle workers of one launch ready."""

    def __init__(
        self, launch: WorkerLaunch, *, count: int = 1, keeper: Keeper | None = None
    ) -> None:
        self.launch = launch
        self.count = count
        self.keeper = keeper
        self._spares: list[Worker] = []
        self._filling: asyncio.Task[None] | None = None
        self.closed = False

    async def fill(self) -> None:
        """Start spares until ``count`` are waiting."""
        while not self.closed and len(self._live()) < self.count:
            try:
                spare = await spawn_worker(self.launch, self.keeper)
            except OSError:
                return
            if self.closed:
                _discard(spare)
                return
            self._spares.append(spare)

    def _live(self) -> list[Worker]:
        live = [s for s in self._spares if s[0].returncode is None]
        for spare in self._spares:
            if spare[0].returncode is not None:
                spare[1].close()
        self._spares = live
        return live

    def pids(self) -> list[int]:
        return [process.pid for process, _ in self._live()]

    def take(self) -> Worker | None:
        """A waiting worker, or None; a replacement starts after ``REFILL_DELAY_S``."""
        live = self._live()
        if not live or self.closed:
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
        self.closed = True
        if self._filling is not None:
            self._filling.cancel()
            with contextlib.suppress(BaseException):
                await self._filling
        spares, self._spares = self._spares, []
        for spare in spares:
            _discard(spare)
        for process, _ in spares:
            await wait_or_kill(process, 3.0)


async def wait_or_kill(process: WorkerProcess, timeout_s: float) -> int:
    """Wait for ``process`` to exit, SIGKILL it past ``timeout_s``; its exit code."""
    try:
        return await asyncio.wait_for(process.wait(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        return await process.wait()


def _discard(spare: Worker) -> None:
    process, sock = spare
    sock.close()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()


class Spawner:
    """Starts the worker processes of one session, taking a waiting spare when one is kept.

    Spares are kept only for the launches ``keep`` names; ``close`` stops every spare (a
    session's last step). A ``Spawner()`` that keeps none just starts workers. With
    ``templates`` (``simulator.template.Templates``), a replica no spare waits for is
    forked from its launch's warm template where it can be, else spawned.
    """

    def __init__(self, templates: Forker | None = None, keeper: Keeper | None = None) -> None:
        self._kept: dict[WorkerLaunch, SpareWorkers] = {}
        self.templates = templates
        self.keeper = keeper
        """Starts every worker when given; its owner closes it once they have stopped."""

    async def worker(self, launch: WorkerLaunch) -> Worker:
        """A waiting spare of ``launch``, else a new worker; raises OSError."""
        spares = self._kept.get(launch)
        spare = spares.take() if spares is not None else None
        if spare is not None:
            return spare
        if self.templates is not None and launch.module == REPLICA_MODULE:
            forked = await self.templates.fork(launch)
            if forked is not None:
                return forked
        return await spawn_worker(launch, self.keeper)

    def keep(self, launch: WorkerLaunch, *, count: int = 1) -> SpareWorkers:
        """Keep spares of ``launch`` from now on (call ``fill`` to start them)."""
        spares = self._kept.get(launch)
        if spares is None or spares.closed:
            spares = self._kept[launch] = SpareWorkers(launch, count=count, keeper=self.keeper)
        return spares

    async def release(self, root: Path) -> None:
        """Stop keeping spares for the project at ``root`` and stop the waiting ones."""
        root = Path(root).resolve()
        for launch in [launch for launch in self._kept if launch.root == root]:
            spares = self._kept.pop(launch, None)  # another caller may be releasing them too
            if spares is not None:
                await spares.close()

    async def close(self) -> None:
        """Stop every spare, of every launch; templates fork no more (each exits once the
        replicas it forked have stopped)."""
        while self._kept:
            _, spares = self._kept.popitem()
            await spares.close()
        if self.templates is not None:
            await self.templates.close()

    def spare_pids(self) -> list[int]:
        """The pids of the waiting spares (for tests)."""
        return [pid for spares in self._kept.values() for pid in spares.pids()]


__all__ = [
    "Forker",
    "Interpreter",
    "Keeper",
    "SpareWorkers",
    "Worker",
    "WorkerLaunch",
    "Spawner",
    "spawn_worker",
    "keepers_possible",
    "start_process",
    "wait_or_kill",
]
