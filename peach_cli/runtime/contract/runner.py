"""``ComponentRunner``: one replica's component — its module, its state, its calls.

Both hosts wrap it: ``peach_cli/runtime/replica_worker.py`` in a ``peach dev`` replica process, the
``Component`` deployment on Ray. ``peach dev`` also patches it: ``prepare_patch`` executes a
component's new code in a module of its own, ``commit_patch`` switches the method to it and
keeps the state ``init`` returned. A task (``peach_cli.runtime.task``) loads its code with the
same ``add_import_paths`` and ``execute_code``.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import linecache
import logging
import os
import sys
import threading
import types
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from peach_cli.runtime import debug, sampler
from peach_cli.runtime.contract.answers import CallResult, stream_required_message
from peach_cli.runtime.contract.binding import MethodSignature, bind_arguments
from peach_cli.runtime.contract.errors import ContractError, InitError, ResultNotJSON, StreamCut
from peach_cli.runtime.contract.request import RequestParams
from peach_cli.runtime.contract.results import (
    describe_exception,
    encode_chunk,
    is_empty,
    split_drift,
    to_json_value,
    user_traceback,
)
from peach_cli.runtime.contract.transport import STREAMING_KINDS
from peach_cli.runtime.plan import ComponentSpec, NotebookCode

logger = logging.getLogger("peach.contract")
_Code = TypeVar("_Code", bound=NotebookCode)

MethodKind = Literal["function", "coroutine", "generator", "async_generator"]


def method_kind(function: Callable[..., Any]) -> MethodKind:
    if inspect.isasyncgenfunction(function):
        return "async_generator"
    if inspect.isgeneratorfunction(function):
        return "generator"
    if inspect.iscoroutinefunction(function):
        return "coroutine"
    return "function"


class ComponentRunner:
    """One replica's view of a component: its module, its state and its calls.

    Example (inside a host)::

        runner = ComponentRunner(spec, project_root, replica_id="assistant/main#1")
        await runner.start()                          # exec the code, run init once
        loaded = runner.prepare_patch(new_spec)       # new code beside the old (InitError)
        runner.commit_patch(loaded)                   # next calls: new method, same state
        result = await runner.call(params)            # CallResult, never raises for user errors
        chunks = await runner.open_stream(params)     # ContractError here, before any byte
        try:
            async for chunk in chunks: ...            # bytes, as soon as each is yielded
        finally:
            await chunks.aclose()                     # closes the user's generator

    Sync methods and sync generators run in the runner's own thread pool, so slow calls
    (say, past ``timeout_s``) do not starve the replica's other requests.
    """

    max_threads = 64

    def __init__(self, spec: ComponentSpec, root: Path, *, replica_id: str = "") -> None:
        self.spec = spec
        self.root = Path(root)
        self.cwd = os.getcwd()
        """The folder the user's code runs in (a Ray replica's: its working_dir)."""
        self.replica_id = replica_id or spec.key
        self.state: Any = None
        self.method: Callable[..., Any] | None = None
        self.signature: MethodSignature | None = None
        self.method_kind: MethodKind = "function"
        self.init_function: Callable[..., Any] | None = None
        self.last_reinit_error: str | None = None
        self.reinit_count = 0
        self._ready = asyncio.Event()
        self._reinit_task: asyncio.Task[None] | None = None  # held: the loop keeps weak refs
        self._executor = ThreadPoolExecutor(self.max_threads, thread_name_prefix="peach-call")
        self.abandoned_threads = 0
        """How many times new code was patched in (``commit_patch``) since ``start``."""
        debug.install(self.replica_id)  # breakpoint() and pdb.set_trace() (SPEC §7)

    # -- lifecycle -----------------------------------------------------------------------

    def load(self) -> None:
        """Execute the component's extracted code in a fresh module and find its functions."""
        add_import_paths(self.root, self.spec.notebook)
        self._use(self._execute(self.spec))

    def _execute(self, spec: ComponentSpec) -> LoadedCode[ComponentSpec]:
        return execute_code(spec, self.root, self.module_name)

    def _use(self, loaded: LoadedCode[ComponentSpec]) -> None:
        self.spec = loaded.spec
        sys.modules[self.module_name] = loaded.module  # dataclasses and pickling look it up
        self.method = loaded.method
        self.signature = MethodSignature.of(loaded.method)
        self.method_kind = method_kind(loaded.method)
        self.init_function = loaded.init

    @property
    def module_name(self) -> str:
        return f"peach_component_{self.spec.endpoint}_{self.spec.name}".replace("-", "_")

    def prepare_patch(self, spec: ComponentSpec) -> LoadedCode[ComponentSpec]:
        """Execute the new code of this component in a fresh module, without running init.

        Nothing changes for calls until ``commit_patch``: the method in use, its module and
        the state stay as they are. Raises ``InitError`` when the code raises, lacks its
        functions, or its method became or stopped being a generator (a restart is needed
        then: callers decided how to call it when the replica started).
        """
        filename = debug.code_filename(self.spec)
        previous = linecache.cache.get(filename)
        try:
            loaded = self._execute(spec)
            kind = method_kind(loaded.method)
            if (kind in STREAMING_KINDS) != self.streams:
                now = "is now" if kind in STREAMING_KINDS else "is no longer"
                raise InitError(f"{spec.method}() {now} a generator: the replica must restart")
            MethodSignature.of(loaded.method)
        except BaseException:
            if previous is not None:  # tracebacks of the code in use keep their lines
                linecache.cache[filename] = previous
            raise
        return loaded

    def commit_patch(self, loaded: LoadedCode[ComponentSpec]) -> None:
        """Serve the code ``prepare_patch`` loaded: the next call runs the new method with
        the state ``init`` returned before; calls already running finish on the old one."""
        self._use(loaded)

    async def _in_thread(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # the request id, for a breakpoint's banner
        work = self._executor.submit(context.run, _then_finish, partial(function, *args, **kwargs))
        try:
            return await asyncio.wrap_future(work, loop=loop)
        except asyncio.CancelledError:
            if not work.cancelled():  # already running: a thread cannot be stopped, so
                # count it as abandoned until the function returns on its own, if ever
                self.abandoned_threads += 1
                work.add_done_callback(lambda _: loop.call_soon_threadsafe(self._thread_returned))
            raise

    def _thread_returned(self) -> None:
        self.abandoned_threads -= 1

    @property
    def threads_exhausted(self) -> bool:
        """True when every thread is held by a call nobody waits for any more.

        The replica can then no longer run a sync call: hosts should replace it.
        """
        return self.abandoned_threads >= self.max_threads

    async def _run_init(self) -> Any:
        assert self.init_function is not None
        if inspect.iscoroutinefunction(self.init_function):
            return await self.init_function()
        return await self._in_thread(self.init_function)

    async def start(self) -> None:
        """Load the code and run ``init`` once; raise ``InitError`` if either fails."""
        self.load()
        if self.init_function is not None:
            try:
                self.state = await self._run_init()
            except (Exception, SystemExit) as error:
                await self._post_mortem(error)
                raise InitError(
                    f"{self.spec.init}() raised {describe_exception(error)}",
                    user_traceback(error, self.spec),
                ) from None
        self._ready.set()

    def close(self) -> None:
        """Release the runner's threads (calls still running finish in the background)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def streams(self) -> bool:
        """Whether the method is a generator, so callers must ask for a stream."""
        return self.method_kind in STREAMING_KINDS

    @property
    def reinitializing(self) -> bool:
        """True while a drift re-init runs; new calls wait for it."""
        return not self._ready.is_set()

    def _keep_cwd(self) -> None:
        """Re-enter ``cwd`` when it was deleted and made again under its name.

        Ray's runtime_env agent of a node sets up a ``working_dir`` by removing the folder
        and unpacking the package again: two nodes on one machine share that folder, so a
        task's job starting on one (the scheduler's) replaced the folder a replica on the
        other runs in. Its ``os.getcwd()`` then raises ``FileNotFoundError``, and so did
        every drift re-init of ``examples/assistant`` (``Path.cwd()``).
        """
        try:
            os.getcwd()
        except FileNotFoundError:
            try:
                os.chdir(self.cwd)
            except OSError:  # not made again (yet): the user's code reports what it lacks
                pass

    async def _reinit(self) -> None:
        self._keep_cwd()
        try:
            state = await self._run_init()
        except Exception as error:  # keep the old state, report the error (SPEC decision)
            self.last_reinit_error = (
                "re-init after drift failed, keeping the previous state: "
                f"{self.spec.init}() raised {describe_exception(error)}"
            )
            logger.error(
                "%s: %s\n%s",
                self.replica_id,
                self.last_reinit_error,
                user_traceback(error, self.spec),
            )
        else:
            self.state = state
            self.last_reinit_error = None
        finally:
            self.reinit_count += 1
            self._ready.set()

    def _schedule_reinit(self) -> None:
        if self.init_function is None or self.reinitializing:
            return
        self._ready.clear()
        self._reinit_task = asyncio.get_running_loop().create_task(self._reinit())

    async def wait_reinit(self) -> None:
        """Wait until a drift re-init (if any) is over."""
        await self._ready.wait()

    # -- calls ---------------------------------------------------------------------------

    def _bind(self, params: RequestParams) -> dict[str, Any]:
        assert self.signature is not None, "start() first"
        return bind_arguments(
            self.signature,
            params,
            self.spec.args,
            state=self.state,
            state_param=self.spec.state_param,
        )

    async def call(self, params: RequestParams) -> CallResult:
        """Run one non-streaming call; every failure becomes a ``CallResult``.

        A drift-aware answer is returned first; the re-init it triggers then runs while new
        calls to this replica wait for the fresh state.
        """
        assert self.method is not None, "start() first"
        await self._ready.wait()
        self._keep_cwd()
        if self.streams:
            return CallResult.failure(
                "stream_required",
                stream_required_message(self.spec.url, self.method_kind),
                self.replica_id,
            )
        try:
            kwargs = self._bind(params)
        except ContractError as error:
            return CallResult.failure(error.code, error.message, self.replica_id)
        try:
            method = sampler.timed(self.method)  # itself, unless `peach profile` runs
            if self.method_kind == "coroutine":
                try:
                    raw = await method(**kwargs)
                finally:
                    debug.finish()
            else:
                raw = await self._in_thread(method, **kwargs)
        except Exception as error:
            await self._post_mortem(error)
            logger.error(
                "%s: %s() raised\n%s",
                self.replica_id,
                self.spec.method,
                user_traceback(error, self.spec),
            )
            return CallResult.failure(
                "method_error",
                f"{self.spec.method}() raised {describe_exception(error)}",
                self.replica_id,
            )
        value, drift = split_drift(raw)
        try:
            result = to_json_value(value)
        except ResultNotJSON as error:
            return CallResult.failure(
                "method_error",
                f"{self.spec.method}() returned a result that is not JSON: {error}",
                self.replica_id,
            )
        if drift:
            self._schedule_reinit()
        return CallResult(
            ok=True, result=result, empty=is_empty(value), drift=drift, replica=self.replica_id
        )

    async def open_stream(self, params: RequestParams) -> AsyncGenerator[bytes, None]:
        """Bind the call and return its chunks as bytes, each as soon as it is yielded.

        Raises ``ContractError`` (``bad_request``) before any byte is sent. An exception
        inside the user's generator is logged and raised as ``StreamCut``: hosts cut the
        response. Closing the returned
        iterator (a client that went away) closes the user's generator, so its ``finally``
        runs.
        """
        assert self.method is not None, "start() first"
        await self._ready.wait()
        self._keep_cwd()
        if not self.streams:
            raise ContractError("bad_request", f"{self.spec.method}() does not stream")
        kwargs = self._bind(params)
        if self.method_kind == "async_generator":
            return self._relay_async(self.method(**kwargs))
        return self._relay_sync(self.method(**kwargs))

    async def _relay_async(self, agen: Any) -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in agen:
                yield encode_chunk(chunk)
        except Exception as error:
            self._log_stream_error(error)
            raise StreamCut(describe_exception(error)) from None
        finally:
            await agen.aclose()

    async def _relay_sync(self, generator: Any) -> AsyncGenerator[bytes, None]:
        lock = threading.Lock()  # next() and close() must never overlap

        def step() -> Any:
            with lock:
                try:
                    return next(generator)
                except StopIteration:
                    return _DONE

        def close() -> None:
            with lock:
                generator.close()

        try:
            while True:
                chunk = await self._in_thread(step)
                if chunk is _DONE:
                    break
                yield encode_chunk(chunk)
        except Exception as error:
            self._log_stream_error(error)
            raise StreamCut(describe_exception(error)) from None
        finally:
            await self._in_thread(close)

    async def _post_mortem(self, error: BaseException) -> None:
        """``--pdb``: a session at the frame that raised, in a thread of its own."""
        if debug.post_mortem_wanted():
            await self._in_thread(debug.post_mortem, error)

    def _log_stream_error(self, error: BaseException) -> None:
        logger.error(
            "%s: the stream of %s() ended with an error\n%s",
            self.replica_id,
            self.spec.method,
            user_traceback(error, self.spec),
        )


_DONE = object()


def _then_finish(work: Callable[[], Any]) -> Any:
    """Run ``work``; then end the debugger session it opened on this thread, if any."""
    try:
        return work()
    finally:
        debug.finish()


@dataclass(frozen=True)
class LoadedCode(Generic[_Code]):
    """Notebook code executed in its own module: what ``commit_patch`` switches to."""

    spec: _Code
    module: types.ModuleType
    method: Callable[..., Any]
    init: Callable[..., Any] | None


def add_import_paths(root: Path, notebook: str) -> None:
    """Let the code import the project's modules: the project folder and the notebook's
    folder go first on ``sys.path``."""
    for folder in (root, (root / notebook).parent):
        text = str(folder)
        if text not in sys.path:
            sys.path.insert(0, text)


def execute_code(code: _Code, root: Path, module_name: str) -> LoadedCode[_Code]:
    """Run ``code.source`` in a new module (registered in ``sys.modules`` only while it
    runs) and find its functions; raise ``InitError`` when it raises (``cause``: what it
    raised, ``SystemExit`` included) or lacks them."""
    # tracebacks and inspect.getsource find the notebook code by its name
    filename = debug.code_filename(code)  # <notebooks/X.ipynb>: pdb lists it from linecache
    lines = code.source.splitlines(keepends=True)
    linecache.cache[filename] = (len(code.source), None, lines, filename)
    debug.register(code)
    module = types.ModuleType(module_name)
    module.__file__ = str(root / code.notebook)
    # While it runs, the code's module must be in sys.modules (a @dataclass looks its
    # module up); the module in use stays registered otherwise, until the caller's ``_use``.
    previous = sys.modules.get(module_name)
    sys.modules[module_name] = module
    try:
        compiled = compile(code.source, filename, "exec")
        exec(compiled, module.__dict__)  # noqa: S102 - running the user's notebook is the job
    except (Exception, SystemExit) as error:  # anything the notebook raises, exit() too
        raise InitError(
            f"{code.source_name} failed to run: {describe_exception(error)}",
            user_traceback(error, code),
            cause=error,
        ) from None
    finally:
        if previous is not None:
            sys.modules[module_name] = previous
        else:
            sys.modules.pop(module_name, None)
    method = getattr(module, code.method, None)
    if not callable(method):
        raise InitError(f"{code.source_name} does not define a function '{code.method}'")
    init = None
    if code.init:
        init = getattr(module, code.init, None)
        if not callable(init):
            raise InitError(f"{code.source_name} does not define a function '{code.init}'")
    return LoadedCode(code, module, method, init)
