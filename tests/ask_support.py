"""A small real HTTP server on loopback for the `peach ask` tests, and a way to run the CLI.

The server (Starlette on uvicorn, in a thread) plays the cases a client must handle that a
well-behaved `peach dev` never produces: streams cut mid-way, servers that stall, answers
from servers that are not peach. ``gate`` lets a test hold a stream open until it says so,
and ``closed`` records that the server's generator was closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import uvicorn
from cli_support import PEACH
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from peach_cli.runtime.contract.answers import (
    Answer,
    error_answer,
    not_found_answer,
    ok_envelope,
    stream_required_message,
)
from peach_cli.runtime.contract.flow import answer_reply, stream_reply

PLAIN_CHUNKS = [b"alpha ", b"b\xc3", b"\xa9ta ", b"gamma\n"]  # "\xc3\xa9" (é) split in two
JSONL_CHUNKS = [
    b'{"token": "Hel"}\n',
    b'{"token": "lo"}\n{"delta": {"text": ", "}}\n',
    b'{"text": "world"}\n',
    b'{"usage": {"tokens": 4}}\n',
]
HOSTILE_CHUNKS = [
    b"told \x1b[31mred\x1b[0m ",
    b"\x1b]0;pwned\x07 \x1b[2J\xc2\x9b31m",  # a title, a clear screen, a one-byte CSI
    b" and on\n",
]
"""A stream that would drive a terminal: colours, the window's title, a cleared screen."""
SSE_CHUNKS = [
    b": keep-alive comment\n\n",
    b"event: greeting\nid: 1\ndata: first line\ndata: second line\n\n",
    b'data: {"token": "Hi"}\r\n\r\n',
    b'data: {"token": " there"}\n',
    b"\nid: 7\ndata: plain\n\n",
    b"data: [DONE]\n\n",
]
ROUTES = {
    "codops": "zzebu",
    "endpoints": [
        {"name": "assistant", "url": "/assistant", "components": ["main"]},
        {"name": "recommend", "url": "/recommend", "components": ["main", "fallback"]},
    ],
}
REPLICA = "main/main#1"
"""A replica id as `peach dev` writes it: ``endpoint/component#n``
(``test_ask_client.test_the_stand_in_answers_as_a_dev_server_does`` checks the real one)."""


def _headers(raw: list[tuple[bytes, bytes]], *, keep_type: bool) -> dict[str, str]:
    """The headers the contract builds for a reply (``Starlette`` adds the body's length)."""
    skip = {b"content-length"} | (set() if keep_type else {b"content-type"})
    return {name.decode(): value.decode() for name, value in raw if name not in skip}


def _answer_headers(answer: Answer) -> dict[str, str]:
    return _headers(answer_reply(answer).headers, keep_type=False)


def _stream_headers(media_type: str) -> dict[str, str]:
    async def nothing():  # the reply's chunks are not read: only its headers are used
        yield b""

    return _headers(stream_reply(media_type, "main", REPLICA, nothing()).headers, keep_type=True)


PEACH_HEADERS = _answer_headers(Answer(200, {}, component="main", replica=REPLICA))
"""The headers of a `peach dev` answer, from the contract's own code."""
WAIT_LIMIT_S = 10.0
DURATION = r"(?:\d+ ms|\d+\.\d\d s)"  # how the summary writes a duration


@dataclass
class ServerState:
    gate: threading.Event = field(default_factory=threading.Event)
    closed: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)

    def reset(self) -> None:
        self.gate.clear()
        self.closed.clear()
        self.started.clear()


async def _wait_for(event: threading.Event) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not event.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


def _chunks(chunks: list[bytes], delay: float = 0.02):
    async def generate():
        for chunk in chunks:
            yield chunk
            await asyncio.sleep(delay)

    return generate()


def make_app(state: ServerState, *, peach: bool = True) -> Starlette:
    """The test server; ``peach=False`` plays a server that is not `peach dev`."""

    async def params(request: Request) -> dict:
        merged = dict(request.query_params)
        body = await request.body()
        if body:
            merged.update(json.loads(body))
        return merged

    def wants_stream(values: dict) -> bool:
        return str(values.get("stream", "")).lower() in ("true", "1", "yes")

    async def echo(request: Request) -> Response:
        body = await request.body()
        result = {
            "method": request.method,
            "query": list(request.query_params.multi_items()),
            "body": json.loads(body) if body else None,
            "headers": {k: v for k, v in request.headers.items()},
        }
        return JSONResponse(ok_envelope(result), headers=PEACH_HEADERS)

    async def plain(request: Request) -> Response:
        values = await params(request)
        if not wants_stream(values):
            return _answer(error_answer("stream_required", stream_required_message("/plain")))
        headers = _stream_headers("text/plain; charset=utf-8")
        return StreamingResponse(_chunks(PLAIN_CHUNKS), headers=headers)

    async def jsonl(request: Request) -> Response:
        media = request.query_params.get("media", "application/x-ndjson")
        return StreamingResponse(_chunks(JSONL_CHUNKS), media_type=media)

    async def sse(request: Request) -> Response:
        media = request.query_params.get("media", "text/event-stream")
        chunks = SSE_CHUNKS
        if request.query_params.get("bom"):  # a byte order mark, split, before the first event
            chunks = [b"\xef\xbb", b"\xbf" + SSE_CHUNKS[1], *SSE_CHUNKS[2:]]
        return StreamingResponse(_chunks(chunks), media_type=media)

    async def hostile(request: Request) -> Response:
        media = request.query_params.get("media", "text/plain; charset=utf-8")
        chunks = HOSTILE_CHUNKS
        if "event-stream" in media:
            chunks = [b"data: " + b"".join(HOSTILE_CHUNKS).rstrip(b"\n") + b"\n\n"]
        return StreamingResponse(_chunks(chunks), media_type=media)

    async def markdown(request: Request) -> Response:
        count = int(request.query_params.get("paragraphs", "40"))
        code_lines = int(request.query_params.get("code_lines", "30"))
        pieces = [b"# Title\n\n"]
        for index in range(count):
            pieces += [f"Paragraph **{index}** has ".encode(), b"some words.\n\n"]
        pieces.append(b"```python\n")
        pieces += [f"line_{index} = {index}\n".encode() for index in range(code_lines)]
        pieces.append(b"```\n\nAfter the code.\n")
        return StreamingResponse(_chunks(pieces, delay=0.002), media_type="text/markdown")

    async def gated(request: Request) -> Response:
        async def generate():
            try:
                state.started.set()
                yield b"first chunk\n"
                await _wait_for(state.gate)
                yield b"second chunk\n"
            finally:
                state.closed.set()

        return StreamingResponse(generate(), media_type="text/plain")

    async def cut(request: Request) -> Response:
        async def generate():
            yield b"partial "
            await asyncio.sleep(0.02)
            yield b"answer"
            raise RuntimeError("the server died mid-stream")

        return StreamingResponse(generate(), media_type="text/plain")

    async def cut_first(request: Request) -> Response:
        async def generate():
            raise RuntimeError("the generator raised before its first chunk")
            yield b""  # an async generator

        return StreamingResponse(generate(), media_type="text/plain")

    async def cut_jsonl(request: Request) -> Response:
        async def generate():
            yield b'{"token": "Hel"}\n'
            await asyncio.sleep(0.02)
            yield b'{"token": "lo"}\n{"tok'
            raise RuntimeError("the server died mid-line")

        return StreamingResponse(generate(), media_type="application/x-ndjson")

    async def stall(request: Request) -> Response:
        async def generate():
            yield b"one\n"
            await _wait_for(state.gate)
            yield b"two\n"

        return StreamingResponse(generate(), media_type="text/plain")

    async def slow(request: Request) -> Response:
        await _wait_for(state.gate)
        return JSONResponse(ok_envelope("late"))

    async def ok(request: Request) -> Response:
        return JSONResponse(
            ok_envelope({"items": [1, 2, 3], "name": "héllo"}), headers=PEACH_HEADERS
        )

    async def error(request: Request) -> Response:
        return _answer(
            error_answer("method_error", "ValueError: boom", component="main", replica=REPLICA)
        )

    async def prose(request: Request) -> Response:
        text = "# Heading\n\nSome **bold** words.\n"
        return JSONResponse(ok_envelope(text), headers=PEACH_HEADERS)

    async def redirect(request: Request) -> Response:
        return Response(status_code=307, headers={"Location": "/ok"})

    async def foreign_json(request: Request) -> Response:
        return JSONResponse({"hello": "world"})

    async def foreign_text(request: Request) -> Response:
        return PlainTextResponse("just text\n")

    async def foreign_500(request: Request) -> Response:
        return PlainTextResponse("upstream exploded", status_code=502)

    async def routes(request: Request) -> Response:
        return JSONResponse(ROUTES)

    async def not_found(request: Request, exc: Exception) -> Response:
        if not peach:
            return PlainTextResponse("Not Found", status_code=404)
        urls = [endpoint["url"] for endpoint in ROUTES["endpoints"]]
        return _answer(not_found_answer(request.url.path, urls))

    table = [
        Route("/echo", echo, methods=["GET", "POST"]),
        Route("/plain", plain, methods=["GET", "POST"]),
        Route("/jsonl", jsonl, methods=["GET", "POST"]),
        Route("/sse", sse, methods=["GET", "POST"]),
        Route("/markdown", markdown, methods=["GET", "POST"]),
        Route("/hostile", hostile, methods=["GET", "POST"]),
        Route("/gated", gated, methods=["GET", "POST"]),
        Route("/cut", cut, methods=["GET", "POST"]),
        Route("/cut-first", cut_first, methods=["GET", "POST"]),
        Route("/cut-jsonl", cut_jsonl, methods=["GET", "POST"]),
        Route("/stall", stall, methods=["GET", "POST"]),
        Route("/slow", slow, methods=["GET", "POST"]),
        Route("/ok", ok, methods=["GET", "POST"]),
        Route("/error", error, methods=["GET", "POST"]),
        Route("/prose", prose, methods=["GET", "POST"]),
        Route("/redirect", redirect, methods=["GET", "POST"]),
        Route("/foreign-json", foreign_json),
        Route("/foreign-text", foreign_text),
        Route("/foreign-500", foreign_500),
    ]
    if peach:
        table.append(Route("/_peach/routes", routes))
    return Starlette(routes=table, exception_handlers={404: not_found})


def _answer(answer: Answer) -> Response:
    """A contract ``Answer`` as `peach dev` sends it: its status, envelope and headers."""
    return JSONResponse(answer.body, status_code=answer.status, headers=_answer_headers(answer))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def run_server(app: Starlette, **options) -> Iterator[str]:
    """Serve ``app`` on a free loopback port in a thread; yield its base URL.

    ``options`` go to ``uvicorn.Config`` (``ssl_certfile``/``ssl_keyfile`` serve https).
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="critical",
        lifespan="off",
        timeout_graceful_shutdown=1,
        http="h11",
        **options,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        scheme = "https" if options.get("ssl_certfile") else "http"
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()


# --------------------------------------------------------------------------- the CLI


@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: str


def ask(*args: str, env: dict | None = None, timeout: float = 30) -> Result:
    """Run `peach ask ARGS` with stdout piped; return exit code, stdout bytes, stderr text."""
    completed = subprocess.run(
        # a real process: the test reads the exact bytes `peach ask` writes on its stdout
        [*PEACH, "ask", *args],
        capture_output=True,
        timeout=timeout,
        env=_env(env),
    )
    return Result(completed.returncode, completed.stdout, completed.stderr.decode())


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PEACH_URL"}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "TERM": "xterm"})
    env.update(extra or {})
    return env


CHILD_DEADLINE_S = 30.0
"""How long a background `peach ask` may take to print or to exit before the test fails: a
guard against a hang, not a bound on speed (a start-up takes seconds when the suite's workers
and a Ray cluster load both cores; 10 s was once not enough)."""


class Child:
    """`peach ask` running in the background, its stdout read incrementally (pipe or pty)."""

    def __init__(self, *args: str, tty: bool = False, env: dict | None = None) -> None:
        self._master: int | None = None
        stdout: int
        if tty:
            import pty

            self._master, slave = pty.openpty()
            stdout = slave
        else:
            stdout = subprocess.PIPE
        self.process = subprocess.Popen(
            # a real process: it runs in the background (on a pty or a pipe) while the test talks to it
            [*PEACH, "ask", *args],
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=_env(env),
        )
        if tty:
            os.close(slave)
        self._fd = self._master if tty else self.process.stdout.fileno()
        self.output = b""

    def read_until(self, needle: bytes, timeout: float = CHILD_DEADLINE_S) -> bytes:
        """Read stdout until ``needle`` appears (or fail after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while needle not in self.output:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{needle!r} not printed in {timeout} s; got {self.output!r}")
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                try:
                    data = os.read(self._fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError(f"stdout closed before {needle!r}; got {self.output!r}")
                self.output += data
        return self.output

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)

    def finish(self, timeout: float = CHILD_DEADLINE_S) -> Result:
        """Wait for the exit; drain stdout; return the result."""
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            data = b""
            if ready:
                try:
                    data = os.read(self._fd, 65536)
                except OSError:
                    data = b""
                self.output += data
            if not data and self.process.poll() is not None:
                break
            if time.monotonic() > deadline:
                raise AssertionError("peach ask did not exit in time")
        stderr = self.process.stderr.read().decode()
        return Result(self.process.returncode, self.output, stderr)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        if self.process.stdout:
            self.process.stdout.close()
        if self.process.stderr:
            self.process.stderr.close()
        if self._master is not None:
            os.close(self._master)
            self._master = None


def self_signed_certificate(folder) -> tuple[str, str]:
    """Write a self-signed certificate for 127.0.0.1; return (certfile, keyfile)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = folder / "cert.pem", folder / "key.pem"
    certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(certfile), str(keyfile)
