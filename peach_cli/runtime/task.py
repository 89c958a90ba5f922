"""Running a task's code once: the part shared by ``peach task run``, ``peach dev`` and Ray.

``run_outcome(spec, root, payload)`` runs a ``TaskSpec`` with the contract's runner: its
extracted notebook code in a fresh module (``execute_code``, as a replica's), ``init`` (if
any), then the task's function bound by ``bind_task_call`` — the payload as first positional
argument when it takes one, else none; ``args`` and the state as ``model`` by name — and
says how it went: ``TaskReturned`` (the JSON of what it returned) or ``TaskFailed`` (the
user's traceback with notebook cells and lines). Locally the task process
(``peach_cli.runtime.task_worker``) calls it; on Ray it is a job's entrypoint::

    python -m peach_cli.runtime.task TASK_JSON      # payload in PEACH_TASK_PAYLOAD

(``peach deploy``'s jobs run ``python -m _peach_spec``, whose ``__main__`` calls ``main``
on the ``task.json`` beside it, in the job's spec package).

which prints what the task prints, then its traceback on failure, and exits 0 (returned)
or 1 (raised). Standard library only: it runs in every user environment.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from peach_cli.runtime import debug
from peach_cli.runtime.contract.binding import MethodSignature, bind_task_call
from peach_cli.runtime.contract.errors import ContractError, InitError
from peach_cli.runtime.contract.results import describe_exception, user_traceback
from peach_cli.runtime.contract.runner import add_import_paths, execute_code
from peach_cli.runtime.plan import TaskSpec
from peach_cli.runtime.protocol import TaskFailed, TaskReturned
from peach_cli.runtime.triggers import PAYLOAD_ENV

MAX_RESULT_CHARS = 2000


def run_task(spec: TaskSpec, root: str, payload: Any) -> Any:
    """Execute the task's code, run ``init``, call its function; raises what the user's
    code raises (``ContractError`` when the function cannot be called)."""
    folder = Path(root)
    debug.install(f"task {spec.name}")
    add_import_paths(folder, spec.notebook)
    module_name = f"peach_task_{spec.name}".replace("-", "_")
    try:
        loaded = execute_code(spec, folder, module_name)
    except InitError as error:
        if error.cause is not None:
            raise error.cause from None  # as the code raised it: SystemExit(0) is a normal end
        raise
    sys.modules[module_name] = loaded.module  # dataclasses and pickling look it up
    try:
        state = None
        if loaded.init is not None:
            state = _finish(loaded.init())
        args, kwargs = bind_task_call(
            MethodSignature.of(loaded.method), payload, spec.args, state=state
        )
        return _finish(loaded.method(*args, **kwargs))
    except Exception as error:
        debug.post_mortem(error)  # --pdb: at the frame that raised, then the run fails
        raise
    finally:
        debug.finish()


def _finish(value: Any) -> Any:
    """The value itself, or what it resolves to when it is awaitable (an ``async def``)."""
    if not inspect.isawaitable(value):
        return value

    async def wait() -> Any:
        return await value

    return asyncio.run(wait())


def result_text(result: Any) -> str:
    """How a task's return value is shown: as JSON when it is JSON (what a user would send or
    store); bytes as their text; anything else as its type and ``str()``, never a repr.

    >>> result_text({"done": True}), result_text(("a", 1)), result_text(bytearray(b"garbage"))
    ('{"done": true}', '["a", 1]', '"garbage" (7 bytes)')
    >>> result_text(range(2))
    'a range (not JSON): range(0, 2)'
    """
    from peach_cli.runtime.contract.errors import ResultNotJSON
    from peach_cli.runtime.contract.results import to_json_value

    try:
        return json.dumps(to_json_value(result), ensure_ascii=False)
    except (ResultNotJSON, TypeError, ValueError, RecursionError):
        pass
    if isinstance(result, (bytes, bytearray, memoryview)):
        data = bytes(result)
        text = data.decode("utf-8", "replace")
        return f"{json.dumps(text, ensure_ascii=False)} ({len(data)} bytes)"
    return f"a {type(result).__qualname__} (not JSON): {result}"


def run_outcome(spec: TaskSpec, root: str, payload: Any) -> TaskReturned | TaskFailed:
    """Run the task once and say how it went; never raises for what the task does."""
    began = time.perf_counter()
    try:
        result = run_task(spec, root, payload)
    except ContractError as error:
        return TaskFailed(f"{spec.method}() cannot be called: {error.message}", "")
    except InitError as error:
        return TaskFailed(error.message, error.details)
    except SystemExit as error:
        if error.code in (None, 0):
            return TaskReturned(None, time.perf_counter() - began)
        return TaskFailed(describe_exception(error), user_traceback(error, spec))
    except BaseException as error:  # noqa: BLE001 - every failure is the run's outcome
        return TaskFailed(describe_exception(error), user_traceback(error, spec))
    text = result_text(result)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"… ({len(text)} characters)"
    return TaskReturned(None if result is None else text, time.perf_counter() - began)


def main(argv: list[str] | None = None) -> None:
    """A Ray job's entrypoint: run the task described by the JSON file ``argv[0]``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m peach_cli.runtime.task TASK_JSON")
    from peach_cli.runtime.triggers import install_task_helpers

    install_task_helpers()
    with open(args[0], encoding="utf-8") as handle:
        spec = TaskSpec.from_dict(json.load(handle))
    text = os.environ.get(PAYLOAD_ENV)
    payload = json.loads(text) if text else None
    outcome = run_outcome(spec, os.getcwd(), payload)
    sys.stdout.flush()
    match outcome:
        case TaskReturned(result=result, seconds=seconds):
            returned = f": returned {result}" if result is not None else ""
            print(f"task {spec.name} returned in {seconds:.2f} s{returned}", flush=True)
        case TaskFailed(message=message, traceback=traceback):
            print(traceback or message, file=sys.stderr, flush=True)
            sys.exit(1)


if __name__ == "__main__":
    main()
