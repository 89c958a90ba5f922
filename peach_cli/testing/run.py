"""Running a case: send its request as `peach ask` would, observe the answer, compare.

The request is built by ``peach_cli.client.items.build_request`` and sent by
``peach_cli.client.send.Client``; a stream is decoded with ``peach_cli.client.framing`` and
a connection closed before the end is ``ResponseCut``: the same code as `peach ask`::

    with Client(timeout_s=30) as client:
        observed = observe(client, "http://127.0.0.1:8000", case)
        mismatches = compare(case.expect, observed)       # [] when the case passes

(``compare`` and what it compares are ``peach_cli.testing.outcome``'s.) ``run_case`` does both for one case of a case file and keeps what came of it (an
``Outcome``): `peach test` runs its selected files with ``run_cases``, the pytest plugin each
case item with ``run_case``. Nothing here prints; ``peach_cli.views.testing`` renders
outcomes (``run_cases`` hands each one to its caller as it comes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from peach_cli.errors import ClientError
from peach_cli.testing.outcome import Observed, Outcome, compare

if TYPE_CHECKING:
    from peach_cli.client.send import Client, CompleteResponse, Stream
    from peach_cli.testing.cases import Case, CaseFile, LoadedCase

DEFAULT_TIMEOUT_S = 60.0


def run_case(
    client: Client, base: str, file: str, loaded: LoadedCase, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Outcome:
    """One case of ``file`` sent to the host at ``base``, and what came of it."""
    observed = observe(client, base, loaded.case, timeout_s)
    return Outcome(file, loaded, observed, compare(loaded.case.expect, observed))


def run_cases(
    selected: list[CaseFile],
    client: Client,
    base: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    on_file: Callable[[str], None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Each selected case sent to the host at ``base``, in file order; ``on_file`` is told
    each file before its cases run, ``on_outcome`` each outcome as it comes."""
    outcomes: list[Outcome] = []
    for case_file in selected:
        if on_file is not None:
            on_file(case_file.name)
        for loaded in case_file.cases:
            outcome = run_case(client, base, case_file.name, loaded, timeout_s)
            outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(outcome)
    return outcomes


def request_for(
    case: Case, base: str, timeout_s: float = DEFAULT_TIMEOUT_S, *, tool: str = "test"
) -> Any:
    """The ``AskRequest`` of a case: GET params as the query string, POST as the JSON body,
    marked as sent by peach's ``tool``."""
    from peach_cli.client.items import build_request, with_tool

    if case.method == "POST":
        request = build_request(
            case.url,
            base=base,
            stream=case.stream,
            json_body=json.dumps(case.params),
            timeout_s=timeout_s,
        )
    else:
        items = [f"{key}:={json.dumps(value)}" for key, value in case.params.items()]
        request = build_request(
            case.url, items, base=base, stream=case.stream, get=True, timeout_s=timeout_s
        )
    return with_tool(request, tool)


def observe(
    client: Client, base: str, case: Case, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Observed:
    """Send the case's request to the host at ``base`` and read the answer."""
    return observe_request(client, request_for(case, base, timeout_s))


def observe_request(
    client: Client, request: Any, *, stream_limit_s: float | None = None
) -> Observed:
    """Send ``request`` and read the answer; a stream is read to its end, or for
    ``stream_limit_s`` seconds of the clock after its answer starts, whatever its generator
    does (then closed: ``abandoned``, neither cut nor finished)."""
    from peach_cli.client.send import RequestTimedOut

    observed = Observed()
    started = time.perf_counter()
    try:
        with client.stream(request) as response:
            observed.status = response.status
            observed.headers = dict(response.headers)
            if request.stream and response.status < 300 and response.is_stream:
                until = None if stream_limit_s is None else time.perf_counter() + stream_limit_s
                _read_stream(response, observed, until)
            else:
                _read_answer(response.read_all(), observed)
    except ClientError as error:
        if observed.status and observed.stream and isinstance(error, RequestTimedOut):
            observed.stalled = error.message  # no data for the timeout: not a cut
        elif observed.status and observed.stream:
            observed.cut = True  # ResponseCut: the stream did not end cleanly
        else:
            from peach_cli.client.send import ServerUnreachable

            observed.failure = error.message
            observed.refused = isinstance(error, ServerUnreachable)
    observed.total_ms = (time.perf_counter() - started) * 1000
    if not observed.elapsed_ms:
        observed.elapsed_ms = observed.total_ms
    return observed


def _read_answer(reply: CompleteResponse, observed: Observed) -> None:
    from peach_cli.client.send import envelope_error, is_ok_envelope

    observed.elapsed_ms = reply.latency_s * 1000
    is_json, value = reply.json()
    if not is_json:
        observed.text = reply.body.decode("utf-8", "replace")
        return
    envelope = envelope_error(value)
    if envelope is not None:
        observed.error_code, observed.error_message = envelope
    elif is_ok_envelope(value):
        observed.result = value["result"]
    else:
        observed.result = value


def _read_stream(response: Stream, observed: Observed, until: float | None = None) -> None:
    from peach_cli.client import framing

    observed.stream = True
    decoder: framing.FrameDecoder | None = None
    head = b""
    texts: list[str] = []
    raw: list[bytes] = []
    frames = 0
    raw_chunks = 0

    def take(found: list[framing.Frame]) -> None:
        nonlocal frames
        for frame in found:
            if frame.done:
                continue
            frames += 1
            texts.append(frame.text if frame.text is not None else frame.data)

    try:
        for chunk in response.chunks(until=until):
            raw_chunks += 1
            raw.append(chunk)
            if decoder is None:
                head += chunk
                kind = framing.detect_framing(response.content_type, head)
                if kind is None:
                    continue
                decoder = framing.make_decoder(kind)
                chunk, head = head, b""
            take(decoder.feed(chunk))
    finally:
        observed.abandoned = response.abandoned
        if decoder is None:
            kind = framing.detect_framing(response.content_type, head, final=True) or "text"
            decoder = framing.make_decoder(kind)
            take(decoder.feed(head))
        take(decoder.close())
        stats = response.stats
        if stats.first_chunk is not None:
            observed.elapsed_ms = (stats.first_chunk - stats.started) * 1000
        plain = decoder.framing == framing.PLAIN
        observed.chunks = raw_chunks if plain else frames
        observed.text = "".join(texts)
        observed.raw_text = b"".join(raw).decode("utf-8", "replace")
