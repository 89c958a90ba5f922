"""Hostile HTTP against a running `peach dev`: random methods, paths, query strings, headers,
bodies and encodings, deeply nested and huge JSON, malformed HTTP on a raw socket.

The oracle: never a 5xx that the endpoint did not ask for (the only 500 allowed is a
``method_error`` for an exception the user's code raised), every error is the JSON envelope
with the code its status stands for, a request never sets ``model``, ``init_state`` or
``stream``, and the server is alive and every replica healthy after each request.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import quote, urlencode

import httpx
import pytest
from conftest import PROJECTS, DevProcess, start_peach_dev
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peach_cli.runtime.contract import ERROR_STATUS, MAX_BODY_BYTES, MAX_BODY_DEPTH

FUZZ = PROJECTS / "faults" / "fuzz"
URLS = ["/echo", "/strict", "/chunks", "/fallback", "/decorated"]
STATE = {"/echo": "the state from init", "/strict": "the state from init"}
RESERVED = ("model", "init_state", "stream")


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    dev = start_peach_dev(FUZZ, tmp_path_factory.mktemp("fuzz") / "peach-dev.log")
    try:
        dev.wait_ready()
        yield dev
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def client(fuzz_server: DevProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fuzz_server.url, timeout=15) as client:
        yield client


def assert_alive(client: httpx.Client, dev: DevProcess) -> None:
    assert dev.process.poll() is None, dev.output()[-3000:]
    health = client.get("/_peach/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ok", health.text  # no replica crashed or restarted


def check_answer(response: httpx.Response, path: str) -> None:
    """What every answer must satisfy, whatever the request was."""
    status = response.status_code
    if response.request.method == "HEAD":
        assert status < 500
        return
    if status >= 400 and not response.headers.get("content-type", "").startswith(
        "application/json"
    ):
        if path.startswith("/_peach/") and status in (404, 405):
            return  # the simulator's own routes answer as a plain web app
        # refused by the HTTP parser before the gateway saw it (a method it does not know)
        assert status == 400 and response.text == "Invalid HTTP request received.", response.text
        return
    if status >= 400 and path in URLS:
        body = response.json()
        assert body["status"] == "error", body
        code = body["error"]["code"]
        assert ERROR_STATUS[code] == status, body
        assert body["error"]["message"]
    if status >= 500:
        # the only 5xx a request may get here: the user's own exception, named
        body = response.json()
        assert body["error"]["code"] == "method_error", body
        assert "() raised " in body["error"]["message"], body
    if status == 200 and path.rstrip("/") in STATE:
        result = response.json()["result"]
        assert result["model"] == STATE[path.rstrip("/")]
    if status == 200 and path.rstrip("/") in ("/echo", "/decorated"):
        result = response.json()["result"]
        assert not set(RESERVED) & set(result["kwargs"]), result
        if path.rstrip("/") == "/decorated":
            assert result["init_state"] == "state from init_fn"


# -- strategies -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
param_names = st.sampled_from(
    ["text", "n", "flag", "tags", "count", "ratio", "when", "k", *RESERVED]
) | st.text(max_size=12)
query_values = st.sampled_from(
    ["", "1", "-1", "true", "no", "null", "1e309", "nan", "[1,2]", "a,b", "{}", "\x00", "é"]
) | st.text(max_size=30)
methods = st.sampled_from(
    ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "get"]
) | st.from_regex(r"\A[A-Z]{1,12}\Z")
paths = st.sampled_from(
    [
        *URLS,
        "/echo/",
        "/",
        "//echo",
        "/ECHO",
        "/echo%00",
        "/echo/../strict",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/_peach/health",
        "/_peach/routes",
        "/_peach/",
        "/_peach/../echo",
        "/" + "a" * 4000,
    ]
) | st.text(max_size=40).map(lambda text: "/" + quote(text, safe="/%"))


@st.composite
def bodies(draw) -> tuple[bytes | None, str]:
    kind = draw(st.sampled_from(["none", "object", "json", "bytes", "nested", "bad-utf8", "utf16"]))
    if kind == "none":
        return None, kind
    if kind == "object":
        obj = draw(st.dictionaries(param_names, json_values, max_size=6))
        return json.dumps(obj).encode(), kind
    if kind == "json":
        return json.dumps(draw(json_values)).encode(), kind
    if kind == "bytes":
        return draw(st.binary(max_size=3000)), kind
    if kind == "nested":
        depth = draw(st.integers(1, 200_000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        inner = draw(st.sampled_from(["1", "", "[]"]))
        return (opener * depth + inner + closer * depth).encode(), kind
    if kind == "bad-utf8":
        return b'{"text": "\xff\xfe\xc3"}', kind
    return json.dumps({"text": "é", "n": 2}).encode("utf-16"), kind


headers = st.dictionaries(
    st.sampled_from(
        ["content-type", "content-encoding", "accept-encoding", "x-peach-replica", "expect"]
    )
    | st.from_regex(r"\A[A-Za-z][A-Za-z0-9-]{0,30}\Z"),
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=latin-1",
            "text/plain",
            "multipart/form-data; boundary=x",
            "gzip",
            "br, deflate",
            "100-continue",
            "main#1",
        ]
    )
    | st.from_regex(r"\A([!-~]([ -~]{0,58}[!-~])?)?\Z"),
    max_size=5,
).filter(lambda h: not {k.lower() for k in h} & {"host", "content-length", "transfer-encoding"})


@pytest.mark.slow
@settings(
    max_examples=200,
    derandomize=True,  # the same requests on every run and machine, no example database
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=methods,
    path=paths,
    query=st.lists(st.tuples(param_names, query_values), max_size=6),
    body=bodies(),
    extra_headers=headers,
)
def test_random_requests_never_get_an_unasked_5xx_and_the_server_lives(
    fuzz_server, client, method, path, query, body, extra_headers
):
    content, _ = body
    target = path + ("?" + urlencode(query) if query else "")
    try:
        response = client.request(method, target, content=content, headers=extra_headers)
    except httpx.UnsupportedProtocol:
        return
    check_answer(response, path)
    assert_alive(client, fuzz_server)


# -- malformed HTTP on a raw socket ---------------------------------------------------------

MALFORMED = [
    b"\x00\x01\x02garbage\r\n\r\n",
    b"GET /echo HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET /echo\r\n\r\n",
    b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nno-colon-here\r\n\r\n",
    b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
    b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Many: 1\r\n" * 5000 + b"\r\n",
    b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n{}",
    b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnope\r\n",
    b'POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"text":',  # then hang up
    b"GET /echo%ZZ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET /\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET /echo?text=%ff%fe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET http://evil.example/echo HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # pipelined
    b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # the head never ends: the client gives up
]


@pytest.mark.parametrize("raw", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_http_is_refused_or_answered_never_a_5xx(fuzz_server, client, raw):
    host, port = fuzz_server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR) if raw.endswith(b":") or raw.endswith(
            b"127.0.0.1\r\n"
        ) else None
        received = b""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            received += data
            if received.count(b"HTTP/1.1 ") >= raw.count(b"HTTP/1.1") and (
                received.endswith(b"}") or received.endswith(b"received.")
            ):
                break  # every request answered, the last body complete
    for line in received.split(b"\r\n"):
        if line.startswith(b"HTTP/"):
            status = int(line.split()[1])
            assert status < 500, received[:500]
    assert_alive(client, fuzz_server)


# -- the parameters a request can never set -------------------------------------------------


@pytest.mark.parametrize("where", ["query", "body", "both"])
def test_a_request_can_never_set_model_init_state_or_stream(client, where):
    evil = {"model": "from the request", "init_state": "from the request", "stream": "false"}
    query = evil if where in ("query", "both") else {}
    body = evil if where in ("body", "both") else None
    for path, state_name, state in (
        ("/echo", "model", "the state from init"),
        ("/strict", "model", "the state from init"),
        ("/decorated", "init_state", "state from init_fn"),
    ):
        params = dict(query, count="3") if path == "/strict" else query
        response = client.post(path, params=params, json=body)
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        assert result[state_name] == state
        assert not set(RESERVED) & set(result.get("kwargs", []))


def test_a_stream_request_cannot_be_turned_off_or_on_by_defaults(client):
    # `stream` from the request decides; a generator without it is a clear 400
    response = client.get("/chunks")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "stream_required"
    streamed = client.get("/chunks", params={"stream": "yes", "n": "2"})
    assert streamed.status_code == 200 and streamed.text == "chunk-0\nchunk-1\n"


# -- huge and deeply nested bodies ----------------------------------------------------------


def test_deeply_nested_json_is_a_400_not_a_crash(client, fuzz_server):
    for depth in (1_000, 100_000, 1_000_000):
        response = client.post("/echo", content=b"[" * depth + b"]" * depth)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "bad_request"

    def nested(levels: int) -> dict:
        value: dict = {"text": "x"}
        for _ in range(levels - 1):
            value = {"a": value}
        return value

    deep = client.post("/echo", json=nested(MAX_BODY_DEPTH))  # **kwargs take it: fine
    assert deep.status_code == 200, deep.text
    for levels in (MAX_BODY_DEPTH + 1, 500, 900):  # valid JSON, but it could not be passed on
        response = client.post("/echo", json=nested(levels))
        assert response.status_code == 400, response.text
        assert response.json()["error"] == {
            "code": "bad_request",
            "message": f"the request body is nested more than {MAX_BODY_DEPTH} levels deep",
        }
    assert_alive(client, fuzz_server)


def test_a_body_just_under_the_limit_is_served_and_one_over_it_is_413(client):
    text = "x" * (MAX_BODY_BYTES - 100)
    response = client.post("/echo", json={"text": text})
    assert response.status_code == 200 and len(response.json()["result"]["text"]) == len(text)
    response = client.post("/echo", json={"text": text + "y" * 200})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def _peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_300_mb_body_is_refused_without_the_gateway_holding_it(fuzz_server, client, declared):
    gateway = fuzz_server.process.pid
    before = _peak_kib(gateway)
    block = b"a" * (1 << 20)

    def upload() -> Iterator[bytes]:
        for _ in range(300):
            yield block

    headers = {"content-length": str(300 << 20)} if declared else {}
    began = time.monotonic()
    try:
        response = client.post("/echo", content=upload(), headers=headers)
    except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
        # the server answered 413 and closed before the upload ended: refused, as asked
        response = None
    if response is not None:
        assert response.status_code == 413
        assert "over the limit of" in response.json()["error"]["message"]
    assert time.monotonic() - began < 60
    assert _peak_kib(gateway) - before < 64 * 1024, "the gateway held the body in memory"
    assert_alive(client, fuzz_server)


def _reset_peak(pid: int) -> None:
    """Reset ``pid``'s peak resident size (VmHWM) to its current size: what VmHWM says
    after is the peak since now, however short it was."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")


def test_a_16_mb_header_is_refused_without_the_gateway_holding_it(fuzz_server, client):
    gateway = fuzz_server.process.pid
    _reset_peak(gateway)
    before = _peak_kib(gateway)
    host, port = fuzz_server.url.removeprefix("http://").rsplit(":", 1)
    head = b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"h" * (16 << 20) + b"\r\n\r\n"
    sent_all, answer, closed = False, b"", False
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        try:
            sock.sendall(head)
            sent_all = True
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway closed the connection before the header ended
        try:
            while chunk := sock.recv(65536):  # until the gateway closes (a timeout fails)
                answer += chunk
            closed = True
        except ConnectionResetError:
            closed = True
    peak = _peak_kib(gateway)
    status = answer.split(b"\r\n", 1)[0]
    # refused: a 431 (or 400) answer, or the connection closed before the header ended
    assert status.split(b" ")[1:2] in ([b"431"], [b"400"]) or (not sent_all and not answer), (
        status,
        sent_all,
    )
    assert closed, "the gateway kept the connection open"
    assert peak - before < 8 * 1024, f"the gateway's peak grew {peak - before} KiB"
    assert_alive(client, fuzz_server)


def test_the_head_bound_refuses_past_64_kib_and_resets_per_request(fuzz_server, client):
    from simulator.http_protocol import MAX_HEAD_BYTES

    big = {"X-Big": "h" * (MAX_HEAD_BYTES + 1024)}
    refused = httpx.get(f"{fuzz_server.url}/echo", headers=big, timeout=10)
    assert refused.status_code == 431 and "KiB" in refused.text
    # 40 KiB of headers on each of three requests on one keep-alive connection: each fits
    fits = {"X-Some": "h" * (40 * 1024)}
    with httpx.Client(timeout=10) as keep_alive:
        for _ in range(3):
            assert keep_alive.get(f"{fuzz_server.url}/echo", headers=fits).status_code != 431
    assert_alive(client, fuzz_server)


# -- request data with control characters through the log ---------------------------------


@pytest.mark.slow
@given(
    text=st.text(st.characters(max_codepoint=0x2030), min_size=1, max_size=12),
    refused=st.booleans(),
)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_request_data_with_control_characters_gives_one_escaped_log_line(
    fuzz_server, text, refused
):
    """A path (percent-decoded by the server) logs as one line with nothing raw in it, both
    when the gateway answers (404) and when the Origin check refuses it (403)."""
    marker = f"m{time.monotonic_ns()}"
    fuzz_server.mark()
    origin = {"Origin": "http://x.test"} if refused else {}
    httpx.get(f"{fuzz_server.url}/{marker}{quote(text, safe='')}", headers=origin)
    fuzz_server.wait_for_output(marker)
    logged = [line for line in fuzz_server.output_since_mark().splitlines() if marker in line]
    assert len(logged) == 1, logged
    assert not any(c in logged[0] for c in "\r\x1b\x00\x07\x08\x85\u2028")
