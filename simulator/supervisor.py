"""A replica's process, supervised: started, watched, restarted, killed.

``ProcessSupervisor`` is what a ``simulator.replica.Replica`` knows of the operating system:
it starts the worker (``simulator.spawn``: a spare when one is kept, else through the
keeper), forwards what the worker prints as lines (cut and rate-limited: a replica printing
without pause must not starve the gateway), waits for it to exit (killing it and its tree
when it lives on after closing its socket, or does not stop in time), and paces restarts
(a growing pause for a process that keeps dying soon after it started). ``MemoryWatch``
samples the process's memory while it runs and says when it crosses its component's
``memory`` request. What the replica says, and the requests in flight on it, are the
``Replica``'s.

    supervisor = ProcessSupervisor(spawner, on_output=print)
    process, sock = await supervisor.spawn(launch)   # the worker's end of the socket is its
    ...                                              # (its output is forwarded meanwhile)
    code = await supervisor.wait_exit(process)          # its socket closed: its exit code
    await supervisor.pause_before_restart(code)      # 0 s, 0.5 s, 1 s, 2 s, 5 s, ...

    memory = MemoryWatch(spec, replica_id, on_event)
    supervisor.watch(memory.watch(supervisor, ping))    # memory.rss, memory.pss
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import psutil

from peach_cli.procmem import Memory, process_memory
from peach_cli.runtime.plan import ComponentSpec
from peach_cli.runtime.protocol import CRASH_EXIT, THREADS_HELD_EXIT
from simulator.events import Event, MemoryWarning, ReplicaMemory
from simulator.spawn import Spawner, WorkerLaunch, WorkerProcess
from simulator.trees import kill_tree, reap

STOP_TIMEOUT_S = 3.0
REAP_TIMEOUT_S = 2.0
"""How long a process whose socket closed may take to exit before it and its tree are killed."""
RESTART_PAUSES_S = (0.0, 0.5, 1.0, 2.0, 5.0)
"""Pause before each successive restart of a replica that keeps dying soon after start."""
STABLE_AFTER_S = 10.0
"""A replica that ran this long resets its restart pause."""
STOPPED_FROM_OUTSIDE = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""Signals by which someone stopped a process (a kill, peach's fuzzer, the kernel's OOM
killer), as opposed to a crash of its code (an exit, SIGSEGV, SIGABRT): a replica that was
ready and was stopped so restarts at once, and its pause does not grow."""
OUTPUT_LINES_PER_S = 100
"""Lines of a replica's output shown per second; the others are counted, then summarised."""
OUTPUT_LINE_BYTES = 4096
"""Longer lines of a replica's output are cut (the size of the rest is shown)."""
HEALTH_INTERVAL_S = 1.0
PSS_EVERY = 5
"""The RSS is sampled every ``HEALTH_INTERVAL_S``, the PSS (costlier: each second, for a
hundred replicas, it would cost the gateway about 7 % of a core) the first time and every 5th after."""


def resident_memory(pid: int, *, pss: bool = True) -> Memory | None:
    """Process ``pid``'s RSS and PSS in bytes (psutil: Linux, macOS, Windows; PSS is the
    RSS where the system does not say; 0 with ``pss=False``); None when it is gone."""
    try:
        return process_memory(psutil.Process(pid), pss=pss)
    except psutil.Error:
        return None


def exit_description(returncode: int | None) -> str:
    """How a process ended, as a replica's error says it (``was killed by SIGKILL``)."""
    if returncode is None:
        return "closed its connection"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    if returncode == THREADS_HELD_EXIT:
        return "left: every thread it has for sync calls is held by a call that never returned"
    if returncode == CRASH_EXIT:
        return "stopped on an error of peach's replica runtime (its traceback is above)"
    return f"exited with code {returncode}"


class ProcessSupervisor:
    """The process of one replica, and the tasks that watch it."""

    def __init__(self, spawner: Spawner, on_output: Callable[[str], None]) -> None:
        self.spawner = spawner
        """Starts the process (a spare when hot reload keeps one for the launch)."""
        self.process: WorkerProcess | None = None
        """The current process (None before the first start)."""
        self._on_output = on_output
        self._ready_at = 0.0
        """When the current process took its component (0: not yet)."""
        self._restarts = 0
        self._pause_step = 0
        """Where the next crash's pause is on ``RESTART_PAUSES_S``."""
        self._tasks: set[asyncio.Task[Any]] = set()

    async def spawn(self, launch: WorkerLaunch) -> tuple[WorkerProcess, socket.socket]:
        """Start a process (``OSError`` when it cannot be) and forward its output; returns
        it and peach's end of its socket."""
        process, parent_end = await self.spawner.worker(launch)
        self.process = process
        self.watch(self._pump_output(process))
        return process, parent_end

    def ready(self) -> None:
        """The process took its component: a restart pause counts from now."""
        self._ready_at = time.monotonic()

    @property
    def restarted(self) -> bool:
        """The process is not the first this replica started."""
        return self._restarts > 0

    async def wait_exit(self, process: WorkerProcess) -> int | None:
        """The exit code of ``process``, whose socket closed; it and its tree are killed
        when it lives on ``REAP_TIMEOUT_S`` after."""
        try:
            return await asyncio.wait_for(process.wait(), REAP_TIMEOUT_S)
        except TimeoutError:
            return await self._kill(process)

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Wait for the current process to exit (it was told to stop); killed, with its
        tree, when it does not within ``timeout_s`` (its loop is blocked)."""
        process = self.process
        if process is not None and process.returncode is None:
            try:
                await asyncio.wait_for(process.wait(), timeout_s)
            except TimeoutError:
                await self._kill(process)

    def kill_now(self) -> None:
        """Last resort at interpreter exit: SIGKILL the process and its tree, not waiting."""
        process = self.process
        if process is not None and process.returncode is None:
            kill_tree(process.pid)

    async def pause_before_restart(self, returncode: int | None) -> None:
        """Wait before the next start (``next_pause``)."""
        pause = self.next_pause(returncode)
        if pause:
            await asyncio.sleep(pause)

    def next_pause(self, returncode: int | None) -> float:
        """The pause before the next start, for a process that ended with ``returncode``:
        longer each time the process died soon after it started (``RESTART_PAUSES_S``),
        none after it ran ``STABLE_AFTER_S``, and none when it was ready and then stopped
        from outside (``STOPPED_FROM_OUTSIDE``: nothing in it crashed, so no crash loop can
        follow)."""
        self._restarts += 1
        if self._ready_at and returncode is not None and -returncode in STOPPED_FROM_OUTSIDE:
            self._ready_at = 0.0  # the next process's start, not this one's, counts
            return 0.0
        ran_for = time.monotonic() - self._ready_at if self._ready_at else 0.0
        if ran_for > STABLE_AFTER_S:
            self._pause_step = 0
        pause = RESTART_PAUSES_S[min(self._pause_step, len(RESTART_PAUSES_S) - 1)]
        self._pause_step += 1
        self._ready_at = 0.0
        return pause

    def watch(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run ``coroutine`` beside the process until it ends or ``stop_watching``."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop_watching(self) -> None:
        """Cancel every watching task (but the one calling) and wait for them, so that
        none is left pending when the loop closes."""
        current = asyncio.current_task()
        pending = [task for task in self._tasks if task is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    @staticmethod
    async def _kill(process: WorkerProcess) -> int | None:
        killed = kill_tree(process.pid)
        returncode = await process.wait()
        reap(killed - {process.pid})
        return returncode

    async def _pump_output(self, process: WorkerProcess) -> None:
        """Forward what the process prints (the user's prints, crashes), line by line.

        Long lines are cut and lines over ``OUTPUT_LINES_PER_S`` are counted and
        summarised, not shown.
        """
        stream = process.stdout
        if stream is None:
            return
        output = _OutputLimiter(self._on_output)
        while True:
            try:
                data = await asyncio.wait_for(stream.read(1 << 16), output.seconds_to_summary())
            except TimeoutError:
                output.summarise()
                continue
            if not data:
                output.close()
                return
            output.feed(data)


class MemoryWatch:
    """The memory of one replica's process: ``watch`` samples it about once a second
    (``HEALTH_INTERVAL_S``) while the process answers its pings, reports each sample
    (``ReplicaMemory``) and warns once each time it crosses the component's ``memory``
    request (``MemoryWarning``)."""

    def __init__(self, spec: ComponentSpec, replica_id: str, on_event: Callable[[Event], None]):
        self.spec = spec
        """The component (its ``memory`` request is read at each sample)."""
        self.replica_id = replica_id
        self.on_event = on_event
        self.rss = 0
        self.pss = 0
        """As last sampled: RSS (what the ``memory`` request is checked against: a replica of
        its own on the platform) and PSS (shared pages counted once)."""
        self._over_limit = False

    async def watch(
        self, supervisor: ProcessSupervisor, ping: Callable[[], Awaitable[object | None]]
    ) -> None:
        """Sample the supervisor's current process until it is replaced or exits; a sample is
        taken only after the process answered ``ping`` (None: it did not)."""
        process = supervisor.process
        samples = 0
        while process is supervisor.process and process is not None and process.returncode is None:
            answered = await ping()
            pss = samples % PSS_EVERY == 0
            memory = resident_memory(process.pid, pss=pss) if answered is not None else None
            if memory is not None:
                samples += 1
                self._sampled(memory, pss)
            await asyncio.sleep(HEALTH_INTERVAL_S)

    def _sampled(self, memory: Memory, pss: bool) -> None:
        self.rss, self.pss = memory.rss, memory.pss if pss else self.pss
        spec, limit = self.spec, self.spec.memory
        self.on_event(ReplicaMemory(spec.key, self.replica_id, self.rss, limit, self.pss))
        over = limit is not None and self.rss > limit
        if over and not self._over_limit:
            assert limit is not None
            self.on_event(MemoryWarning(spec.key, self.replica_id, self.rss, limit))
        self._over_limit = over


class _OutputLimiter:
    """Splits a replica's output into lines, cut at ``OUTPUT_LINE_BYTES`` and shown at
    most ``OUTPUT_LINES_PER_S`` a second; ``emit`` gets each shown line and the summaries."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.line = bytearray()
        self.cut = 0
        self.shown = 0
        self.hidden = 0
        self.window = time.monotonic()

    def feed(self, data: bytes) -> None:
        if time.monotonic() - self.window >= 1.0:
            self.summarise()
        pieces = data.split(b"\n")
        self._add(pieces[0])
        for piece in pieces[1:]:
            self._end_line()
            self._add(piece)

    def _add(self, piece: bytes) -> None:
        room = OUTPUT_LINE_BYTES - len(self.line)
        if room > 0:
            self.line += piece[:room]
        self.cut += max(0, len(piece) - max(room, 0))

    def _end_line(self) -> None:
        if self.shown < OUTPUT_LINES_PER_S:
            self.shown += 1
            text = self.line.decode("utf-8", "replace")
            if self.cut:
                text += f" … ({self.cut} more bytes not shown)"
            self.emit(text)
        else:
            self.hidden += 1
        self.line.clear()
        self.cut = 0

    def seconds_to_summary(self) -> float | None:
        """How long until hidden lines are due to be summarised (None: nothing hidden)."""
        if not self.hidden:
            return None
        return max(0.0, 1.0 - (time.monotonic() - self.window))

    def summarise(self) -> None:
        if self.hidden:
            self.emit(
                f"… {self.hidden} more lines of output not shown "
                f"(at most {OUTPUT_LINES_PER_S} lines a second are)"
            )
        self.hidden = 0
        self.shown = 0
        self.window = time.monotonic()

    def close(self) -> None:
        if self.line or self.cut:
            self._end_line()
        self.summarise()
