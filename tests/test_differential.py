"""Differential: generated requests, sent to `peach dev` and to the Ray deployment, must
get the same answer.

Hypothesis generates requests — methods, urls (the semantics project's deterministic
endpoints, unknown ones, trailing slashes), query strings with repeated keys,
percent-encoding and raw non-ASCII bytes, JSON bodies of every shape and depth, invalid
bodies, ``stream`` on and off, values that fail conversion, oversized bodies — and sends
each, byte for byte the same, to both hosts serving ``tests/projects/semantics``. Status,
``content-type``, ``X-Peach-Component``, the body bytes and, for streams, whether the
stream ended cleanly or was cut, must be identical; replica ids aside.

The seed is fixed (``derandomize``) and the budget keeps the test to about a minute in CI;
``PEACH_DIFF_EXAMPLES=2000`` runs a longer search.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

EXAMPLES = int(os.environ.get("PEACH_DIFF_EXAMPLES", "120"))
MAX_BODY = 10 * 1024 * 1024

DETERMINISTIC_URLS = [
    "/params",
    "/kwargs",
    "/typed",
    "/stream",
    "/sync-stream",
    "/stream-fail",
    "/stream-fail-first",
    "/sync-stream-fail",
    "/sse",
    "/stream-bytes",
    "/results",
    "/fallback/raise",
    "/fallback/empty",
    "/raises",
    "/empty",
    "/loud",
    "/ab",
]
"""Endpoints whose answers depend only on the request (no replica state, no clock)."""

KEYS = [
    "a",
    "b",
    "flag",
    "tags",
    "name",
    "size",
    "count",
    "kind",
    "message",
    "text",
    "day",
    "when",
    "price",
    "ident",
    "color",
    "level",
    "mode",
    "days",
    "stream",
    "model",
    "init_state",
    "x",
]

VALUES = st.one_of(
    st.sampled_from(
        ["1", "-3", "2.5", "true", "false", "yes", "", "null", "a,b", "[1, 2]", "[1, 2", "é"]
    ),
    st.sampled_from(["2024-05-01", "2024-02-30", "19.90", "NaN", "red", "3", "slow", "numpy"]),
    st.sampled_from(["12345678-1234-5678-1234-567812345678", "2024-05-01T10:00:00+02:00"]),
    st.text(max_size=12),
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


LONE_SURROGATES = [
    b'{"a": "x\\ud800y"}',
    b'{"name": "\\udcff"}',
    b'{"tags": ["ok", "\\udfff"]}',
    b'{"a\\ud800": 1}',
    b'{"a": "\xed\xb3\xbf"}',
]
"""JSON bodies holding a lone surrogate: ``400 bad_request`` naming it, on both hosts."""


@dataclass(frozen=True)
class Request:
    method: str
    target: bytes
    body: bytes | None
    declared_length: int | None = None
    """A Content-Length larger than the body actually sent (an oversized upload)."""

    def __repr__(self) -> str:
        body = (
            self.body if self.body is None or len(self.body) < 200 else f"<{len(self.body)} bytes>"
        )
        return f"Request({self.method} {self.target!r} body={body!r})"


def _encode_pair(key: str, value: str, raw: bool) -> bytes:
    if raw:  # what a sloppy client sends: UTF-8 bytes, unescaped
        return key.encode() + b"=" + value.encode("utf-8", "surrogatepass")
    return quote(key, safe="").encode() + b"=" + quote(value, safe="").encode()


@st.composite
def requests(draw: st.DrawFn) -> Request:
    method = draw(st.sampled_from(["GET"] * 5 + ["POST"] * 5 + ["PUT", "DELETE", "HEAD"]))
    url = draw(
        st.one_of(
            st.sampled_from(DETERMINISTIC_URLS),
            st.sampled_from(DETERMINISTIC_URLS).map(lambda u: u + "/"),
            st.sampled_from(["/nope", "/params/extra", "/PARAMS", "/", "/fallback"]),
        )
    )
    pairs = draw(st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=6))
    if draw(st.booleans()):
        pairs.append(("stream", draw(st.sampled_from(["true", "1", "no", "false"]))))
    raw = draw(st.integers(0, 9)) == 0
    query = b"&".join(_encode_pair(k, v, raw) for k, v in pairs)
    if draw(st.integers(0, 9)) == 0:
        query += draw(st.sampled_from([b"&%", b"&x=%zz", b"&=1", b"&&", b"&y=%C3", b"&z=%E2%82"]))
    target = url.encode() + (b"?" + query if query else b"")
    body: bytes | None = None
    declared: int | None = None
    if method == "POST":
        shape = draw(st.integers(0, 19))
        if shape < 10:
            body = json.dumps(
                draw(st.dictionaries(st.sampled_from(KEYS), JSON | VALUES, max_size=5))
            ).encode()
        elif shape < 13:
            body = json.dumps(draw(JSON)).encode()
        elif shape < 15:
            body = draw(st.sampled_from([b"{not json", b"\xff\xfe", b"", b"   ", b'{"a": 1,}']))
            if draw(st.booleans()):  # a lone surrogate, escaped or as its raw bytes
                body = draw(st.sampled_from(LONE_SURROGATES))
        elif shape < 17:
            depth = draw(st.integers(90, 110))
            body = b'{"a": ' + b"[" * depth + b"]" * depth + b"}"
        elif shape == 17:
            body = b'{"a": "' + b"x" * (MAX_BODY + 1) + b'"}'
        else:
            body, declared = b"{", MAX_BODY * 2
    return Request(method, target, body, declared)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    clean: bool
    """False when a chunked body ended without its terminating chunk (a cut stream)."""

    def comparable(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "content-type": self.headers.get("content-type"),
            "x-peach-component": self.headers.get("x-peach-component"),
            "has-replica-header": "x-peach-replica" in self.headers,
            "body": self.body,
            "clean": self.clean,
        }


def send(base_url: str, request: Request) -> Reply:
    """Send ``request`` byte for byte over a fresh connection; read the whole reply."""
    parts = urlsplit(base_url)
    prefix = parts.path.rstrip("/").encode()
    head = [
        request.method.encode() + b" " + prefix + request.target + b" HTTP/1.1",
        b"Host: 127.0.0.1",
    ]
    head.append(b"Connection: close")
    if request.body is not None:
        head.append(b"Content-Type: application/json")
        length = request.declared_length or len(request.body)
        head.append(b"Content-Length: " + str(length).encode())
    data = b"\r\n".join(head) + b"\r\n\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        try:
            sock.sendall(data + (request.body or b""))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the body was all sent: read the answer
        received = b""
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    return _parse(received, request.method)


def _parse(data: bytes, method: str) -> Reply:
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if method == "HEAD":
        return Reply(status, headers, b"", True)
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body, clean = _unchunk(rest)
        return Reply(status, headers, body, clean)
    length = int(headers.get("content-length", len(rest)))
    return Reply(status, headers, rest[:length], len(rest) >= length)


def _unchunk(data: bytes) -> tuple[bytes, bool]:
    body = b""
    while True:
        size_line, found, rest = data.partition(b"\r\n")
        if not found:
            return body, False
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            return body, False
        if size == 0:
            return body, True
        if len(rest) < size + 2:
            return body + rest[:size], False
        body += rest[:size]
        data = rest[size + 2 :]


@pytest.fixture(scope="module")
def hosts(dev_server: Any, ray_semantics: str) -> tuple[str, str]:
    return dev_server.url, ray_semantics


COVERED = {
    "stream",
    "cut",
    "escaped",
    "raw non-ascii",
    "oversized",
    "declared oversized",
    "deep",
    "lone surrogate",
}


def features(request: Request) -> set[str]:
    """What of ``COVERED`` one generated request exercises."""
    seen: set[str] = set()
    target = request.target
    if b"stream=true" in target or b"stream=1" in target:
        seen.add("stream")
    if b"-fail" in target:
        seen.add("cut")
    if b"%" in target:
        seen.add("escaped")
    if any(b > 0x7F for b in target):
        seen.add("raw non-ascii")
    if request.body is not None and len(request.body) > MAX_BODY:
        seen.add("oversized")
    if request.declared_length:
        seen.add("declared oversized")
    if request.body is not None and request.body.startswith(b"{") and b"[[[[" in request.body:
        seen.add("deep")
    if request.body in LONE_SURROGATES:
        seen.add("lone surrogate")
    return seen


def test_both_hosts_answer_every_request_alike(hosts: tuple[str, str]) -> None:
    """Every generated request gets the same answer from both hosts; and the requests sent
    reach streams, cut streams, escapes, raw bytes, big and deep bodies (the rare shapes
    also as explicit examples: 120 generated requests need not draw them)."""
    dev_url, ray_url = hosts
    sent: list[Request] = []

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(request=requests())
    @example(request=Request("POST", b"/params", b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}"))
    @example(request=Request("POST", b"/params", b'{"a": "' + b"x" * (MAX_BODY + 1) + b'"}'))
    @example(request=Request("POST", b"/params?stream=true", b"{", MAX_BODY * 2))
    @example(request=Request("POST", b"/params", LONE_SURROGATES[0]))
    @example(request=Request("GET", "/params?a=caf\u00e9&b=\u20ac".encode(), None))
    def compare(request: Request) -> None:
        sent.append(request)
        dev = send(dev_url, request)
        ray = send(ray_url, request)
        assert dev.comparable() == ray.comparable(), request

    compare()
    seen = set().union(*(features(request) for request in sent))
    assert seen == COVERED, f"{len(sent)} requests sent; never: {sorted(COVERED - seen)}"


@pytest.mark.parametrize("body", LONE_SURROGATES)
def test_a_lone_surrogate_in_a_json_body_is_a_bad_request_on_both_hosts(
    hosts: tuple[str, str], body: bytes
) -> None:
    """Never a plain-text 500 nor a closed connection: the envelope, naming it — on Ray
    and on both paths of `peach dev` (an escape in the path takes the general one)."""
    dev_url, ray_url = hosts
    for url, target in [(dev_url, b"/params"), (dev_url, b"/param%73"), (ray_url, b"/params")]:
        reply = send(url, Request("POST", target, body))
        assert reply.status == 400, (url, target, reply)
        error = json.loads(reply.body)["error"]
        assert error["code"] == "bad_request" and "lone surrogate" in error["message"], error
        assert "\\u" in error["message"]  # named as its escape


REPLICA_FIELDS = {"id", "state", "pid", "error"}
"""What every host says of a replica in ``/_peach/health`` (each adds figures of its own)."""


def test_both_hosts_answer_routes_and_health_in_one_shape(hosts: tuple[str, str]) -> None:
    """``/_peach/routes`` and ``/_peach/health`` are built by one function
    (``contract.status``) for both hosts: the same keys at every level, the same endpoints,
    components and A/B splits; only what one host cannot know differs (whether an endpoint
    streams is the replicas' on Ray: null; the requests each arm got; each replica's own
    figures; which host answers, as each declares it)."""
    import httpx

    answers = {}
    for url in hosts:
        routes = httpx.get(f"{url}/_peach/routes", timeout=30).json()
        health = httpx.get(f"{url}/_peach/health", timeout=30).json()
        answers[url] = routes, health
    (dev_routes, dev_health), (ray_routes, ray_health) = answers.values()

    def endpoint_shape(endpoint: dict[str, Any]) -> tuple[Any, ...]:
        ab = endpoint.get("ab")
        ab_shape = (
            None if ab is None else (sorted(ab), ab["by"], ab["split"], sorted(ab["requests"]))
        )
        return sorted(endpoint), endpoint["name"], endpoint["url"], endpoint["components"], ab_shape

    assert sorted(dev_routes) == sorted(ray_routes) == ["codops", "endpoints"]
    assert dev_routes["codops"] == ray_routes["codops"]
    dev_endpoints = [endpoint_shape(e) for e in dev_routes["endpoints"]]
    assert dev_endpoints == [endpoint_shape(e) for e in ray_routes["endpoints"]]
    assert any(shape[-1] is not None for shape in dev_endpoints)  # an A/B test is compared
    assert {e["streams"] for e in ray_routes["endpoints"]} == {None}

    keys = ["codops", "components", "host", "ready", "status"]
    assert sorted(dev_health) == sorted(ray_health) == keys
    assert (dev_health["host"], ray_health["host"]) == ("dev", "ray")  # each says what it is

    def components(health: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
        return {
            c["component"]: (sorted(c), c["deployment"], c["memory"], c["cpus"])
            for c in health["components"]
        }

    assert components(dev_health) == components(ray_health)
    for health in (dev_health, ray_health):
        for component in health["components"]:
            for replica in component["replicas"]:
                assert REPLICA_FIELDS <= set(replica), replica
