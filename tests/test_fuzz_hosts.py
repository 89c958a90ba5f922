"""`peach fuzz --url` sends only to the base's host (SPEC §6, issue 49): an OpenAPI document
whose paths name another scheme, host or port (``http://127.0.0.2:PORT/abs``,
``//127.0.0.2:PORT/abs``) is refused like a replay line that names a host — exit 2, one
line, and nothing sent, to either host.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cli_support import run_peach


class Hits:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.document: dict = {}


def serve(host: str, hits: Hits) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            hits.paths.append(self.path)
            if self.path.startswith("/_peach/openapi.json"):
                body = json.dumps(hits.document).encode()
            else:
                body = b'{"status": "ok", "result": 1}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 - the standard library's names

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def two_hosts() -> Iterator[tuple[str, Hits, str, Hits]]:
    base_hits, other_hits = Hits(), Hits()
    base, other = serve("127.0.0.1", base_hits), serve("127.0.0.2", other_hits)
    try:
        yield (
            f"http://127.0.0.1:{base.server_address[1]}",
            base_hits,
            f"127.0.0.2:{other.server_address[1]}",
            other_hits,
        )
    finally:
        for server in (base, other):
            server.shutdown()
            server.server_close()


def operation(name: str) -> dict:
    return {
        "operationId": f"{name}_get",
        "parameters": [{"name": "q", "in": "query", "schema": {"type": "string"}}],
        "responses": {"200": {"description": "ok"}},
    }


@pytest.mark.parametrize("form", ["http://{other}/abs", "//{other}/abs", "https://{other}/abs"])
def test_a_document_path_naming_another_host_is_refused_and_nothing_is_sent(
    two_hosts, form: str
) -> None:
    base, base_hits, other, other_hits = two_hosts
    path = form.format(other=other)
    base_hits.document = {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {"/ok": {"get": operation("ok")}, path: {"get": operation("abs")}},
    }
    done = run_peach("fuzz", "--url", base, "--examples", "3", "--seed", "1")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "names a host" in done.stderr and path in done.stderr
    assert other_hits.paths == []
    assert [p for p in base_hits.paths if not p.startswith("/_peach/")] == []
