"""The client core: request building, the error boundary, streams read as they arrive."""

from __future__ import annotations

import inspect
import json
import time

import httpx
import pytest
from ask_support import JSONL_CHUNKS, PLAIN_CHUNKS, ServerState, make_app, run_server

from peach_cli.client import send as client_module
from peach_cli.client.items import build_request, parse_items, resolve_url
from peach_cli.client.request import URL_LIMIT
from peach_cli.client.send import (
    EXIT_CODES,
    BadResponse,
    Client,
    ClientError,
    EndpointFailed,
    EndpointNotFound,
    HostNotFound,
    RequestTimedOut,
    ResponseCut,
    ServerUnreachable,
    TLSFailed,
    translate_error,
)
from peach_cli.errors import UsageError


@pytest.fixture(scope="module")
def server():
    state = ServerState()
    with run_server(make_app(state)) as url:
        yield url, state


# --------------------------------------------------------------------------- requests


def test_items_follow_httpie_conventions():
    parsed = parse_items(
        ["q=hello", "size:=5", 'tags:=["a","b"]', "eq=a=b", "page==2", "flag:=true", 's:="x"']
    )
    assert parsed.strings == [("q", "hello"), ("eq", "a=b")]
    assert parsed.fields == {"size": 5, "tags": ["a", "b"], "flag": True, "s": "x"}
    assert parsed.query == [("page", "2")]


def test_the_later_of_key_equals_and_key_colon_equals_wins():
    parsed = parse_items(["n=1", "n:=2", "m:=3", "m=4", "t=a", "t=b"])
    assert parsed.fields == {"n": 2}
    assert parsed.strings == [("m", "4"), ("t", "a"), ("t", "b")]  # a repeated key: a list


@pytest.mark.parametrize("item", ["novalue", "=x", "size:=nope", ":=1"])
def test_bad_items_are_usage_errors(item):
    with pytest.raises(UsageError):
        parse_items([item])


def test_resolve_url(monkeypatch):
    monkeypatch.delenv("PEACH_URL", raising=False)
    assert resolve_url("/assistant") == "http://127.0.0.1:8000/assistant"
    assert resolve_url("assistant") == "http://127.0.0.1:8000/assistant"
    assert resolve_url("/a", "http://h:9/zzebu/") == "http://h:9/zzebu/a"
    assert resolve_url("/a", "h:9") == "http://h:9/a"
    assert resolve_url("https://x.example/a?b=1", "http://ignored") == "https://x.example/a?b=1"
    assert resolve_url(":9000/a") == "http://127.0.0.1:9000/a"
    assert resolve_url("localhost:9000/a") == "http://localhost:9000/a"
    assert resolve_url("my-host.lan:80/a?x=1") == "http://my-host.lan:80/a?x=1"
    monkeypatch.setenv("PEACH_URL", "http://10.0.0.1:7000")
    assert resolve_url("/a") == "http://10.0.0.1:7000/a"
    assert resolve_url("/a", "http://flag:1") == "http://flag:1/a"  # --url beats the env
    for bad in ("ftp://x/a", "http://", "http://h:notaport/a"):
        with pytest.raises(UsageError):
            resolve_url(bad)
    monkeypatch.setenv("PEACH_URL", "ftp://x")
    with pytest.raises(UsageError, match="^PEACH_URL: 'ftp://x'"):  # says where it came from
        resolve_url("/a")
    with pytest.raises(UsageError, match="^--url: 'ftp://y'"):
        resolve_url("/a", "ftp://y")


def test_build_request_body_query_stream_and_headers(tmp_path):
    request = build_request("/a", ["q=hi", "n:=2"], stream=True, headers=["X-Trace: 7"])
    assert request.method == "POST"
    assert request.params == (("q", "hi"),)  # KEY=VALUE: converted as a query string is
    assert request.body == {"n": 2, "stream": True}
    assert ("X-Trace", "7") in request.headers
    assert ("Accept-Encoding", "identity") in request.headers

    request = build_request("/a", ["q=hi", "ids:=[1,2]", "on:=true"], get=True, stream=True)
    assert request.method == "GET" and request.body is None
    assert request.params == (
        ("q", "hi"),
        ("ids", "1"),
        ("ids", "2"),
        ("on", "true"),
        ("stream", "true"),
    )

    assert build_request("/a").method == "GET"
    for items in (["stream==true"], ["stream=yes"], ["stream:=true"], ["stream:=1"]):
        request = build_request("/a", items)  # the parameter asks for the stream too
        assert request.stream and ("Accept-Encoding", "identity") in request.headers
    assert build_request("/a", ["stream=true"], get=True).params == (("stream", "true"),)
    request = build_request("/a", ["stream=no", "q=1"], get=True, stream=True)
    assert request.params == (("q", "1"), ("stream", "true"))  # --stream wins, once
    assert build_request("/a", json_body='{"stream": true}').stream
    assert not build_request("/a", ["stream=false"]).stream
    assert build_request("/a", stream=True).body == {"stream": True}

    body_file = tmp_path / "body.json"
    body_file.write_text(json.dumps({"q": "from file", "size": 3}))
    request = build_request("/a", ["size:=9"], json_body=f"@{body_file}")
    assert request.body == {"q": "from file", "size": 9}  # items win over --json
    request = build_request("/a", ["size=9"], json_body=f"@{body_file}")
    assert request.body == {"q": "from file"} and request.params == (("size", "9"),)
    assert build_request("/a", json_body='{"x": 1}').body == {"x": 1}


def test_key_value_items_go_in_the_query_string():
    request = build_request("/a", ["n=3", "delay=0.1", "tag=a", "tag=b", "page==2"])
    assert request.method == "GET" and request.body is None
    assert request.params == (
        ("page", "2"),
        ("n", "3"),
        ("delay", "0.1"),
        ("tag", "a"),
        ("tag", "b"),
    )
    request = build_request("/a", ["n=3", "stream=no"], stream=True)
    assert request.params == (("n", "3"),) and request.body == {"stream": True}


def test_a_value_too_long_for_the_url_goes_in_the_body_as_a_string():
    long = "é" * 2000  # 12,000 bytes once percent-encoded
    request = build_request("/a", ["q=short", f"text={long}", "n=3", f"text={long}x"])
    assert request.method == "POST"
    assert request.params == (("q", "short"), ("n", "3"))  # short values still convert
    assert request.body == {"text": long + "x"}  # every value of that key, the last one wins
    url = httpx.Request(request.method, request.url, params=request.params).url
    assert len(str(url)) <= URL_LIMIT
    fits = "x" * (URL_LIMIT - len("http://127.0.0.1:8000/a?v="))
    assert build_request("/a", [f"v={fits}"]).params == (("v", fits),)  # exactly the limit
    assert build_request("/a", [f"v={fits}y"]).body == {"v": fits + "y"}
    request = build_request("/a", [f"text={long}"], get=True)  # --get: the query, always
    assert request.params == (("text", long),) and request.body is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"json_body": "[1, 2]"},
        {"json_body": "{nope"},
        {"json_body": "@/nonexistent/body.json"},
        {"json_body": "{}", "get": True},
        {"headers": ["no-colon"]},
        {"headers": ["bad name: x"]},
        {"timeout_s": 0},
    ],
)
def test_build_request_usage_errors(kwargs):
    with pytest.raises(UsageError):
        build_request("/a", **kwargs)


# --------------------------------------------------------------------------- the error boundary


def _all_httpx_exceptions():
    return [
        obj
        for obj in vars(httpx).values()
        if inspect.isclass(obj)
        and issubclass(obj, Exception)
        and (issubclass(obj, httpx.HTTPError) or obj is httpx.InvalidURL)
        and obj not in (httpx.HTTPError, httpx.HTTPStatusError)
    ]


@pytest.mark.parametrize("error_class", _all_httpx_exceptions(), ids=lambda c: c.__name__)
def test_every_httpx_exception_is_translated(error_class):
    # HTTPStatusError is never raised (the client does not call raise_for_status).
    error = error_class("boom") if error_class is not httpx.InvalidURL else error_class("bad")
    for in_body in (False, True):
        translated = translate_error(error, url="http://h:1/a", timeout_s=5, in_body=in_body)
        assert isinstance(translated, ClientError)
        assert type(translated) is not ClientError, "mapped to the generic class"


def test_translation_picks_the_specific_cause():
    import socket
    import ssl

    def connect_error(cause):
        try:
            raise httpx.ConnectError("x") from cause
        except httpx.ConnectError as error:
            return translate_error(error, url="http://h:1/a", timeout_s=5, in_body=False)

    refused = connect_error(ConnectionRefusedError(111, "refused"))
    assert isinstance(refused, ServerUnreachable)
    assert refused.message == "is the server running on h:1? (connection refused)"
    unreachable = connect_error(OSError(101, "Network is unreachable"))
    assert isinstance(unreachable, ServerUnreachable)
    assert unreachable.message == "cannot connect to h:1: Network is unreachable"
    assert isinstance(connect_error(socket.gaierror(-2, "Name or service not known")), HostNotFound)
    assert isinstance(connect_error(ssl.SSLError(1, "WRONG_VERSION_NUMBER")), TLSFailed)
    cut = translate_error(
        httpx.RemoteProtocolError("incomplete"), url="http://h:1/a", timeout_s=5, in_body=True
    )
    assert isinstance(cut, ResponseCut)
    early = translate_error(
        httpx.RemoteProtocolError("no answer"), url="http://h:1/a", timeout_s=5, in_body=False
    )
    assert isinstance(early, BadResponse)
    gap = translate_error(httpx.ReadTimeout("t"), url="http://h:1/a", timeout_s=5, in_body=True)
    assert isinstance(gap, RequestTimedOut) and "stalled" in gap.message


def test_exit_codes_are_distinct_and_documented():
    classes = [
        obj
        for obj in vars(client_module).values()
        if inspect.isclass(obj) and issubclass(obj, ClientError) and obj is not ClientError
    ]
    codes = [cls.exit_code for cls in classes]
    assert len(classes) == 8 and len(set(codes)) == len(codes)
    documented = {code for code, _ in EXIT_CODES}
    assert set(codes) <= documented
    assert {EndpointFailed.exit_code, EndpointNotFound.exit_code} == {1, 8}
    for cls in classes:
        assert f"exit {cls.exit_code}" in client_module.__doc__.replace("  ", " ")


# --------------------------------------------------------------------------- live streams


def test_stream_chunks_arrive_before_the_stream_ends(server):
    url, state = server
    state.reset()
    request = build_request(f"{url}/gated", stream=True, timeout_s=10)
    with Client.for_request(request) as client, client.stream(request) as stream:
        chunks = stream.chunks()
        assert next(chunks) == b"first chunk\n"
        assert not state.gate.is_set()  # the server is still holding the stream open
        state.gate.set()
        assert b"".join(chunks) == b"second chunk\n"
    assert state.closed.wait(5)
    assert stream.stats.chunks == 2 and stream.stats.bytes == len(b"first chunk\nsecond chunk\n")
    assert stream.stats.first_chunk is not None and stream.stats.ended is not None


def test_closing_a_stream_early_closes_the_server_generator(server):
    url, state = server
    state.reset()
    request = build_request(f"{url}/gated", stream=True, timeout_s=10)
    with Client.for_request(request) as client:
        with client.stream(request) as stream:
            assert next(stream.chunks()) == b"first chunk\n"
        # Leaving the block dropped the connection: the generator's finally has run.
        assert state.closed.wait(5)


def test_a_stream_is_abandoned_at_its_deadline_whatever_the_server_does(server):
    """``chunks(until=...)`` (what `peach fuzz` reads a stream with): the server holds the
    stream open after its first chunk, and the body is left at the deadline, not at the
    read timeout; the server's generator is closed, and the client sends on."""
    url, state = server
    state.reset()
    request = build_request(f"{url}/gated", stream=True, timeout_s=10)
    with Client.for_request(request) as client:
        with client.stream(request) as stream:
            began = time.perf_counter()
            got = list(stream.chunks(until=began + 0.25))
            took = time.perf_counter() - began
        assert got == [b"first chunk\n"] and stream.abandoned
        assert 0.2 < took < 3  # (the read timeout is 10 s)
        assert state.closed.wait(5)
        for _ in range(3):  # the connection it shut is never reused; one that ended in time is
            plain = build_request(f"{url}/plain", stream=True)
            with client.stream(plain) as stream:
                assert b"".join(stream.chunks(until=time.perf_counter() + 5)) == b"".join(
                    PLAIN_CHUNKS
                )
            assert not stream.abandoned


def test_stream_bytes_are_exact(server):
    url, _ = server
    for path, expected in (("/plain", PLAIN_CHUNKS), ("/jsonl", JSONL_CHUNKS)):
        request = build_request(url + path, stream=True)
        with Client.for_request(request) as client, client.stream(request) as stream:
            assert b"".join(stream.chunks()) == b"".join(expected)


def test_stream_errors_are_translated(server):
    url, state = server
    request = build_request(f"{url}/cut", stream=True)
    with Client.for_request(request) as client, client.stream(request) as stream:
        with pytest.raises(ResponseCut):
            list(stream.chunks())

    state.reset()
    request = build_request(f"{url}/stall", stream=True, timeout_s=0.3)
    started = time.monotonic()
    with Client.for_request(request) as client, client.stream(request) as stream:
        with pytest.raises(RequestTimedOut, match="stalled"):
            list(stream.chunks())
    assert time.monotonic() - started < 3
    state.gate.set()


def test_routes_of_a_dev_server(dev_server):
    """Against a real `peach dev` (tests/projects/semantics): every endpoint of its plan."""
    from conftest import SEMANTICS

    from peach_cli.checks.build import build_plan

    plan, _ = build_plan(SEMANTICS)
    assert plan is not None
    with Client() as client:
        routes = client.fetch_routes(f"{dev_server.url}/missing")
    assert [route["url"] for route in routes] == sorted(e.url for e in plan.endpoints.values())
    assert {route["name"] for route in routes} == set(plan.endpoints)


def test_the_stand_in_answers_as_a_dev_server_does(server, dev_server):
    """The stand-in's answers (built from the contract's code) have the real `peach dev`'s
    headers, replica id shape and envelopes: it cannot drift from what peach ask meets."""
    import re

    from ask_support import PEACH_HEADERS, REPLICA

    real = httpx.get(f"{dev_server.url}/loud", timeout=10)
    assert real.status_code == 200, real.text
    fake = httpx.get(f"{server[0]}/ok", timeout=10)
    peach_headers = {name.lower() for name in PEACH_HEADERS}
    assert peach_headers <= set(real.headers) and peach_headers <= set(fake.headers)
    assert real.headers["x-peach-component"] == fake.headers["x-peach-component"] == "main"
    assert re.fullmatch(r"loud/main#\d+", real.headers["x-peach-replica"]), real.headers
    assert re.fullmatch(r"main/main#\d+", REPLICA)
    assert fake.headers["x-peach-replica"] == REPLICA
    assert set(real.json()) == set(fake.json()) == {"status", "result"}

    real, fake = (
        httpx.get(f"{url}/no-such-thing", timeout=10) for url in (dev_server.url, server[0])
    )
    assert real.status_code == fake.status_code == 404
    assert real.json()["error"]["code"] == fake.json()["error"]["code"] == "not_found"
    assert re.sub(r"\(endpoints: .*\)", "", real.json()["error"]["message"]) == re.sub(
        r"\(endpoints: .*\)", "", fake.json()["error"]["message"]
    )
