"""Running a task's code once: the part shared by ``peach task run``, ``peach dev`` and Ray.

``run_outcome(spec, root, payload)`` executes the task's extracted notebook code in a fresh
module, runs ``init`` (if any) and calls the task's function — with the payload as first
positional argument when it takes one, else with none — and says how it went: the repr of
what it returned, or the user's traceback with notebook cells and lines. Locally the task
process (``peach_cli.runtime.task_worker``) calls it; on Ray it is a job's entrypoint::

    python -m peach_cli.runtime.task .peach/task.json      # payload in PEACH_TASK_PAYLOAD

which prints what the task prints, then its traceback on failure, and exits 0 (returned)
or 1 (raised). Standard library only: it runs in every user environment.
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import time
import types
from typing import Any, NamedTuple, cast

from peach_cli.runtime.contract.results import describe_exception
from peach_cli.runtime.contract.results import user_traceback as contract_traceback
from peach_cli.runtime.triggers import PAYLOAD_ENV

MAX_RESULT_CHARS = 2000
_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08


class _Code(NamedTuple):
    """What the contract's traceback needs of a task's code (a ``ComponentSpec`` subset)."""

    source_name: str
    line_map: tuple[tuple[int, int, int], ...]


def describe(error: BaseException) -> str:
    """``TypeName: text``, as the contract says it for a method that raised."""
    return describe_exception(error)


def user_traceback(error: BaseException, spec: dict[str, Any]) -> str:
    """The traceback from the first frame in the notebook's code on, cells and lines named
    (the contract's, so a task's traceback reads like an endpoint's)."""
    code = _Code(spec["source_name"], tuple(tuple(entry) for entry in spec.get("line_map", ())))
    return contract_traceback(error, cast(Any, code))


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


def run_outcome(spec: dict[str, Any], root: str, payload: Any) -> tuple[str, dict[str, Any]]:
    """``("done", {"result", "seconds"})`` or ``("failed", {"message", "traceback"})``."""
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
    """A Ray job's entrypoint: run the task described by the JSON file ``argv[0]``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m peach_cli.runtime.task TASK_JSON")
    from peach_cli.runtime.triggers import install_task_helpers

    install_task_helpers()
    with open(args[0], encoding="utf-8") as handle:
        spec = json.load(handle)
    text = os.environ.get(PAYLOAD_ENV)
    payload = json.loads(text) if text else None
    kind, answer = run_outcome(spec, os.getcwd(), payload)
    sys.stdout.flush()
    if kind == "done":
        returned = f": returned {answer['result']}" if answer["result"] is not None else ""
        print(f"task {spec['name']} returned in {answer['seconds']:.2f} s{returned}", flush=True)
        return
    print(answer["traceback"], file=sys.stderr, flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
