"""Shared fixtures: `peach dev` as a real subprocess on a free loopback port.

``base_url`` is the address of ``peach dev tests/projects/semantics`` (one server for the
session, every replica up). The HTTP semantics tests only use ``base_url``, so the same
cases run against another host by overriding that fixture.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cli_support import PEACH
from lifetime_support import dies_with_this_process

TESTS = Path(__file__).resolve().parent
PROJECTS = TESTS / "projects"
SEMANTICS = PROJECTS / "semantics"
REPO = TESTS.parent
URL_LINE = re.compile(r"peach dev serving on (http://\S+)")
START_TIMEOUT_S = 60.0

# A shell starts a background job (`.ci/run &`, nohup, some CI runners) with SIGINT ignored,
# and an ignored signal stays ignored across exec: every peach the tests start would then
# shrug off the Ctrl-C the tests send. Installing Python's own handler here gives every child
# the default disposition back (exec resets a handled signal to SIG_DFL).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@dataclass
class DevProcess:
    """A running `peach dev`: its URL, its process and its output (a file)."""

    process: subprocess.Popen[bytes]
    log_path: Path
    url: str = ""
    worker_pids: list[int] = field(default_factory=list)
    marked: int = 0  # where in the log ``wait_for_output`` starts searching again
    started: int | None = None  # the end of what the server printed before any test used it

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def mark(self) -> None:
        """From now on ``wait_for_output`` searches only what the server printed before the
        first mark (its start-up) and what is written after this point. Each test marks the
        servers it shares with other tests (see ``pytest_runtest_call``), so it never finds
        a line an earlier test caused."""
        self.marked = self.log_path.stat().st_size
        if self.started is None:
            self.started = self.marked

    def output_since_mark(self) -> str:
        """The start-up output and what was written since the mark (read from there: a
        shared server's log grows through the run, and this is polled)."""
        with self.log_path.open("rb") as log:
            startup = log.read(self.started) if self.started is not None else b""
            log.seek(self.marked)
            return (startup + log.read()).decode(errors="replace")

    def wait_for_output(self, pattern: str, timeout_s: float = 20.0) -> re.Match[str]:
        """Poll the output written since the mark until ``pattern`` (a regex) appears."""
        deadline = time.monotonic() + timeout_s
        regex = re.compile(pattern)
        while True:
            match = regex.search(self.output_since_mark())
            if match:
                return match
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{pattern!r} not in peach dev output since the mark:\n"
                    f"{self.output_since_mark()}"
                )
            time.sleep(0.02)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> dict:
        """Poll ``/_peach/health`` until no replica is starting; return the health data."""
        import httpx

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                health = httpx.get(f"{self.url}/_peach/health", timeout=5).json()
                if health["ready"]:
                    self.worker_pids = [
                        r["pid"] for c in health["components"] for r in c["replicas"] if r["pid"]
                    ]
                    return health
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"replicas not ready in {timeout_s} s:\n{self.output()}")
            time.sleep(0.05)

    def stop(self) -> int:
        """Ctrl-C, then SIGKILL to the whole process group if it does not exit in time."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
                return self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                return self.process.wait()
        with_group_killed(self.process)
        return self.process.wait()


def with_group_killed(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_peach_dev(
    project: Path, log_path: Path, *args: str, wait_url: bool = True, reload: bool = False
) -> DevProcess:
    """Start ``peach dev PROJECT --port 0 --no-reload ARGS`` in its own process group
    (``reload=True``: without ``--no-reload``).

    Its output goes to ``log_path`` (a file never fills up the way a pipe does). With
    ``wait_url`` the call returns once the server printed its URL.
    """
    log = log_path.open("wb")
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200", PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [
            # a real process: a `peach dev` server
            *PEACH,
            "dev",
            str(project),
            "--port",
            "0",
            *([] if reload else ["--no-reload"]),
            *args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
        start_new_session=True,
        preexec_fn=dies_with_this_process(),  # never outlives the pytest worker
    )
    log.close()
    dev = DevProcess(process, log_path)
    if not wait_url:
        return dev
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            match = URL_LINE.search(dev.output())
            if match:
                dev.url = match.group(1)
                return dev
            if process.poll() is not None:
                raise AssertionError(f"peach dev exited with {process.returncode}:\n{dev.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"peach dev printed no URL in {START_TIMEOUT_S} s:\n{dev.output()}"
                )
            time.sleep(0.02)
    except BaseException:
        dev.stop()
        raise


@pytest.fixture(scope="session", autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temporary, empty ``HOME`` (and XDG cache, config and data dirs) for the whole
    session: every `peach` a test starts inherits it, so nothing of the developer's machine
    (``~/.ray/auth_token``, a config, a cache) reaches a test. A test about them sets its
    own. ``PEACH_ENV_CACHE`` (``env_cache``) still names the session's env cache."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        xdg = {"CACHE": ".cache", "CONFIG": ".config", "DATA": ".local/share"}
        for name, folder in xdg.items():
            (home / folder).mkdir(parents=True)
            patch.setenv(f"XDG_{name}_HOME", str(home / folder))
        yield home


@pytest.fixture(scope="session", autouse=True)
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``PEACH_ENV_CACHE`` for the whole session: one env and uv cache shared by every test
    (and every `peach` they start), never the user's own cache."""
    from env_support import use_env_cache

    with use_env_cache(tmp_path_factory.mktemp("peach-envs")) as path:
        yield path


@pytest.fixture(scope="session")
def small_env(env_cache: Path):
    """The session's one small built env (``env_support.SMALL``), built once."""
    from env_support import SMALL

    from peach_cli.envs import EnvSpec, ensure_env

    return ensure_env(EnvSpec("base", SMALL))


@pytest.fixture
def peach_dev(tmp_path: Path) -> Iterator:
    """A factory: ``peach_dev(project, *args)`` starts `peach dev`; all are stopped after."""
    started: list[DevProcess] = []

    def start(project: Path, *args: str, wait_url: bool = True, reload: bool = False) -> DevProcess:
        dev = start_peach_dev(
            project,
            tmp_path / f"peach-dev-{len(started)}.log",
            *args,
            wait_url=wait_url,
            reload=reload,
        )
        started.append(dev)
        return dev

    try:
        yield start
    finally:
        for dev in started:
            dev.stop()


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`peach dev tests/projects/semantics`, every replica started, for the whole session."""
    log_path = tmp_path_factory.mktemp("peach-dev") / "semantics.log"
    dev = start_peach_dev(SEMANTICS, log_path)
    try:
        dev.wait_ready()
        yield dev
    finally:
        dev.stop()


@pytest.fixture(scope="session")
def base_url(dev_server: DevProcess) -> str:
    """The base URL of a host serving ``tests/projects/semantics``."""
    return dev_server.url


SEMANTICS_CPUS = 40  # logical: 36 for the project and test_peach_test_ray.py's app, 4 more for
# test_task_ray.py's (three components of 1 CPU, and room for its jobs)
RAY_DEPLOY_TIMEOUT_S = 240


class SemanticsDeploy:
    """``tests/projects/semantics`` deployed on a cluster of its own, started on first use
    and stopped after the last test that uses it (see ``pytest_runtest_teardown``)."""

    def __init__(self) -> None:
        self.head: Any = None
        self.url = ""

    def get(self) -> tuple[Any, str]:
        from ray_cluster import RayHead

        from peach_cli.checks.build import build_plan
        from peach_cli.deploy.deployer import deploy

        if self.head is None:
            plan, diagnostics = build_plan(SEMANTICS)
            assert plan is not None, diagnostics
            head = RayHead(num_cpus=0, worker_cpus=SEMANTICS_CPUS).start()
            try:
                head.start_serve()
                result = deploy(
                    plan,
                    address=head.dashboard_url,
                    http_port=head.http_port,
                    timeout_s=RAY_DEPLOY_TIMEOUT_S,
                )
            except BaseException:
                head.stop()
                raise
            self.head, self.url = head, result.url
        return self.head, self.url

    def stop(self) -> None:
        if self.head is not None:
            self.head.stop()
            self.head = None


_semantics = SemanticsDeploy()


@pytest.fixture(scope="session")
def ray_semantics_cluster() -> tuple[Any, str]:
    """`peach deploy tests/projects/semantics` on a fresh two-node cluster: the head and
    the proxy's URL.

    A head offering no CPUs and a worker node, so every replica runs on the worker; one
    cluster for the session: the parity suite, the differential test, the endpoint tests
    against a deployed app and the task tests (their applications under route prefixes of
    their own) share it.
    """
    return _semantics.get()


@pytest.fixture(scope="session")
def ray_semantics(ray_semantics_cluster: tuple[Any, str]) -> str:
    """The proxy's URL of ``ray_semantics_cluster``."""
    return ray_semantics_cluster[1]


def drain_stream(chunks: Iterator[bytes]) -> tuple[bytes, bool]:
    """The rest of a streamed body and whether it ended cleanly: False when the server cut
    it (the response ended without its terminating chunk, SPEC §2)."""
    import httpx

    received = b""
    try:
        for chunk in chunks:
            received += chunk
    except httpx.RemoteProtocolError as error:
        assert "incomplete chunked read" in str(error), error
        return received, False
    return received, True


# -- the two-node Ray cluster of the deploy tests -------------------------------------------

RAY_WORKER_CPUS = 4
"""Logical CPUs of the worker node (the test projects reserve 0.1 CPU per replica)."""


class SharedRayCluster:
    """One two-node cluster for every test that asks for ``ray_cluster``, stopped as soon as
    the next test does not need it (so it never idles through the rest of the suite).

    It starts in the background while the tests on the semantics deploy run (``start_soon``,
    see ``pytest_runtest_teardown``), so that its start-up is not on the Ray tests' path;
    else on first use."""

    def __init__(self) -> None:
        self.cluster: Any = None
        self.starting: concurrent.futures.Future[Any] | None = None
        self.used = False
        self.wanted = False
        """Whether a test of this run asks for it (set at collection)."""

    @staticmethod
    def _start() -> Any:
        from ray_cluster import RayHead

        cluster = RayHead(num_cpus=0, worker_cpus=RAY_WORKER_CPUS).start()
        try:
            cluster.start_serve()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def start_soon(self) -> None:
        """Start it in a thread of its own, once, if a test will use it."""
        if self.wanted and not self.used and self.starting is None:
            pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ray-start")
            self.starting = pool.submit(self._start)
            pool.shutdown(wait=False)

    def get(self) -> Any:
        if self.cluster is None:
            starting, self.starting = self.starting, None
            try:
                self.cluster = starting.result() if starting is not None else None
            except Exception:  # the early start failed (a busy machine): its user starts one
                self.cluster = None
            if self.cluster is None:
                self.cluster = self._start()
            self.used = True
        return self.cluster

    def stop(self, *, starting: bool = False) -> None:
        """Stop the cluster in use (``starting``: also one still starting or not used yet)."""
        if starting and self.starting is not None:
            future, self.starting = self.starting, None
            try:
                self.cluster = future.result()
            except Exception:
                pass
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None


_shared_ray = SharedRayCluster()


@pytest.fixture
def ray_cluster():
    """A head offering no CPUs and a worker node with ``RAY_WORKER_CPUS``, on loopback, Serve
    running with its proxy on the head: every replica runs on the worker node, which did
    not upload the packages it runs."""
    return _shared_ray.get()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Mark the `peach dev` servers this test shares with others (session- or module-scoped
    fixtures): its ``wait_for_output`` sees only what happened during the test."""
    definitions = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
    for name, value in getattr(item, "funcargs", {}).items():
        shared = name in definitions and definitions[name][-1].scope != "function"
        if isinstance(value, DevProcess) and shared:
            value.mark()


# -- running the suite in parallel (pytest-xdist, `-n 3 --dist loadgroup`) -----------------

RAY_FIXTURES = frozenset({"ray_cluster", "ray_semantics_cluster", "ray_semantics"})
SEMANTICS_DEV = frozenset({"dev_server", "base_url"})  # test_parity's base_url asks for it too
RAY_MODULE_NAME = re.compile(r"(^|_)(ray|cluster)(_|$)")  # test_task_ray, test_doctor_cluster
NOT_RAY_MODULE_NAME = re.compile(r"(^|_)without_ray(_|$)")


def _uses_ray(item: pytest.Item) -> bool:
    """Whether ``item`` starts or uses a Ray cluster: marked ``ray``, asks for a Ray fixture,
    lives in a module named after Ray or a cluster, or in one that uses ``ray_cluster.py``."""
    if item.get_closest_marker("ray") or RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    module = getattr(item, "module", None)
    if module is None:
        return False
    name = module.__name__.rpartition(".")[2].removeprefix("test_")
    if RAY_MODULE_NAME.search(name) and not NOT_RAY_MODULE_NAME.search(name):
        return True
    return any(
        getattr(value, "__name__", None) == "ray_cluster"
        or getattr(value, "__module__", None) == "ray_cluster"
        for value in vars(module).values()
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests for ``--dist loadgroup``: every test that uses Ray in one group, so
    one worker runs them all, one cluster at a time, and each marked ``ray``; the modules
    with a test on the session's ``dev_server`` in one group, so one worker starts it, not
    each (37 replicas: 4 % of a core at rest, ~30 CPU-seconds over a run); each other
    module in a group of its own, so its module-scoped servers start once (in the worker
    that runs it)."""
    on_dev_server = {
        item.nodeid.partition("::")[0]
        for item in items
        if SEMANTICS_DEV & set(getattr(item, "fixturenames", ())) and not _uses_ray(item)
    }
    ray = []
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            module = item.nodeid.partition("::")[0]
            group = "dev_server" if module in on_dev_server else module
            item.add_marker(pytest.mark.xdist_group("ray" if _uses_ray(item) else group))
        if _uses_ray(item):
            ray.append(item)
            if item.get_closest_marker("ray") is None:  # so that -m "not ray" leaves it out
                item.add_marker(pytest.mark.ray)
    # The Ray tests first (the longest group), those on the semantics deploy together, then
    # those on the shared cluster: each cluster starts once and stops after its last test.
    ray.sort(key=lambda item: 0 if _uses_semantics(item) else 1 if _uses_shared(item) else 2)
    others = [item for item in items if not _uses_ray(item)]
    items[:] = ray + others


def pytest_collection_finish(session: pytest.Session) -> None:
    _shared_ray.wanted = any(_uses_shared(item) for item in session.items)  # once deselected


def _uses_semantics(item: pytest.Item) -> bool:
    """Whether ``item`` uses ``ray_semantics_cluster`` (or is test_parity.py's "ray" case,
    which asks for it while it runs)."""
    if "ray_semantics_cluster" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return (
        item.get_closest_marker("ray") is not None
        and callspec is not None
        and ("ray" in callspec.params.values())
    )


def _uses_shared(item: pytest.Item | None) -> bool:
    return item is not None and "ray_cluster" in getattr(item, "fixturenames", ())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under xdist, a test marked ``serial`` (timing figures that load on the machine would
    skew) runs while no other worker runs a test; other tests run side by side."""
    if not hasattr(item.config, "workerinput"):
        yield
        return
    from serial_lock import SerialLock

    shared = Path(item.config.option.basetemp).parent  # each worker's is in the run's
    with SerialLock(shared, alone=item.get_closest_marker("serial") is not None):
        yield


@pytest.hookimpl(trylast=True)  # after the fixtures the next test does not use are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if not _uses_shared(nextitem):
        _shared_ray.stop()
    if _uses_semantics(item):  # the semantics deploy is up: the next cluster starts meanwhile
        _shared_ray.start_soon()
    # The Ray tests of one process run in the order of pytest_collection_modifyitems unless
    # xdist spreads them over its workers by another rule than their group (then a test
    # later in this worker may still use the deploy: it stays up).
    in_order = not hasattr(item.config, "workerinput") or item.config.option.loadgroup
    if in_order and (nextitem is None or not _uses_semantics(nextitem)):
        _semantics.stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _shared_ray.stop(starting=True)
    _semantics.stop()


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Without xdist (``-p no:xdist``: every test in this process) the ``--dist loadgroup``
    of the project's ``addopts`` means nothing: take it and ignore it."""
    if not pluginmanager.has_plugin("xdist"):
        parser.addoption("--dist", default="no", help="(xdist is not loaded: ignored)")


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM (a CI job's timeout, ``kill``) ends the run as Ctrl-C does, so that the
    session's teardown still runs and stops its Ray clusters and `peach dev` servers
    instead of leaving them running.

    xdist's ``--dist loadgroup`` names each test's group by appending it to
    ``item._nodeid``; pytest 9.2 reads the node id elsewhere, every test becomes a group of
    its own and the Ray tests run on every worker at once, each starting its own clusters:
    such a run is refused (from 9.1, which was not tried; 9.0.3 keeps the groups)."""
    from packaging.version import Version

    loadgroup = config.getoption("dist", "no") == "loadgroup" and config.getoption(
        "numprocesses", None
    )
    if loadgroup and Version(pytest.__version__) >= Version("9.1"):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} is past the versions known to keep xdist's test "
            "groups (9.2 ignores them): install those pyproject.toml names "
            '(python -m pip install -e ".[test]")'
        )

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    _one_ssl_context_per_setting()


def _one_ssl_context_per_setting() -> None:
    """Each ``httpx.Client`` (and each ``httpx.get``) a test makes loads the CA bundle into a
    new SSL context: 32 ms of CPU, measured, for a test speaking plain HTTP on loopback (207
    contexts in five files' 190 tests, measured). The tests' own clients share one context
    per setting; the `peach` processes they start are untouched."""
    import functools

    import httpx._transports.default as transports

    make = getattr(transports, "create_ssl_context", None)
    if make is not None and not hasattr(make, "cache_info"):
        transports.create_ssl_context = functools.lru_cache(maxsize=16)(make)  # type: ignore[attr-defined]
