"""`peach dev --record` against requests it cannot write as they are (SPEC §6, issue 49).

One request with a lone surrogate or a body nested 50,000 deep used to kill the writer
thread: nothing was recorded from then on, and every later request stayed in memory. Now
such a request is recorded with the part escaped or omitted, the next ones are recorded,
and a writer that falls behind holds a bounded queue and says how many it did not record.
"""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from conftest import DevProcess, start_peach_dev
from projectkit import write_project
from waiting import poll

from simulator.record import Recording, RecordWriter

CONF = """codops: record-hostile
endpoints:
  echo:
    url: /echo
    components:
      main: {notebook: nb.ipynb, method: echo}
"""
CODE = """def echo(word: str = ""):
    return word
"""
SURROGATE_BODY = b'{"word": "a\\udcffb"}'
DEEP_BODY = b"[" * 50_000 + b"]" * 50_000


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevProcess, Path]]:
    root = tmp_path_factory.mktemp("record-hostile")
    project = write_project(root / "project", CONF, {"nb.ipynb": [CODE]})
    record = root / "requests.jsonl"
    dev = start_peach_dev(project, root / "peach-dev.log", "--record", str(record))
    try:
        dev.wait_ready()
        yield dev, record
    finally:
        dev.stop()


def recorded(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def test_a_request_the_recorder_cannot_write_as_is_does_not_stop_it(recording) -> None:
    dev, record = recording
    headers = {"content-type": "application/json"}
    httpx.post(f"{dev.url}/echo", content=SURROGATE_BODY, headers=headers)
    httpx.post(f"{dev.url}/echo", content=DEEP_BODY, headers=headers)
    after = httpx.get(f"{dev.url}/echo", params={"word": "after"})
    assert after.status_code == 200, after.text

    lines = poll(lambda: (found := recorded(record)) and len(found) >= 3 and found, "3 lines")
    surrogate, deep, last = lines[:3]
    assert surrogate["escaped"] is True
    assert surrogate["body"] == {"word": "a\\udcffb"}  # the lone surrogate, written escaped
    assert deep["body"] is None and deep["body_omitted"] == len(DEEP_BODY)
    assert deep["body_omitted_why"] == "nested deeper than 100 levels"
    assert last["query"] == "word=after" and last["result"] == "after"
    assert "Traceback" not in dev.output()


class Blocked:
    """A FIFO as the record file, its reader not reading: the writer blocks on it."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.chunks: list[bytes] = []
        self._thread: threading.Thread | None = None

    def drain(self) -> None:
        """Read everything from now on, until the writer closes the file."""
        os.set_blocking(self.fd, True)

        def read() -> None:
            while chunk := os.read(self.fd, 1 << 20):
                self.chunks.append(chunk)

        self._thread = threading.Thread(target=read, daemon=True)
        self._thread.start()

    def lines(self) -> list[dict]:
        assert self._thread is not None
        self._thread.join(timeout=30)
        os.close(self.fd)
        return [json.loads(line) for line in b"".join(self.chunks).decode().splitlines()]


def one_request(body: bytes) -> Recording:
    recording = Recording()
    recording.body, recording.body_size = [body], len(body)
    return recording


def test_a_writer_that_falls_behind_holds_a_bounded_queue_and_says_what_it_dropped(
    tmp_path: Path,
) -> None:
    blocked = Blocked(tmp_path / "record.fifo")
    notes: list[str] = []
    writer = RecordWriter(blocked.path)
    writer.on_note = notes.append
    scope = {"method": "POST", "path": "/echo", "query_string": b""}
    reply = SimpleNamespace(
        status=200, component="main", replica="echo/main#1", stream=False,
        body=b'{"status":"ok","result":"x"}', error=None,
    )  # fmt: skip
    sent = 100
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for number in range(sent):  # fifty 1 MiB bodies and more, the writer stuck
            body = b'"' + str(number).encode().rjust(1000 * 1024, b"x") + b'"'
            writer.finish(one_request(body), scope, reply)
            del body
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 48 * 1024 * 1024, f"{held / 2**20:.0f} MiB held for {sent} MiB of bodies"
    dropped = writer.dropped
    assert dropped > sent // 2, dropped

    blocked.drain()
    writer.finish(one_request(b'"last"'), scope, reply)  # room again: the count is noted
    writer.close()
    lines = blocked.lines()
    assert notes and f"{dropped} requests not recorded" in notes[0]
    counts = [line["not_recorded"] for line in lines if "not_recorded" in line]
    written = [line for line in lines if "url" in line]
    assert counts == [dropped]
    assert len(written) + dropped == sent + 1
    assert written[-1]["body"] == "last"
