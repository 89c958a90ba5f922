"""The one host wiring of the commands that run against a project's host or a URL
(``peach_cli.testing.host``): each reads the project's conf once, and knows what its host is
from what the host declares (``/_peach/health``'s ``host``), never from the shape of its
answers."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_support import REPO

from peach_cli.boundary import Output
from peach_cli.errors import PeachError

QUICKSTART = REPO / "examples" / "quickstart"


def _refused() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{free.getsockname()[1]}"


def _reads(run: Callable[[], object]) -> list[str]:
    """How often ``run`` finds the conf files (``find``) and reads them (``read``)."""
    from peach_cli.errors import PeachError
    from peach_cli.project import filenames, loader

    counted = {filenames.find_conf_files.__code__: "find", loader.read_project.__code__: "read"}
    calls: list[str] = []

    def count(frame: Any, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in counted:
            calls.append(counted[frame.f_code])

    sys.setprofile(count)
    try:
        run()
    except PeachError:
        pass  # each run here stops with a usage error before anything is sent
    finally:
        sys.setprofile(None)
    return sorted(calls)


def test_fuzz_reads_its_conf_once_with_its_simulator_and_with_a_url() -> None:
    """`peach fuzz` up to its targets (here a name that matches none): the project's conf
    found once and read once — with ``--url`` too, where the host serves no document and
    the project's own is read (before: found 3 times, read twice)."""
    pytest.importorskip("hypothesis")
    from peach_cli.commands.fuzz import run_fuzz
    from peach_cli.commands.host_options import FuzzOptions

    project, targets = str(QUICKSTART), ["/no-such-endpoint"]
    local = _reads(lambda: run_fuzz(Output(), FuzzOptions(project=project, targets=targets)))
    remote = _reads(
        lambda: run_fuzz(Output(), FuzzOptions(project=project, targets=targets, url=_refused()))
    )
    assert local == ["find", "read"]
    assert remote == ["find", "read"]


def test_a_run_reads_its_dotenv_once_and_masks_what_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`peach fuzz` up to its targets: the project's ``.env`` is read once, where its
    secrets are checked (a ``.env`` that cannot be read stops the run) and masked (before:
    read twice, once to check it and once to mask it); its values are masked in what the
    run shows."""
    import shutil

    pytest.importorskip("hypothesis")
    from peach_cli.commands.fuzz import run_fuzz
    from peach_cli.commands.host_options import FuzzOptions
    from peach_cli.project import secrets

    project = tmp_path / "secrets"
    shutil.copytree(REPO / "tests" / "projects" / "secrets", project)
    (project / ".env").write_text("READER_KEY=reader-from-dotenv\nTASK_KEY=task-from-dotenv\n")
    for name in ("READER_KEY", "OTHER_KEY", "TASK_KEY", "NEEDY_KEY"):
        monkeypatch.delenv(name, raising=False)
    reads: list[Path] = []
    read_dotenv = secrets.read_dotenv

    def counted(root: Path) -> dict[str, str]:
        reads.append(root)
        return read_dotenv(root)

    monkeypatch.setattr(secrets, "read_dotenv", counted)
    output = Output()
    options = FuzzOptions(project=str(project), targets=["/no-such-endpoint"])
    with pytest.raises(PeachError, match="no endpoint"):
        run_fuzz(output, options)
    assert reads == [project]
    assert output.secrets.mask("key: reader-from-dotenv") == "key: ***"


def test_replay_reads_the_conf_that_masks_its_secrets_once(tmp_path: Path) -> None:
    """`peach replay -p PROJECT` finds and reads the conf once to mask its secrets (before:
    found twice)."""
    from peach_cli.commands.host_options import ReplayOptions
    from peach_cli.commands.replay import run_replay

    recording = tmp_path / "traffic.jsonl"
    recording.write_text('{"method": "GET", "url": "/recommend?item_id=apple", "status": 200}\n')
    options = ReplayOptions(file=recording, url=_refused(), project=QUICKSTART)
    assert _reads(lambda: run_replay(Output(), options)) == [
        "find",
        "read",
    ]


class _Health(BaseHTTPRequestHandler):
    """A server answering ``/_peach/health`` in peach's shape, with the ``host`` it is given
    (None: the field left out, as a host of an older peach answers)."""

    declared: str | None = None

    def do_GET(self) -> None:  # noqa: N802 - the handler's name
        body = b'{"status": "ok", "ready": true, "codops": "x", "components": []}'
        if self.declared is not None:
            body = body[:-1] + f', "host": "{self.declared}"}}'.encode()
        self.send_response(200 if self.path == "/_peach/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _answering(declared: str | None) -> Iterator[str]:
    handler = type("Declaring", (_Health,), {"declared": declared})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_host_is_what_its_health_declares_never_what_its_replicas_look_like() -> None:
    """A loopback host answering health with ``host: "ray"`` is a deployed app (profiled
    through the dashboard: ``--init`` refused), whatever its replicas show; one that
    declares no host is refused with what to do."""
    from peach_cli.client.actions import declared_host
    from peach_cli.commands.host_options import ProfileOptions
    from peach_cli.commands.profile import run_profile
    from peach_cli.errors import UsageError

    with _answering("ray") as ray, _answering("dev") as dev, _answering(None) as older:
        assert declared_host(ray, tool="profile") == "ray"
        assert declared_host(dev, tool="profile") == "dev"
        with pytest.raises(UsageError, match="does not say which host it is") as undeclared:
            declared_host(older, tool="profile")
        assert "with this version of peach" in (undeclared.value.hint or "")
        with pytest.raises(UsageError, match="--init is not offered on a deployed app"):
            run_profile(
                Output(), ProfileOptions(target="/hot", url=ray, init=True, project=QUICKSTART)
            )
    with pytest.raises(UsageError, match="nothing answers at"):
        declared_host(_refused(), tool="profile")


def test_peach_dev_declares_itself_in_its_health() -> None:
    """The simulator (what `peach dev` serves) answers ``/_peach/health`` with ``host:
    "dev"``, and `peach bench` samples its replicas' capacity because of it."""
    from peach_cli.bench.capacity import CapacitySampler
    from peach_cli.client.actions import declared_host
    from peach_cli.testing.host import FoundProject, local_host

    plan = FoundProject.at(QUICKSTART, need_conf=True).plan("testing")
    with local_host(QUICKSTART, plan) as url:
        health = httpx.get(f"{url}/_peach/health", timeout=10).json()
        assert health["host"] == "dev"
        assert declared_host(url, tool="bench") == "dev"
        assert CapacitySampler.for_dev(url) is not None
    with _answering("ray") as ray:
        assert CapacitySampler.for_dev(ray) is None


def test_profile_of_a_deployed_app_reads_its_conf_once() -> None:
    """`peach profile --url` of a host declaring ``ray``: the project's conf (its secrets
    masked, its notebook lines named) found and read once, up to the dashboard, which is
    not there (before: a host whose replicas named no ``node_ip`` was taken for a `peach
    dev`; of one that did, the conf was found 3 times and read twice)."""
    from peach_cli.commands.host_options import ProfileOptions
    from peach_cli.commands.profile import run_profile
    from peach_cli.errors import UsageError

    refused: list[UsageError] = []

    def run() -> None:
        try:
            options = ProfileOptions(
                target="/recommend", url=ray, project=QUICKSTART, address=_refused()
            )
            run_profile(Output(), options)
        except UsageError as error:
            refused.append(error)

    with _answering("ray") as ray:
        assert _reads(run) == ["find", "read"]
    assert "no Ray dashboard to profile its replicas with" in refused[0].message
