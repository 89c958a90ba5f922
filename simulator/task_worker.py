"""One task run: ``python -m simulator.task_worker --fd N``.

The scheduler (``simulator.tasks``) starts this through ``simulator.workers``, in the task's
py_env, with the project folder as working directory and one end of a socketpair as file
descriptor ``N``. The worker puts itself in a process group of its own — so that a run
past its timeout is killed with every process it started, and a Ctrl-C in the terminal
reaches peach, which decides — then waits for one frame::

    ("run", 0, {"spec": TaskSpec fields, "payload": JSON text, "run_id": str})

It executes the extracted notebook code in a fresh module, runs ``init`` (if any), calls
the task's function — with the payload as first positional argument when it takes one —
and answers with one frame before exiting::

    ("done", 0, {"result": repr of the return value, "seconds": float})
    ("failed", 0, {"message": "TypeName: text", "traceback": "... cell 2, line 3 ..."})

What the task prints goes to stdout, which the scheduler reads line by line. The frame
format is ``simulator.protocol``'s (a 4-byte length, a pickled tuple); this module stays
small and standard-library only because it runs in every user environment and its import
time is part of every run.
"""

from __future__ import annotations

import json
import linecache
import os
import pickle
import signal
import socket
import sys
import time
import traceback
import types
from typing import Any

MAX_RESULT_CHARS = 2000
_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (best effort elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        os._exit(0)


def _read_frame(sock: socket.socket) -> Any:
    def exactly(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    return pickle.loads(exactly(int.from_bytes(exactly(4), "big")))


def _send_frame(sock: socket.socket, kind: str, payload: Any) -> None:
    body = pickle.dumps((kind, 0, payload), protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(len(body).to_bytes(4, "big") + body)


def notebook_position(line_map: list[tuple[int, int, int]], line: int) -> str:
    """Where line ``line`` of the extracted module is in the notebook: ``cell 3, line 2``.

    >>> notebook_position([(1, 2, 1), (5, 4, 1)], 6)
    'cell 4, line 2'
    """
    position = f"line {line}"
    for first_line, cell, first_cell_line in line_map:
        if first_line <= line:
            position = f"cell {cell}, line {first_cell_line + line - first_line}"
    return position


def describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def user_traceback(error: BaseException, spec: dict[str, Any]) -> str:
    """The traceback from the first frame in the notebook's code on, cells and lines named."""
    name = spec["source_name"]
    frames = traceback.extract_tb(error.__traceback__)
    start = next((i for i, f in enumerate(frames) if f.filename == name), 0)
    lines = ["Traceback (most recent call last):"]
    for frame in frames[start:]:
        if frame.filename == name and frame.lineno is not None:
            where = f"{name}, {notebook_position(spec['line_map'], frame.lineno)}"
        else:
            where = f"{frame.filename}, line {frame.lineno}"
        lines.append(f"  File {where}, in {frame.name}")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    lines.append(describe(error))
    return "\n".join(lines)


def _parameters(function: Any) -> tuple[list[str], list[str], bool, bool]:
    """(positional names, all names, takes *args, takes **kwargs) of ``function``."""
    code = getattr(function, "__code__", None)
    if isinstance(function, types.FunctionType) and code is not None:
        names = list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
        return (
            names[: code.co_argcount],
            names,
            bool(code.co_flags & _CO_VARARGS),
            bool(code.co_flags & _CO_VARKEYWORDS),
        )
    import inspect

    params = list(inspect.signature(function).parameters.values())
    kinds = inspect.Parameter
    return (
        [p.name for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)],
        [p.name for p in params if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)],
        any(p.kind is kinds.VAR_POSITIONAL for p in params),
        any(p.kind is kinds.VAR_KEYWORD for p in params),
    )


def call_task(function: Any, payload: Any, state: Any, has_state: bool, args: dict) -> Any:
    """Call the task's function: ``model`` and ``args`` by name when it accepts them, the
    payload as the first positional argument when it takes one, else no argument."""
    positional, names, varargs, varkw = _parameters(function)
    kwargs = {k: v for k, v in args.items() if k in names or varkw}
    if has_state and ("model" in names or varkw):
        kwargs["model"] = state
    free = [p for p in positional if p not in kwargs]
    result = function(payload, **kwargs) if free or varargs else function(**kwargs)
    if hasattr(result, "__await__"):
        import asyncio

        async def finish() -> Any:
            return await result

        result = asyncio.run(finish())
    return result


def run_task(spec: dict[str, Any], root: str, payload: Any) -> Any:
    """Execute the task's code and call its function; raises what the user's code raises."""
    for folder in (root, os.path.dirname(os.path.join(root, spec["notebook"]))):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    source, name = spec["source"], spec["source_name"]
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    module = types.ModuleType(f"peach_task_{spec['name']}".replace("-", "_"))
    module.__file__ = os.path.join(root, spec["notebook"])
    sys.modules[module.__name__] = module
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the user's task
    function = getattr(module, spec["method"], None)
    if not callable(function):
        raise NameError(f"{name} does not define a function '{spec['method']}'")
    state, has_state = None, False
    if spec.get("init"):
        init = getattr(module, spec["init"], None)
        if not callable(init):
            raise NameError(f"{name} does not define a function '{spec['init']}'")
        state, has_state = init(), True
    return call_task(function, payload, state, has_state, dict(spec.get("args") or {}))


def _outcome(spec: dict[str, Any], root: str, payload: Any) -> tuple[str, dict[str, Any]]:
    began = time.perf_counter()
    try:
        result = run_task(spec, root, payload)
    except SystemExit as error:
        if error.code in (None, 0):
            return "done", {"result": None, "seconds": time.perf_counter() - began}
        return "failed", {"message": describe(error), "traceback": user_traceback(error, spec)}
    except BaseException as error:  # noqa: BLE001 - every failure is the run's outcome
        return "failed", {"message": describe(error), "traceback": user_traceback(error, spec)}
    text = repr(result)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"… ({len(text)} characters)"
    return "done", {
        "result": None if result is None else text,
        "seconds": time.perf_counter() - began,
    }


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "--fd":
        sys.exit("usage: python -m simulator.task_worker --fd N")
    try:
        os.setpgid(0, 0)  # its own group: the scheduler kills the whole tree at once
    except OSError:
        pass
    _die_with_parent()
    from peach_cli.triggers import install_task_helpers

    install_task_helpers()
    sock = socket.socket(fileno=int(args[1]))
    try:
        kind, _, job = _read_frame(sock)
    except (EOFError, OSError):
        os._exit(0)  # a spare nobody used
    if kind != "run":
        os._exit(0)
    payload = json.loads(job["payload"]) if job.get("payload") is not None else None
    kind, answer = _outcome(job["spec"], job["root"], payload)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        _send_frame(sock, kind, answer)
    except OSError:
        pass
    os._exit(0)  # threads the task left running must not keep the run alive


if __name__ == "__main__":
    main()
