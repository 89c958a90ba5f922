"""The one wiring of every command that runs against a project's host or a URL (`peach test`
and its pytest plugin, `peach fuzz`, `peach profile`, `peach replay`, `peach bench`).

``Host`` is what one run of a command sends to, wired once: the project found and read once
(``FoundProject``), its plan checked — or with ``--url`` (checked by the command, with
``peach_cli.client.items.base_url``) its secrets masked —, the host (the project's simulator, started at first use, or ``--url``), what the
host declares it is (``dev`` or ``ray``, from its ``/_peach/health``:
``runtime.contract.status``), what it serves (its OpenAPI document), and the client that
sends to it; closing it stops what it started::

    with Host(Path("examples/quickstart"), None, doing="testing", tool="test") as host:
        observe(host.client, host.base, case)
    host.kind                                    # "dev"

``FoundProject`` is the project, its conf files found and read once; everything a command
needs of it comes from that one reading — its plan (validated, not read again), the secrets
to mask, the root its case files are under::

    found = FoundProject.at(Path("examples/quickstart"), need_conf=True)
    found.mask()                                # its secrets masked, no plan

What a host declares, its OpenAPI document and its ``/_peach/*`` actions are asked through
``peach_cli.client.actions``.

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
from typing import TYPE_CHECKING, Any, Self

from peach_cli.boundary import Secrets
from peach_cli.errors import UsageError
from peach_cli.testing.run import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from peach_cli.client.send import Client
    from peach_cli.project.diagnostics import Diagnostic
    from peach_cli.project.loader import Project
    from peach_cli.runtime.contract.status import HostKind
    from peach_cli.runtime.plan import ProjectPlan

START_TIMEOUT_S = 600.0
"""Building a py_environment the first time may take minutes."""
LOCAL_SLACK_S = 30.0
"""Past the project's ``timeout_s``, how long its simulator's answer may take before it
counts as none."""


class FoundProject:
    """The project at ``given``: its root and its conf files, found and read once.

    With no conf there (``need_conf`` false: a folder whose endpoints are on another host)
    the folder is its own root and nothing is read; ``missing`` says why there is none.
    """

    def __init__(
        self,
        given: Path,
        root: Path,
        read: tuple[Project | None, list[Diagnostic]] | None,
        missing: UsageError | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        self.given = given
        self.secrets = secrets if secrets is not None else Secrets()
        """The run's secrets: the project's values go there (``mask``), its simulator's too."""
        self.root = root
        self.read = read
        self.missing = missing
        self._plan: ProjectPlan | None = None

    @classmethod
    def at(
        cls, path: Path, *, need_conf: bool, mask: bool = False, secrets: Secrets | None = None
    ) -> FoundProject:
        """The project at ``path``; ``UsageError`` when ``path`` does not exist, or holds no
        conf and ``need_conf``. ``secrets``: the run's, which ``mask`` adds to; with
        ``mask`` the secrets the conf declares are masked as soon as it is read (``mask``)."""
        from peach_cli.project.filenames import find_conf_files
        from peach_cli.project.loader import read_project
        from peach_cli.project.notebook import fewer_collections
        from peach_cli.project.secrets import hide_declared_read

        if not need_conf and not path.exists():
            raise UsageError(f"{path} does not exist")
        try:
            root, files = find_conf_files(path)
        except UsageError as error:
            if need_conf:
                raise
            return cls(path, path if path.is_dir() else path.parent, None, error, secrets)
        with fewer_collections():
            found = cls(path, root, read_project(root, files), secrets=secrets)
        if mask:
            hide_declared_read(found.root, found.read, found.secrets)
        return found

    @classmethod
    def masked(cls, path: Path, *, secrets: Secrets) -> FoundProject:
        """The project at ``path`` (``UsageError`` when it holds no conf), the values of the
        secrets its conf declares masked in everything the run of ``secrets`` shows from now
        on."""
        return cls.at(path, need_conf=True, mask=True, secrets=secrets)

    def require(self) -> None:
        """``UsageError`` when no conf was found (the project was named, so it must be one)."""
        if self.missing is not None:
            raise self.missing

    def mask(self) -> None:
        """Mask the values of the secrets the conf declares in everything the run shows from
        now on (a conf with errors as far as it was read; no conf declares none)."""
        from peach_cli.project.secrets import hide_declared_read

        hide_declared_read(self.root, self.read, self.secrets)

    def built(self) -> ProjectPlan | None:
        """The plan of what was read, None when it has errors or there is no conf."""
        if self.read is None:
            return None
        from peach_cli.checks.build import plan_read

        return plan_read(*self.read)[0]

    def plan(self, doing: str) -> ProjectPlan:
        """The plan, checked as `peach dev` does; ``ProjectInvalid`` when the project has
        errors (``2 errors in examples/bad: not testing``)."""
        if self._plan is None:
            self.require()
            assert self.read is not None
            from peach_cli.checks.build import checked_read

            self._plan = checked_read(self.given, self.read, doing)[0]
        return self._plan


class _Started:
    """What holds the clients it opened and the simulators it started in ``_stack``:
    ``close`` (or the end of its ``with``) closes and stops them all."""

    _stack: ExitStack

    def close(self) -> None:
        """Close every client and stop every simulator started."""
        self._stack.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Hosts(_Started):
    """The hosts of one run of cases, and the client that sends them their requests.

    With ``url`` every project's cases go to that host; else each project's simulator is
    started the first time its URL is asked for (``local_host``), and stopped by ``close``.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        secrets: Secrets | None = None,
    ) -> None:
        self.url = url
        self.secrets = secrets if secrets is not None else Secrets()
        """The run's secrets: each project's values, and its simulator's, go there."""
        self.timeout_s = timeout_s
        self._stack = ExitStack()
        self._urls: dict[Path, str] = {}
        self._client: Client | None = None
        self._projects: dict[Path, FoundProject] = {}
        self._masked: set[Path] = set()

    def project(self, path: Path) -> FoundProject:
        """The project at ``path``, found and read the first time it is asked for (a folder
        with no conf is its own root, declaring no secret; its plan is that ``UsageError``)."""
        key = path.resolve()
        if key not in self._projects:
            try:
                self._projects[key] = FoundProject.at(path, need_conf=True, secrets=self.secrets)
            except UsageError as error:
                self._projects[key] = FoundProject(path, path, None, error, self.secrets)
        return self._projects[key]

    def url_for(self, project: Path) -> str:
        """The base URL ``project``'s cases are sent to: ``url``, else its simulator's
        (its plan built and checked as `peach dev` does, and started now if it has not
        been; ``ProjectInvalid`` when the project has errors)."""
        if self.url is not None:
            return self.url
        if project.resolve() not in self._urls:
            self.simulator_url(project, self.project(project).plan("testing"))
        return self._urls[project.resolve()]

    def simulator_url(self, project: Path, plan: Any) -> str:
        """The URL of ``project``'s simulator serving ``plan`` (started now if it has not
        been)."""
        key = project.resolve()
        if key not in self._urls:
            self._urls[key] = self._stack.enter_context(
                local_host(project, plan, secrets=self.secrets)
            )
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
            self.project(project).mask()


class Host(_Started):
    """The host one run of a command sends to, wired once: the project at ``path`` found and
    read once — its plan checked as `peach dev` does (``2 errors in X: not DOING``), or with
    ``url`` (``--url``, checked by the command: ``peach_cli.client.items.base_url``) its
    secrets masked in what the host answers — then the host,
    ``url`` or the project's simulator (started when ``base`` is first asked for, its events
    to ``on_event``; stopped by ``close``), and the one client that sends to it, which waits
    ``timeout_s`` for an answer (None: the project's ``timeout_s`` and ``LOCAL_SLACK_S``
    on its simulator, ``DEFAULT_TIMEOUT_S`` at ``url``). ``secrets``: the run's, where the
    project's secret values go (masked in what the run shows). With ``openapi`` (`peach
    fuzz`) the OpenAPI document of what the host serves is read as it is wired: the one
    ``url`` serves, else the project's (``UsageError`` when there is neither)::

        with Host(Path("examples/quickstart"), None, doing="testing") as host:
            observe(host.client, host.base, case)
    """

    def __init__(
        self,
        path: Path,
        url: str | None,
        *,
        doing: str,
        tool: str,
        timeout_s: float | None = None,
        on_event: Callable[[Any], None] | None = None,
        usage_errors: bool = True,
        openapi: bool = False,
        secrets: Secrets | None = None,
    ) -> None:
        self.doing, self.tool = doing, tool
        self._on_event = on_event
        self._stack = ExitStack()
        self._served: str | None = None
        self._client: Client | None = None
        # read once; with --url its secrets masked in what the host answers
        self.found = FoundProject.at(
            path, need_conf=url is None, mask=url is not None, secrets=secrets
        )
        self.url: str | None = None
        served: dict[str, Any] | None = None  # the OpenAPI document of what is served
        if url is not None:
            from peach_cli.client.actions import openapi_document

            self.url = url
            if openapi:
                wait_s = timeout_s or DEFAULT_TIMEOUT_S
                served = openapi_document(self.url, tool=tool, timeout_s=wait_s)
        checked: ProjectPlan | None = None  # the simulator's; with --url, what describes it
        if self.found.read is not None and (url is None or (openapi and served is None)):
            from peach_cli.checks.build import plan_to_check

            read = self.found.read
            checked = plan_to_check(
                path, self.found.root, read, doing, usage=usage_errors, secrets=self.secrets
            )
        self.plan = checked if url is None else None  # with --url: the host knows its endpoints
        if timeout_s is None:  # as long as the project lets its calls run, and a slack
            local = self.plan.timeout_s + LOCAL_SLACK_S if self.plan is not None else None
            timeout_s = local or DEFAULT_TIMEOUT_S
        self.timeout_s = timeout_s or DEFAULT_TIMEOUT_S
        if openapi and served is None and checked is not None:  # the project describes it
            from peach_cli.openapi.document import build_document

            served = build_document(checked)
        if openapi and served is None:
            from peach_cli.internal import OPENAPI_PATH

            raise UsageError(
                f"{self.url} serves no OpenAPI document at {OPENAPI_PATH}, and "
                f"{self.found.given} holds no peach project to read one from",
                hint="point --url at a peach dev or a deployed app, or give the project",
            )
        self.openapi = served
        """With ``openapi``: the OpenAPI document of what the host serves — the one ``url``
        serves, else the project's."""

    @property
    def root(self) -> Path:
        """The project's root folder (its case files are under it)."""
        return self.found.root

    @property
    def secrets(self) -> Secrets:
        """The run's secrets: the project's values, and its simulators', go there."""
        return self.found.secrets

    @property
    def endpoint_urls(self) -> list[str] | None:
        """The urls of the project's endpoints; None with ``url`` (the host knows them)."""
        return None if self.plan is None else [e.url for e in self.plan.endpoints.values()]

    @property
    def base(self) -> str:
        """The base URL requests go to: ``url``, else the project's simulator's (started
        now if it has not been)."""
        if self.url is not None:
            return self.url
        if self._served is None:
            served = local_host(
                self.found.root, self.plan, on_event=self._on_event, secrets=self.secrets
            )
            self._served = self._stack.enter_context(served)
        return self._served

    @property
    def client(self) -> Client:
        """The client every request is sent with (``timeout_s`` for each answer; it
        verifies TLS for an ``https`` URL)."""
        if self._client is None:
            tls = self.url is not None and self.url.startswith("https:")
            self._client = self.new_client(self.timeout_s, tls=tls)
        return self._client

    @property
    def kind(self) -> HostKind:
        """What the host is: ``dev`` (the project's simulator, or a `peach dev` on this
        machine, as its ``/_peach/health`` declares) or ``ray`` (a deployed app). A host on
        another machine is taken for a deployed app and not asked: a `peach dev` answers its
        ``/_peach/*`` actions for loopback clients only."""
        if self.url is None:
            return "dev"
        from urllib.parse import urlsplit

        from peach_cli.addresses import is_loopback
        from peach_cli.client.actions import declared_host

        here = is_loopback(urlsplit(self.url).hostname)
        return declared_host(self.url, tool=self.tool) if here else "ray"

    def spare(self, timeout_s: float, on_event: Callable[[Any], None]) -> str:
        """Start a second simulator of the project whose calls time out at ``timeout_s``
        (its events to ``on_event``); stopped with this host. Its URL."""
        assert self.plan is not None, "a host at --url has no simulator here"
        served = local_host(
            self.found.root, self.plan, on_event=on_event, timeout_s=timeout_s, secrets=self.secrets
        )
        return self._stack.enter_context(served)

    def new_client(self, timeout_s: float, *, tls: bool = False) -> Client:
        """A client waiting ``timeout_s`` for each answer; closed with this host."""
        from peach_cli.client.send import Client

        return self._stack.enter_context(Client(timeout_s, tls=tls))


class _Runner:
    def __init__(
        self,
        plan: Any,
        project: Path,
        on_event: Callable[[Any], None] | None = None,
        timeout_s: float | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        self.plan = plan
        self.project = project
        self.on_event = on_event
        self.timeout_s = timeout_s
        self.secrets = secrets
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
        session = DevSession(config, on_event=self.on_event, secrets=self.secrets)
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
    secrets: Secrets | None = None,
) -> Iterator[str]:
    """Serve ``plan`` (``project``'s, built and checked as `peach dev` does) and yield the
    server's URL.

    ``on_event`` gets the simulator's events (``simulator.events``), in the server's
    thread: what the answers alone do not show (a fallback covering an error, a replica
    that died). ``timeout_s`` overrides every endpoint's (as `peach dev --timeout-s`).
    ``secrets``: the run's, where the simulator's secret values go."""
    runner = _Runner(plan, project, on_event, timeout_s, secrets)
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
