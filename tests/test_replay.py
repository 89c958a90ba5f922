"""`peach dev --record FILE` and `peach replay`, against real `peach dev` servers.

One recording `peach dev` (reloading) of a copy of examples/quickstart for the module: its
requests are recorded, replayed against it (all same), and after an edit of the fallback in
the notebook replayed again (the fallback's answers differ, the rest are the same); a second
`peach dev` of the unedited example is the `--against` host.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import httpx
import pytest
from cli_support import REPO, run_peach
from conftest import start_peach_dev

QUICKSTART = REPO / "examples" / "quickstart"
NOTEBOOK = "notebooks/Endpoints.ipynb"
TRENDING = '[\\"apple\\", \\"banana\\", \\"cherry\\"][:size]'  # as the notebook's JSON has it
EDITED = TRENDING.replace("apple", "kiwi")


def wait_for_lines(path: Path, count: int, timeout_s: float = 10) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return [json.loads(line) for line in lines]
        assert time.monotonic() < deadline, f"{len(lines)} lines recorded, expected {count}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The recording dev server, and a snapshot of what it recorded of five requests."""
    folder = tmp_path_factory.mktemp("replay")
    project = folder / "quickstart"
    shutil.copytree(QUICKSTART, project)
    record = folder / "traffic.jsonl"
    dev = start_peach_dev(project, folder / "dev.log", "--record", str(record), reload=True)
    try:
        dev.wait_ready()
        with httpx.Client(base_url=dev.url, timeout=30) as client:
            client.get("/recommend", params={"item_id": "apple"})
            client.get("/recommend", params={"item_id": "durian"})  # the fallback answers
            client.post("/recommend", json={"item_id": "pear", "size": 1})
            with client.stream("GET", "/story", params={"stream": "true", "words": 3}) as r:
                r.read()
            client.get("/story")  # 400 stream_required
        lines = wait_for_lines(record, 5)
        snapshot = folder / "snapshot.jsonl"
        snapshot.write_text("".join(json.dumps(line) + "\n" for line in lines))
        yield dev, project, record, snapshot
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    dev = start_peach_dev(QUICKSTART, tmp_path_factory.mktemp("original") / "dev.log")
    try:
        dev.wait_ready()
        yield dev
    finally:
        dev.stop()


def test_every_answered_request_is_one_json_line(recorded):
    _, _, _, snapshot = recorded
    apple, durian, posted, story, refused = (
        json.loads(x) for x in snapshot.read_text().splitlines()
    )
    assert apple["method"] == "GET" and apple["url"] == "/recommend"
    assert apple["query"] == "item_id=apple" and apple["body"] is None
    assert (apple["status"], apple["component"], apple["result"]) == (
        200,
        "main",
        ["pear", "banana"],
    )
    assert apple["replica"].startswith("recommend/main#") and apple["ms"] > 0
    assert apple["time"].endswith("Z") and apple["stream"] is False
    assert (durian["component"], durian["result"]) == ("fallback", ["apple", "banana"])
    assert posted["method"] == "POST" and posted["body"] == {"item_id": "pear", "size": 1}
    assert story["stream"] is True and story["text"] == "peach-0 peach-1 peach-2 "
    assert story["cut"] is False
    assert refused["status"] == 400 and refused["error"]["code"] == "stream_required"
    assert "result" not in refused


@pytest.mark.slow
def test_replay_against_the_same_server_is_all_same(recorded):
    dev, _, _, snapshot = recorded
    result = run_peach("replay", str(snapshot), "--url", dev.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 requests in" in result.stderr and ": 5 same, 0 differ, 0 failed" in result.stderr


@pytest.mark.slow
def test_after_a_notebook_edit_the_changed_answers_differ(recorded, original):
    dev, project, _, snapshot = recorded
    notebook = project / NOTEBOOK
    text = notebook.read_text()
    assert TRENDING in text
    notebook.write_text(text.replace(TRENDING, EDITED))
    deadline = time.monotonic() + 30
    while (
        httpx.get(f"{dev.url}/recommend", params={"item_id": "durian"}).json()["result"][0]
        != "kiwi"
    ):
        assert time.monotonic() < deadline, "the edit was not reloaded"
        time.sleep(0.05)

    result = run_peach("replay", str(snapshot), "--url", dev.url, "--format", "json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert (report["same"], report["differ"], report["failed"]) == (4, 1, 0)
    differ = [r for r in report["requests"] if r["outcome"] == "differ"]
    assert differ[0]["request"] == "GET /recommend?item_id=durian"
    assert '-    "apple",' in differ[0]["diff"] and '+    "kiwi",' in differ[0]["diff"]

    text_report = run_peach("replay", str(snapshot), "--url", dev.url)
    assert text_report.returncode == 1
    assert "✗ differ: GET /recommend?item_id=durian (line 2)" in text_report.stdout
    assert "--- recorded" in text_report.stdout and '+    "kiwi",' in text_report.stdout
    assert ": 4 same, 1 differ, 0 failed" in text_report.stderr

    ignored = run_peach("replay", str(snapshot), "--url", dev.url, "--ignore", "$.result[0]")
    assert ignored.returncode == 0, ignored.stdout
    assert ": 5 same, 0 differ, 0 failed" in ignored.stderr

    against = run_peach("replay", str(snapshot), "--url", original.url, "--against", dev.url)
    assert against.returncode == 1
    assert "✗ differ: GET /recommend?item_id=durian" in against.stdout
    assert f"--- {original.url}" in against.stdout and f"+++ {dev.url}" in against.stdout
    assert ": 4 same, 1 differ, 0 failed" in against.stderr


@pytest.mark.slow
def test_a_body_over_1_mib_is_recorded_as_omitted_and_fails_to_replay(recorded, tmp_path):
    dev, _, record, _ = recorded
    before = len(record.read_text().splitlines())
    httpx.post(f"{dev.url}/recommend", json={"item_id": "x" * (1024 * 1024 + 10)}, timeout=30)
    big = wait_for_lines(record, before + 1)[-1]
    assert big["body"] is None and big["body_omitted"] > 1024 * 1024
    alone = tmp_path / "big.jsonl"
    alone.write_text(json.dumps(big) + "\n")
    result = run_peach("replay", str(alone), "--url", dev.url)
    assert result.returncode == 1
    assert "its body (over 1 MiB) was not recorded" in result.stdout
    assert ": 0 same, 0 differ, 1 failed" in result.stderr


@pytest.mark.slow
def test_bad_input_is_exit_2(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"url": "/a"}\nnot json\n')
    result = run_peach("replay", str(broken))
    assert result.returncode == 2 and f"{broken}:2: not a JSON line" in result.stderr
    path = run_peach("replay", str(broken), "--ignore", "result.x")
    assert path.returncode == 2 and "a JSONPath starts with $" in path.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert run_peach("replay", str(empty)).returncode == 2


def settled_lines(record: Path, dev_url: str) -> list[dict]:
    """The recording, without markers, once everything sent before is written: a marker
    request is sent and awaited (the recorder writes in order)."""
    marker = f"marker-{time.monotonic_ns()}"
    before = len(record.read_text().splitlines())
    httpx.get(f"{dev_url}/recommend", params={"item_id": marker}, timeout=30)
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(line) for line in record.read_text().splitlines()]
        if any(line["query"] == f"item_id={marker}" for line in lines[before:]):
            assert lines[-1]["query"] == f"item_id={marker}"
            return [line for line in lines if not line["query"].startswith("item_id=marker-")]
        assert time.monotonic() < deadline, "the marker request was not recorded"
        time.sleep(0.02)


def test_replaying_or_benching_against_the_recording_server_leaves_its_file_as_it_was(recorded):
    dev, _, record, snapshot = recorded
    before = settled_lines(record, dev.url)
    for _ in range(2):
        result = run_peach("replay", str(snapshot), "--url", dev.url)
        assert "5 requests in" in result.stderr, result.stdout + result.stderr
        assert settled_lines(record, dev.url) == before
    bench = run_peach("bench", "/recommend", "item_id==apple", "--url", dev.url, "-n", "40")
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert settled_lines(record, dev.url) == before
    recorded_bench = run_peach("bench", "--from", str(snapshot), "--url", dev.url, "-n", "20")
    assert recorded_bench.returncode == 0, recorded_bench.stdout + recorded_bench.stderr
    assert settled_lines(record, dev.url) == before
    checked = run_peach("test", "--url", dev.url, cwd=QUICKSTART)
    assert "passed" in checked.stderr + checked.stdout, checked.stdout + checked.stderr
    assert settled_lines(record, dev.url) == before


@pytest.fixture
def listeners():
    """Two listening sockets that never answer: the --url base and a foreign host."""
    sockets = []
    for _ in range(2):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        sockets.append(listener)
    yield sockets
    for listener in sockets:
        listener.close()


def connected(listener: socket.socket) -> bool:
    """Whether anyone connected (the kernel queues a connection before it is accepted)."""
    try:
        listener.accept()[0].close()
    except BlockingIOError:
        return False
    return True


FOREIGN_URLS = (
    "http://127.0.0.1:{port}/recommend",
    "//127.0.0.1:{port}/recommend",
    "127.0.0.1:{port}/recommend",
    "localhost:{port}/recommend",
    ":{port}/recommend",
)


@pytest.mark.parametrize("shape", FOREIGN_URLS)
@pytest.mark.parametrize("command", ["replay", "bench"])
def test_a_recorded_url_naming_a_host_is_refused_at_its_line_and_nothing_is_sent(
    tmp_path, listeners, shape, command
):
    base, foreign = listeners
    base_url = f"http://127.0.0.1:{base.getsockname()[1]}"
    url = shape.format(port=foreign.getsockname()[1])
    hostile = tmp_path / "hostile.jsonl"
    lines = [{"method": "GET", "url": "/recommend", "query": "item_id=apple"}] * 2
    lines.insert(1, {"method": "POST", "url": url, "query": "", "body": {"item_id": "x"}})
    hostile.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["replay", str(hostile)] if command == "replay" else ["bench", "--from", str(hostile)]
    result = run_peach(*args, "--url", base_url)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{hostile}:2: url '{url}' names a host" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert not connected(foreign) and not connected(base)


def test_nothing_listening_stops_at_the_first_refusal_with_one_message(tmp_path):
    """Every request would be refused the same way: one message, not one per line."""
    import socket

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    file = tmp_path / "traffic.jsonl"
    line = {"method": "GET", "url": "/greet", "query": "", "status": 200, "result": "hi"}
    file.write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n" + json.dumps(line) + "\n")
    result = run_peach("replay", str(file), "--url", f"http://127.0.0.1:{port}")
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr.count("connection refused") == 1, result.stderr
    assert "replay stopped at the recording's line 1, nothing more was sent" in result.stderr
    assert "Traceback" not in result.stderr
