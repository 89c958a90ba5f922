"""`peach ask` against a real `peach dev` serving tests/projects/streams.

Each framing end to end (piped byte-exact and rendered on a terminal), chunks printed while
the endpoint's generator is still running, Ctrl-C closing the generator (its ``finally``
writes a marker file), and the exit code of every error a dev server can produce.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from ask_support import DURATION, Child, ask
from conftest import PROJECTS, start_peach_dev

STREAMS = PROJECTS / "streams"
PLAIN = b"alpha b\xc3\xa9ta gamma\n"
JSONL = (
    b'{"token": "Hel"}\n{"token": "lo"}\n{"token": ", "}\n{"token": "world"}\n'
    b'{"usage": {"tokens": 4}}\n'
)
SSE = (
    b": keep-alive comment\n\n"
    b"event: greeting\nid: 1\ndata: first line\ndata: second line\n\n"
    b'data: {"delta": "Hi"}\n\n'
    b'data: {"delta": " there"}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("peach-dev-streams") / "dev.log"
    server = start_peach_dev(STREAMS, log_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture
def env(dev):
    return {"PEACH_URL": dev.url}


def wait_for_file(path: Path, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.stat().st_size):  # created empty, then written
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "expected"), [("/plain", PLAIN), ("/jsonl", JSONL), ("/sse", SSE)]
)
def test_each_framing_piped_is_byte_exact(env, path, expected):
    result = ask(path, "--stream", env=env)
    assert result.code == 0, result.stderr
    assert result.stdout == expected
    summary = result.stderr.strip()
    assert re.fullmatch(
        rf"first chunk {DURATION} · \d+ chunks? · .*{len(expected)} B · total {DURATION} · "
        rf"largest gap {DURATION}",
        summary,
    ), summary


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/plain", "alpha béta gamma\n"),
        ("/jsonl", 'Hello, world\n{"usage": {"tokens": 4}}\n'),
        ("/sse", "[greeting] first line\nsecond line\nHi there\n"),
    ],
)
def test_each_framing_rendered_on_a_terminal(env, path, expected):
    child = Child(path, "--stream", tty=True, env=env)
    try:
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 0, result.stderr
    assert result.stdout.decode().replace("\r\n", "\n") == expected
    summary = result.stderr.strip()
    assert summary.startswith("200 OK · component main · replica "), summary


@pytest.mark.slow
def test_get_sends_stream_in_the_query(env):
    result = ask("/jsonl", "pause_ms:=0", "--stream", "--get", env=env)
    assert result.code == 0 and result.stdout == JSONL


@pytest.mark.slow
def test_first_chunk_is_printed_while_the_generator_waits(env, tmp_path):
    gate, marker = tmp_path / "gate", tmp_path / "marker"
    child = Child("/gated", f"gate={gate}", f"marker={marker}", "--stream", env=env)
    try:
        assert child.read_until(b"first chunk\n") == b"first chunk\n"
        assert not marker.exists()  # the generator is still running
        gate.touch()
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 0, result.stderr
    assert result.stdout == b"first chunk\nsecond chunk\n"
    assert wait_for_file(marker)


@pytest.mark.slow
@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
def test_sigint_mid_stream_exits_130_and_closes_the_generator(env, tmp_path, tty):
    gate, marker = tmp_path / "gate", tmp_path / "marker"
    child = Child("/gated", f"gate={gate}", f"marker={marker}", "--stream", tty=tty, env=env)
    try:
        child.read_until(b"first chunk")
        assert not marker.exists()
        child.interrupt()
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 130
    assert result.stdout.replace(b"\r\n", b"\n") == b"first chunk\n"  # kept what was printed
    assert wait_for_file(marker), "the endpoint's finally did not run"
    assert not gate.exists()
    assert "interrupted" in result.stderr


@pytest.mark.slow
def test_stalled_stream_times_out_and_the_generator_is_closed(env, tmp_path):
    gate, marker = tmp_path / "gate", tmp_path / "marker"
    result = ask(
        "/gated", f"gate={gate}", f"marker={marker}", "--stream", "--timeout", "0.5", env=env
    )
    assert result.code == 6
    assert result.stdout == b"first chunk\n"
    assert "stalled" in result.stderr
    assert wait_for_file(marker)


@pytest.mark.slow
def test_answer_piped_and_on_a_terminal(env):
    result = ask("/answer", "query=hi", "size:=2", env=env)
    assert result.code == 0, result.stderr
    assert result.stdout == b'{"query": "hi", "items": [0, 1]}\n'
    assert ask("/answer", "query=hi", "size==2", "--get", env=env).stdout == result.stdout

    child = Child("/answer", tty=True, env=env)
    try:
        shown = child.finish()
    finally:
        child.kill()
    assert shown.code == 0
    assert re.match(rf"200 OK · {DURATION} · component main · replica \S+", shown.stderr), (
        shown.stderr
    )


@pytest.mark.slow
def test_error_envelope_exits_1(env):
    result = ask("/fails", env=env)
    assert result.code == 1 and result.stdout == b""
    assert result.stderr.startswith("error: method_error: ") and "ValueError: boom" in result.stderr


def test_stream_not_requested_exits_1_and_says_what_to_send(env):
    result = ask("/plain", env=env)
    assert result.code == 1
    assert "stream_required" in result.stderr and "stream=true" in result.stderr
    assert result.stderr.splitlines()[-1] == "hint: add --stream to ask for the stream"


@pytest.mark.slow
def test_unknown_url_lists_the_endpoints(env):
    result = ask("/answr", env=env)
    assert result.code == 8
    lines = result.stderr.splitlines()
    assert lines[0] == "error: 404: no endpoint at /answr; did you mean /answer?"
    for url in ("/answer", "/fails", "/gated", "/jsonl", "/plain", "/sse", "/ticks"):
        assert url in lines[1]


def test_bad_parameter_is_the_servers_bad_request(env):
    for extra in ([], ["--get"]):
        result = ask("/answer", "size=notanumber", *extra, env=env)
        assert result.code == 1
        assert "bad_request" in result.stderr and "size" in result.stderr


def test_key_value_reaches_typed_parameters_of_a_generator(env, dev):
    result = ask("/count", "--stream", "n=3", "delay=0.1", env=env)
    assert result.code == 0, result.stderr
    assert result.stdout == b"0\n1\n2\n"
    # The same values in a query string, as curl would send them: the same stream.
    with httpx.stream("GET", f"{dev.url}/count?n=3&delay=0.1&stream=true", timeout=10) as reply:
        assert reply.status_code == 200
        assert b"".join(reply.iter_bytes()) == result.stdout


@pytest.mark.slow
def test_key_value_is_converted_like_a_query_string(env, dev):
    for items in (["size=2"], ["size==2"], ["size:=2"]):
        result = ask("/answer", "query=7", *items, env=env)
        assert result.code == 0, result.stderr
        assert result.stdout == b'{"query": "7", "items": [0, 1]}\n'  # str stays a string
    curl = httpx.get(f"{dev.url}/answer?query=7&size=2", timeout=10)
    assert curl.json()["result"] == {"query": "7", "items": [0, 1]}


@pytest.mark.slow
def test_a_stream_cut_by_peach_dev_is_reported_as_cut(env):
    """The generator raises after two chunks: peach dev cuts the stream (SPEC §2) and
    `peach ask` keeps what arrived, says "cut after 2 chunks" and exits 7."""
    result = ask("/breaks", "--stream", env=env)
    assert result.code == 7, result.stderr
    assert result.stdout.count(b"\n") == 2
    assert "cut after 2 chunks" in result.stderr
