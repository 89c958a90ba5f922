"""Which interpreter each component's replicas run in under ``peach dev``.

Isolated (the default): every py_environment is a virtual env built from ``base`` + its
own requirements (``peach_cli.envs``), and its replicas run that env's Python with only
peach's staged standard-library runtime added to their path — so an import the conf does
not declare fails here as it fails on the platform. Shared (``--shared-env``): every
replica runs peach's own interpreter, as before environments existed (fast, unchecked).

    envs = Environments(root, on_event=emit)                # isolated
    launch = await envs.launch_for(spec)                    # builds the env once, or raises
                                                            # EnvUnavailable(message)

An env is built once per requirement set and ``peach dev`` run (in a thread, so serving
goes on), reused across reloads, and rebuilt only when its requirements change. A build
reports ``EnvProgress`` events and, when it fails, ``EnvFailed``. ``close()`` (``peach dev``
stopping) stops the builds under way at once: uv is killed, nothing half-built is kept.
While it runs, it marks each env it uses (and the staged runtime) in use, so that
``peach env prune --all`` elsewhere keeps them (``peach_cli.envs.lock.InUse``).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.envs.builder import in_use_file
from peach_cli.envs.lock import InUse, LockTimeout
from peach_cli.envs.uvrun import UvCancelled
from peach_cli.errors import EnvBuildError
from peach_cli.runtime.plan import ComponentSpec, TaskSpec
from simulator.events import EnvFailed, EnvProgress, Event
from simulator.spawn import Interpreter, WorkerLaunch

if TYPE_CHECKING:
    from peach_cli.envs import BuildProgress, BuiltEnv

_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


class EnvUnavailable(Exception):
    """The component's env could not be built; the message is the builder's reason."""


class Environments:
    """The envs of one ``peach dev`` run: built on first use, then reused."""

    def __init__(
        self,
        root: Path,
        *,
        isolated: bool = True,
        offline: bool = False,
        on_event: Callable[[Event], None] | None = None,
        env: tuple[tuple[str, str], ...] = (),
        inherit_env: bool = False,
    ) -> None:
        self.root = Path(root).resolve()
        self.isolated = isolated
        self.offline = offline
        self.on_event = on_event
        self.env = env
        """Extra environment variables of every worker (the task scheduler's socket)."""
        self.inherit_env = inherit_env
        """Workers start from peach's whole environment, not the minimal one."""
        self._builds: dict[tuple[str, tuple[str, ...]], asyncio.Future[WorkerLaunch]] = {}
        self._shared = WorkerLaunch(self.root, env=env, inherit_env=inherit_env)
        self._closed = threading.Event()
        """Set by ``close``: builds under way stop (uv is killed), no new one starts."""
        self._uses: list[InUse] = []
        self._uses_lock = threading.Lock()  # builds take marks in their threads

    def emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)

    async def launch_for(self, spec: ComponentSpec | TaskSpec) -> WorkerLaunch:
        """How to start ``spec``'s replicas (or task); builds its env first when needed.

        Raises ``EnvUnavailable`` when the env cannot be built (the message names the env
        and, where uv's reason points at one, the requirement).
        """
        if not self.isolated:
            return self._shared
        if self._closed.is_set():
            raise EnvUnavailable(f"py_env {spec.py_env}: peach is stopping")
        key = (spec.py_env, tuple(spec.dependencies))
        build = self._builds.get(key)
        if build is None or (build.done() and not _succeeded(build)):  # a failure is retried
            build = self._builds[key] = asyncio.ensure_future(self._build(*key))
            build.add_done_callback(_retrieved)  # nobody may wait for it any more
        try:
            return await asyncio.shield(build)
        except EnvBuildError as error:
            raise EnvUnavailable(error.message) from None

    def close(self) -> None:
        """Stop the builds under way (``peach dev`` is stopping): uv is killed at once
        instead of being waited for, and no build starts after. The envs stay marked in
        use until ``release``, once their replicas have stopped."""
        self._closed.set()

    def release(self) -> None:
        """Unmark the envs in use (every replica and task of this run has stopped)."""
        self.close()
        with self._uses_lock:
            uses, self._uses = self._uses, []
        for use in uses:
            use.release()

    def launches(self) -> list[WorkerLaunch]:
        """The launches of every env built so far (spare workers are kept for each)."""
        if not self.isolated:
            return [self._shared]
        return [build.result() for build in self._builds.values() if _succeeded(build)]

    async def _build(self, name: str, requirements: tuple[str, ...]) -> WorkerLaunch:
        from peach_cli.envs import EnvSpec, ensure_env
        from peach_cli.envs.runtime import stage_runtime

        loop = asyncio.get_running_loop()

        def progress(step: BuildProgress) -> None:  # called in the build's thread
            event = EnvProgress(name, step.phase, step.elapsed_s, step.detail)
            loop.call_soon_threadsafe(self.emit, event)

        spec = EnvSpec(name, requirements)

        def build() -> tuple[BuiltEnv, Path]:
            for _ in range(3):  # a prune elsewhere may remove it between finding and holding
                env = ensure_env(spec, offline=self.offline, progress=progress, cancel=self._closed)
                runtime = stage_runtime()
                try:
                    if self._hold(env.key, env.path) and self._hold(runtime.name, runtime):
                        return env, runtime
                except LockTimeout as error:  # a prune held it for a minute: do not wait on
                    raise EnvBuildError(name, str(error)) from None
            raise EnvBuildError(name, "its env keeps being removed (peach env prune) as it starts")

        try:
            env, runtime = await asyncio.to_thread(build)
        except UvCancelled:
            raise EnvBuildError(name, "the build was stopped: peach is stopping") from None
        except EnvBuildError as error:
            self.emit(EnvFailed(name, error.message))
            raise
        except OSError as error:  # the cache folder is not writable, the disk is full
            failure = EnvBuildError(name, f"cannot write the env cache: {error}")
            self.emit(EnvFailed(name, failure.message))
            raise failure from None
        interpreter = Interpreter(
            python=str(env.python), path=(str(runtime),), isolated=True, name=name
        )
        return WorkerLaunch(self.root, interpreter, env=self.env, inherit_env=self.inherit_env)

    def _hold(self, name: str, path: Path) -> bool:
        """Mark ``path`` (an env, a staged runtime) in use until ``release``; False when it
        was removed before the mark was taken. Raises ``LockTimeout``, and ``UvCancelled``
        once ``close`` was called."""
        use = InUse(in_use_file(name))
        use.acquire()
        if not path.is_dir():
            use.release()
            return False
        with self._uses_lock:
            if self._closed.is_set():  # stopping: this build serves nobody
                use.release()
                raise UvCancelled
            self._uses.append(use)
        return True


def _retrieved(build: asyncio.Future[WorkerLaunch]) -> None:
    if not build.cancelled():
        build.exception()  # a failed build is reported by EnvFailed, not at exit


def _succeeded(build: asyncio.Future[WorkerLaunch]) -> bool:
    return build.done() and not build.cancelled() and build.exception() is None


def explain_init_error(message: str, launch: WorkerLaunch) -> str:
    """A replica's init error, with what to declare when it is a missing module of an
    isolated env (``yaml`` → add ``pyyaml`` to that py_env)."""
    env = launch.interpreter.name
    match = _MISSING_MODULE.search(message)
    if not env or match is None:
        return message
    from peach_cli.envs import explain_missing_module

    return f"{message}: {explain_missing_module(match.group(1), env)}"
