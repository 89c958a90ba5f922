"""The dev server is a local service (SPEC §6, issue 20): Host and Origin checks, no forged
log lines or escape sequences from request data, slow clients cut."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import PROJECTS, DevProcess, start_peach_dev
from test_fastlane import raw_exchange

FUZZ = PROJECTS / "faults" / "fuzz"
HEAD_TIMEOUT_S = 1.0
ATTACKER = "rebind.attacker.example:8000"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    log = tmp_path_factory.mktemp("local") / "peach-dev.log"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PEACH_HEAD_TIMEOUT_S", str(HEAD_TIMEOUT_S))
        dev = start_peach_dev(
            FUZZ, log, "--allow-host", "app.test", "--allow-origin", "http://app.test:3000"
        )
    try:
        dev.wait_ready()
        yield dev
    finally:
        dev.stop()


def error_code(response: httpx.Response) -> str:
    return response.json()["error"]["code"]


def test_a_rebinding_host_cannot_reinit_or_call(server):
    reinit = httpx.post(f"{server.url}/_peach/reinit/echo", headers={"Host": ATTACKER})
    assert reinit.status_code == 403 and error_code(reinit) == "forbidden_host", reinit.text
    call = httpx.get(f"{server.url}/echo", headers={"Host": ATTACKER})
    assert call.status_code == 403 and error_code(call) == "forbidden_host"
    assert call.json()["status"] == "error"  # the gateway's envelope
    server.wait_for_output(r"GET /echo 403 .*forbidden_host")
    assert "re-ran init" not in server.output()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "app.test", "LOCALHOST."])
def test_loopback_names_the_bound_address_and_allowed_hosts_are_answered(server, host):
    port = server.url.rsplit(":", 1)[1]
    response = httpx.get(f"{server.url}/echo", headers={"Host": f"{host}:{port}"})
    assert response.status_code == 200, response.text


def test_a_web_page_cannot_drive_endpoints_even_with_a_simple_post(server):
    page = {"Origin": f"http://{ATTACKER}", "Content-Type": "text/plain"}
    response = httpx.post(f"{server.url}/echo", content='{"text": "x"}', headers=page)
    assert response.status_code == 403 and error_code(response) == "forbidden_origin"
    reinit = httpx.post(f"{server.url}/_peach/reinit/echo", headers={"Origin": "null"})
    assert reinit.status_code == 403 and error_code(reinit) == "forbidden_origin"


@pytest.mark.parametrize(
    "origin", ["http://localhost:5173", "http://127.0.0.1", "http://app.test:3000"]
)
def test_loopback_and_allowed_origins_are_answered(server, origin):
    response = httpx.get(f"{server.url}/echo", headers={"Origin": origin})
    assert response.status_code == 200, response.text


def test_a_page_this_server_served_under_an_allowed_host_may_call_it(server):
    """``/_peach/docs`` opened as ``http://app.test:PORT`` sends its own origin with Send."""
    port = server.url.rsplit(":", 1)[1]
    host = f"app.test:{port}"
    own = httpx.post(
        f"{server.url}/echo", json={"text": "x"}, headers={"Host": host, "Origin": f"http://{host}"}
    )
    assert own.status_code == 200, own.text
    for other in (f"http://app.test:{int(port) + 1}", f"http://{ATTACKER}", f"https://{host}x"):
        refused = httpx.post(
            f"{server.url}/echo", json={"text": "x"}, headers={"Host": host, "Origin": other}
        )
        assert refused.status_code == 403 and error_code(refused) == "forbidden_origin", other


def test_a_path_cannot_forge_a_log_line_or_reach_the_terminal_raw(server):
    server.mark()
    httpx.get(f"{server.url}/x%0aGET%20/echo%20200%20main%20FORGED%1b%5b41m")
    server.wait_for_output(r"FORGED")
    logged = server.output_since_mark()
    assert "\x1b" not in logged
    assert not any(line.startswith("GET /echo 200 main FORGED") for line in logged.splitlines())
    assert r"GET /x\nGET /echo 200 main FORGED\x1b[41m 404" in logged


def send_and_wait(server: DevProcess, data: bytes) -> tuple[bytes, float]:
    """Send ``data`` and nothing more: what comes back before the server closes, and when."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    began = time.monotonic()
    received = b""
    with socket.create_connection((host, int(port)), timeout=10 * HEAD_TIMEOUT_S) as sock:
        sock.sendall(data)
        while True:
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                raise AssertionError("the connection is still open") from None
            if not chunk:
                return received, time.monotonic() - began
            received += chunk


def test_a_connection_that_sent_half_a_head_is_closed(server):
    received, took = send_and_wait(server, b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ")
    assert received.startswith(b"HTTP/1.1 408 "), received
    assert took >= HEAD_TIMEOUT_S * 0.9


def test_a_connection_that_sends_nothing_is_closed(server):
    received, _ = send_and_wait(server, b"")
    assert received == b""


def test_a_slow_head_after_a_first_request_is_closed_too(server):
    first = b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    received, _ = send_and_wait(server, first + b"GET /echo HTTP/1.1\r\nHo")
    assert received.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 408 " in received, received


# -- stalled bodies (SPEC §6: part of a request, its head or its body, then nothing) --------

LANE_BODY = b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789"
"""A plain call, which the fast lane takes at its head."""
STREAM_BODY = b"POST /chunks?stream=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"
"""A stream, which takes the general path."""
BIG_BODY = (
    b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 200000\r\n\r\n" + b" " * 100_000
)
"""A body over the fast lane's 64 KiB (the general path), half of it sent."""
CHUNKED_BODY = (
    b'POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\n'
)
"""A body of unknown length (the general path), its first chunk sent."""


@pytest.mark.parametrize(
    "data",
    [LANE_BODY, STREAM_BODY, BIG_BODY, CHUNKED_BODY],
    ids=["lane", "stream", "big", "chunked"],
)
def test_a_connection_whose_body_stalls_is_closed_with_a_408(server, data):
    received, took = send_and_wait(server, data)
    assert received.startswith(b"HTTP/1.1 408 "), received
    assert took >= HEAD_TIMEOUT_S * 0.9


def test_a_body_that_keeps_arriving_is_not_cut_however_long_it_takes(server):
    """The stall is counted from the body's last byte, not from its first."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    pieces = [b'{"text": "', *[b"x" * 10] * 11, b'"}']
    head = "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: "
    began = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=10 * HEAD_TIMEOUT_S) as sock:
        sock.sendall(head.encode() + str(sum(map(len, pieces))).encode() + b"\r\n\r\n")
        for piece in pieces:  # the client's pace is what is tested: each pause under the limit
            sock.sendall(piece)
            time.sleep(HEAD_TIMEOUT_S / 5)
        received = read_to_end(sock)
    assert time.monotonic() - began > 2 * HEAD_TIMEOUT_S  # longer than one stall in all
    assert received.startswith(b"HTTP/1.1 200 ") and b'"text": "' + b"x" * 110 in received


def test_a_body_that_stalls_after_its_answer_is_cut_without_another_answer(server):
    """A refused request is answered before its body is in; a stall after it still ends the
    connection, with no second answer (there is one request)."""
    refused = LANE_BODY.replace(b"\r\n\r\n", b"\r\nOrigin: http://evil.example\r\n\r\n")
    received, _ = send_and_wait(server, refused)
    assert received.startswith(b"HTTP/1.1 403 ") and received.count(b"HTTP/1.1 ") == 1, received


def read_to_end(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


# -- absolute-form targets (RFC 9112 §3.2.2: their authority, not Host, names the host) -----


def exchange(server: DevProcess, head: bytes) -> bytes:
    """Send one request head (``Connection: close`` added): the whole answer."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
        return read_to_end(sock)


PATHS = ["/echo?text=hi", "/chunks?stream=1"]
"""One the fast lane would take, one for the general path."""


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("authority", ["evil.example", "evil.example:8000", "[::2]:8000"])
def test_an_absolute_target_naming_another_host_is_403(server, path, authority):
    local = server.url.removeprefix("http://")
    head = f"GET http://{authority}{path} HTTP/1.1\r\nHost: {local}\r\n\r\n"
    received = exchange(server, head.encode())
    assert received.startswith(b"HTTP/1.1 403 "), received
    assert b'"code": "forbidden_host"' in received and authority.encode() in received


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("target", ["127.0.0.1", "[::1]"])
@pytest.mark.parametrize("host", ["127.0.0.1", "evil.example"])
def test_an_absolute_target_naming_this_server_is_answered_whatever_host_says(
    server, path, target, host
):
    port = server.url.rsplit(":", 1)[1]
    head = f"GET http://{target}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
    received = exchange(server, head.encode())
    assert received.startswith(b"HTTP/1.1 200 "), received
    assert b'"text": "hi"' in received or b"chunk-0" in received


@pytest.mark.parametrize("path", PATHS)
def test_a_host_that_only_begins_like_a_loopback_address_is_403(server, path):
    port = server.url.rsplit(":", 1)[1]
    for host in ("[::1].evil.example", f"[::1]x:{port}", "127.0.0.1.evil.example"):
        received = exchange(server, f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert received.startswith(b"HTTP/1.1 403 "), (host, received)
        assert b'"code": "forbidden_host"' in received


def test_an_origin_that_only_begins_like_a_loopback_address_is_403(server):
    response = httpx.get(f"{server.url}/echo", headers={"Origin": "http://[::1].evil.example"})
    assert response.status_code == 403 and error_code(response) == "forbidden_origin"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
def test_a_request_without_host_is_403(server, path, version):
    """No `Host` names no address of this server: refused like a foreign one."""
    received = exchange(server, f"GET {path} {version}\r\n\r\n".encode())
    assert received.split(b" ", 2)[1] == b"403", received
    assert b'"code": "forbidden_host"' in received and b"no Host header" in received


@pytest.mark.parametrize("path", PATHS)
def test_a_second_host_header_cannot_launder_a_foreign_first_one(server, path):
    """The first `Host` is the one judged: a loopback one after a foreign one changes nothing."""
    local = server.url.removeprefix("http://")
    head = f"GET {path} HTTP/1.1\r\nHost: evil.example\r\nHost: {local}\r\n\r\n"
    received = exchange(server, head.encode())
    assert received.startswith(b"HTTP/1.1 403 "), received
    assert b'"code": "forbidden_host"' in received


# -- refusals are counted (issue 36) --------------------------------------------------------


def refused_count(
    server: DevProcess, status: int, method: str, route: str = ""
) -> tuple[float, float]:
    """``/_peach/metrics``: ``method`` requests to ``route`` (``""``: no route took them)
    answered ``status``, and those counted as errors."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{server.url}/_peach/metrics", timeout=10).text
    counts = {"requests": 0.0, "errors": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("route") != route or labels.get("method") != method:
                continue
            if sample.name == "ray_serve_num_http_requests_total":
                counts["requests"] += sample.value * (labels["status_code"] == str(status))
            elif sample.name == "ray_serve_num_http_error_requests_total":
                counts["errors"] += sample.value * (labels["error_code"] == str(status))
    return counts["requests"], counts["errors"]


def first_answer(server: DevProcess, data: bytes) -> bytes:
    """Send ``data`` on one connection: the first answer, whole (or what came before the
    server closed the connection)."""
    return raw_exchange(server.url, data, timeout_s=10 * HEAD_TIMEOUT_S)


def foreign_host(server: DevProcess) -> bytes:
    return first_answer(server, f"GET /echo HTTP/1.1\r\nHost: {ATTACKER}\r\n\r\n".encode())


def foreign_origin(server: DevProcess) -> bytes:
    page = f"Origin: http://{ATTACKER}\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
    return first_answer(
        server, f"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n{page}\r\n{{}}".encode()
    )


def stalled_body(server: DevProcess) -> bytes:
    return first_answer(server, LANE_BODY)


def oversized_body(server: DevProcess) -> bytes:
    head = b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 20000000\r\n\r\n"
    return first_answer(server, head + b"{")


def oversized_head(server: DevProcess) -> bytes:
    header = b"X-Big: " + b"a" * (70 * 1024) + b"\r\n"
    return first_answer(server, b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\n")


@pytest.mark.parametrize(
    ("refuse", "status", "code", "method", "route"),
    [
        (foreign_host, 403, "forbidden_host", "GET", ""),
        (foreign_origin, 403, "forbidden_origin", "POST", ""),
        (stalled_body, 408, "request_timeout", "POST", ""),
        (oversized_body, 413, "payload_too_large", "POST", "/echo"),
        (oversized_head, 431, "headers_too_large", "GET", ""),
    ],
    ids=["host", "origin", "stalled-body", "oversized-body", "oversized-head"],
)
def test_each_refusal_is_the_error_envelope_and_is_counted_in_the_metrics(
    server, refuse, status, code, method, route
):
    """A refusal answers the contract's error envelope and is counted under its status
    (the refusals no route took under ``route=""``, as Ray's proxy labels them)."""
    before = refused_count(server, status, method, route)
    answer = refuse(server)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert json.loads(body)["error"]["code"] == code
    requests, errors = before
    assert refused_count(server, status, method, route) == (requests + 1, errors + 1)


@pytest.mark.parametrize(
    ("refuse", "line"),
    [
        (
            oversized_head,
            r"GET /echo 431 [\d.]+ m?s  headers_too_large: the request's headers are over 64 KiB",
        ),
        (
            stalled_body,
            r"POST /echo 408 [\d.]+ m?s  request_timeout: the request did not arrive in 1 s",
        ),
        (
            lambda server: send_and_wait(server, b"GET /ec")[0],
            r"- /ec 408 [\d.]+ m?s  request_timeout: the request did not arrive in 1 s",
        ),
    ],
    ids=["oversized-head", "stalled-body", "half-a-head"],
)
def test_a_refusal_of_the_protocol_is_logged_as_its_request_line(server, refuse, line):
    """The protocol's 431 and 408 are logged as every request is, through the dev view's
    request line (not uvicorn's own words on stderr)."""
    server.mark()
    refuse(server)
    server.wait_for_output(line)
    logged = server.output_since_mark()
    assert "Refused a request" not in logged and "warning:" not in logged, logged
