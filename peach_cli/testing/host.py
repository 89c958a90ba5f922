"""The host cases run against: the project's own simulator, started quietly, or a URL.

``local_host`` runs a ``simulator.session.DevSession`` (as ``peach dev --no-reload`` on a
free loopback port, no live view, replicas in their envs) on an event loop of its own, in a
background thread, so the caller may send blocking requests to it::

    with local_host(Path("examples/quickstart")) as url:
        httpx.get(f"{url}/recommend?item_id=apple")

It returns once every replica has started, and stops every replica on exit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 600.0
"""Building a py_environment the first time may take minutes."""


class _Runner:
    def __init__(
        self, plan: Any, project: Path, on_event: Callable[[Any], None] | None = None
    ) -> None:
        self.plan = plan
        self.project = project
        self.on_event = on_event
        self.url: str | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, name="peach-test-host", daemon=True)

    def _run(self) -> None:
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        self.loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as error:  # reported to the caller's thread
            self.error = error
        finally:
            self.ready.set()
            loop.close()

    async def _serve(self) -> None:
        from simulator.session import DevSession, SessionConfig

        self.stop = asyncio.Event()
        session = DevSession(SessionConfig(self.plan, project=self.project), on_event=self.on_event)
        try:
            await session.start()
            await session.wait_ready()
            self.url = session.url
            self.ready.set()
            await self.stop.wait()
        finally:
            await session.stop()

    def close(self) -> None:
        loop, stop = self.loop, self.stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass  # the loop already ended
        self.thread.join(timeout=60)


@contextmanager
def local_host(
    project: Path, *, plan: Any = None, on_event: Callable[[Any], None] | None = None
) -> Iterator[str]:
    """Serve ``project`` (its plan, built and checked as `peach dev` does, unless given)
    and yield the server's URL; ``ProjectInvalid`` when the project has errors.

    ``on_event`` gets the simulator's events (``simulator.events``), in the server's
    thread: what the answers alone do not show (a fallback covering an error, a replica
    that died)."""
    if plan is None:
        from peach_cli.checks.validate import checked_plan

        plan, _ = checked_plan(project, "testing")
    runner = _Runner(plan, project, on_event)
    runner.thread.start()
    try:
        if not runner.ready.wait(START_TIMEOUT_S):
            raise TimeoutError(f"the simulator of {project} did not start in {START_TIMEOUT_S:g} s")
        if runner.error is not None:
            raise runner.error
        assert runner.url is not None
        yield runner.url
    finally:
        runner.close()
