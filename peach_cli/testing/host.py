"""The host cases run against: the project's own simulator, started quietly, or a URL.

``Hosts`` is what `peach test` and the pytest plugin both run cases with: the host of each
project (``--url``, else its simulator, started at first use) and the one client that sends
the requests; closing it stops every simulator it started::

    with Hosts(url=None, timeout_s=60) as hosts:
        observed = observe(hosts.client, hosts.url_for(Path("examples/quickstart")), case)

``local_host`` runs a ``simulator.session.DevSession`` (as ``peach dev --no-reload`` on a
free loopback port, no live view, replicas in their envs) on an event loop of its own, in a
background thread, so the caller may send blocking requests to it::

    with local_host(Path("examples/quickstart"), plan) as url:
        httpx.get(f"{url}/recommend?item_id=apple")

It returns once every replica has started, and stops every replica on exit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.testing.run import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from peach_cli.client.send import Client

START_TIMEOUT_S = 600.0
"""Building a py_environment the first time may take minutes."""


class Hosts:
    """The hosts of one run of cases, and the client that sends them their requests.

    With ``url`` every project's cases go to that host; else each project's simulator is
    started the first time its URL is asked for (``local_host``), and stopped by ``close``.
    """

    def __init__(self, url: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._stack = ExitStack()
        self._urls: dict[Path, str] = {}
        self._client: Client | None = None
        self._masked: set[Path] = set()

    def url_for(self, project: Path) -> str:
        """The base URL ``project``'s cases are sent to: ``url``, else its simulator's
        (its plan built and checked as `peach dev` does, and started now if it has not
        been; ``ProjectInvalid`` when the project has errors)."""
        if self.url is not None:
            return self.url
        if project.resolve() not in self._urls:
            from peach_cli.checks.build import checked_plan

            self.simulator_url(project, checked_plan(project, "testing")[0])
        return self._urls[project.resolve()]

    def simulator_url(self, project: Path, plan: Any) -> str:
        """The URL of ``project``'s simulator serving ``plan`` (started now if it has not
        been)."""
        key = project.resolve()
        if key not in self._urls:
            self._urls[key] = self._stack.enter_context(local_host(project, plan))
        return self._urls[key]

    @property
    def client(self) -> Client:
        """The client every request is sent with (it verifies TLS for an ``https`` URL)."""
        if self._client is None:
            from peach_cli.client.send import Client

            tls = self.url is not None and self.url.startswith("https:")
            self._client = self._stack.enter_context(Client(self.timeout_s, tls=tls))
        return self._client

    def mask_secrets(self, project: Path) -> None:
        """Mask the values of the secrets ``project`` declares in everything shown from now
        on (once a project: a host that is no simulator of ours does not mask them)."""
        if project not in self._masked:
            self._masked.add(project)
            from peach_cli.project.secrets import hide_declared_in

            hide_declared_in(project)

    def close(self) -> None:
        """Close the client and stop every simulator started."""
        self._stack.close()

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Runner:
    def __init__(
        self,
        plan: Any,
        project: Path,
        on_event: Callable[[Any], None] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.plan = plan
        self.project = project
        self.on_event = on_event
        self.timeout_s = timeout_s
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
        config = SessionConfig(self.plan, project=self.project, timeout_s=self.timeout_s)
        session = DevSession(config, on_event=self.on_event)
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
    project: Path,
    plan: Any,
    *,
    on_event: Callable[[Any], None] | None = None,
    timeout_s: float | None = None,
) -> Iterator[str]:
    """Serve ``plan`` (``project``'s, built and checked as `peach dev` does) and yield the
    server's URL.

    ``on_event`` gets the simulator's events (``simulator.events``), in the server's
    thread: what the answers alone do not show (a fallback covering an error, a replica
    that died). ``timeout_s`` overrides every endpoint's (as `peach dev --timeout-s`)."""
    runner = _Runner(plan, project, on_event, timeout_s)
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
