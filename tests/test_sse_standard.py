"""Streams render as the WHATWG event-stream algorithm says (SPEC §3).

The event streams of web-platform-tests' ``eventsource/format-*`` tests
(``tests/data/wpt_eventsource_format.json``, each case naming its file and commit) go
through the decoder whole, split in two at every byte offset, and one byte at a time; then
`peach ask` on a terminal shows only dispatched events, drops a cut stream's unterminated
event, and shows a ``text/plain`` stream that looks like SSE as the text it is.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from ask_support import Child, run_server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from peach_cli.client.framing import PLAIN, SSE, SSEDecoder, detect_framing

VECTORS = json.loads((Path(__file__).parent / "data" / "wpt_eventsource_format.json").read_text())
CASES = VECTORS["cases"]


def events(chunks: list[bytes]) -> list[dict]:
    decoder = SSEDecoder()
    frames = [frame for chunk in chunks for frame in decoder.feed(chunk)] + decoder.close()
    return [
        {"type": f.event or "message", "data": f.data, "lastEventId": f.id or ""} for f in frames
    ]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['file']}:{i}" for i, c in enumerate(CASES)])
def test_wpt_format_vectors_at_every_split(case):
    stream = case["stream"].encode("utf-8")
    if case["events"] is None:  # not an event stream: shown as text
        assert detect_framing(case["content_type"], stream, final=True) == PLAIN
        return
    assert detect_framing(case["content_type"], stream[:1]) == SSE
    assert events([stream]) == case["events"]
    for cut in range(1, len(stream)):
        assert events([stream[:cut], stream[cut:]]) == case["events"], cut
    assert events([stream[i : i + 1] for i in range(len(stream))]) == case["events"]


STANDARD = b"retry:1000\ndata:test1\n\nid:test\ndata:test2\n"


def _streaming(chunks: list[bytes], media_type: str, *, cut: bool = False):
    async def endpoint(request: Request) -> StreamingResponse:
        async def generate():
            for chunk in chunks:
                yield chunk
                await asyncio.sleep(0.01)
            if cut:
                raise RuntimeError("the generator raised")

        return StreamingResponse(generate(), media_type=media_type)

    return endpoint


@pytest.fixture(scope="module")
def url():
    post = {"methods": ["POST"]}  # --stream sends stream=true in a JSON body
    app = Starlette(
        routes=[
            Route("/standard", _streaming([STANDARD], "text/event-stream"), **post),
            Route(
                "/cut",
                _streaming([b"data: a\n\n", b"data: unfinished"], "text/event-stream", cut=True),
                **post,
            ),
            Route(
                "/colon", _streaming([b": not a comment\n", b"more text\n"], "text/plain"), **post
            ),
            Route("/id", _streaming([b"id: 3\n", b"data: shown as text\n"], "text/plain"), **post),
        ]
    )
    with run_server(app) as base:
        yield base


def on_terminal(url: str):
    child = Child(url, "--stream", tty=True)
    try:
        return child.finish()
    finally:
        child.kill()


@pytest.mark.slow
def test_only_dispatched_events_are_shown(url):
    result = on_terminal(f"{url}/standard")
    assert result.code == 0, result.stderr
    assert result.stdout.decode().replace("\r", "") == "test1\n"
    assert " 1 event" in result.stderr


def test_a_cut_streams_unterminated_event_is_not_shown(url):
    result = on_terminal(f"{url}/cut")
    assert result.code == 7, result.stderr
    assert result.stdout.decode().replace("\r", "") == "a\n"
    assert "unfinished" not in result.stdout.decode()
    assert "cut after 2 chunks" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "text"),
    [("/colon", ": not a comment\nmore text\n"), ("/id", "id: 3\ndata: shown as text\n")],
)
def test_text_plain_that_looks_like_sse_is_shown_as_text(url, path, text):
    result = on_terminal(f"{url}{path}")
    assert result.code == 0, result.stderr
    assert result.stdout.decode().replace("\r", "") == text
    assert "event" not in result.stderr and "2 chunks" in result.stderr
