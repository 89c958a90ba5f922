"""What peach exposes: the address `peach dev` listens on, and the token `peach deploy` holds.

`peach dev` binds 127.0.0.1 unless told otherwise and warns when it is not loopback. The
deploy commands send ``RAY_AUTH_TOKEN`` as ``Authorization: Bearer`` and never print it —
not in errors, not in what a dashboard echoes back, not in ``--dry-run`` — nor a password
written into ``--address``; and they warn about plain HTTP to a host that is not loopback.
A tiny HTTP server on this machine stands in for the dashboard (no cluster is needed to
check what is sent and printed).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest
from cli_support import run_peach
from conftest import PROJECTS, DevProcess
from netns_support import other_machine

from peach_cli.addresses import is_loopback

TOKEN = "tok-3f9a7c1e-never-print-me"
PASSWORD = "pw-81d2-never-print-me"
DEPLOY_PROJECT = PROJECTS / "deploy_basic"


# -- peach dev ------------------------------------------------------------------------------


def listening_addresses(pid: int) -> set[str]:
    """The local addresses ``pid`` listens on (from /proc/net/tcp and tcp6)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/net/{table}") as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    address, port = fields[1].split(":")
                    raw = bytes.fromhex(address)
                    if len(raw) == 4:
                        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
                    else:
                        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                        host = socket.inet_ntop(socket.AF_INET6, words)
                    found.add(f"{host}:{int(port, 16)}")
    return found


def test_peach_dev_listens_on_loopback_only_by_default(peach_dev):
    dev: DevProcess = peach_dev(PROJECTS / "broken")  # no --host: the default
    port = int(dev.url.rsplit(":", 1)[1])
    assert dev.url == f"http://127.0.0.1:{port}"
    assert listening_addresses(dev.process.pid) == {f"127.0.0.1:{port}"}
    with other_machine() as link:  # another machine cannot reach it
        assert link.connect(port) == "ConnectionRefusedError"
    assert "warning: bound to" not in dev.output()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.com", False),
    ],
)
def test_what_counts_as_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_peach_dev_on_every_interface_warns_that_it_is_reachable(peach_dev):
    dev = peach_dev(PROJECTS / "broken", "--host", "0.0.0.0")
    dev.wait_for_output(r"warning: bound to 0\.0\.0\.0: every endpoint is reachable from other")
    port = int(dev.url.rsplit(":", 1)[1])
    assert listening_addresses(dev.process.pid) == {f"0.0.0.0:{port}"}


# -- the dashboard stand-in -----------------------------------------------------------------


class Dashboard:
    """A fake Ray dashboard: records each request, answers from ``routes``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.routes: dict[tuple[str, str], tuple[int, str]] = {}
        self.default = (404, json.dumps({"error": "no such route"}))
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                headers = dict(self.headers.items())
                dashboard.requests.append((self.command, self.path, headers))
                status, body = dashboard.routes.get((self.command, self.path), dashboard.default)
                # a careless server that echoes the request in its error pages
                body = body.replace("{headers}", json.dumps(headers))
                auth = headers.get("Authorization", "")
                body = body.replace("{quoted}", quote(auth, safe=""))
                body = body.replace("{base64}", base64.b64encode(auth[7:].encode()).decode())
                data = body.encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_DELETE = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def dashboard() -> Iterator[Dashboard]:
    server = Dashboard()
    server.routes[("GET", "/api/version")] = (200, json.dumps({"ray_version": "2.40.0"}))
    try:
        yield server
    finally:
        server.close()


def peach(*args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    return run_peach(*args, env={"RAY_AUTH_TOKEN": token} if token else None)


def assert_secret_never_shown(result: subprocess.CompletedProcess[str]) -> None:
    everything = result.stdout + result.stderr
    assert TOKEN not in everything
    assert PASSWORD not in everything
    assert "Traceback" not in everything


# -- tokens ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_token_is_sent_as_a_bearer_header_and_never_printed(dashboard):
    dashboard.routes[("GET", "/api/serve/applications/")] = (
        500,
        '{"error": "internal error while handling {headers}"}',
    )
    result = peach("status", "--address", dashboard.url)
    assert result.returncode == 1
    assert "failed with HTTP 500" in result.stderr
    assert_secret_never_shown(result)
    sent = [headers for _, _, headers in dashboard.requests]
    assert sent and all(h.get("Authorization") == f"Bearer {TOKEN}" for h in sent)


@pytest.mark.slow
@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_token_is_named_but_never_shown(dashboard, status):
    dashboard.routes.clear()
    dashboard.default = (status, '{"error": "bad token {headers}"}')
    for command in (("status",), ("delete", "shop"), ("deploy", str(DEPLOY_PROJECT))):
        result = peach(*command, "--address", dashboard.url)
        assert result.returncode != 0, command
        assert f"refused the request ({status})" in result.stderr, result.stderr
        assert "RAY_AUTH_TOKEN" in result.stderr
        assert_secret_never_shown(result)


@pytest.mark.slow
def test_dry_run_never_prints_the_token(tmp_path):
    for output_format in ("json", "yaml"):
        result = peach("deploy", str(DEPLOY_PROJECT), "--dry-run", "--format", output_format)
        assert result.returncode == 0, result.stderr
        assert_secret_never_shown(result)


ODD_TOKEN = 'tok-ab"cd\\ef/+never-print-me'
"""A token with characters JSON, percent-encoding and base64 each change."""


@pytest.mark.slow
@pytest.mark.parametrize("echo", ["{headers}", "{quoted}", "{base64}"])
def test_the_token_is_masked_in_every_form_a_server_echoes_it_in(dashboard, echo):
    dashboard.routes[("GET", "/api/serve/applications/")] = (
        500,
        json.dumps({"error": "cannot handle "}).replace('"}', echo + '"}'),
    )
    result = peach("status", "--address", dashboard.url, token=ODD_TOKEN)
    assert result.returncode == 1
    assert "failed with HTTP 500" in result.stderr and "***" in result.stderr
    everything = result.stdout + result.stderr
    raw = ODD_TOKEN.encode()
    for form in (
        ODD_TOKEN,
        json.dumps(ODD_TOKEN)[1:-1],
        quote(ODD_TOKEN, safe=""),
        base64.b64encode(raw).decode().rstrip("="),
        "never-print-me",
    ):
        assert form not in everything, (form, everything)


@pytest.mark.slow
def test_a_body_that_is_not_json_is_shown_without_the_token(dashboard):
    dashboard.routes[("GET", "/api/serve/applications/")] = (200, "<html>{headers}</html>")
    result = peach("status", "--address", dashboard.url)
    assert result.returncode == 1
    assert "did not answer JSON" in result.stderr
    assert_secret_never_shown(result)


@pytest.mark.slow
def test_a_password_in_the_address_is_never_printed(dashboard):
    host_port = dashboard.url.removeprefix("http://")
    dashboard.routes[("GET", "/api/serve/applications/")] = (500, '{"error": "boom"}')
    for address in (
        f"http://peach:{PASSWORD}@{host_port}",
        f"http://peach:{PASSWORD}@127.0.0.1:9",  # nothing listens: the "cannot reach" error
    ):
        result = peach("status", "--address", address, token=None)
        assert result.returncode != 0
        assert_secret_never_shown(result)


# -- plain HTTP -----------------------------------------------------------------------------


@pytest.mark.slow
def test_plain_http_to_a_host_that_is_not_loopback_is_warned_about():
    with other_machine() as link:
        server = Dashboard(link.host_address)
        server.routes[("GET", "/api/version")] = (200, json.dumps({"ray_version": "2.40.0"}))
        server.routes[("GET", "/api/serve/applications/")] = (
            200,
            json.dumps({"applications": {}}),
        )
        try:
            result = peach("status", "--address", server.url)
        finally:
            server.close()
    assert result.returncode == 0, result.stderr
    assert "over plain HTTP" in result.stderr, result.stderr
    assert server.requests, "peach never asked the dashboard"
    assert_secret_never_shown(result)


@pytest.mark.slow
def test_plain_http_on_loopback_is_not_warned_about(dashboard):
    dashboard.routes[("GET", "/api/serve/applications/")] = (
        200,
        json.dumps({"applications": {}}),
    )
    result = peach("status", "--address", dashboard.url)
    assert result.returncode == 0, result.stderr
    assert "plain HTTP" not in result.stderr
    assert_secret_never_shown(result)
