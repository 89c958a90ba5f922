"""``breakpoint()`` and post-mortems in a replica or task process (SPEC §7).

Every replica and task process calls ``install(who)`` before it runs notebook code: it sets
``sys.breakpointhook`` and ``pdb.set_trace`` (now, or when ``pdb`` is first imported) to
this module's. What they do depends on the environment peach gave the process:

* ``PEACH_DEBUG_SOCKET`` set (``peach dev`` or ``peach task run`` in a terminal): a pdb
  session whose input and output travel over a private Unix socket to peach, which shows
  it in its terminal (``simulator.debug``). The process sends one JSON line (who stopped,
  which request, where), waits for ``go`` (another session may hold the terminal), then
  pdb reads and writes that socket until the user continues or quits; then it is closed.
* Not set (no terminal, ``--no-debug``, Ray): the breakpoint does nothing, and the first
  one skipped says so once on standard error (the replica's or task's log).

``PEACH_PDB=1`` (``--pdb``) adds the post-mortem: ``post_mortem(error)`` opens a session at
the frame that raised, before the error takes its usual course.

Compiled notebook code is named ``<notebooks/X.ipynb>`` (``code_filename``) and its lines
are in ``linecache``, so pdb lists the cell code, not the notebook's JSON; its stack entries
read ``notebooks/X.ipynb, cell N, line L``. Standard library only.
"""

from __future__ import annotations

import contextvars
import json
import os
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

from peach_cli.runtime.contract.results import (
    cell_line,
    code_filename,
    module_line,
    notebook_position,
)

if TYPE_CHECKING:
    import pdb
    from collections.abc import Iterator
    from types import FrameType

    from peach_cli.runtime.plan import NotebookCode

    _PdbBase = pdb.Pdb
else:
    _PdbBase = object  # pdb is imported when the first session opens (``_define``)

SOCKET_ENV = "PEACH_DEBUG_SOCKET"
POST_MORTEM_ENV = "PEACH_PDB"
SKIPPED_ENV = "PEACH_DEBUG_SKIPPED"
"""Why breakpoints are skipped, for the log line (default: no terminal)."""

REQUEST: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "peach_debug_request", default=None
)
"""The request id (of the worker protocol) of the call running in this context."""

_CODES: dict[str, NotebookCode] = {}
"""Compiled filename → the notebook code, for positions."""
_who = ""
_skipped = False
_local = threading.local()
_SKIP_MODULES = ["peach_cli.*", "asyncio.*", "concurrent.*", "threading", "contextvars"]


def register(code: NotebookCode) -> None:
    """Remember compiled code so positions in it name the notebook cell and line."""
    _CODES[code_filename(code)] = code


def is_notebook(filename: str) -> bool:
    """Whether ``filename`` names compiled notebook code (``<notebooks/X.ipynb>``)."""
    return filename in _CODES


def position(filename: str, line: int) -> str:
    """``notebooks/X.ipynb, cell N, line L`` for notebook code, else ``file, line L``."""
    code = _CODES.get(filename)
    if code is None:
        return f"{filename}, line {line}"
    return f"{code.source_name}, {notebook_position(code, line)}"


def install(who: str) -> None:
    """Route ``breakpoint()`` and ``pdb.set_trace()`` of this process through peach."""
    global _who
    _who = who
    sys.breakpointhook = breakpoint_hook
    pdb_module = sys.modules.get("pdb")
    if pdb_module is not None:
        pdb_module.__dict__["set_trace"] = set_trace
    elif not any(isinstance(f, _PatchPdb) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchPdb())


def enabled() -> bool:
    return bool(os.environ.get(SOCKET_ENV))


def post_mortem_wanted() -> bool:
    return bool(os.environ.get(POST_MORTEM_ENV) and os.environ.get(SOCKET_ENV))


def breakpoint_hook(*args: Any, **kwargs: Any) -> None:
    """``sys.breakpointhook``: a session in peach's terminal, or nothing (logged once)."""
    if os.environ.get("PYTHONBREAKPOINT") == "0":
        return
    _stop_at(sys._getframe(1))


def set_trace(*, header: str | None = None) -> None:
    """``pdb.set_trace``, relayed like ``breakpoint()``."""
    _stop_at(sys._getframe(1))


def _stop_at(frame: FrameType) -> None:
    path = os.environ.get(SOCKET_ENV)
    if not path:
        _skip(frame)
        return
    debugger = _debugger(path)
    debugger.set_trace(frame)


def _skip(frame: FrameType) -> None:
    global _skipped
    if _skipped:
        return
    _skipped = True
    why = os.environ.get(SKIPPED_ENV) or "no terminal to debug in"
    where = position(frame.f_code.co_filename, frame.f_lineno)
    print(
        f"peach: {_who}: breakpoint() at {where} skipped ({why}); later ones are skipped silently",
        file=sys.stderr,
        flush=True,
    )


def post_mortem(error: BaseException) -> None:
    """With ``--pdb`` in a terminal: a session at the frame that raised ``error``."""
    path = os.environ.get(SOCKET_ENV)
    if not path or not os.environ.get(POST_MORTEM_ENV) or error.__traceback__ is None:
        return
    import bdb

    if isinstance(error, bdb.BdbQuit):
        return
    debugger = _debugger(path)
    debugger.post_mortem_of = f"{type(error).__name__}: {error}"
    debugger.reset()
    try:
        debugger.interaction(None, error.__traceback__)
    except bdb.BdbQuit:
        pass
    finally:
        debugger.close()


def finish() -> None:
    """The call running on this thread returned: end its session, if one is open."""
    debugger = getattr(_local, "debugger", None)
    if debugger is not None:
        _local.debugger = None
        debugger.close()
        sys.settrace(None)


def _in_notebook(frame: FrameType) -> bool:
    return frame.f_code.co_filename in _CODES


def _debugger(path: str) -> RelayedPdb:
    debugger = getattr(_local, "debugger", None)
    if debugger is None or debugger.path != path:
        debugger = _local.debugger = _make(path)
    return debugger


class _PatchPdb:
    """A meta path finder that patches ``pdb.set_trace`` once ``pdb`` is imported."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "pdb":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("pdb")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            module.set_trace = set_trace

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class _Detached:
    """pdb's input and output before a session connects: nothing."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def readline(self) -> str:
        return ""


RelayedPdb: Any = None


def _make(path: str) -> Any:
    global RelayedPdb
    if RelayedPdb is None:
        RelayedPdb = _define()
    return RelayedPdb(path)


class _NotebookPositions(_PdbBase):
    """pdb's stack, listings and ``list`` numbers in notebook positions (cell, line), for a
    ``pdb.Pdb`` subclass (``_define``'s): the methods of pdb it overrides, apart from the
    session's own."""

    def get_stack(self, f: Any, t: Any) -> tuple[list[Any], int]:
        """The stack from the first frame of notebook code (not peach's own)."""
        stack, index = super().get_stack(f, t)
        first = next((n for n, (frame, _) in enumerate(stack) if _in_notebook(frame)), 0)
        return stack[first:], max(index - first, 0)

    def format_stack_entry(self, frame_lineno: Any, lprefix: str = ": ") -> str:
        text = super().format_stack_entry(frame_lineno, lprefix)
        frame, line = frame_lineno
        filename = frame.f_code.co_filename
        if filename in _CODES:
            text = text.replace(f"{filename}({line})", f"{position(filename, line)}, in ", 1)
        return text

    def _here(self) -> tuple[NotebookCode, int] | None:
        """The notebook code of the current frame and its line (None: not notebook code)."""
        frame = getattr(self, "curframe", None)
        code = None if frame is None else _CODES.get(frame.f_code.co_filename)
        return None if code is None or frame is None else (code, frame.f_lineno)

    def do_list(self, arg: str) -> Any:
        """``list N`` and ``list FIRST,LAST`` in notebook code count from the first line
        of the current line's cell, as the listings and the banner do."""
        here = self._here()
        return super().do_list(arg if here is None else _list_arg(*here, arg))

    do_l = do_list

    def _print_lines(self, lines: Any, start: int, breaks: Any = (), frame: Any = None) -> None:
        """Lines of notebook code numbered by their cell (``[cell N]`` before the lines
        of another cell than the current line's), as the banner and ``where`` say."""
        here = self._here()
        if here is None:
            super()._print_lines(lines, start, breaks, frame)
            return
        current = frame.f_lineno if frame else -1
        raised = getattr(self, "tb_lineno", {}).get(frame, -1) if frame else -1
        for text in _cell_lines(*here, lines, start, breaks, current, raised):
            self.message(text)


def _define() -> type[pdb.Pdb]:
    import pdb

    class _RelayedPdb(_NotebookPositions, pdb.Pdb):
        """pdb over the socket to peach's terminal, notebook positions in its stack."""

        def __init__(self, path: str) -> None:
            detached = _Detached()
            super().__init__(
                stdin=detached,  # type: ignore[arg-type]
                stdout=detached,  # type: ignore[arg-type]
                skip=_SKIP_MODULES,
                nosigint=True,
            )
            self.path = path
            self.post_mortem_of: str | None = None
            self._sock: socket.socket | None = None
            self._file: Any = None
            self._release = False

        def interaction(self, frame: Any, tb_or_exc: Any) -> None:
            self._release = False
            if self._file is None and not self._connect(frame, tb_or_exc):
                self.set_continue()
                return
            super().interaction(frame, tb_or_exc)
            if self._release:
                self.close()

        def set_continue(self) -> None:
            super().set_continue()
            self._release = True

        def set_quit(self) -> None:
            super().set_quit()
            self._release = True

        def _connect(self, frame: Any, tb: Any) -> bool:
            session = _open_session(self.path, _hello(frame, tb, self.post_mortem_of))
            if session is None:
                return False
            self._sock, self._file = session
            self.stdin = self.stdout = self._file
            return True

        def close(self) -> None:
            file, sock = self._file, self._sock
            self._file = self._sock = None
            detached = _Detached()
            self.stdin = self.stdout = detached  # type: ignore[assignment]
            for thing in (file, sock):
                if thing is not None:
                    try:
                        thing.close()
                    except OSError:
                        pass

    return _RelayedPdb


def _list_arg(code: NotebookCode, at: int, arg: str) -> str:
    """``list``'s argument with its numbers, counted from the first line of the cell of
    line ``at``, turned into the module's (``FIRST,COUNT``'s count stays as it is)."""
    parts = arg.split(",") if arg else []
    if not parts or not all(p.strip().isdigit() for p in parts):
        return arg
    cell, _ = cell_line(code, at)
    numbers = [int(part) for part in parts]
    count = len(numbers) == 2 and numbers[1] < numbers[0]  # FIRST,COUNT
    for n, number in enumerate(numbers):
        line = module_line(code, cell, number) if cell is not None else None
        if line is not None and not (count and n == 1):
            numbers[n] = line
    return ",".join(map(str, numbers))


def _cell_lines(
    code: NotebookCode,
    at: int,
    lines: Any,
    start: int,
    breaks: Any,
    current: int,
    raised: int,
) -> Iterator[str]:
    """pdb's listing of ``lines`` (from module line ``start``) numbered by their cell, with
    ``[cell N]`` before the lines of another cell than line ``at``'s."""
    shown_cell, _ = cell_line(code, at)
    # the blank line that ends each cell in the joined module is in no cell
    starts = [first for first, _, _ in code.line_map][1:]
    joins = {first - 1 for first in starts} | {code.source.count("\n")}
    for lineno, line in enumerate(lines, start):
        if lineno in joins and not line.strip():
            continue
        cell, number = cell_line(code, lineno)
        if cell != shown_cell:
            yield f"[cell {cell}]"
            shown_cell = cell
        mark = "B" if lineno in breaks else " "
        mark += "->" if lineno == current else (">>" if lineno == raised else "")
        yield f"{str(number).rjust(3):<4}{mark}\t{line.rstrip()}"


def _hello(frame: Any, tb: Any, error: str | None) -> dict[str, Any]:
    """The JSON line a session opens with: who stopped, at which request, where."""
    if frame is None and tb is not None:
        while tb.tb_next is not None:
            tb = tb.tb_next
        frame, line = tb.tb_frame, tb.tb_lineno
    else:
        line = frame.f_lineno if frame is not None else 0
    where = position(frame.f_code.co_filename, line) if frame is not None else ""
    return {
        "who": _who,
        "request": REQUEST.get(),
        "where": where,
        "pid": os.getpid(),
        "error": error,
    }


def _open_session(path: str, hello: dict[str, Any]) -> tuple[socket.socket, Any] | None:
    """The socket to peach's terminal and its file, once peach says ``go`` (None: peach is
    not there, or is stopping)."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(json.dumps(hello).encode() + b"\n")
        file = sock.makefile("rw", encoding="utf-8", errors="replace", newline="\n")
        if file.readline().strip() != "go":  # peach is stopping
            file.close()
            sock.close()
            return None
    except OSError:
        return None
    return sock, file
