"""The pytest plugin peach registers (entry point ``pytest11: peach``).

- Every ``*.peach-test.yaml`` file is collected; each of its cases is a test item, run as
  `peach test` runs it, its failure shown as expected against observed.
- The ``peach`` fixture (session scope) talks to the simulator of the project at the rootdir
  (or ``--peach-project``), started once for the session, or to the host at
  ``--peach-url``::

      def test_greets(peach):
          reply = peach.ask("/greet", name="Ada", lang="fr")
          assert reply.status == 200 and reply.result["greeting"] == "Bonjour, Ada!"

      def test_story(peach):
          stream = peach.stream("/story", topic="a fig")
          assert "fig" in "".join(stream)
          assert not stream.cut

Importing this module costs next to nothing (it imports only ``peach_cli.project.filenames``):
peach's own modules load when a case file is collected or the fixture is used, so other test
suites are not slowed down.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from peach_cli.project.filenames import CASE_SUFFIX, is_project_folder

if TYPE_CHECKING:
    from peach_cli.testing.cases import LoadedCase
    from peach_cli.testing.host import Hosts


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("peach", "peach endpoint tests")
    group.addoption(
        "--peach-project",
        default=None,
        help="The peach project whose simulator the tests use (default: the rootdir, or the "
        "project holding each case file).",
    )
    group.addoption(
        "--peach-url",
        default=None,
        help="Run against this host (a peach dev, or a deployed app with its route prefix) "
        "instead of starting the project's simulator.",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SESSION] = _Session(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is not None:
        session.close()


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    if file_path.name.endswith(CASE_SUFFIX):
        return CaseFileCollector.from_parent(parent, path=file_path)
    return None


# --------------------------------------------------------------------------- the session


class _Session:
    """What one pytest session runs cases with: the hosts (``peach_cli.testing.host.Hosts``,
    made at first use: one simulator per project, or ``--peach-url``), and which project a
    file is of."""

    def __init__(self, config: pytest.Config) -> None:
        from peach_cli.boundary import Secrets

        self.config = config
        self._hosts: Hosts | None = None
        self.secrets = Secrets()
        """The pytest session's secrets (each project's): masked in every report."""

    @property
    def hosts(self) -> Hosts:
        if self._hosts is None:
            from peach_cli.testing.host import Hosts

            self._hosts = Hosts(self.config.getoption("--peach-url") or None, secrets=self.secrets)
        return self._hosts

    def project_of(self, path: Path | None) -> Path:
        project = self._project_of(path)
        self.hosts.mask_secrets(project)  # in every report
        return project

    def _project_of(self, path: Path | None) -> Path:
        given = self.config.getoption("--peach-project")
        if given:
            return Path(given)
        root = Path(self.config.rootpath)
        if path is not None:
            for folder in [path.parent, *path.parent.parents]:
                if is_project_folder(folder):
                    return folder
                if folder == root:
                    break
        return root

    def close(self) -> None:
        if self._hosts is not None:
            self._hosts.close()


_SESSION = pytest.StashKey[_Session]()


# --------------------------------------------------------------------------- case files


class CaseFileCollector(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        from peach_cli.testing.cases import read_case_file

        session = self.config.stash[_SESSION]
        project = session.project_of(self.path)  # its secrets known to the session first
        shown = session.secrets.shown  # masked, escaped: pytest writes it as it is
        diagnostics: list[Any] = []
        case_file = read_case_file(project, self.path, diagnostics)
        errors = [d for d in diagnostics if d.severity == "error"]
        if errors:
            raise self.CollectError("\n".join(shown(_diagnostic_text(d)) for d in errors))
        assert case_file is not None
        for loaded in case_file.cases:  # a name is shown in every report: masked, escaped
            name = shown(loaded.case.name)
            yield CaseItem.from_parent(self, name=name, loaded=loaded, project=project)


class CaseItem(pytest.Item):
    def __init__(self, *, loaded: LoadedCase, project: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.loaded = loaded
        self.project = project
        self.details = ""

    def runtest(self) -> None:
        from peach_cli.testing.run import run_case

        session = self.config.stash[_SESSION]
        hosts = session.hosts
        base = hosts.url_for(self.project)  # the project's plan loaded, its simulator started
        outcome = run_case(hosts.client, base, "", self.loaded)
        if not outcome.passed:
            details = outcome.details()
            self.details = session.secrets.shown_lines(details)  # no secret, no escape
            raise CaseFailed(self.details)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            secrets = self.config.stash[_SESSION].secrets
            where = self.loaded.position
            head = secrets.shown(f"{where.file}:{where.line}: case '{self.name}' failed")
            return f"{head}\n{secrets.shown_lines(str(excinfo.value))}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, self.loaded.position.line - 1, f"case: {self.name}"


class CaseFailed(AssertionError):
    """A case whose answer did not meet its expectations (the message holds the diffs)."""


def _diagnostic_text(diagnostic: Any) -> str:
    hint = f" ({diagnostic.hint})" if diagnostic.hint else ""
    return f"{diagnostic}{hint}"


# --------------------------------------------------------------------------- the fixture


@dataclass
class AskReply:
    """One answer: what a test asserts on."""

    status: int
    result: Any
    error_code: str | None
    component: str | None
    replica: str | None
    headers: dict[str, str]
    elapsed_ms: float


@dataclass
class StreamReply:
    """A stream: iterate it for its chunks (text, as they arrive); ``cut`` afterwards."""

    _open: Any
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[str] = field(default_factory=list)
    cut: bool = False

    def __iter__(self) -> Iterator[str]:
        yield from self._open(self)

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    @property
    def component(self) -> str | None:
        return self.headers.get("x-peach-component")


class Peach:
    """The ``peach`` fixture: ``ask`` and ``stream`` against the session's host."""

    def __init__(self, hosts: Hosts, project: Path) -> None:
        self._hosts = hosts
        self._project = project

    @property
    def url(self) -> str:
        """The host's base URL (the simulator's, or ``--peach-url``)."""
        return self._hosts.url_for(self._project)

    def _request(self, url: str, params: dict[str, Any], stream: bool) -> Any:
        from peach_cli.client.items import build_request

        items = [f"{key}:={json.dumps(value)}" for key, value in params.items()]
        return build_request(url, items, base=self.url, get=True, stream=stream)

    def ask(self, url: str, **params: Any) -> AskReply:
        """GET ``url`` with ``params`` as the query string; the whole answer."""
        from peach_cli.testing.outcome import MISSING
        from peach_cli.testing.run import observe_request

        observed = observe_request(self._hosts.client, self._request(url, params, False))
        if observed.failure is not None:
            raise ConnectionError(observed.failure)
        return AskReply(
            status=observed.status,
            result=None if observed.result is MISSING else observed.result,
            error_code=observed.error_code,
            component=observed.component,
            replica=observed.replica,
            headers=observed.headers,
            elapsed_ms=observed.elapsed_ms,
        )

    def stream(self, url: str, **params: Any) -> StreamReply:
        """GET ``url`` with ``stream=true``: iterate the reply for its chunks."""
        request = self._request(url, params, True)
        client = self._hosts.client

        def chunks(reply: StreamReply) -> Iterator[str]:
            import codecs

            from peach_cli.client.send import ResponseCut

            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            with client.stream(request) as response:
                reply.status, reply.headers = response.status, dict(response.headers)
                try:
                    for chunk in response.chunks():
                        text = decoder.decode(chunk)
                        if text:
                            reply.chunks.append(text)
                            yield text
                except ResponseCut:
                    reply.cut = True

        return StreamReply(chunks)


@pytest.fixture(scope="session")
def peach(request: pytest.FixtureRequest) -> Peach:
    """The simulator of the project at the rootdir (or ``--peach-project``), or the host at
    ``--peach-url``; started at first use, stopped at the end of the session."""
    session = request.config.stash[_SESSION]
    return Peach(session.hosts, session.project_of(None))
