"""The in-process runner (``cli_support.run_peach``) shows what a `peach` process shows, and
leaves the test's process as it found it."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from cli_support import REPO, run_peach, run_peach_process

QUICKSTART = REPO / "examples" / "quickstart"
BROKEN = REPO / "tests" / "projects" / "broken"


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("--version",),
        ("validate", "--bogus"),
        ("validate", str(QUICKSTART), "--format", "json"),
        ("validate", str(BROKEN)),
        ("openapi", "/no/such/project"),
    ],
    ids=" ".join,
)
def test_in_this_process_and_in_a_process_the_same_output_and_exit_code(args):
    here = run_peach(*args, columns=90)
    there = run_peach_process(*args, columns=90)  # a real process: what the runner imitates
    assert (here.returncode, here.stdout, here.stderr) == (
        there.returncode,
        there.stdout,
        there.stderr,
    )


def test_a_call_leaves_the_environment_folder_streams_and_logging_as_they_were(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PEACH_RAY_ADDRESS", "http://127.0.0.1:9")
    shutil.copytree(QUICKSTART, tmp_path, dirs_exist_ok=True)
    before = (dict(os.environ), os.getcwd(), sys.stdout, sys.stderr, sys.argv)
    handlers = logging.getLogger().handlers[:]
    result = run_peach("validate", cwd=tmp_path, env={"PEACH_TEST_ONLY": "1"})
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stdout
    assert (dict(os.environ), os.getcwd(), sys.stdout, sys.stderr, sys.argv) == before
    assert logging.getLogger().handlers == handlers


def test_each_call_has_its_own_width():
    narrow = run_peach("validate", "--help", columns=50).stdout
    wide = run_peach("validate", "--help", columns=150).stdout
    assert max(map(len, narrow.splitlines())) <= 50
    assert max(map(len, wide.splitlines())) > 50


def test_a_usage_error_exits_2_with_its_message_on_stderr():
    result = run_peach("no-such-command")
    assert result.returncode == 2
    assert "No such command 'no-such-command'" in result.stderr
    assert result.stdout == ""


def test_the_command_gets_this_process_environment_with_env_on_top(tmp_path, monkeypatch):
    monkeypatch.setenv("PEACH_ENV_CACHE", str(tmp_path / "from-the-test"))
    shown = run_peach("env", "list", str(QUICKSTART)).stdout
    assert f"cache: {tmp_path / 'from-the-test'}" in shown
    shown = run_peach("env", "list", str(QUICKSTART), env={"PEACH_ENV_CACHE": str(tmp_path)}).stdout
    assert f"cache: {tmp_path}\n" in shown


class _Dashboard(BaseHTTPRequestHandler):
    """A dashboard that refuses every request, keeping its Authorization header."""

    seen: list[str | None] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dashboard() -> Iterator[tuple[str, list[str | None]]]:
    handler = type("Dashboard", (_Dashboard,), {"seen": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler.seen
    finally:
        server.shutdown()
        server.server_close()


def test_the_shells_cluster_address_and_token_reach_no_command_a_tests_own_do(
    dashboard, monkeypatch
):
    """What the cluster tests run in this process rely on: the address and token a
    developer's shell exports are not the command's, those a test passes in ``env`` are."""
    url, seen = dashboard
    for name, value in (("PEACH_RAY_ADDRESS", url), ("RAY_AUTH_TOKEN", "the-shells")):
        monkeypatch.setenv(name, value)
    run_peach("status")  # to the default address
    assert seen == []  # not to the shell's
    run_peach("status", "--address", url)
    assert seen == [None]  # nor its token
    run_peach("status", env={"PEACH_RAY_ADDRESS": url, "RAY_AUTH_TOKEN": "the-tests"})
    assert seen == [None, "Bearer the-tests"]
    assert os.environ["RAY_AUTH_TOKEN"] == "the-shells"
