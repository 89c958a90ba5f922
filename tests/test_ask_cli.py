"""`peach ask` as a user runs it: a real process against a real server on loopback.

The server (tests/ask_support.py) plays what `peach dev` never does on purpose — cut
streams, stalls, foreign servers, TLS — so every error path is exercised end to end.
"""

from __future__ import annotations

import json
import re
import socket
import threading

import pytest
from ask_support import (
    DURATION,
    HOSTILE_CHUNKS,
    JSONL_CHUNKS,
    PLAIN_CHUNKS,
    REPLICA,
    SSE_CHUNKS,
    Child,
    ServerState,
    ask,
    free_port,
    make_app,
    run_server,
    self_signed_certificate,
)

from peach_cli.client.send import EXIT_CODES
from peach_cli.runtime.contract.answers import stream_required_message


@pytest.fixture(scope="module")
def peach_server():
    state = ServerState()
    with run_server(make_app(state)) as url:
        yield url, state


@pytest.fixture
def server(peach_server):
    url, state = peach_server
    state.reset()
    yield url, state
    state.gate.set()  # release anything still waiting


@pytest.fixture(scope="module")
def foreign_server():
    with run_server(make_app(ServerState(), peach=False)) as url:
        yield url


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    assert "Traceback" not in stderr
    return lines[0]


# --------------------------------------------------------------------------- answers


@pytest.mark.slow
def test_piped_answer_is_the_result_json_only(server):
    url, _ = server
    result = ask(f"{url}/ok")
    assert result.code == 0
    assert result.stdout == '{"items": [1, 2, 3], "name": "héllo"}\n'.encode()
    assert result.stderr == ""


@pytest.mark.slow
def test_raw_prints_the_body_as_received(server):
    url, _ = server
    result = ask(f"{url}/ok", "--raw")
    assert result.code == 0
    assert json.loads(result.stdout) == {
        "result": {"items": [1, 2, 3], "name": "héllo"},
        "status": "ok",
    }


@pytest.mark.slow
def test_terminal_answer_is_pretty_with_a_status_line(server):
    url, _ = server
    child = Child(f"{url}/ok", tty=True)
    try:
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout.decode()).replace("\r\n", "\n")
    assert '{\n  "items": [\n    1,' in text
    status = one_line(result.stderr)
    assert status.startswith("200 OK · ") and " ms" in status
    assert "component main" in status and f"replica {REPLICA}" in status


@pytest.mark.slow
def test_request_items_json_headers_and_get(server, tmp_path):
    url, _ = server
    body_file = tmp_path / "body.json"
    body_file.write_text('{"query": "from file", "size": 1}')
    result = ask(
        f"{url}/echo", "size:=3", "tags:=[1]", "page==2", f"--json=@{body_file}", "-H", "X-Trace: 7"
    )
    assert result.code == 0, result.stderr
    echoed = json.loads(result.stdout)
    assert echoed["method"] == "POST"
    assert echoed["body"] == {"query": "from file", "size": 3, "tags": [1]}
    assert echoed["query"] == [["page", "2"]]
    assert echoed["headers"]["x-trace"] == "7"

    result = ask("/echo", "q=hi", "n:=2", "--get", env={"PEACH_URL": url})
    echoed = json.loads(result.stdout)
    assert echoed["method"] == "GET" and echoed["body"] is None
    assert echoed["query"] == [["q", "hi"], ["n", "2"]]

    result = ask("/echo", "--url", url, "--stream")  # a non-generator answers with the envelope
    assert json.loads(result.stdout)["body"] == {"stream": True}


@pytest.mark.slow
def test_foreign_answers_print_as_they_are(server, foreign_server):
    result = ask(f"{foreign_server}/foreign-json")
    assert result.code == 0 and result.stdout == b'{"hello":"world"}'
    result = ask(f"{foreign_server}/foreign-text")
    assert result.code == 0 and result.stdout == b"just text\n"


# --------------------------------------------------------------------------- streams


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "chunks"),
    [("/plain", PLAIN_CHUNKS), ("/jsonl", JSONL_CHUNKS), ("/sse", SSE_CHUNKS)],
)
def test_piped_stream_is_byte_exact_with_a_summary_on_stderr(server, path, chunks):
    url, _ = server
    result = ask(f"{url}{path}", "--stream")
    assert result.code == 0, result.stderr
    assert result.stdout == b"".join(chunks)
    summary = one_line(result.stderr)
    assert re.search(
        rf"first chunk {DURATION} · {len(chunks)} chunks · .*{len(b''.join(chunks))} B · "
        rf"total {DURATION} · largest gap {DURATION}",
        summary,
    ), summary


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/plain", "alpha béta gamma\n"),
        ("/jsonl", 'Hello, world\n{"usage": {"tokens": 4}}\n'),
        ("/jsonl?media=text/plain", 'Hello, world\n{"usage": {"tokens": 4}}\n'),
        ("/sse", "[greeting] first line\nsecond line\nHi there\nplain\n"),
        ("/sse?bom=1", "[greeting] first line\nsecond line\nHi there\nplain\n"),
        # Only text/event-stream is parsed as events: text/plain is the text it is (SPEC §3).
        ("/sse?media=text/plain", b"".join(SSE_CHUNKS).decode()),
        ("/sse?bom=1&media=text/plain", b"".join(SSE_CHUNKS[1:]).decode()),  # BOM dropped
    ],
)
def test_terminal_stream_renders_the_framing(server, path, expected):
    url, _ = server
    child = Child(f"{url}{path}", "--stream", tty=True)
    try:
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 0, result.stderr
    assert result.stdout.decode().replace("\r", "") == expected.replace("\r", "")
    summary = one_line(result.stderr)
    assert summary.startswith("200 OK · ") and "first chunk" in summary
    if "/sse" in path and "text/plain" not in path:
        assert "4 events" in summary  # [DONE] and comments are not events
    if "/jsonl" in path:
        assert "5 lines" in summary


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["?media=text/event-stream"], ["--markdown"]])
def test_a_stream_cannot_drive_the_terminal(server, extra):
    """SPEC §6: on a terminal the control characters of a stream are shown escaped (plain
    text, SSE, Markdown): no colour, no window title, no cleared screen from an endpoint."""
    import pyte

    url, _ = server
    query = extra[0] if extra and extra[0].startswith("?") else ""
    options = [] if query else extra
    child = Child(f"{url}/hostile{query}", "--stream", *options, tty=True)
    try:
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 0, result.stderr
    for raw in (b"\x1b[31m", b"\x1b]0;", b"\x1b[2J", b"\xc2\x9b"):
        assert raw not in result.stdout, result.stdout
    screen = pyte.Screen(120, 10)
    stream = pyte.ByteStream(screen)
    stream.feed(result.stdout)
    shown = "\n".join(screen.display)
    assert "told \\x1b[31mred\\x1b[0m \\x1b]0;pwned\\x07 \\x1b[2J\\x9b31m and on" in shown
    assert screen.title == ""


@pytest.mark.slow
def test_a_piped_stream_keeps_its_control_characters(server):
    url, _ = server
    result = ask(f"{url}/hostile", "--stream")
    assert result.code == 0, result.stderr
    assert result.stdout == b"".join(HOSTILE_CHUNKS)  # the bytes as sent


@pytest.mark.slow
def test_raw_on_a_terminal_shows_the_frames_as_received(server):
    url, _ = server
    child = Child(f"{url}/sse", "--stream", "--raw", tty=True)
    try:
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 0
    # The terminal turns each "\n" into "\r\n" (onlcr); the bytes are otherwise as sent.
    assert result.stdout == b"".join(SSE_CHUNKS).replace(b"\n", b"\r\n")


@pytest.mark.slow
def test_markdown_text_answer_is_rendered(server):
    url, _ = server
    child = Child(f"{url}/prose", "--markdown", tty=True)
    try:
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout.decode())
    assert "Some bold words." in text and "**" not in text and "#" not in text
    assert ask(f"{url}/prose", "--markdown").stdout == b'"# Heading\\n\\nSome **bold** words.\\n"\n'


@pytest.mark.slow
def test_first_chunk_is_printed_before_the_stream_ends(server):
    url, state = server
    child = Child(f"{url}/gated", "--stream")
    try:
        assert child.read_until(b"first chunk\n") == b"first chunk\n"
        assert not state.closed.is_set()  # the server is still in the middle of the stream
        state.gate.set()
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 0
    assert result.stdout == b"first chunk\nsecond chunk\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tty", "extra"),
    [(False, []), (True, []), (True, ["--markdown"])],
    ids=["piped", "terminal", "markdown"],
)
def test_ctrl_c_closes_the_connection_keeps_the_output_and_exits_130(server, tty, extra):
    url, state = server
    child = Child(f"{url}/gated", "--stream", *extra, tty=tty)
    try:
        child.read_until(b"first chunk")
        child.interrupt()
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 130
    if extra:
        assert [line for line in render_screen(result.stdout) if line] == ["first chunk"]
    else:
        assert result.stdout.replace(b"\r\n", b"\n") == b"first chunk\n"
    assert state.closed.wait(5), "the server's generator was not closed"
    assert not state.gate.is_set()  # it was closed by the disconnect, not by finishing
    summary = one_line(result.stderr)
    assert summary.startswith(("interrupted", "200 OK · interrupted")) and "1 chunk" in summary


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly(server):
    url, state = server
    child = Child(f"{url}/gated", "--stream")
    try:
        child.read_until(b"first chunk\n")
        child.process.stdout.close()  # like `| head -1` exiting
        state.gate.set()  # the next chunk meets the closed pipe
        child.process.wait(timeout=10)
        stderr = child.process.stderr.read().decode()
    finally:
        child.kill()
    assert child.process.returncode == 141
    assert "Traceback" not in stderr and "Exception ignored" not in stderr


@pytest.mark.slow
def test_markdown_does_not_duplicate_lines_on_a_long_answer(server):
    url, _ = server
    child = Child(
        f"{url}/markdown?paragraphs=40&code_lines=30",
        "--stream",
        "--markdown",
        tty=True,
        env={"LINES": "20", "COLUMNS": "80"},
    )
    try:
        result = child.finish()
    finally:
        child.kill()
    assert result.code == 0, result.stderr
    lines = [line.strip() for line in render_screen(result.stdout)]
    paragraphs = [line for line in lines if line.startswith("Paragraph ")]
    assert paragraphs == [f"Paragraph {index} has some words." for index in range(40)]
    code = [line for line in lines if line.startswith("line_")]
    assert code == [f"line_{index} = {index}" for index in range(30)]
    assert lines.count("Title") == 1 and lines.count("After the code.") == 1
    assert "**" not in "\n".join(lines)  # rendered, not raw Markdown


def render_screen(output: bytes, height: int = 20) -> list[str]:
    """Replay terminal output (text, CR, LF, cursor up, erase line) into the final lines.

    As on a real terminal, the cursor cannot move above the top of the visible screen
    (``height`` rows), so a live area taller than the screen leaves copies behind.
    """
    lines = [""]
    row = col = 0
    for token in re.split(r"(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)", output.decode("utf-8", "replace")):
        if not token:
            continue
        if token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            if row == len(lines):
                lines.append("")
        elif token.startswith("\x1b["):
            command, argument = token[-1], token[2:-1]
            if command == "A":
                row = max(0, len(lines) - height, row - int(argument or 1))
            elif command == "K":
                lines[row] = "" if argument == "2" else lines[row][:col]
            elif command not in "mhl":
                raise AssertionError(f"unexpected control sequence {token!r}")
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + len(token) :]
            col += len(token)
    return [line.rstrip() for line in lines]


# --------------------------------------------------------------------------- errors


def test_server_not_running_exits_3_with_one_line():
    port = free_port()
    result = ask(f"http://127.0.0.1:{port}/assistant")
    assert result.code == 3
    assert result.stdout == b""
    assert result.stderr.strip().splitlines() == [
        f"error: is `peach dev` running on 127.0.0.1:{port}? (connection refused)"
    ]


def test_default_url_says_where_it_looked():
    result = ask("/assistant", env={"PEACH_URL": f"http://127.0.0.1:{free_port()}"})
    assert result.code == 3 and "is `peach dev` running on 127.0.0.1:" in result.stderr


@pytest.mark.slow
def test_unknown_host_exits_4():
    result = ask("http://no-such-host.invalid/assistant", "--timeout", "5")
    assert result.code == 4, result.stderr
    assert "cannot resolve host 'no-such-host.invalid'" in one_line(result.stderr)


@pytest.mark.slow
def test_https_to_a_plain_http_server_exits_5(server):
    url, _ = server
    result = ask(url.replace("http://", "https://") + "/ok", "--timeout", "5")
    assert result.code == 5, result.stderr
    assert "TLS with 127.0.0.1:" in one_line(result.stderr)


@pytest.mark.slow
def test_untrusted_certificate_exits_5(tmp_path):
    pytest.importorskip("cryptography")
    certfile, keyfile = self_signed_certificate(tmp_path)
    with run_server(make_app(ServerState()), ssl_certfile=certfile, ssl_keyfile=keyfile) as url:
        assert url.startswith("https://")
        result = ask(f"{url}/ok", "--timeout", "5")
        trusted = ask(f"{url}/ok", env={"SSL_CERT_FILE": certfile})
    assert result.code == 5, result.stderr
    assert "certificate verify failed" in one_line(result.stderr)
    assert trusted.code == 0 and trusted.stdout.startswith(b'{"items"')  # the same server, trusted


@pytest.mark.slow
def test_timeout_before_the_answer_exits_6(server):
    url, _ = server
    result = ask(f"{url}/slow", "--timeout", "0.4")
    assert result.code == 6
    assert "sent no answer within 0.4 s" in one_line(result.stderr)


@pytest.mark.slow
def test_stalled_stream_exits_6_and_keeps_what_arrived(server):
    url, _ = server
    result = ask(f"{url}/stall", "--stream", "--timeout", "0.4")
    assert result.code == 6
    assert result.stdout == b"one\n"
    lines = result.stderr.splitlines()
    gap = re.search(rf"largest gap ({DURATION})", lines[0]).group(1)
    assert gap.endswith(" s") or int(gap.split()[0]) >= 400  # the stall itself is the largest
    assert "no data from 127.0.0.1:" in lines[1] and "stalled" in lines[1]


CUT_ERROR = "closed the connection before the end of the response"
CUT_HINT = (
    "hint: an endpoint whose generator raises cuts its stream; the server's log has the error"
)


def run_ask(*args: str, tty: bool):
    if not tty:
        return ask(*args)
    child = Child(*args, tty=True)
    try:
        result = child.finish()
    finally:
        child.kill()
    result.stdout = result.stdout.replace(b"\r\n", b"\n")
    return result


@pytest.mark.slow
@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
def test_stream_cut_after_some_chunks_is_reported_as_cut(server, tty):
    url, _ = server
    result = run_ask(f"{url}/cut", "--stream", tty=tty)
    assert result.code == 7, result.stderr
    assert result.stdout == (b"partial answer\n" if tty else b"partial answer")  # kept
    summary, error, hint = result.stderr.splitlines()
    assert re.search(r" · cut after [12] chunks? · 14 B · ", summary), summary
    assert summary.startswith("200 OK · ") == tty
    assert error.startswith("error: 127.0.0.1:") and error.endswith(CUT_ERROR)
    assert hint == CUT_HINT


@pytest.mark.slow
@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
def test_stream_cut_before_its_first_chunk_is_reported_as_cut(server, tty):
    url, _ = server
    result = run_ask(f"{url}/cut-first", "--stream", tty=tty)
    assert result.code == 7, result.stderr
    assert result.stdout == b""
    summary, error, hint = result.stderr.splitlines()
    assert " · no data · cut after 0 chunks · 0 B · " in f" · {summary}", summary
    assert error.endswith(CUT_ERROR) and hint == CUT_HINT


@pytest.mark.slow
def test_a_line_cut_in_half_stays_on_the_terminal(server):
    url, _ = server
    result = run_ask(f"{url}/cut-jsonl", "--stream", tty=True)
    assert result.code == 7, result.stderr
    assert result.stdout == b'Hello\n{"tok\n'  # the tokens as text, then the broken line
    assert re.search(r" · cut after [12] chunks? · 3 lines · ", result.stderr)  # 3rd: cut
    piped = ask(f"{url}/cut-jsonl", "--stream")
    assert piped.code == 7 and piped.stdout == b'{"token": "Hel"}\n{"token": "lo"}\n{"tok'


@pytest.mark.slow
def test_a_finished_stream_never_says_cut(server):
    url, _ = server
    result = ask(f"{url}/plain", "--stream")
    assert result.code == 0 and "cut" not in result.stderr


def test_an_answer_cut_without_stream_exits_7(server):
    url, _ = server
    result = ask(f"{url}/cut")
    assert result.code == 7 and result.stdout == b""
    assert one_line(result.stderr).endswith(CUT_ERROR)


@pytest.mark.slow
def test_an_answer_that_is_not_http_exits_9():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(20)
    port = listener.getsockname()[1]

    def answer_garbage():
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection:
            connection.recv(65536)
            connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    try:
        result = ask(f"http://127.0.0.1:{port}/answer")
    finally:
        listener.close()
        thread.join(timeout=5)
    assert result.code == 9, result.stderr
    assert f"127.0.0.1:{port} did not answer in HTTP" in one_line(result.stderr)


@pytest.mark.slow
def test_not_found_on_a_dev_server_lists_endpoints_and_guesses(dev_server):
    """Against a real `peach dev` (tests/projects/semantics): its 404 and its route list."""
    from conftest import SEMANTICS

    from peach_cli.checks.build import build_plan

    plan, _ = build_plan(SEMANTICS)
    assert plan is not None
    listed = ", ".join(
        f"{e.url} ({e.name})" for e in sorted(plan.endpoints.values(), key=lambda e: e.url)
    )
    result = ask(f"{dev_server.url}/greeet", "q=hi")
    assert result.code == 8, result.stderr
    assert result.stderr.splitlines() == [
        "error: 404: no endpoint at /greeet; did you mean /greet?",
        f"hint: endpoints: {listed}",
    ]
    result = ask(f"{dev_server.url}/qqqqqqqqqqqq", "--stream")
    assert result.code == 8 and "did you mean" not in result.stderr
    assert f"hint: endpoints: {listed}" in result.stderr


@pytest.mark.slow
def test_not_found_elsewhere_exits_8_without_a_listing(foreign_server):
    result = ask(f"{foreign_server}/nothing")
    assert result.code == 8
    assert (
        result.stderr.strip()
        == "error: 404: nothing at /nothing on " + foreign_server.split("//")[1]
    )


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--stream"]], ids=["answer", "stream"])
def test_error_envelope_prints_code_and_message_and_exits_1(server, extra):
    url, _ = server
    result = ask(f"{url}/error", *extra)
    assert result.code == 1
    assert result.stdout == b""
    assert one_line(result.stderr) == "error: method_error: ValueError: boom"


@pytest.mark.slow
def test_key_value_items_travel_as_the_query_string_curl_would_send(server):
    url, _ = server
    result = ask(f"{url}/echo", "n=3", "flag=true", "tag=a", "tag=b", "size:=2")
    assert result.code == 0, result.stderr
    echoed = json.loads(result.stdout)
    assert echoed["method"] == "POST" and echoed["body"] == {"size": 2}
    assert echoed["query"] == [["n", "3"], ["flag", "true"], ["tag", "a"], ["tag", "b"]]
    long = "word " * 1000
    echoed = json.loads(ask(f"{url}/echo", "n=3", f"text={long}").stdout)
    assert echoed["query"] == [["n", "3"]] and echoed["body"] == {"text": long}


@pytest.mark.slow
def test_a_failed_call_has_no_hint_about_strings(server):
    url, _ = server
    result = ask(f"{url}/error", "size=2", "flag=true")
    assert result.code == 1
    assert result.stderr.splitlines() == ["error: method_error: ValueError: boom"]


def test_stream_required_error_is_shown_with_what_to_do(server):
    url, _ = server
    result = ask(f"{url}/plain")  # a generator endpoint asked without --stream
    assert result.code == 1
    assert result.stderr.splitlines() == [
        f"error: stream_required: {stream_required_message('/plain')}",
        "hint: add --stream to ask for the stream",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--stream"]], ids=["answer", "stream"])
def test_redirect_is_reported_not_followed(server, extra):
    url, _ = server
    result = ask(f"{url}/redirect", *extra)
    assert result.code == 1
    assert one_line(result.stderr) == "error: HTTP 307 Temporary Redirect: redirected to /ok"


@pytest.mark.slow
def test_foreign_server_error_exits_1(foreign_server):
    result = ask(f"{foreign_server}/foreign-500")
    assert result.code == 1
    assert one_line(result.stderr) == "error: HTTP 502 Bad Gateway: upstream exploded"


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["/a", "novalue"],
        ["/a", "n:=oops"],
        ["ftp://x/a"],
        ["/a", "--timeout", "0"],
        ["/a", "-H", "x"],
    ],
)
def test_usage_errors_exit_2(args):
    result = ask(*args)
    assert result.code == 2
    assert "Traceback" not in result.stderr and result.stderr.startswith("error: ")


@pytest.mark.slow
def test_help_documents_every_exit_code():
    result = ask("--help", env={"COLUMNS": "200"})
    assert result.code == 0
    text = result.stdout.decode()
    assert "Exit codes" in text
    for code, _ in EXIT_CODES:
        assert re.search(rf"(?<![\d.]){code} ", text), f"exit code {code} missing from --help"
    [line] = [line for line in text.splitlines() if "Exit codes" in line]
    assert "4 host name does not resolve" in line  # wrapped by the terminal, not the source
