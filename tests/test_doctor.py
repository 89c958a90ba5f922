"""`peach doctor` without a cluster: every check passing and failing, exit codes, JSON shape.

The package index is a real HTTP server on loopback (``UV_DEFAULT_INDEX``), or a loopback
port nothing listens on; the env cache is a temporary folder (``PEACH_ENV_CACHE``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cli_support import Env, run_peach
from projectkit import BASE_CELLS, write_project

from peach_cli.doctor import machine

CHECKS = ["python", "uv", "index", "cache", "port", "project", "dashboard"]
GOOD = "codops: shop\nendpoints:\n  e:\n    url: /e\n    components:\n      main: {notebook: nb.ipynb, method: ask}\n"
WITH_DEPS = GOOD + "py_environments:\n  base: {dependencies: [orjson]}\n"


class _Index(BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:  # noqa: N802 (the http.server protocol)
        self.send_response(200 if self.path == "/simple/" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def index_url() -> Iterator[str]:
    """A package index on loopback that answers HEAD /simple/."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port() -> int:
    return closed_port()


def doctor(
    *args: str, cwd: Path, index: str, cache: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment: Env = {"UV_INDEX_URL": None, "UV_DEFAULT_INDEX": index}
    environment.update(PEACH_ENV_CACHE=str(cache), **(env or {}))
    environment["NO_PROXY"] = "127.0.0.1,localhost"  # the index and dashboard are on loopback
    return run_peach("doctor", *args, cwd=cwd, env=environment)


def doctor_json(
    *args: str, cwd: Path, index: str, cache: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``peach doctor --format json`` on a free port, with ``args`` before them."""
    port = str(free_port())
    return doctor(
        *args, "--format", "json", "--port", port, cwd=cwd, index=index, cache=cache, env=env
    )


def checks_of(result: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    report = json.loads(result.stdout)
    return {check["name"]: check for check in report["checks"]}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "shop", GOOD, {"nb.ipynb": BASE_CELLS})


@pytest.mark.slow
def test_a_healthy_setup_passes_every_check_and_exits_0(project, tmp_path, index_url):
    port = free_port()
    result = doctor("--port", str(port), cwd=project, index=index_url, cache=tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[1] for line in lines[: len(CHECKS)]] == CHECKS
    for line in lines[:6]:
        assert line.startswith("✓ "), result.stdout
    assert "✓ project    . is valid: 1 endpoint" in result.stdout
    assert f"port {port} is free on 127.0.0.1" in result.stdout
    assert f"package index {index_url} answered" in result.stdout
    assert lines[6].startswith("- dashboard  no cluster to check")
    assert "pass --address URL (or set PEACH_RAY_ADDRESS)" in lines[7]
    assert lines[-1] == "✓ no check failed (1 skipped)"
    assert not (tmp_path / "cache").exists()  # doctor creates nothing


@pytest.mark.slow
def test_json_output_shape(project, tmp_path, index_url):
    result = doctor_json(cwd=project, index=index_url, cache=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"ok", "checks"} and report["ok"] is True
    assert [check["name"] for check in report["checks"]] == [*CHECKS, "processes"]
    for check in report["checks"]:
        assert set(check) == {"name", "status", "summary", "advice", "details"}
        assert check["status"] in ("ok", "warn", "fail", "skip")
        assert isinstance(check["summary"], str) and isinstance(check["details"], dict)
    checks = checks_of(result)
    assert checks["python"]["details"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert checks["uv"]["details"]["version"]
    assert checks["index"]["details"]["status_code"] == 200
    assert checks["project"]["details"]["endpoints"] == 1


@pytest.mark.slow
def test_a_port_in_use_fails_with_advice(project, tmp_path, index_url):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        result = doctor("--port", str(port), cwd=project, index=index_url, cache=tmp_path)
    assert result.returncode == 1
    assert f"✗ port       port {port} is in use on 127.0.0.1" in result.stdout
    assert f"(pid {os.getpid()})" in result.stdout  # this test's process holds it
    assert "peach dev --port N" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("✗ 1 of 8 checks failed")


@pytest.mark.slow
def test_an_unreachable_index_fails(project, tmp_path):
    index = f"http://127.0.0.1:{closed_port()}/simple/"
    result = doctor_json(cwd=project, index=index, cache=tmp_path)
    assert result.returncode == 0  # the project needs no package: a warning only
    check = checks_of(result)["index"]
    assert check["status"] == "warn" and "is unreachable" in check["summary"]
    assert "need no package" in check["summary"]

    write_project(project, WITH_DEPS)
    result = doctor_json(cwd=project, index=index, cache=tmp_path)
    assert result.returncode == 1
    check = checks_of(result)["index"]
    assert check["status"] == "fail"
    assert "UV_DEFAULT_INDEX" in check["advice"] and "peach dev --offline" in check["advice"]


@pytest.mark.slow
def test_an_index_answering_an_error_fails(project, tmp_path, index_url):
    write_project(project, WITH_DEPS)
    wrong = index_url.replace("/simple/", "/nothing/")
    result = doctor_json(cwd=project, index=wrong, cache=tmp_path)
    check = checks_of(result)["index"]
    assert result.returncode == 1
    assert check["status"] == "fail" and "answered HTTP 404" in check["summary"]


@pytest.mark.slow
def test_offline_reports_the_cache_instead_of_contacting_the_index(project, tmp_path):
    index = f"http://127.0.0.1:{closed_port()}/simple/"
    cache = tmp_path / "cache"
    (cache / "some-env").mkdir(parents=True)
    (cache / "some-env" / "file").write_bytes(b"x" * 2000)
    result = doctor_json("--offline", cwd=project, index=index, cache=cache)
    check = checks_of(result)["index"]
    assert result.returncode == 0
    assert check["status"] == "ok" and "--offline ready" in check["summary"]
    assert "status_code" not in check["details"]  # not contacted

    write_project(project, WITH_DEPS)
    result = doctor_json("--offline", cwd=project, index=index, cache=cache)
    check = checks_of(result)["index"]
    assert result.returncode == 1  # orjson was never built into this cache
    assert check["status"] == "fail" and "env base is not built in the cache" in check["summary"]
    assert check["details"]["envs"] == {"base": False}
    assert check["details"]["cache"] == {"entries": 1, "bytes": 2000}


@pytest.mark.slow
def test_offline_is_ready_when_every_env_is_built(project, small_env, env_cache):
    from env_support import SMALL

    deps = ", ".join(SMALL)
    write_project(project, GOOD + f"py_environments:\n  base: {{dependencies: [{deps}]}}\n")
    index = f"http://127.0.0.1:{closed_port()}/simple/"
    result = doctor_json("--offline", cwd=project, index=index, cache=env_cache)
    check = checks_of(result)["index"]
    assert check["status"] == "ok", check
    assert "py_env base is built in the cache" in check["summary"]
    assert check["details"]["envs"] == {"base": True}


@pytest.mark.slow
def test_offline_with_no_package_to_fetch_does_not_claim_a_built_env(project, tmp_path):
    write_project(project, GOOD)  # base declares no dependency
    index = f"http://127.0.0.1:{closed_port()}/simple/"
    result = doctor_json("--offline", cwd=project, index=index, cache=tmp_path / "none-yet")
    checks = checks_of(result)
    assert "does not exist yet" in checks["cache"]["summary"]
    assert checks["index"]["status"] == "ok"
    assert checks["index"]["summary"] == (
        "--offline ready: py_env base needs no package, so nothing is fetched"
    )


@pytest.mark.slow
def test_the_cache_folder_is_reported_with_its_size(project, tmp_path, index_url):
    cache = tmp_path / "cache"
    (cache / "env-a").mkdir(parents=True)
    (cache / "env-a" / "lib.so").write_bytes(b"\0" * 1500)
    os.link(cache / "env-a" / "lib.so", cache / "env-a" / "same.so")  # counted once
    (cache / "uv-cache").mkdir()
    (cache / "uv-cache" / "wheel").write_bytes(b"\0" * 500)
    result = doctor_json(cwd=project, index=index_url, cache=cache)
    check = checks_of(result)["cache"]
    assert check["status"] == "ok"
    assert check["details"]["entries"] == 1 and check["details"]["bytes"] == 2000
    assert f"env cache {cache}: writable, 1 entry, 2.0 KiB" == check["summary"]


@pytest.mark.slow
def test_a_cache_that_cannot_be_a_folder_fails(project, tmp_path, index_url):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for cache in (blocker, blocker / "envs"):
        result = doctor_json(cwd=project, index=index_url, cache=cache)
        check = checks_of(result)["cache"]
        assert result.returncode == 1
        assert check["status"] == "fail", check
        assert "PEACH_ENV_CACHE" in check["advice"]


@pytest.mark.slow
def test_a_project_with_an_error_fails_and_points_at_peach_validate(tmp_path, index_url):
    broken = write_project(
        tmp_path / "broken", GOOD.replace("method: ask", "method: nope"), {"nb.ipynb": BASE_CELLS}
    )
    result = doctor(
        str(broken), "--port", str(free_port()), cwd=tmp_path, index=index_url, cache=tmp_path
    )
    assert result.returncode == 1
    assert re.search(rf"^✗ project    {re.escape(str(broken))}: \d+ errors?$", result.stdout, re.M)
    assert f"run `peach validate {broken}` to see them" in result.stdout


@pytest.mark.slow
def test_a_project_with_a_warning_passes_with_a_warning(tmp_path, index_url):
    conf = GOOD.replace("method: ask", "method: no_model, init: init_model")
    project = write_project(tmp_path / "warned", conf, {"nb.ipynb": BASE_CELLS})
    result = doctor_json(cwd=project, index=index_url, cache=tmp_path)
    check = checks_of(result)["project"]
    assert result.returncode == 0
    assert check["status"] == "warn" and "1 warning" in check["summary"]
    assert check["advice"] == "run `peach validate` to see them"


@pytest.mark.slow
def test_outside_a_project_the_project_check_is_skipped(tmp_path, index_url):
    result = doctor("--port", str(free_port()), cwd=tmp_path, index=index_url, cache=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "- project    no peach project in this folder" in result.stdout
    assert "create one: peach init" in result.stdout


def test_a_project_argument_that_does_not_exist_is_a_usage_error(tmp_path, index_url):
    result = doctor("nowhere", cwd=tmp_path, index=index_url, cache=tmp_path)
    assert result.returncode == 2
    assert "nowhere does not exist" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_bad_options_are_usage_errors(tmp_path, index_url):
    for args, message in (
        (["--format", "xml"], "unknown --format 'xml'"),
        (["--port", "0"], "--port must be between 1 and 65535"),
    ):
        result = doctor(*args, cwd=tmp_path, index=index_url, cache=tmp_path)
        assert result.returncode == 2 and message in result.stderr, result.stderr


@pytest.mark.slow
def test_an_unreachable_dashboard_fails_and_skips_the_cluster_checks(project, tmp_path, index_url):
    address = f"http://127.0.0.1:{closed_port()}"
    result = doctor_json("--address", address, cwd=project, index=index_url, cache=tmp_path)
    assert result.returncode == 1
    checks = checks_of(result)
    assert checks["dashboard"]["status"] == "fail"
    assert f"cannot reach the Ray dashboard at {address}" in checks["dashboard"]["summary"]
    assert "ray start --head" in checks["dashboard"]["advice"]
    for name in ("token", "ray_version", "resources"):
        assert checks[name]["status"] == "skip"


@pytest.mark.slow
def test_the_address_comes_from_peach_ray_address_and_must_be_a_dashboard_url(
    project, tmp_path, index_url
):
    result = doctor_json(
        cwd=project,
        index=index_url,
        cache=tmp_path,
        env={"PEACH_RAY_ADDRESS": "ray://me:secret@head:10001"},
    )
    assert result.returncode == 1
    check = checks_of(result)["dashboard"]
    assert check["status"] == "fail" and "is a Ray client address" in check["summary"]
    assert "secret" not in result.stdout


def test_python_against_requires_python():
    assert machine.check_python((3, 11, 7), ">=3.11").status == "ok"
    older = machine.check_python((3, 10, 14), ">=3.11")
    assert older.status == "fail"
    assert older.summary == "Python 3.10.14 is too old or too new: peach needs >=3.11"
    assert "uv python install" in (older.advice or "")
    assert machine.check_python((3, 13, 0), ">=3.11,<3.13").status == "fail"
    assert machine.check_python((3, 11, 0), "").status == "warn"
    assert machine.check_python((3, 11, 0), ">=three").status == "warn"
    # the installed peach's own requirement, read from its metadata
    assert machine.requires_python() == ">=3.11"


def test_uv_missing_or_broken_fails(tmp_path):
    assert machine.check_uv(machine.locate_uv()).status == "ok"
    missing = machine.check_uv(None)
    assert missing.status == "fail" and "pip install uv" in (missing.advice or "")
    broken = tmp_path / "uv"
    broken.write_text("#!/bin/sh\necho 'error: damaged' >&2\nexit 3\n")
    broken.chmod(0o755)
    check = machine.check_uv(str(broken))
    assert check.status == "fail"
    assert check.summary == f"uv at {broken} --version failed (exit 3): error: damaged"
    not_executable = tmp_path / "plain"
    not_executable.write_text("")
    assert "cannot run" in machine.check_uv(str(not_executable)).summary


@pytest.mark.slow
def test_the_network_checks_run_at_the_same_time(project, tmp_path):
    """The index answers only once the dashboard has been asked: checks run one after the
    other would see the index time out (3 s) first."""
    asked = threading.Event()

    class Dashboard(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            asked.set()
            body = b'{"ray_version": "2.60.0", "version": "4"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class WaitingIndex(_Index):
        def do_HEAD(self) -> None:  # noqa: N802
            asked.wait(10)
            super().do_HEAD()

    servers = [ThreadingHTTPServer(("127.0.0.1", 0), h) for h in (WaitingIndex, Dashboard)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{servers[0].server_address[1]}/simple/"
        address = f"http://127.0.0.1:{servers[1].server_address[1]}"
        result = doctor_json("--address", address, cwd=project, index=index, cache=tmp_path)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    checks = checks_of(result)
    assert checks["index"]["status"] == "ok", checks["index"]
    assert checks["dashboard"]["status"] == "ok", checks["dashboard"]
    assert [c["name"] for c in json.loads(result.stdout)["checks"]][:6] == CHECKS[:6]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="what Linux offers")
def test_the_processes_check_names_what_this_system_lacks(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("PEACH_LINUX_WITHOUT", raising=False)
    here = machine.check_processes()
    assert here.status == "ok" and "even a killed peach" in here.summary
    assert here.details == {"keeper": True, "lacking": {}}
    monkeypatch.setenv("PEACH_LINUX_WITHOUT", "fork")  # lacking templates only: a slower start
    fork = machine.check_processes()
    assert fork.status == "warn" and fork.summary.startswith("this system lacks fork-based warm")
    assert fork.advice == "nothing to do: peach works without them"


@pytest.mark.slow
def test_peach_doctor_names_every_fallback_it_runs_on(project: Path, tmp_path: Path):
    """As on macOS (forced here): each feature of Linux's peach does without, by name."""
    index = f"http://127.0.0.1:{closed_port()}/simple/"
    without = {"PEACH_LINUX_WITHOUT": "all"}
    result = doctor_json("--offline", cwd=project, index=index, cache=tmp_path, env=without)
    check = checks_of(result)["processes"]
    assert check["status"] == "warn"
    assert list(check["details"]["lacking"]) == ["subreaper", "parent-death", "proc", "fork"]
    assert check["details"]["keeper"] is False
    for named in ("a subreaper (prctl)", "a parent-death signal (prctl)", "/proc", "fork-based"):
        assert named in check["summary"]
    assert "kill -9" in check["advice"]
