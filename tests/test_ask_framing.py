"""Stream framing: detection, SSE / JSON lines / plain decoding, Markdown block boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peach_cli.client.framing import (
    JSON_LINES,
    PLAIN,
    SSE,
    Frame,
    JSONLinesDecoder,
    PlainDecoder,
    SSEDecoder,
    detect_framing,
    extract_text,
)
from peach_cli.views.ask import _last_block_boundary


def feed_all(decoder, chunks):
    frames = []
    for chunk in chunks:
        frames += decoder.feed(chunk)
    return frames + decoder.close()


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("content_type", "head", "expected"),
    [
        ("text/event-stream", b"hello", SSE),
        ("text/event-stream; charset=utf-8", b"", SSE),
        ("application/x-ndjson", b"plain", JSON_LINES),
        ("application/jsonl", b"", JSON_LINES),
        ("text/plain; charset=utf-8", b'{"token": "a"}\n', JSON_LINES),
        ("text/plain", b"data: hi\n\n", PLAIN),  # only text/event-stream is SSE (SPEC §3)
        ("text/plain", b": comment\n\n", PLAIN),
        ("text/plain", b"id: 3\n", PLAIN),
        ("text/plain", b"\n\nid: 3\n", PLAIN),
        ("text/plain", b"Hello world", PLAIN),
        ("", b"database rows", PLAIN),  # starts like "data" but is not a field
        (None, b"[1, 2]", PLAIN),
    ],
)
def test_detect_framing(content_type, head, expected):
    assert detect_framing(content_type, head) == expected


def test_detection_waits_for_enough_bytes():
    assert detect_framing("text/plain", b"") is None
    assert detect_framing("text/plain", b"da") == PLAIN  # text/plain is text: no sniffing
    assert detect_framing("text/plain", b"", final=True) == PLAIN
    assert detect_framing("text/plain", b"x") == PLAIN  # no waiting for ordinary text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"text": "a"}, "a"),
        ({"token": "b"}, "b"),
        ({"delta": "c"}, "c"),
        ({"delta": {"text": "d"}}, "d"),
        ({"token": {"id": 5, "text": "e"}}, "e"),
        ({"choices": [{"delta": {"content": "f"}}]}, "f"),
        ({"usage": 3}, None),
        ({"choices": [{"delta": {}}]}, None),
        (["text"], None),
        ("text", None),
    ],
)
def test_extract_text(value, text):
    assert extract_text(value) == text


# --------------------------------------------------------------------------- SSE


def test_sse_fields_comments_multiline_and_done():
    stream = (
        b": a comment\n\n"
        b"event: greeting\nid: 1\ndata: first\ndata: second\n\n"
        b"data:no-space\n\n"
        b'data: {"token": "hi"}\n\n'
        b"retry: 1000\ndata: x\n\n"
        b"data: [DONE]\n\n"
    )
    decoder = SSEDecoder()
    frames = feed_all(decoder, [stream])
    assert [f.data for f in frames] == [
        "first\nsecond",
        "no-space",
        '{"token": "hi"}',
        "x",
        "[DONE]",
    ]
    assert frames[0].event == "greeting" and frames[0].id == "1"
    assert frames[1].event is None and frames[1].id == "1"  # the last id carries over
    assert frames[2].is_json and frames[2].text == "hi"
    assert frames[-1].done and not any(f.done for f in frames[:-1])
    assert decoder.comments == 1


def test_sse_line_endings_crlf_and_cr_even_split_across_chunks():
    decoder = SSEDecoder()
    frames = feed_all(decoder, [b"data: a\r", b"\n\r", b"\ndata: b\r\r", b"data: c\n\n"])
    assert [f.data for f in frames] == ["a", "b", "c"]


def test_sse_empty_data_and_no_data_events():
    frames = feed_all(SSEDecoder(), [b"event: ping\n\n", b"data\n\n", b"id: 9\n\n"])
    # An event without data is not dispatched; a bare "data" line is empty data.
    assert [f.data for f in frames] == [""]


def test_sse_unterminated_event_is_not_dispatched_at_end():
    decoder = SSEDecoder()
    assert feed_all(decoder, [b"data: a\n\ndata: tail"]) == [Frame(data="a")]
    assert decoder.dropped
    decoder = SSEDecoder()
    assert feed_all(decoder, [b"retry:1000\ndata:test1\n\nid:test\ndata:test2\n"]) == [
        Frame(data="test1")
    ]
    assert decoder.dropped


def test_sse_utf8_split_inside_a_character():
    text = "data: café ☕\n\n".encode()
    frames = feed_all(SSEDecoder(), [text[:10], text[10:13], text[13:]])
    assert [f.data for f in frames] == ["café ☕"]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_sse_any_chunking_gives_the_same_frames(data):
    stream = (
        b": c\r\nevent: e\r\nid: 1\r\ndata: one\r\ndata: two\r\n\r\n"
        b'data: {"delta": "\xc3\xa9"}\n\n'
        b"data: x\rdata: y\r\r"
        b"data: [DONE]\n\n"
    )
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=12)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    expected = feed_all(SSEDecoder(), [stream])
    assert feed_all(SSEDecoder(), chunks) == expected
    assert [f.data for f in expected] == ["one\ntwo", '{"delta": "é"}', "x\ny", "[DONE]"]


# --------------------------------------------------------------------------- JSON lines


def test_json_lines_partial_lines_and_non_json():
    decoder = JSONLinesDecoder()
    assert decoder.feed(b'{"token": "He') == []
    frames = decoder.feed(b'l"}\n{"n": 1}\r\nnot json\n\n')
    assert [f.text for f in frames] == ["Hel", None, None]
    assert frames[1].value == {"n": 1} and frames[1].is_json
    assert frames[2].data == "not json" and not frames[2].is_json
    assert decoder.feed(b'{"text": "end"}') == []
    assert [f.text for f in decoder.close()] == ["end"]  # no final newline needed


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_json_lines_any_chunking_gives_the_same_frames(data):
    stream = '{"token": "é"}\n{"a": [1, 2]}\nplain\n{"delta": {"text": "☕"}}'.encode()
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=10)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    frames = feed_all(JSONLinesDecoder(), chunks)
    assert [f.data for f in frames] == ['{"token": "é"}', '{"a": [1, 2]}', "plain", frames[3].data]
    assert [f.text for f in frames] == ["é", None, None, "☕"]


# --------------------------------------------------------------------------- plain


def test_plain_keeps_every_byte_and_never_splits_a_character():
    payload = "naïve ☕ text\n".encode()
    chunks = [payload[i : i + 1] for i in range(len(payload))]
    frames = feed_all(PlainDecoder(), chunks)
    assert "".join(f.data for f in frames) == payload.decode()


# --------------------------------------------------------------------------- Markdown blocks


def test_markdown_block_boundary_skips_code_fences_and_unfinished_lines():
    text = "# T\n\npara one\n\n```\ncode\n\nmore\n```\n\nnext para"
    boundary = _last_block_boundary(text, 0)
    assert text[:boundary] == "# T\n\npara one\n\n```\ncode\n\nmore\n```\n\n"
    assert _last_block_boundary("para\n\n```\nopen fence\n\n", 0) == len("para\n\n")
    assert _last_block_boundary("no blank line yet\n", 0) == 0
    start = len("# T\n\n")
    assert _last_block_boundary(text, start) == boundary


# --------------------------------------------------------------------------- any split, BOM

SSE_STREAM = (
    "\ufeff"  # a byte order mark before the first event is ignored, the event is kept
    "data: first\r\n\r\n"
    ": comment\rid: 2\revent: e\rdata: cr\r\r"
    "data: one\ndata: two\n\n"
    'data: {"token": "café ☕"}\r\n\r\n'
    "data: tail"  # unterminated: not dispatched
).encode()
SSE_DATA = ["first", "cr", "one\ntwo", '{"token": "café ☕"}']
JSON_LINES_STREAM = '\ufeff{"token": "é"}\n{"a": [1]}\r\nplain ☕\n\n{"text": "end"}'.encode()
JSON_LINES_DATA = ['{"token": "é"}', '{"a": [1]}', "plain ☕", '{"text": "end"}']


def split_at(data: bytes, *cuts: int) -> list[bytes]:
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:], strict=False)]


def test_sse_split_at_every_position_gives_the_same_events():
    expected = feed_all(SSEDecoder(), [SSE_STREAM])
    assert [f.data for f in expected] == SSE_DATA
    assert expected[1].event == "e" and expected[1].id == "2"
    assert expected[3].text == "café ☕"
    for cut in range(1, len(SSE_STREAM)):
        assert feed_all(SSEDecoder(), split_at(SSE_STREAM, cut)) == expected, cut
    one_byte_each = [SSE_STREAM[i : i + 1] for i in range(len(SSE_STREAM))]
    assert feed_all(SSEDecoder(), one_byte_each) == expected


def test_json_lines_split_at_every_position_give_the_same_lines():
    expected = feed_all(JSONLinesDecoder(), [JSON_LINES_STREAM])
    assert [f.data for f in expected] == JSON_LINES_DATA
    assert [f.text for f in expected] == ["é", None, None, "end"]
    for cut in range(1, len(JSON_LINES_STREAM)):
        assert feed_all(JSONLinesDecoder(), split_at(JSON_LINES_STREAM, cut)) == expected, cut
    one_byte_each = [JSON_LINES_STREAM[i : i + 1] for i in range(len(JSON_LINES_STREAM))]
    assert feed_all(JSONLinesDecoder(), one_byte_each) == expected


def test_a_bom_split_from_the_first_event_is_still_ignored():
    frames = feed_all(SSEDecoder(), [b"\xef", b"\xbb", b"\xbfdata: x\n\n"])
    assert [f.data for f in frames] == ["x"]
    assert [f.data for f in feed_all(PlainDecoder(), [b"\xef\xbb\xbfhi"])] == ["hi"]


def test_only_the_leading_bom_is_dropped():
    frames = feed_all(SSEDecoder(), ["\ufeff\ufeffdata: x\n\ndata: \ufeffy\n\n".encode()])
    # The second mark starts the first line's field name ("\ufeffdata"), which is no field.
    assert [f.data for f in frames] == ["\ufeffy"]


def test_an_event_ends_at_a_cr_without_waiting_for_the_next_chunk():
    decoder = SSEDecoder()
    assert [f.data for f in decoder.feed(b"data: now\r\r")] == ["now"]
    assert decoder.feed(b"\n") == []  # the LF of a CRLF split across chunks: no extra line
    assert [f.data for f in decoder.feed(b"data: next\n\n")] == ["next"]


def test_a_long_line_in_many_pieces_is_one_frame():
    payload = "x" * 300_000
    sse = f"data: {payload}\n\n".encode()
    pieces = [sse[i : i + 4096] for i in range(0, len(sse), 4096)]
    assert [f.data for f in feed_all(SSEDecoder(), pieces)] == [payload]
    jsonl = f'{{"text": "{payload}"}}\n'.encode()
    pieces = [jsonl[i : i + 4096] for i in range(0, len(jsonl), 4096)]
    assert [f.text for f in feed_all(JSONLinesDecoder(), pieces)] == [payload]


@pytest.mark.parametrize(
    ("content_type", "head", "expected"),
    [
        ("text/event-stream", b"\xef\xbb\xbfdata: hi\n\n", SSE),
        ("text/plain", b'\xef\xbb\xbf{"token": "a"}\n', JSON_LINES),
        ("text/plain", b"\xef\xbb\xbfhello", PLAIN),
        ("text/plain", b"\xef\xbb", None),  # could still be a mark before "{"
    ],
)
def test_detection_looks_past_a_bom(content_type, head, expected):
    assert detect_framing(content_type, head) == expected
    assert detect_framing(content_type, head, final=True) == (expected or PLAIN)
