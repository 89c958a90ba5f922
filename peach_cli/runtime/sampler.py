"""A sampling profiler inside a replica (`peach profile`, SPEC §12). Standard library only.

A daemon thread wakes once in every ``interval_s`` (at a random moment of it) and reads
every other thread's stack (``sys._current_frames()``), plus — wall-clock mode — the
coroutine stack of every task of the replica's event loop that is waiting (an ``async def``
method awaiting I/O is on no thread's stack: its frames are found by following
``cr_await`` from the task's coroutine).
Each stack is weighed by the time it stands for: the wall time since the previous sample,
or (``cpu``) the CPU time its thread used meanwhile, read from the thread's CPU clock.

Wall-clock mode counts the stacks that pass through code that is not the standard
library's or peach's: the time requests spend in the user's code, waiting on I/O included
(exactly what it should show); peach's own threads there mostly wait — for work, or for
the GIL that the user's code holds. CPU mode counts the CPU time every thread used, from
its CPU clock (the time it ran, never the time it waited for the GIL, a lock or I/O):
peach's work included, folded into one entry later; the CPU seconds a profile holds are
the replica's. A thread found where it runs has its CPU since the last sample put on the
stack it is on; one found where it stopped — waiting for work, in a system call, or
handing a call's answer over (``_ran_there``) — used that CPU before, where it was not
seen: that CPU is shared among the stacks the same thread was found running on, in their
proportions (``_cpu_stacks``).

The sampler sees a thread running Python only where it lets go of the GIL: a sample at
a loop's jump back stands for the loop's lines and is shared among them (``_Loops``, an
estimate: ``loops`` in the profile is the weight so shared). While it runs, ``timed``
counts the calls of the user's method and the time they take (a call too short to be
sampled is still named), and wall-clock mode counts, on each line, the time a thread was
found there — in a call that lets go of the GIL — while it had been running elsewhere
(``leans``: the lean toward such lines, which `peach profile` reports).

``stop()`` returns the profile as plain data: a table of frames, each
``(kind, position, function)`` with ``kind`` one of ``notebook``, ``project``, ``library``,
``stdlib`` or ``peach``, and the distinct stacks (root first, as indices in the table) with
their weights in seconds; ``leans`` as ``[frame index, seconds]``. Notebook code is named
``notebooks/X.ipynb, cell N, line L``, as tracebacks and pdb name it
(``peach_cli.runtime.debug``).
"""

from __future__ import annotations

import asyncio
import dis
import functools
import inspect
import os
import random
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import peach_cli
from peach_cli.runtime import debug, linux

DEFAULT_INTERVAL_S = 0.01
"""100 samples a second, as py-spy's default."""

_PEACH_DIR = os.path.dirname(os.path.abspath(peach_cli.__file__)) + os.sep
_STDLIB_DIRS = tuple(
    {
        os.path.abspath(sysconfig.get_paths()[name]) + os.sep
        for name in ("stdlib", "platstdlib")
        if sysconfig.get_paths().get(name)
    }
)
_IDLE_LEAVES = frozenset(
    {
        ("selectors.py", "select"),
        ("threading.py", "wait"),
        ("threading.py", "_wait_for_tstate_lock"),
        ("queue.py", "get"),
        ("thread.py", "_worker"),
    }
)
"""(file name, function) of leaf frames where a thread waits for work, not for the user."""

Stack = tuple[int, ...]
"""``id(code), line, id(code), line, …``, root first: plain ints hash fast (a code object's
hash is computed anew each time), and every stack is looked up at every sample."""


class Sampler:
    """Samples this process's threads (and waiting coroutines) until ``stop()``."""

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        cpu: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.interval_s = max(0.001, float(interval_s))
        self.cpu = cpu
        self.loop = loop
        self.samples = 0
        self.stacks: dict[Stack, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peach-sampler", daemon=True)
        self._clocks: dict[int, int | None] = {}
        self._natives: dict[int, int | None] = {}
        self._proc = linux.offers("proc")
        """Whether a thread's system call can be read (``/proc``: Linux)."""
        self._ran: dict[int, dict[Stack, float]] = {}
        """A thread → the CPU seconds it used where it was found running, by stack (``cpu``)."""
        self._unseen: dict[int, dict[Stack, float]] = {}
        """A thread → the CPU seconds it used where it was not seen, by the stack it was
        found stopped on (``cpu``; ``_cpu_stacks`` shares them out)."""
        self._cpu_seen: dict[int, float] = {}
        self._kinds: dict[str, str] = {}
        self._codes: dict[int, CodeType] = {}
        """``id(code)`` → the code (kept alive, so its id is never another's)."""
        self._verdicts: dict[tuple[Stack, bool], bool] = {}
        self._idle = {id(code) for code in _idle_worker_codes()}
        """The code of a thread pool's worker waiting for work (its leaf frame then)."""
        self.started = 0.0
        self.ended = 0.0
        self._switch: float | None = None
        self.cost_s = 0.0
        """The CPU time the sampling thread has used (its own cost)."""
        self.calls: dict[CodeType, list[float]] = {}
        """The user's method's code → [calls, seconds in them] (``timed``)."""
        self._calls_lock = threading.Lock()
        self._timed: dict[Callable[..., Any], Callable[..., Any]] = {}
        """A method → its counting wrapper, made once."""
        self.busy = 0
        """Samples that found a thread in the user's code (wall-clock)."""
        self.leans: dict[Stack, float] = {}
        """Wall-clock seconds counted on a call where the thread was found while it had run
        elsewhere (``_lean``): a stack → seconds."""
        self._loops = _Loops()

    def start(self) -> None:
        self.started = time.perf_counter()
        # A thread that wants the GIL gets it after the switch interval (5 ms): longer
        # than many a call's stretch of Python (a sort, a scoring loop), which the sampler
        # then catches only when it lets go of the GIL (at I/O). In CPU mode those
        # stretches are the point: the switch interval is cut to a twentieth of the
        # sampling interval while it samples. Not in wall-clock mode (the default), by
        # measurement (benchmarks/RESULTS.md): with several calls running at once it
        # costs the replica some 5 % of a core in GIL hand-overs, and wall-clock time
        # shows where calls wait, which a 5 ms switch does not hide.
        if self.cpu:
            self._switch = sys.getswitchinterval()
            sys.setswitchinterval(min(self._switch, self.interval_s / 20))
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling and return the profile (see the module docstring)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._switch is not None:
            sys.setswitchinterval(self._switch)
            self._switch = None
        self.ended = time.perf_counter()
        return self.profile()

    # -- sampling ------------------------------------------------------------------------

    def _run(self) -> None:
        last = slot = time.perf_counter()
        me = threading.get_ident()
        draw = random.Random().random  # its own: the user's `random.seed()` stays theirs
        while True:
            # One sample at a random moment of each interval, not an interval after the
            # last one: the sampler often gets the GIL where a call hands its answer over
            # (it lets go of the GIL there), and waking a fixed time after that would find
            # the next calls at the same point each time (with 3 ms calls, their last line).
            wake = slot + draw() * self.interval_s
            slot += self.interval_s
            if self._stop.wait(max(0.0, wake - time.perf_counter())):
                break
            now = time.perf_counter()
            slot = max(slot, now)  # fallen behind (a long wait for the GIL): no burst after
            try:
                if self._sample(now - last, me):
                    self.busy += 1
            except Exception:  # noqa: BLE001, S112 - a racing thread or task: skip one sample
                continue
            finally:
                last = now
                self.cost_s = time.thread_time()

    def _sample(self, elapsed: float, me: int) -> bool:
        """Take one sample; whether it found a thread in the user's code (wall-clock)."""
        self.samples += 1
        stacks = self.stacks
        codes = self._codes
        main = threading.main_thread().ident
        idle = self._idle
        frames = sys._current_frames()
        # Every stack is read before anything else: a thread that runs meanwhile may
        # finish its call, and the frame object read after that would name the line where
        # the call returned.
        if self.cpu:
            self._sample_cpu(frames, me, main, elapsed)
            return False
        snapshot = [
            (ident, _stack_of(frame, codes, self._loops), frame)
            for ident, frame in frames.items()
            if ident != me and (ident == main or id(frame.f_code) not in idle)
        ]  # (a worker thread waiting for work has nothing of the user's below)
        users = []
        for ident, stack, frame in snapshot:  # wall-clock: the time requests spend in the
            if not self._waits(stack):  # user's code, waits included
                stacks[stack] = stacks.get(stack, 0.0) + elapsed
                users.append(ident)
                self._lean(ident, stack, frame, elapsed)
        if self.loop is not None:
            for stack in _waiting_coroutines(self.loop, codes):
                if not self._waits(stack):
                    stacks[stack] = stacks.get(stack, 0.0) + elapsed
        return bool(users)

    def _lean(self, ident: int, stack: Stack, frame: FrameType, elapsed: float) -> None:
        """Count in ``leans`` the part of ``elapsed`` that thread ``ident``, found in a call
        of C code (``frame``, its innermost), spent running: the CPU time it used since
        it was last read (its own clock; none where threads have no clock). The sampler looks when a thread lets go of the GIL — at a sleep, I/O,
        any call that lets go of it — so a thread that runs Python between such calls is
        found at them, and the wall-clock time it ran is counted there (``time.sleep(0)``
        in a loop gets the loop's time). A thread that waited in the call all along used
        next to no CPU meanwhile; one stopped at a loop's jump is where it ran. Time the
        thread waited for a CPU on a busy machine is not counted: the lean said is the
        least it can be."""
        used = self._cpu_used(ident)
        if used and _in_call(frame):
            self.leans[stack] = self.leans.get(stack, 0.0) + min(used, elapsed)

    def _sample_cpu(
        self,
        frames: dict[int, FrameType],
        me: int,
        main: int | None,
        elapsed: float,
    ) -> None:
        """Count the CPU time each thread used since the last sample: on the stack it is on
        when it ran there (``_ran_there``), else as used where it was not seen (shared out
        by ``_cpu_stacks``). The sampler's own CPU is on its own stack (peach's)."""
        snapshot = [
            (ident, frame, _stack_of(frame, self._codes, self._loops))
            for ident, frame in frames.items()
        ]
        for ident, frame, stack in snapshot:  # every thread's clock moves on, a waiting one's too
            used = self._cpu_used(ident)
            if used is None:  # no thread clocks here
                weight = self._cpu_weight(ident, me, main, stack, elapsed)
                if weight > 0.0:
                    self.stacks[stack] = self.stacks.get(stack, 0.0) + weight
                continue
            if used <= 0.0:
                continue
            if ident == me:
                table = self.stacks
            elif self._ran_there(ident, stack, id(frame.f_code), main):
                table = self._ran.setdefault(ident, {})
            else:
                table = self._unseen.setdefault(ident, {})
            table[stack] = table.get(stack, 0.0) + used

    def _ran_there(self, ident: int, stack: Stack, leaf: int, main: int | None) -> bool:
        """Whether thread ``ident``, found at ``stack`` (``leaf`` its innermost code's id),
        ran there. Not when it waits for work or sits in a system call (a sleep, I/O:
        ``/proc``); nor, for a thread other than the event loop's, when it is in peach's or
        the standard library's code alone: a worker between two calls of the user's method,
        handing an answer over to the event loop (a socket write, where it lets go of the
        GIL and the sampler gets it: with one call at a time, a quarter of the samples of
        a 2 ms call land there) or going back for work. Such a thread ran on the user's
        lines before."""
        if leaf in self._idle or self._waits(stack, thread=True):
            return False
        if self._thread_state(ident) == "blocked":
            return False
        return ident == main or not self._waits(stack)

    def _thread_state(self, ident: int) -> str | None:
        """``linux.thread_state`` of thread ``ident`` (None: cannot tell here)."""
        if not self._proc:
            return None
        native = self._natives.get(ident)
        if native is None:
            self._natives = {t.ident: t.native_id for t in threading.enumerate() if t.ident}
            native = self._natives.get(ident)
            if native is None:
                return None
        return linux.thread_state(native)

    def _cpu_used(self, ident: int) -> float | None:
        """CPU seconds thread ``ident`` used since the last sample (None: no thread clocks
        here, as on macOS)."""
        clock = self._clocks.get(ident, -1)
        if clock == -1:
            try:
                clock = time.pthread_getcpuclockid(ident)
            except (AttributeError, OSError):
                clock = None
            self._clocks[ident] = clock
        if clock is None:
            return None
        try:
            used = time.clock_gettime(clock)
        except OSError:  # the thread has ended
            return 0.0
        previous = self._cpu_seen.get(ident)
        self._cpu_seen[ident] = used
        return 0.0 if previous is None else max(0.0, used - previous)

    def _cpu_weight(
        self, ident: int, me: int, main: int | None, stack: Stack, elapsed: float
    ) -> float:
        """Where there are no thread clocks (macOS): the interval, for the event loop's
        (``main``) thread — peach's work unless its stack says otherwise — and for a thread
        in the user's code; nothing for the sampler (``me``) and the rest."""
        if ident == me:
            return 0.0
        return elapsed if ident == main or not self._waits(stack) else 0.0

    def _cpu_stacks(self) -> dict[Stack, float]:
        """The CPU seconds on each stack: what each thread used where it was found running,
        grown by what it used where it was not seen, in proportion (a thread's CPU that is
        unseen is spent like the rest of it: a thread found only stopped keeps it where it
        was found). A call's CPU is seen at random points, since the sampler takes the GIL
        from the thread where it runs; its tail is not (the thread then stops, to hand its
        answer over, or waits for work) and would otherwise all go on the last point seen,
        or on the hand-over."""
        stacks = dict(self.stacks)
        for ident in set(self._ran) | set(self._unseen):
            ran = self._ran.get(ident, {})
            unseen = self._unseen.get(ident, {})
            seen = sum(ran.values())
            if seen > 0.0:
                grow = (seen + sum(unseen.values())) / seen
                shared = {stack: weight * grow for stack, weight in ran.items()}
            else:
                shared = unseen
            for stack, weight in shared.items():
                stacks[stack] = stacks.get(stack, 0.0) + weight
        return stacks

    def _waits(self, stack: Stack, *, thread: bool = False) -> bool:
        """Whether ``stack`` is left out: it has no frame of the user's code or a library's
        and it is not the event loop's ``thread`` at work. (Wall-clock mode passes no
        ``thread``: peach's own threads there mostly wait — for work, or for the GIL the
        user's code holds — and would hide the user's lines behind peach's.)"""
        verdict = self._verdicts.get((stack, thread))
        if verdict is None:
            verdict = self._verdicts[(stack, thread)] = self._judge(stack, thread)
        return verdict

    def _judge(self, stack: Stack, thread: bool) -> bool:
        codes = [self._codes[key] for key in stack[0::2]]
        if any(self._kind(code.co_filename) not in ("peach", "stdlib") for code in codes):
            return False
        if not thread or not codes:
            return True
        leaf = codes[-1]
        return (os.path.basename(leaf.co_filename), leaf.co_name) in _IDLE_LEAVES

    def _kind(self, filename: str) -> str:
        kind = self._kinds.get(filename)
        if kind is None:
            kind = self._kinds[filename] = _kind_of(filename)
        return kind

    # -- the result ----------------------------------------------------------------------

    def profile(self) -> dict[str, Any]:
        frames: list[tuple[str, str, str]] = []
        index: dict[tuple[int, int], int] = {}

        def indices_of(stack: Stack) -> list[int]:
            indices = []
            for key in zip(stack[0::2], stack[1::2], strict=True):
                number = index.get(key)
                if number is None:
                    number = index[key] = len(frames)
                    frames.append(self._describe(self._codes[key[0]], key[1]))
                indices.append(number)
            return indices

        stacks = []
        spread = 0.0
        for stack, weight in self._cpu_stacks().items():
            shares = self._spread(stack)
            if len(shares) > 1:
                spread += weight
            stacks += [(indices_of(lined), weight * share) for lined, share in shares]
        leans: dict[int, float] = {}
        for stack, seconds in list(self.leans.items()):
            for lined, share in self._spread(stack):
                leaf = indices_of(lined)[-1]
                leans[leaf] = leans.get(leaf, 0.0) + seconds * share
        return {
            "pid": os.getpid(),
            "mode": "cpu" if self.cpu else "wall",
            "interval_s": self.interval_s,
            "samples": self.samples,
            "cost_s": self.cost_s,
            "duration_s": max(0.0, (self.ended or time.perf_counter()) - self.started),
            "frames": frames,
            "stacks": stacks,
            "busy": self.busy,
            "loops": spread,
            "leans": [[leaf, seconds] for leaf, seconds in leans.items()],
            "calls": [
                [*self._describe(code, code.co_firstlineno), int(n), seconds]
                for code, (n, seconds) in list(self.calls.items())
            ],
        }

    def _spread(self, stack: Stack) -> list[tuple[Stack, float]]:
        """``stack`` with its innermost line, and the share of its weight for it: several
        when the thread was stopped at a loop's jump back (``_Loops``)."""
        if not stack or stack[-1] >= 0:
            return [(stack, 1.0)]
        head = stack[:-1]
        shares = self._loops.spread(self._codes[stack[-2]], -stack[-1] - 1)
        return [((*head, line), share) for line, share in shares]

    # -- calls ---------------------------------------------------------------------------

    def timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` (the user's method) counting its calls and the time they take: a
        call shorter than the sampling interval that never lets go of the GIL is never on
        a sampled stack (the sampler gets the GIL only at the waits in between), and these
        figures still name it."""
        known = self._timed.get(function)
        if known is not None:
            return known
        code = getattr(function, "__code__", None)
        if not isinstance(code, CodeType):
            return function

        def count(began: float) -> None:
            took = time.perf_counter() - began
            with self._calls_lock:
                figures = self.calls.setdefault(code, [0, 0.0])
                figures[0] += 1
                figures[1] += took

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def timed_coroutine(*args: Any, **kwargs: Any) -> Any:
                began = time.perf_counter()
                try:
                    return await function(*args, **kwargs)
                finally:
                    count(began)

            self._timed[function] = timed_coroutine
            return timed_coroutine

        @functools.wraps(function)
        def timed_function(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                count(began)

        self._timed[function] = timed_function
        return timed_function

    def _describe(self, code: CodeType, line: int) -> tuple[str, str, str]:
        filename = code.co_filename
        kind = self._kind(filename)
        function = getattr(code, "co_qualname", code.co_name)
        if kind == "notebook":
            return kind, debug.position(filename, line), function
        return kind, f"{_short_path(filename, kind)}, line {line}", function


def _stack_of(frame: FrameType | None, codes: dict[int, CodeType], loops: _Loops) -> Stack:
    """``frame``'s stack; its innermost frame's line is ``-(offset + 1)`` when the thread
    was stopped at a loop's back edge (``_Loops``)."""
    stack = []
    leaf = True
    while frame is not None:
        code = frame.f_code
        key = id(code)
        if key not in codes:
            codes[key] = code
        line = _line(frame)
        if leaf:
            leaf = False
            lasti = frame.f_lasti
            if lasti in loops.edges(code):
                line = -(lasti + 1)
        stack.append(line)
        stack.append(key)
        frame = frame.f_back
    stack.reverse()
    return tuple(stack)


_CALLS = frozenset(
    number for number, name in enumerate(dis.opname) if name.startswith(("CALL", "PRECALL"))
)
_CHECKS = frozenset(
    number
    for number, name in enumerate(dis.opname)
    if "BACKWARD" in name and not name.endswith("NO_INTERRUPT")
)
"""The jumps back to a loop's head where Python checks whether to let go of the GIL."""


class _Loops:
    """Where a thread running Python can be seen from inside the process, and what a sample
    taken there stands for.

    Another thread reads a thread's frame only while that thread has let go of the GIL,
    and a thread running Python lets go of it only where it checks whether to: at a call
    of C code (after it), at a function's start, and at the jump back to a loop's head. A
    loop without a call in its body is therefore seen only at its end, on the line of that
    jump (its last line), never on its head (``for i in range(n):``) nor on its other lines,
    though the time is theirs too. A sample taken there stands for the stretch of the loop
    run since the thread last checked: from the loop's head, or from the body's last call,
    to the jump. ``spread`` shares such a sample among that stretch's lines by the bytecode
    instructions each runs, weighed by their cost (an estimate: ``_COST``)."""

    def __init__(self) -> None:
        self._edges: dict[int, tuple[CodeType, frozenset[int]]] = {}
        self._spreads: dict[tuple[int, int], tuple[tuple[int, float], ...]] = {}

    def edges(self, code: CodeType) -> frozenset[int]:
        """The offsets of ``code``'s jumps back to a loop's head."""
        known = self._edges.get(id(code))
        if known is None or known[0] is not code:
            raw = code.co_code
            found = frozenset(offset for offset in range(0, len(raw), 2) if raw[offset] in _CHECKS)
            known = self._edges[id(code)] = (code, found)
        return known[1]

    def spread(self, code: CodeType, offset: int) -> tuple[tuple[int, float], ...]:
        """The lines of the stretch that ends at the jump at ``offset`` and their shares
        (``((line, share), …)``, the shares adding up to 1)."""
        key = (id(code), offset)
        known = self._spreads.get(key)
        if known is None:
            known = self._spreads[key] = _stretch(code, offset)
        return known


def _stretch(code: CodeType, offset: int) -> tuple[tuple[int, float], ...]:
    instructions = list(dis.get_instructions(code))
    jump = next((i for i in instructions if i.offset == offset), None)
    if jump is None or not isinstance(jump.argval, int) or jump.argval > offset:
        return ((_line_at(code, offset), 1.0),)
    inside = [i for i in instructions if jump.argval <= i.offset <= offset]
    for index in range(len(inside) - 2, -1, -1):  # the last check before the jump
        if inside[index].opcode in _CALLS or inside[index].opcode in _CHECKS:
            inside = inside[index + 1 :]
            break
    counts: dict[int, int] = {}
    for instruction in inside:
        number = instruction.positions.lineno if instruction.positions else None
        if number is not None and instruction.opname not in ("NOP", "EXTENDED_ARG", "CACHE"):
            cost = 1 if instruction.opname.startswith(_MOVES) else _COST
            counts[number] = counts.get(number, 0) + cost
    whole = sum(counts.values())
    if not whole:
        return ((_line_at(code, offset), 1.0),)
    return tuple((line, n / whole) for line, n in sorted(counts.items()))


def _in_call(frame: FrameType) -> bool:
    """Whether ``frame`` is stopped at a call (of C code: a call of Python code has a frame
    of its own on top)."""
    lasti = frame.f_lasti
    code = frame.f_code.co_code
    return 0 <= lasti < len(code) and code[lasti] in _CALLS


_MOVES = (
    "LOAD_FAST", "STORE_FAST", "DELETE_FAST", "LOAD_CONST", "LOAD_DEREF", "STORE_DEREF",
    "LOAD_CLOSURE", "POP_TOP", "PUSH_NULL", "COPY", "SWAP", "RESUME", "PRECALL", "KW_NAMES",
    "JUMP", "POP_JUMP",
)  # fmt: skip
"""Instructions that only move a reference (or jump): the cheap ones."""
_COST = 10
"""What an instruction that computes, compares, looks a name up, iterates or calls costs,
in moves (``_MOVES``): an int multiply with its new object takes 10–14 ns, a local's load
and store together 2–3 ns (CPython 3.11, x86-64). By count alone, ``for i in range(n):``
with a one-line body of 9 instructions got 2 of 11 of the loop where py-spy, reading the
thread from outside at any instruction, gives it about a quarter; weighed, 11 of 47."""


def _line_at(code: CodeType, offset: int) -> int:
    line = code.co_firstlineno
    for start, _end, number in code.co_lines():
        if start <= offset and number is not None:
            line = number
    return line


def _line(frame: FrameType) -> int:
    """The line ``frame`` is on: its function's first when Python cannot say (``f_lineno``
    is None at some instructions, as between the two halves of a call)."""
    line = frame.f_lineno
    return frame.f_code.co_firstlineno if line is None else line


def _waiting_coroutines(loop: asyncio.AbstractEventLoop, codes: dict[int, CodeType]) -> list[Stack]:
    """The stacks of the tasks of ``loop`` that wait (a running one is on its thread's
    stack): each coroutine's frame, then what it awaits, down to the innermost."""
    found = []
    for task in asyncio.all_tasks(loop):
        coroutine: Any = task.get_coro()
        if getattr(coroutine, "cr_running", False) or getattr(coroutine, "gi_running", False):
            continue
        stack: list[int] = []
        while coroutine is not None:
            frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "gi_frame", None)
            if frame is None:
                break
            code = frame.f_code
            key = id(code)
            if key not in codes:
                codes[key] = code
            stack.append(key)
            stack.append(_line(frame))
            coroutine = getattr(coroutine, "cr_await", None) or getattr(
                coroutine, "gi_yieldfrom", None
            )
        if stack:
            found.append(tuple(stack))
    return found


def _idle_worker_codes() -> list[CodeType]:
    """``concurrent.futures.thread._worker``: the leaf frame of a pool thread that waits
    for work (its queue's ``get`` is C), called by the thread's ``run``, so with nothing of
    the user's below it."""
    from concurrent.futures import thread

    worker = getattr(thread, "_worker", None)
    code = getattr(worker, "__code__", None)
    return [code] if isinstance(code, CodeType) else []


def _kind_of(filename: str) -> str:
    if filename.startswith("<") and filename.endswith(">"):
        if debug.is_notebook(filename):
            return "notebook"
        # <frozen importlib._bootstrap>, and <string>: what dataclasses and namedtuples compile
        return "stdlib" if filename.startswith(("<frozen ", "<string>")) else "library"
    path = os.path.abspath(filename)
    if path.startswith(_PEACH_DIR):
        return "peach"
    if "site-packages" in path or "dist-packages" in path:
        return "library"
    if path.startswith(_STDLIB_DIRS):
        return "stdlib"
    if path.startswith(os.getcwd() + os.sep):  # a replica runs in the project folder
        return "project"
    return "library"


def _short_path(filename: str, kind: str) -> str:
    path = os.path.abspath(filename)
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in path:
            return path.split(marker, 1)[1]
    if kind == "stdlib":
        for folder in _STDLIB_DIRS:
            if path.startswith(folder):
                return path[len(folder) :]
    if kind == "peach":
        return "peach_cli/" + path[len(_PEACH_DIR) :] if path.startswith(_PEACH_DIR) else filename
    cwd = os.getcwd() + os.sep
    if path.startswith(cwd):
        return path[len(cwd) :]
    return filename


_active: Sampler | None = None


def start(interval_s: float, cpu: bool, loop: asyncio.AbstractEventLoop | None) -> None:
    """Start this process's sampler (a running one is replaced, its samples dropped)."""
    global _active
    if _active is not None:
        _active.stop()
    _active = Sampler(interval_s, cpu=cpu, loop=loop)
    _active.start()


def timed(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` counted by the running sampler (``Sampler.timed``); itself when none
    runs."""
    sampler = _active
    return function if sampler is None else sampler.timed(function)


def stop() -> dict[str, Any] | None:
    """Stop this process's sampler; its profile, or None when none was running."""
    global _active
    sampler, _active = _active, None
    return sampler.stop() if sampler is not None else None


__all__ = ["DEFAULT_INTERVAL_S", "Sampler", "start", "stop", "timed"]
